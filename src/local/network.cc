#include "local/network.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>

#include "local/netns.h"

namespace deepbox::local {

std::string_view UplinkName(Uplink uplink) {
  switch (uplink) {
    case Uplink::kVeth:
      return "veth";
    case Uplink::kPasta:
      return "pasta";
    case Uplink::kProxy:
      return "proxy";
    case Uplink::kNone:
      break;
  }
  return "none";
}

NetworkProbe ProbePublicNetwork(const PublicNetworkConfig& config) {
  NetworkProbe probe;
  for (const auto& bin : {config.ip_path, config.nft_path}) {
    if (access(bin.c_str(), X_OK) != 0) {
      probe.reason = fmt::format("{} is missing (install iproute2 and nftables)", bin);
      return probe;
    }
  }
  auto fd = OpenNetns(config.uplink_netns);
  if (!fd) {
    probe.reason = fd.error().message;
    return probe;
  }
  // Our own netns: read the sysctl directly (a fork + exec less per create).
  Result<std::string> fwd = std::string();
  if (config.uplink_netns.empty()) {
    UniqueFd f(open("/proc/sys/net/ipv4/ip_forward", O_RDONLY | O_CLOEXEC));
    char c = '0';
    if (!f || read(f.get(), &c, 1) != 1) c = '0';
    *fwd = std::string(1, c);
  } else {
    fwd = RunInNetns(fd->get(), {"/bin/cat", "/proc/sys/net/ipv4/ip_forward"});
  }
  if (!fwd) {
    probe.reason = fwd.error().message;
    return probe;
  }
  if (fwd->empty() || (*fwd)[0] != '1') {
    probe.reason =
        "net.ipv4.ip_forward is 0 in the uplink network namespace, so sandbox "
        "traffic cannot be routed out (enable it, or use network none)";
    return probe;
  }
  auto nft = RunInNetns(fd->get(), {config.nft_path, "list", "tables"});
  if (!nft) {
    probe.reason = "nftables is not usable: " + nft.error().message;
    return probe;
  }
  auto route = RunInNetns(fd->get(), {config.ip_path, "-4", "route", "show", "default"});
  if (!route || route->empty()) {
    probe.reason = "the uplink network namespace has no IPv4 default route";
    return probe;
  }
  probe.public_possible = true;
  probe.reason = "ok";
  return probe;
}

std::string AllowModeObstacle(const PublicNetworkConfig& config) {
  if (access(config.nft_path.c_str(), X_OK) != 0) {
    return fmt::format("{} is missing (install nftables): the sandbox's rules need it",
                       config.nft_path);
  }
  return {};
}

Result<PublicNetwork> PublicNetwork::Setup(pid_t sandbox_pid, const PublicNetworkConfig& config) {
  if (config.slot >= kMaxPublicSlots) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("slot {} out of range", config.slot));
  }
  PublicNetwork net;
  net.config_ = config;
  net.addrs_ = AddressesForSlot(config.slot);
  auto uplink = OpenNetns(config.uplink_netns);
  if (!uplink) return tl::unexpected(uplink.error());
  net.uplink_fd_ = std::move(*uplink);
  std::string sandbox_ns_path = fmt::format("/proc/{}/ns/net", sandbox_pid);
  UniqueFd sandbox_ns(open(sandbox_ns_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!sandbox_ns) return MakeSyscallError("open", errno, sandbox_ns_path);
  const SlotAddresses& a = net.addrs_;

  // From here on, the destructor removes what was made.
  net.active_ = true;
  auto r =
      RunInNetns(net.uplink_fd_.get(), {config.ip_path, "-batch", "-"},
                 fmt::format("link add {} type veth peer name {} netns {}\n"
                             "addr add {}/30 dev {}\n"
                             "link set {} up\n",
                             a.host_if, a.peer_if, sandbox_pid, a.gateway, a.host_if, a.host_if));
  if (!r) return tl::unexpected(r.error());
  r = RunInNetns(net.uplink_fd_.get(), {config.nft_path, "-f", "-"}, UplinkNftRules(config));
  if (!r) return tl::unexpected(r.error());
  // Rules first, then the interface comes up: no window without the policy.
  r = RunInNetns(sandbox_ns.get(), {config.nft_path, "-f", "-"}, SandboxNftRules(config));
  if (!r) return tl::unexpected(r.error());
  r = RunInNetns(sandbox_ns.get(), {config.ip_path, "-batch", "-"},
                 fmt::format("link set {} name eth0\n"
                             "addr add {}/30 dev eth0\n"
                             "link set eth0 up\n"
                             "link set lo up\n"
                             "route add default via {} dev eth0\n",
                             a.peer_if, a.sandbox, a.gateway));
  if (!r) return tl::unexpected(r.error());
  return net;
}

PublicNetwork& PublicNetwork::operator=(PublicNetwork&& other) noexcept {
  if (this != &other) {
    (void)Teardown();
    config_ = std::move(other.config_);
    addrs_ = std::move(other.addrs_);
    uplink_fd_ = std::move(other.uplink_fd_);
    active_ = std::exchange(other.active_, false);
  }
  return *this;
}

PublicNetwork::~PublicNetwork() { (void)Teardown(); }

Status PublicNetwork::Teardown() {
  if (!active_) return {};
  active_ = false;
  Status result;
  auto r = RunInNetns(uplink_fd_.get(), {config_.nft_path, "delete", "table", "inet",
                                         fmt::format("deepbox_s{}", config_.slot)});
  if (!r) result = tl::unexpected(r.error());
  // The veth pair dies with the sandbox's netns; delete it now in case the sandbox lives on.
  (void)RunInNetns(uplink_fd_.get(), {config_.ip_path, "link", "del", addrs_.host_if});
  uplink_fd_.reset();
  return result;
}

}  // namespace deepbox::local
