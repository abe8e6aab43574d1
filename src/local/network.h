// Sandbox networking on this host: how the modes and the egress policy
// (sandbox/network_policy.h: the type and grammar every provider shares) are
// enforced, and the uplinks.
//
// Modes (NetworkPolicy):
//   none:     a new network namespace with only `lo`, brought up by the child
//             itself (ioctl SIOCSIFFLAGS) before it drops its capabilities.
//   public:   the Kubernetes secure default: egress to the public internet;
//             nothing to private, CGNAT, loopback, link-local (metadata),
//             multicast, reserved or other IANA special-purpose ranges that
//             are not globally reachable (documentation, benchmarking, ...;
//             IPv4, IPv6 and the IPv6 forms that embed IPv4), nor to the
//             host's own addresses, its directly connected subnets and its
//             gateways. The last three are read from the uplink netns with
//             rtnetlink (host_network.h) and kept current while the sandbox
//             lives (HostAddressWatch, uplink.h).
//   Operator exceptions: DEEPBOX_NETWORK_ALLOW_CIDRS (kAllowCidrsEnv) names
//             CIDRs that become reachable although a default refuses them
//             (e.g. a LAN mirror, or a lab whose "internet" is 198.51.100/24).
//             Loopback, link-local, multicast and the host's own addresses
//             can never be allowed (ParseAllowedCidrs says so). The ranges
//             and these checks in code: address_policy.h.
//   allow=L:  only the names of L (e.g. pypi.org,*.github.com), over HTTP and
//             HTTPS through a per-sandbox filtering proxy (egress_proxy.h);
//             every other packet leaving the sandbox is dropped.
//
// Where the policy lives: nftables rules (network_rules.h) installed INSIDE
// the sandbox's network namespace before its init runs. The workload has no
// CAP_NET_ADMIN there (every capability is dropped, see capabilities.h), so it
// cannot change them, and they hold whatever the host's own rules are.
//
// Uplinks for `public` (ChooseUplink picks one; `deepbox doctor` shows which):
//   veth:  a veth pair into an "uplink" netns (the launcher's own by default)
//          that masquerades the sandbox's /30 (PublicNetwork below). Kernel
//          fast path, IPv4 only. Needs root, `ip`, `nft` and
//          net.ipv4.ip_forward=1 in the uplink netns.
//   pasta: a userspace uplink (uplink.h): works wherever user namespaces
//          work, root or not, IPv4 and IPv6, no host sysctl. Chosen when the
//          veth path is impossible.
// DNS: /etc/resolv.conf of the sandbox lists `nameservers`; port 53 of exactly
// those addresses is allowed even in a refused range (e.g. 10.0.0.2).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <utility>

#include "common/error.h"
#include "common/unique_fd.h"
#include "local/network_rules.h"
#include "sandbox/network_policy.h"

namespace deepbox::local {

// The modes and the egress policy's type and grammar: sandbox/network_policy.h.
// PublicNetworkConfig and the rules made from it: network_rules.h. Running
// programs in a network namespace: netns.h.

// The mechanism that carries a sandbox's traffic.
enum class Uplink { kNone, kVeth, kPasta, kProxy };
std::string_view UplinkName(Uplink uplink);  // "none" | "veth" | "pasta" | "proxy"

struct NetworkProbe {
  bool public_possible = false;
  std::string reason;             // why not, or "ok"
  Uplink uplink = Uplink::kNone;  // what public mode uses here (kVeth or kPasta)
  std::string veth_reason;        // why not veth ("ok" when possible)
  std::string pasta_reason;       // why not pasta ("ok" when possible)
};
// The veth path only (ChooseUplink in uplink.h weighs both).
NetworkProbe ProbePublicNetwork(const PublicNetworkConfig& config);
// Whether allow mode can work here: "" or the reason it cannot.
std::string AllowModeObstacle(const PublicNetworkConfig& config);

// RAII: the veth pair, the sandbox-side rules and the uplink table.
class PublicNetwork {
 public:
  static Result<PublicNetwork> Setup(pid_t sandbox_pid, const PublicNetworkConfig& config);

  PublicNetwork() = default;
  PublicNetwork(PublicNetwork&& other) noexcept { *this = std::move(other); }
  PublicNetwork& operator=(PublicNetwork&& other) noexcept;
  ~PublicNetwork();
  Status Teardown();

  const SlotAddresses& addresses() const { return addrs_; }
  bool active() const { return active_; }

 private:
  PublicNetworkConfig config_;
  SlotAddresses addrs_;
  UniqueFd uplink_fd_;
  bool active_ = false;
};

}  // namespace deepbox::local
