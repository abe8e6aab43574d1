// Sandbox networking.
//
// none:   a new network namespace with only `lo`, brought up by the child
//         itself (ioctl SIOCSIFFLAGS) before it drops its capabilities.
// public: the Kubernetes secure default. A veth pair joins the sandbox netns to
//         an "uplink" netns (the launcher's own by default) that masquerades
//         its traffic. Egress to the public internet is allowed; the private,
//         CGNAT, loopback, link-local, multicast and reserved IPv4 ranges and
//         IPv6 ULA/link-local/loopback/multicast are refused by nftables rules
//         evaluated INSIDE the sandbox's netns (the sandbox has no
//         CAP_NET_ADMIN there, so it cannot change them, and they apply whatever
//         the host's own rules are). The uplink repeats the range check in its
//         forward chain, drops every packet from the sandbox to the uplink
//         itself (its services, its addresses, its loopback) and every new
//         connection towards the sandbox (no ingress).
//         Needs: the `ip` and `nft` binaries, veth + nf_tables + nat support,
//         and net.ipv4.ip_forward=1 in the uplink netns. ProbePublicNetwork()
//         says whether that holds; the launcher falls back to `none` with the
//         reason when it does not (fail closed).
// DNS: /etc/resolv.conf lists `nameservers`; in public mode each may be
// reached on port 53 even when it lies in a refused range (e.g. 10.0.0.2);
// nameservers on the host's loopback cannot be reached and are left out.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"
#include "local/child.h"

namespace deepbox::local {

enum class NetworkMode { kNone, kPublic };
std::string_view NetworkModeName(NetworkMode mode);
Result<NetworkMode> ParseNetworkMode(std::string_view text);

// Child, async-signal-safe: sets IFF_UP on "lo". Returns 0 or errno (+ call).
int BringUpLoopbackRaw(ChildCall* call);

const std::vector<std::string>& BlockedIpv4Ranges();
const std::vector<std::string>& BlockedIpv6Ranges();

struct PublicNetworkConfig {
  std::string uplink_netns;  // netns file (/proc/PID/ns/net, /run/netns/X); "" = the launcher's
  uint32_t slot = 0;         // unique per live sandbox: picks the /30 and interface names
  std::vector<std::string> nameservers;  // allowed on port 53 (IPv4 literals)
  std::string ip_path = "/usr/sbin/ip";
  std::string nft_path = "/usr/sbin/nft";
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
std::string SandboxNftRules(const PublicNetworkConfig& config);
std::string UplinkNftRules(const PublicNetworkConfig& config);

struct NetworkProbe {
  bool public_possible = false;
  std::string reason;  // why not, or "ok"
};
NetworkProbe ProbePublicNetwork(const PublicNetworkConfig& config);

// Runs argv (absolute path) in the netns open as `netns_fd` (-1: current),
// feeding `input` on stdin. Returns stdout+stderr; non-zero exit is an error.
Result<std::string> RunInNetns(int netns_fd, const std::vector<std::string>& argv,
                               std::string_view input = {});

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
