// A sandbox network's configuration (PublicNetworkConfig) and the nftables
// text made from it: the rules inside the sandbox's netns (public and allow
// mode), the veth uplink's forward/NAT table, and the rewrite of the uplink's
// own addresses that HostAddressWatch applies. Pure functions of their inputs
// (exposed for tests and review); the addresses they refuse come from
// address_policy.h. Installing them is network.h's, uplink.h's and the
// launcher's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "local/address_policy.h"

namespace deepbox::local {

enum class UplinkChoice { kAuto, kVeth, kPasta };

struct PublicNetworkConfig {
  // netns file (/proc/PID/ns/net, /run/netns/X) whose sockets carry the
  // sandbox's traffic (veth: routes it; pasta and the proxy: open their
  // sockets there); "" = the launcher's own. Joining another one needs root.
  std::string uplink_netns;
  uint32_t slot = 0;  // veth: unique per live sandbox: picks the /30 and interface names
  // The sandbox's resolvers, allowed on port 53 (IPv4/IPv6 literals); empty:
  // the host's /etc/resolv.conf. The proxy resolves through them too.
  std::vector<std::string> nameservers;
  UplinkChoice uplink = UplinkChoice::kAuto;  // public mode
  std::vector<std::string> allow;             // allow mode: see NetworkPolicy
  // Operator exceptions (ParseAllowedCidrs form); Launch adds kAllowCidrsEnv's.
  std::vector<std::string> allowed_cidrs;
  // Extra addresses refused from inside (the uplink's own are kept current by
  // HostAddressWatch).
  std::vector<std::string> extra_blocked;
  std::string ip_path = "/usr/sbin/ip";
  std::string nft_path = "/usr/sbin/nft";
  std::string pasta_path = "/usr/bin/pasta";
};
constexpr uint32_t kMaxPublicSlots = 16384;  // 100.100.0.0/16 in /30s

struct SlotAddresses {
  std::string gateway;  // uplink side, e.g. 100.100.0.1
  std::string sandbox;  // e.g. 100.100.0.2
  std::string host_if;  // e.g. dbx0h
  std::string peer_if;  // e.g. dbx0s (renamed eth0 inside)
};
SlotAddresses AddressesForSlot(uint32_t slot);

// Inside the sandbox, veth and pasta (public): refuse, in this order, the
// uplink netns's own addresses (set self4/self6: never allowed), then accept
// config.allowed_cidrs, then refuse every blocked range and the uplink's
// connected subnets and gateways (near4/near6); port 53 of the nameservers
// is accepted first. `host` fills self/near (HostAddressWatch rewrites them).
std::string SandboxNftRules(const PublicNetworkConfig& config, const HostNetworkSets& host = {});
// Inside the sandbox, allow mode: only loopback (where the proxy listens).
std::string SandboxAllowModeNftRules();
// In the uplink netns, veth: table deepbox_s<slot> (forward filter, no
// ingress, masquerade of the slot's /30).
std::string UplinkNftRules(const PublicNetworkConfig& config);
// One nft transaction that replaces the dynamic sets of SandboxNftRules.
std::string HostSetsNftScript(const HostNetworkSets& sets);

}  // namespace deepbox::local
