// The userspace uplink of `public` mode: pasta (from Debian's passt package)
// attached to the sandbox's network namespace.
//
// Why pasta and not slirp4netns (both Debian 12; bench/network measures them
// side by side with the veth path, see its README):
//   * throughput and latency: on par here (2.1-5.2 vs 2.4-5.2 Gbit/s for a
//     256 MiB download, connect p50 52-104 us vs 69-95 us, on a busy 2-vCPU
//     VM where the kernel veth path does 7.4-9.2 Gbit/s and 15-31 us); both
//     clear the goal (>= 1 Gbit/s, p50 < 1 ms) by far, so this does not decide;
//   * IPv6: pasta carries it natively with the host's own addresses and
//     routes; slirp4netns 1.2 only NATs a private fd00::/64 ("experimental");
//   * DNS: both can forward to the host's resolver (pasta: --dns-forward);
//     pasta otherwise leaves the sandbox's packets to port 53 as they are, so
//     the sandbox's resolv.conf and our rules decide;
//   * the host's loopback: slirp4netns maps 10.0.2.2 onto it unless
//     --disable-host-loopback; pasta maps the gateway address onto it unless
//     --no-map-gw, AND by default forwards the sandbox's own loopback ports to
//     the host's (-T/-U auto) and host ports into the sandbox (-t/-u auto).
//     We pass --no-map-gw -t none -u none -T none -U none: nothing reaches the
//     host's loopback and nothing enters the sandbox (no ingress).
//   * addressing: pasta gives the sandbox the host's own addresses and routes;
//     slirp4netns puts it in 10.0.2.0/24 with gateway and DNS at 10.0.2.2/.3,
//     inside the private range our rules refuse (more exceptions to get right);
//   * confinement in tests: both open their sockets in the network namespace
//     they run in, so tests run them inside their own "internet" netns;
//   * both need /dev/net/tun readable and writable by the caller when
//     unprivileged (PastaObstacle says so where it is not, e.g. mode 0600).
// So: pasta, for native IPv6 and fewer private-range exceptions.
// pasta drops to `nobody` when started as root, and nobody may not join the
// root-owned namespaces of a sandbox: as root we pass --runas 0; pasta still
// confines itself (its own user/mount namespaces, capabilities dropped,
// seccomp). Unprivileged, it runs as the caller, who owns the sandbox's user
// namespace.
// The policy itself is NOT pasta's: nftables rules inside the sandbox's netns
// (network_rules.h) are installed before pasta starts and before the workload
// runs.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"
#include "local/network.h"

namespace deepbox::local {

// The sandbox's resolver when the host's is on its loopback (127.0.0.53 of
// systemd-resolved): pasta maps UDP port 53 of this address onto the host's
// first resolver (--dns-forward). Link-local, so nothing else answers there.
inline constexpr const char* kPastaDnsForward = "169.254.0.53";

struct UplinkDns {
  std::vector<std::string> sandbox_nameservers;  // for the sandbox's resolv.conf and rules
  std::vector<std::string> pasta_args;           // -D / --dns-forward
};
// config.nameservers when given (used as they are: the sandbox reaches them
// through pasta like any address); else the host's resolv.conf, where a
// loopback resolver becomes kPastaDnsForward.
UplinkDns PlanUplinkDns(const PublicNetworkConfig& config,
                        const std::vector<std::string>& host_nameservers);

// The full pasta command line (exposed for tests and review). `ready_fd` is
// the pipe pasta writes its pid to once the namespace is configured.
std::vector<std::string> PastaArgv(pid_t sandbox_pid, const PublicNetworkConfig& config,
                                   const UplinkDns& dns, int ready_fd);

// "" if pasta can serve public mode here, else why not.
std::string PastaObstacle(const PublicNetworkConfig& config);

// What public mode uses for `config`: veth when root, ip_forward=1 and the
// uplink has no IPv6 default route (kernel fast path, nothing lost); pasta
// otherwise (works unprivileged, carries IPv6). public_possible false with both
// reasons when neither can work. config.uplink forces one.
NetworkProbe ChooseUplink(const PublicNetworkConfig& config);

// RAII: the pasta process (SIGKILLed and reaped on destruction).
class PastaUplink {
 public:
  // Starts pasta for the network namespace of `sandbox_pid` (in
  // config.uplink_netns when set) and waits until it configured the
  // interface. pasta's stderr goes to `log_fd` (-1: /dev/null).
  static Result<PastaUplink> Start(pid_t sandbox_pid, const PublicNetworkConfig& config,
                                   const UplinkDns& dns, int log_fd);

  PastaUplink() = default;
  PastaUplink(PastaUplink&& other) noexcept { *this = std::move(other); }
  PastaUplink& operator=(PastaUplink&& other) noexcept;
  ~PastaUplink();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  void Stop();

 private:
  pid_t pid_ = -1;
  UniqueFd pidfd_;
};

// Keeps the sandbox's nft sets self4/self6/near4/near6 (SandboxNftRules)
// equal to the uplink netns's own addresses, connected subnets and gateways
// (ReadHostNetworkSets), whatever they become while the sandbox lives: an
// address or route the uplink gains later (an IPv6 temporary address, a new
// interface or VPN, a DHCP lease) is refused too. A thread in the launcher
// joins the uplink netns, subscribes to rtnetlink's address and route groups
// BEFORE it reads the current state (no change can fall between), and
// rewrites the sets in one nft transaction whenever they change. The window
// between a change and the rewrite is the time of one `nft -f` (milliseconds).
// Used by both public uplinks (veth and pasta).
class HostAddressWatch {
 public:
  // Returns once the sets hold the current state (an error otherwise).
  static Result<std::unique_ptr<HostAddressWatch>> Start(pid_t sandbox_pid,
                                                         const PublicNetworkConfig& config);
  ~HostAddressWatch();  // stops and joins the thread
  HostAddressWatch(const HostAddressWatch&) = delete;
  HostAddressWatch& operator=(const HostAddressWatch&) = delete;

  HostNetworkSets current() const;  // what the sandbox's sets hold now
  uint64_t rewrites() const { return rewrites_.load(); }
  std::string last_error() const;

 private:
  HostAddressWatch() = default;
  void Loop(int netlink_fd, std::promise<std::string>* ready);
  Status Apply(const HostNetworkSets& sets);

  PublicNetworkConfig config_;
  UniqueFd uplink_ns_, sandbox_userns_, sandbox_netns_, stop_;
  std::thread thread_;
  mutable std::mutex mu_;
  HostNetworkSets current_;
  std::string last_error_;
  std::atomic<uint64_t> rewrites_{0};
};

}  // namespace deepbox::local
