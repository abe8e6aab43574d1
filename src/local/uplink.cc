#include "local/uplink.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "local/child.h"
#include "local/host_network.h"
#include "local/namespaces.h"
#include "local/netns.h"
#include "local/network_rules.h"

namespace deepbox::local {

namespace {
bool IsLoopback(const std::string& ns) { return ns.rfind("127.", 0) == 0 || ns == "::1"; }

bool IsIpLiteral(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

UplinkDns PlanUplinkDns(const PublicNetworkConfig& config,
                        const std::vector<std::string>& host_nameservers) {
  UplinkDns dns;
  if (!config.nameservers.empty()) {
    // Explicit resolvers (tests: the test world's DNS server). pasta must not
    // read the host's resolv.conf for anything: -D names them instead.
    for (const auto& ns : config.nameservers) {
      if (!IsIpLiteral(ns)) continue;
      dns.sandbox_nameservers.push_back(ns);
      dns.pasta_args.insert(dns.pasta_args.end(), {"-D", ns});
    }
    if (dns.pasta_args.empty()) dns.pasta_args = {"-D", "none"};
    return dns;
  }
  bool forward = false;
  for (const auto& ns : host_nameservers) {
    if (!IsIpLiteral(ns)) continue;
    if (IsLoopback(ns)) {
      forward = forward || ns.find('.') != std::string::npos;
      continue;
    }
    dns.sandbox_nameservers.push_back(ns);
  }
  if (forward) {
    dns.sandbox_nameservers.insert(dns.sandbox_nameservers.begin(), kPastaDnsForward);
    dns.pasta_args = {"--dns-forward", kPastaDnsForward};
  }
  return dns;
}

std::vector<std::string> PastaArgv(pid_t sandbox_pid, const PublicNetworkConfig& config,
                                   const UplinkDns& dns, int ready_fd) {
  std::vector<std::string> argv = {config.pasta_path, "--foreground", "--quiet"};
  if (geteuid() == 0) argv.insert(argv.end(), {"--runas", "0"});  // see uplink.h
  // No ingress (-t/-u), nothing onto the host's loopback (-T/-U, --no-map-gw).
  argv.insert(argv.end(), {"-t", "none", "-u", "none", "-T", "none", "-U", "none", "--no-map-gw",
                           "--config-net", "--ns-ifname", "eth0", "--pid",
                           fmt::format("/proc/self/fd/{}", ready_fd)});
  argv.insert(argv.end(), dns.pasta_args.begin(), dns.pasta_args.end());
  argv.push_back(std::to_string(sandbox_pid));
  return argv;
}

std::string PastaObstacle(const PublicNetworkConfig& config) {
  if (access(config.pasta_path.c_str(), X_OK) != 0) {
    return fmt::format("{} is missing (install the passt package)", config.pasta_path);
  }
  if (access(config.nft_path.c_str(), X_OK) != 0) {
    return fmt::format("{} is missing (install nftables)", config.nft_path);
  }
  if (!config.uplink_netns.empty() && geteuid() != 0) {
    return "running the uplink in another network namespace needs root";
  }
  if (geteuid() != 0 && access("/dev/net/tun", R_OK | W_OK) != 0) {
    // pasta opens it after joining the sandbox's namespaces; the node's own
    // mode still applies (Debian's default is 0666).
    return fmt::format(
        "/dev/net/tun is not readable and writable by uid {} ({}); pasta needs it "
        "(chmod 0666 /dev/net/tun, the usual default)",
        geteuid(), strerror(errno));
  }
  return {};
}

NetworkProbe ChooseUplink(const PublicNetworkConfig& config) {
  NetworkProbe out;
  if (config.uplink != UplinkChoice::kPasta) {
    if (geteuid() != 0) {
      out.veth_reason = "needs root (a veth pair and NAT in the host's network namespace)";
    } else {
      NetworkProbe veth = ProbePublicNetwork(config);
      out.veth_reason = veth.reason;
      if (veth.public_possible && config.uplink == UplinkChoice::kAuto) {
        // IPv6 egress only exists through pasta: prefer it where the uplink has IPv6.
        UniqueFd ns(
            open(config.uplink_netns.empty() ? "/proc/self/ns/net" : config.uplink_netns.c_str(),
                 O_RDONLY | O_CLOEXEC));
        auto v6 = RunInNetns(ns.get(), {config.ip_path, "-6", "route", "show", "default"});
        if (v6 && !v6->empty() && PastaObstacle(config).empty()) {
          out.veth_reason = "possible, but IPv4 only: pasta carries IPv6 here";
          veth.public_possible = false;
        }
      }
      if (veth.public_possible) {
        out.public_possible = true;
        out.uplink = Uplink::kVeth;
        out.reason = "ok";
        out.pasta_reason = config.uplink == UplinkChoice::kVeth ? "not asked for" : "not needed";
        return out;
      }
    }
  } else {
    out.veth_reason = "not asked for";
  }
  if (config.uplink == UplinkChoice::kVeth) {
    out.pasta_reason = "not asked for";
    out.reason = "veth: " + out.veth_reason;
    return out;
  }
  std::string obstacle = PastaObstacle(config);
  if (obstacle.empty()) {
    out.public_possible = true;
    out.uplink = Uplink::kPasta;
    out.reason = "ok";
    out.pasta_reason = "ok";
    return out;
  }
  out.pasta_reason = obstacle;
  out.reason = fmt::format("pasta: {}; veth: {}", obstacle, out.veth_reason);
  return out;
}

Result<PastaUplink> PastaUplink::Start(pid_t sandbox_pid, const PublicNetworkConfig& config,
                                       const UplinkDns& dns, int log_fd) {
  UniqueFd uplink_ns;
  if (!config.uplink_netns.empty()) {
    uplink_ns.reset(open(config.uplink_netns.c_str(), O_RDONLY | O_CLOEXEC));
    if (!uplink_ns) return MakeSyscallError("open", errno, config.uplink_netns);
  }
  UniqueFd devnull;
  if (log_fd < 0) {
    devnull.reset(open("/dev/null", O_WRONLY | O_CLOEXEC));
    if (!devnull) return MakeSyscallError("open", errno, "/dev/null");
    log_fd = devnull.get();
  }
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return MakeSyscallError("pipe2", errno);
  UniqueFd ready_r(p[0]), ready_w(p[1]);
  // pasta gets the pipe's write end at fd 3 (its --pid file).
  constexpr int kReadyFd = 3;
  std::vector<std::string> argv = PastaArgv(sandbox_pid, config, dns, kReadyFd);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  char path_env[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
  char* envp[] = {path_env, nullptr};
  const pid_t parent = getpid();

  auto clone = CloneWithFlags(0);
  if (!clone) return tl::unexpected(clone.error());
  if (clone->pid == 0) {
    // Async-signal-safe only. Dies with the launching thread's process.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != parent) _exit(125);
    if (uplink_ns && setns(uplink_ns.get(), CLONE_NEWNET) != 0) _exit(126);
    int in = open("/dev/null", O_RDONLY);
    if (in < 0 || dup2(in, 0) < 0 || dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0) _exit(126);
    if (dup2(ready_w.get(), kReadyFd) < 0) _exit(126);
    syscall(SYS_close_range, kReadyFd + 1, ~0U, 0);
    RestoreDefaultSignals();
    execve(args[0], args.data(), envp);
    _exit(127);
  }
  PastaUplink up;
  up.pid_ = clone->pid;
  up.pidfd_ = std::move(clone->pidfd);
  ready_w.reset();

  // pasta writes its pid once the namespace's interface is configured; EOF
  // means it exited.
  const int64_t deadline = NowMs() + 10000;
  std::string got;
  for (;;) {
    int left = static_cast<int>(deadline - NowMs());
    if (left <= 0) {
      return MakeError(ErrorCode::kTimeout,
                       "pasta did not configure the sandbox's network in 10 s");
    }
    pollfd pfd{ready_r.get(), POLLIN, 0};
    int rc = poll(&pfd, 1, left);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return MakeSyscallError("poll", errno, "pasta readiness pipe");
    if (rc == 0) continue;
    char buf[32];
    ssize_t n = read(ready_r.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeSyscallError("read", errno, "pasta readiness pipe");
    if (n == 0) break;
    got.append(buf, static_cast<size_t>(n));
    break;  // one write() of its pid
  }
  if (got.empty()) {
    int status = 0;
    pid_t pid = std::exchange(up.pid_, -1);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::string why = code == 126   ? "could not enter the uplink network namespace"
                      : code == 127 ? "could not execute " + config.pasta_path
                                    : "see the sandbox's log for pasta's message";
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("pasta exited with status {} before configuring the sandbox's "
                                 "network ({})",
                                 code, why));
  }
  return up;
}

PastaUplink& PastaUplink::operator=(PastaUplink&& other) noexcept {
  if (this != &other) {
    Stop();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::move(other.pidfd_);
  }
  return *this;
}

PastaUplink::~PastaUplink() { Stop(); }

void PastaUplink::Stop() {
  if (pid_ <= 0) return;
  // The pidfd names exactly our child, even if its pid were reused.
  (void)syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  pidfd_.reset();
}

Result<std::unique_ptr<HostAddressWatch>> HostAddressWatch::Start(
    pid_t sandbox_pid, const PublicNetworkConfig& config) {
  std::unique_ptr<HostAddressWatch> w(new HostAddressWatch());
  w->config_ = config;
  if (!config.uplink_netns.empty()) {
    w->uplink_ns_.reset(open(config.uplink_netns.c_str(), O_RDONLY | O_CLOEXEC));
    if (!w->uplink_ns_) return MakeSyscallError("open", errno, config.uplink_netns);
  }
  if (auto st = OpenSandboxNamespaces(sandbox_pid, &w->sandbox_userns_, &w->sandbox_netns_); !st) {
    return tl::unexpected(st.error());
  }
  w->stop_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!w->stop_) return MakeSyscallError("eventfd", errno);
  std::promise<std::string> ready;
  std::future<std::string> ready_result = ready.get_future();
  w->thread_ = std::thread([raw = w.get(), &ready] {
    // The socket belongs to the netns of the thread that creates it.
    if (raw->uplink_ns_ && setns(raw->uplink_ns_.get(), CLONE_NEWNET) != 0) {
      ready.set_value(SyscallError("setns", errno, "the uplink network namespace").message);
      return;
    }
    UniqueFd nl(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE));
    if (!nl) {
      ready.set_value(SyscallError("socket", errno, "AF_NETLINK").message);
      return;
    }
    sockaddr_nl groups{};
    groups.nl_family = AF_NETLINK;
    groups.nl_groups =
        RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE;
    if (bind(nl.get(), reinterpret_cast<sockaddr*>(&groups), sizeof(groups)) != 0) {
      ready.set_value(SyscallError("bind", errno, "rtnetlink address and route groups").message);
      return;
    }
    raw->Loop(nl.get(), &ready);
  });
  std::string why = ready_result.get();
  if (!why.empty()) {
    w->thread_.join();
    return MakeError(ErrorCode::kUnavailable, "watching the uplink's addresses: " + why);
  }
  return w;
}

HostAddressWatch::~HostAddressWatch() {
  if (stop_) {
    uint64_t one = 1;
    (void)!write(stop_.get(), &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
}

HostNetworkSets HostAddressWatch::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

std::string HostAddressWatch::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

Status HostAddressWatch::Apply(const HostNetworkSets& sets) {
  auto r = RunInOpenNamespaces(sandbox_userns_.get(), sandbox_netns_.get(),
                               {config_.nft_path, "-f", "-"}, HostSetsNftScript(sets));
  if (!r) return tl::unexpected(r.error());
  std::lock_guard<std::mutex> lock(mu_);
  current_ = sets;
  ++rewrites_;
  return {};
}

void HostAddressWatch::Loop(int nl, std::promise<std::string>* ready) {
  auto first = ReadHostNetworkSets(config_.allowed_cidrs);
  if (!first) {
    ready->set_value(first.error().ToString());
    return;
  }
  if (auto st = Apply(*first); !st) {
    ready->set_value(st.error().ToString());
    return;
  }
  ready->set_value("");  // `ready` dies with Start's frame: never touch it again
  std::vector<char> buf(1 << 16);
  bool retry = false;  // the last rewrite failed: try again in a second
  for (;;) {
    pollfd p[2] = {{nl, POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    int rc = poll(p, 2, retry ? 1000 : -1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 || p[1].revents) return;
    // Drain every pending notification (ENOBUFS: some were lost; re-read anyway).
    for (;;) {
      ssize_t n = recv(nl, buf.data(), buf.size(), 0);
      if (n < 0 && (errno == EINTR || errno == ENOBUFS)) continue;
      if (n <= 0) break;
    }
    auto sets = ReadHostNetworkSets(config_.allowed_cidrs);
    if (!sets) {
      std::lock_guard<std::mutex> lock(mu_);
      last_error_ = sets.error().ToString();
      retry = true;
      continue;
    }
    retry = false;
    if (*sets == current()) continue;
    if (auto st = Apply(*sets); !st) {
      std::lock_guard<std::mutex> lock(mu_);
      last_error_ = st.error().ToString();
      retry = true;
    }
  }
}

}  // namespace deepbox::local
