#include "local/network.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace deepbox::local {

std::string_view NetworkModeName(NetworkMode mode) {
  return mode == NetworkMode::kPublic ? "public" : "none";
}

Result<NetworkMode> ParseNetworkMode(std::string_view text) {
  if (text == "none") return NetworkMode::kNone;
  if (text == "public") return NetworkMode::kPublic;
  return MakeError(ErrorCode::kInvalidArgument,
                   fmt::format("unknown network mode '{}' (expected none or public)", text));
}

int BringUpLoopbackRaw(ChildCall* call) {
  *call = ChildCall::kSocket;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  struct ifreq ifr;
  memset(&ifr, 0, sizeof(ifr));
  ifr.ifr_name[0] = 'l';
  ifr.ifr_name[1] = 'o';
  *call = ChildCall::kIoctl;
  if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
    int err = errno;
    close(fd);
    return err;
  }
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) {
    int err = errno;
    close(fd);
    return err;
  }
  close(fd);
  *call = ChildCall::kNone;
  return 0;
}

const std::vector<std::string>& BlockedIpv4Ranges() {
  static const std::vector<std::string> v = {
      "0.0.0.0/8",       // "this network"
      "10.0.0.0/8",      // RFC 1918
      "100.64.0.0/10",   // CGNAT (also every sandbox's own /30)
      "127.0.0.0/8",     // loopback (of the host, via the uplink)
      "169.254.0.0/16",  // link-local, cloud metadata 169.254.169.254
      "172.16.0.0/12",   // RFC 1918
      "192.0.0.0/24",    // IETF protocol assignments
      "192.168.0.0/16",  // RFC 1918
      "224.0.0.0/4",     // multicast
      "240.0.0.0/4",     // reserved + broadcast
  };
  return v;
}

const std::vector<std::string>& BlockedIpv6Ranges() {
  static const std::vector<std::string> v = {
      "::/127",          // unspecified + loopback
      "::ffff:0:0/96",   // IPv4-mapped
      "64:ff9b:1::/48",  // local-use NAT64
      "fc00::/7",        // ULA
      "fe80::/10",       // link-local
      "fec0::/10",       // site-local (deprecated)
      "ff00::/8",        // multicast
  };
  return v;
}

SlotAddresses AddressesForSlot(uint32_t slot) {
  uint32_t base = (100u << 24) | (100u << 16) | ((slot % kMaxPublicSlots) * 4u);
  auto ip = [](uint32_t a) {
    return fmt::format("{}.{}.{}.{}", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
  };
  SlotAddresses s;
  s.gateway = ip(base + 1);
  s.sandbox = ip(base + 2);
  s.host_if = fmt::format("dbx{}h", slot);
  s.peer_if = fmt::format("dbx{}s", slot);
  return s;
}

namespace {
std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

bool IsIpv4(const std::string& s) {
  struct in_addr a;
  return inet_pton(AF_INET, s.c_str(), &a) == 1;
}

std::vector<std::string> UsableNameservers(const PublicNetworkConfig& c) {
  std::vector<std::string> out;
  for (const auto& ns : c.nameservers) {
    if (IsIpv4(ns) && ns.rfind("127.", 0) != 0) out.push_back(ns);
  }
  return out;
}
}  // namespace

std::string SandboxNftRules(const PublicNetworkConfig& config) {
  std::string dns;
  for (const auto& ns : UsableNameservers(config)) {
    dns += fmt::format("    ip daddr {} udp dport 53 accept\n    ip daddr {} tcp dport 53 accept\n",
                       ns, ns);
  }
  return fmt::format(
      "table inet deepbox {{\n"
      "  set blocked4 {{ type ipv4_addr; flags interval; elements = {{ {} }} }}\n"
      "  set blocked6 {{ type ipv6_addr; flags interval; elements = {{ {} }} }}\n"
      "  chain output {{\n"
      "    type filter hook output priority 0; policy accept;\n"
      "    oifname \"lo\" accept\n"
      "{}"
      "    ip daddr @blocked4 reject with icmpx type admin-prohibited\n"
      "    ip6 daddr @blocked6 reject with icmpx type admin-prohibited\n"
      "  }}\n"
      "  chain input {{\n"
      "    type filter hook input priority 0; policy drop;\n"
      "    iifname \"lo\" accept\n"
      "    ct state established,related accept\n"
      "  }}\n"
      "}}\n",
      Join(BlockedIpv4Ranges()), Join(BlockedIpv6Ranges()), dns);
}

std::string UplinkNftRules(const PublicNetworkConfig& config) {
  SlotAddresses a = AddressesForSlot(config.slot);
  std::string dns;
  for (const auto& ns : UsableNameservers(config)) {
    dns += fmt::format(
        "    iifname \"{}\" ip daddr {} meta l4proto {{ tcp, udp }} th dport 53 "
        "accept\n",
        a.host_if, ns);
  }
  return fmt::format(
      "table inet deepbox_s{0} {{\n"
      "  chain forward {{\n"
      "    type filter hook forward priority -10; policy accept;\n"
      "{4}"
      "    iifname \"{1}\" ip daddr {{ {2} }} drop\n"
      "    iifname \"{1}\" meta nfproto ipv6 drop\n"
      "    oifname \"{1}\" ct state established,related accept\n"
      "    oifname \"{1}\" drop\n"
      "  }}\n"
      "  chain input {{\n"
      "    type filter hook input priority -10; policy accept;\n"
      "    iifname \"{1}\" drop\n"
      "  }}\n"
      "  chain postrouting {{\n"
      "    type nat hook postrouting priority 100; policy accept;\n"
      "    ip saddr {3} oifname != \"{1}\" masquerade\n"
      "  }}\n"
      "}}\n",
      config.slot, a.host_if, Join(BlockedIpv4Ranges()), a.sandbox, dns);
}

Result<std::string> RunInNetns(int netns_fd, const std::vector<std::string>& argv,
                               std::string_view input) {
  if (argv.empty() || argv[0].empty() || argv[0][0] != '/') {
    return MakeError(ErrorCode::kInvalidArgument, "RunInNetns needs an absolute program path");
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  char path_env[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
  char* envp[] = {path_env, nullptr};
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0) return MakeSyscallError("pipe2", errno);
  UniqueFd in_r(in_pipe[0]), in_w(in_pipe[1]);
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return MakeSyscallError("pipe2", errno);
  UniqueFd out_r(out_pipe[0]), out_w(out_pipe[1]);
  pid_t pid = fork();
  if (pid < 0) return MakeSyscallError("fork", errno);
  if (pid == 0) {
    if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) != 0) _exit(126);
    if (dup2(in_r.get(), 0) < 0 || dup2(out_w.get(), 1) < 0 || dup2(out_w.get(), 2) < 0) {
      _exit(126);
    }
    execve(args[0], args.data(), envp);
    _exit(127);
  }
  in_r.reset();
  out_w.reset();
  size_t off = 0;
  while (off < input.size()) {
    ssize_t n = write(in_w.get(), input.data() + off, input.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  in_w.reset();
  std::string output;
  char buf[4096];
  for (;;) {
    ssize_t n = read(out_r.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    output.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string cmd;
    for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
    return MakeError(
        ErrorCode::kInternal,
        fmt::format("'{}' failed (status {}): {}", cmd,
                    WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), output));
  }
  return output;
}

namespace {
Result<UniqueFd> OpenNetns(const std::string& path) {
  std::string p = path.empty() ? "/proc/self/ns/net" : path;
  UniqueFd fd(open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return MakeSyscallError("open", errno, p);
  return fd;
}
}  // namespace

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
  auto fwd = RunInNetns(fd->get(), {"/bin/cat", "/proc/sys/net/ipv4/ip_forward"});
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
