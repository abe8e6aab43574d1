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
//             rtnetlink and kept current while the sandbox lives
//             (HostAddressWatch, uplink.h).
//   Operator exceptions: DEEPBOX_NETWORK_ALLOW_CIDRS (kAllowCidrsEnv) names
//             CIDRs that become reachable although a default refuses them
//             (e.g. a LAN mirror, or a lab whose "internet" is 198.51.100/24).
//             Loopback, link-local, multicast and the host's own addresses
//             can never be allowed (ParseAllowedCidrs says so).
//   allow=L:  only the names of L (e.g. pypi.org,*.github.com), over HTTP and
//             HTTPS through a per-sandbox filtering proxy (egress_proxy.h);
//             every other packet leaving the sandbox is dropped.
//
// Where the policy lives: nftables rules installed INSIDE the sandbox's
// network namespace before its init runs. The workload has no CAP_NET_ADMIN
// there (every capability is dropped, see capabilities.h), so it cannot change
// them, and they hold whatever the host's own rules are.
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

#include <sys/socket.h>
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"
#include "local/child.h"
#include "sandbox/network_policy.h"

namespace deepbox::local {

// The modes and the egress policy's type and grammar: sandbox/network_policy.h.

// The mechanism that carries a sandbox's traffic.
enum class Uplink { kNone, kVeth, kPasta, kProxy };
std::string_view UplinkName(Uplink uplink);  // "none" | "veth" | "pasta" | "proxy"

// Child, async-signal-safe: sets IFF_UP on "lo". Returns 0 or errno (+ call).
int BringUpLoopbackRaw(ChildCall* call);

const std::vector<std::string>& BlockedIpv4Ranges();
// Native IPv6 ranges plus the IPv6 forms that embed a blocked IPv4 range
// (IPv4-mapped, IPv4-compatible, NAT64 64:ff9b::/96, 6to4 2002::/16).
const std::vector<std::string>& BlockedIpv6Ranges();
// The same check in code (the proxy's): true if `addr` (AF_INET or AF_INET6)
// lies in a blocked range, or is an IPv6 form of a blocked IPv4 address.
bool AddressBlocked(const struct sockaddr* addr);
bool AddressBlocked(std::string_view literal);  // unparsable: true

// The operator's exceptions (see the header comment): the environment
// variable holds CIDRs or addresses separated by commas or spaces.
inline constexpr const char* kAllowCidrsEnv = "DEEPBOX_NETWORK_ALLOW_CIDRS";
// Normalised ("192.0.2.0/24", "2001:db8::/32"); an error names the bad entry,
// or the range that can never be allowed (loopback, 0/8, ::, link-local,
// multicast, 240/4, ::ffff:0:0/96, fec0::/10) if one overlaps it.
Result<std::vector<std::string>> ParseAllowedCidrs(std::string_view text);
Result<std::vector<std::string>> AllowedCidrsFromEnv();  // unset or empty: none
// True if `addr` lies in one of `allowed` (normalised CIDRs).
bool AddressInCidrs(const struct sockaddr* addr, const std::vector<std::string>& allowed);
// AddressBlocked unless an operator exception allows it.
bool AddressRefused(const struct sockaddr* addr, const std::vector<std::string>& allowed);

// What the uplink netns would do with a destination (rtnetlink route lookup
// in the CALLING THREAD's network namespace, RTM_F_FIB_MATCH).
enum class RouteKind {
  kVia,         // through a gateway (or a device default route): the internet
  kLocal,       // an address of this netns itself (or a broadcast address)
  kOnLink,      // a directly connected subnet (no gateway, prefix >= /16 v4, /48 v6)
  kGateway,     // the gateway of the route that matches it
  kUnroutable,  // no route, blackhole, prohibit, ...
};
Result<RouteKind> ClassifyRoute(const struct sockaddr* addr);

// The calling thread's netns as the sandbox rules need it (rtnetlink dumps):
// `self` = its own addresses, `near` = its directly connected subnets and its
// gateways. Entries that a blocked range already refuses (and no allowed CIDR
// overlaps) and loopback/link-local ones are left out; the rest is sorted,
// without duplicates or nested entries.
struct HostNetworkSets {
  std::vector<std::string> self;
  std::vector<std::string> near;
  bool operator==(const HostNetworkSets& o) const { return self == o.self && near == o.near; }
};
Result<HostNetworkSets> ReadHostNetworkSets(const std::vector<std::string>& allowed);
// One nft transaction that replaces the dynamic sets of SandboxNftRules.
std::string HostSetsNftScript(const HostNetworkSets& sets);

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

// The nftables scripts (exposed for tests and review).
// Inside the sandbox, veth and pasta (public): refuse, in this order, the
// uplink netns's own addresses (set self4/self6: never allowed), then accept
// config.allowed_cidrs, then refuse every blocked range and the uplink's
// connected subnets and gateways (near4/near6); port 53 of the nameservers
// is accepted first. `host` fills self/near (HostAddressWatch rewrites them).
std::string SandboxNftRules(const PublicNetworkConfig& config, const HostNetworkSets& host = {});
// Inside the sandbox, allow mode: only loopback (where the proxy listens).
std::string SandboxAllowModeNftRules();
std::string UplinkNftRules(const PublicNetworkConfig& config);

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

// Runs argv (absolute path) in the netns open as `netns_fd` (-1: current),
// feeding `input` on stdin. Returns stdout+stderr; non-zero exit is an error.
Result<std::string> RunInNetns(int netns_fd, const std::vector<std::string>& argv,
                               std::string_view input = {});
// Runs argv inside the user AND network namespace of `pid` with CAP_NET_ADMIN
// (raised as an ambient capability: the launcher's uid is not root in there).
// Works unprivileged when the launcher owns that user namespace.
Result<std::string> RunInSandboxNetns(pid_t pid, const std::vector<std::string>& argv,
                                      std::string_view input = {});
// The namespaces RunInSandboxNetns joins, opened once (userns only when not root).
Status OpenSandboxNamespaces(pid_t pid, UniqueFd* userns, UniqueFd* netns);
// RunInSandboxNetns with namespaces opened by OpenSandboxNamespaces.
Result<std::string> RunInOpenNamespaces(int userns_fd, int netns_fd,
                                        const std::vector<std::string>& argv,
                                        std::string_view input = {});
// A TCP listener on `ip`:`port` created inside the network namespace of `pid`
// (joining its user namespace first; `lo` is brought up). The socket stays in
// that netns whichever process holds it: the proxy serves the sandbox with it.
Result<UniqueFd> ListenInSandboxNetns(pid_t pid, const std::string& ip, int port);

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
