#include "local/netns.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/capability.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace deepbox::local {

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

namespace {
// Child side, async-signal-safe: joins `userns_fd` (if >= 0) and `netns_fd`
// (if >= 0). With a user namespace, CAP_NET_ADMIN is made ambient so that a
// program exec'ed next keeps it (our uid is not root in that namespace).
int JoinNamespacesRaw(int userns_fd, int netns_fd, bool ambient_net_admin) {
  if (userns_fd >= 0 && setns(userns_fd, CLONE_NEWUSER) != 0) return errno;
  if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) != 0) return errno;
  if (ambient_net_admin) {
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (syscall(SYS_capget, &hdr, data) != 0) return errno;
    data[0].inheritable |= 1U << CAP_NET_ADMIN;
    if (syscall(SYS_capset, &hdr, data) != 0) return errno;
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_ADMIN, 0, 0) != 0) return errno;
  }
  return 0;
}

Result<std::string> RunJoined(int userns_fd, int netns_fd, const std::vector<std::string>& argv,
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
    if (JoinNamespacesRaw(userns_fd, netns_fd, userns_fd >= 0) != 0) _exit(126);
    if (dup2(in_r.get(), 0) < 0 || dup2(out_w.get(), 1) < 0 || dup2(out_w.get(), 2) < 0) {
      _exit(126);
    }
    RestoreDefaultSignals();
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
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code == 126 && output.empty()) output = "could not join the namespaces (setns)";
    return MakeError(ErrorCode::kInternal,
                     fmt::format("'{}' failed (status {}): {}", cmd, code, output));
  }
  return output;
}

}  // namespace

Result<UniqueFd> OpenNetns(const std::string& path) {
  std::string p = path.empty() ? "/proc/self/ns/net" : path;
  UniqueFd fd(open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return MakeSyscallError("open", errno, p);
  return fd;
}

// Opens /proc/PID/ns/{user,net}; the user namespace only when not root (root
// already holds CAP_NET_ADMIN over every network namespace).
Status OpenSandboxNamespaces(pid_t pid, UniqueFd* userns, UniqueFd* netns) {
  if (geteuid() != 0) {
    std::string p = fmt::format("/proc/{}/ns/user", pid);
    userns->reset(open(p.c_str(), O_RDONLY | O_CLOEXEC));
    if (!*userns) return MakeSyscallError("open", errno, p);
  }
  std::string p = fmt::format("/proc/{}/ns/net", pid);
  netns->reset(open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (!*netns) return MakeSyscallError("open", errno, p);
  return {};
}

Result<std::string> RunInOpenNamespaces(int userns_fd, int netns_fd,
                                        const std::vector<std::string>& argv,
                                        std::string_view input) {
  return RunJoined(userns_fd, netns_fd, argv, input);
}

Result<std::string> RunInNetns(int netns_fd, const std::vector<std::string>& argv,
                               std::string_view input) {
  return RunJoined(-1, netns_fd, argv, input);
}

Result<std::string> RunInSandboxNetns(pid_t pid, const std::vector<std::string>& argv,
                                      std::string_view input) {
  UniqueFd userns, netns;
  if (auto st = OpenSandboxNamespaces(pid, &userns, &netns); !st) return tl::unexpected(st.error());
  return RunJoined(userns.get(), netns.get(), argv, input);
}

Result<UniqueFd> ListenInSandboxNetns(pid_t pid, const std::string& ip, int port) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
      inet_pton(AF_INET, ip.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in);
  } else if (auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
             inet_pton(AF_INET6, ip.c_str(), &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in6);
  } else {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("bad listen address '{}'", ip));
  }
  UniqueFd userns, netns;
  if (auto st = OpenSandboxNamespaces(pid, &userns, &netns); !st) return tl::unexpected(st.error());
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sp) != 0) {
    return MakeSyscallError("socketpair", errno);
  }
  UniqueFd mine(sp[0]), theirs(sp[1]);
  pid_t child = fork();
  if (child < 0) return MakeSyscallError("fork", errno);
  if (child == 0) {
    // Reports {step, errno} on failure, or passes the listener.
    int report[2] = {0, 0};
    auto fail = [&](int step) {
      report[0] = step;
      report[1] = errno;
      (void)!write(theirs.get(), report, sizeof(report));
      _exit(1);
    };
    if (JoinNamespacesRaw(userns.get(), netns.get(), false) != 0) fail(1);
    ChildCall call;
    if (int err = BringUpLoopbackRaw(&call); err != 0) {
      errno = err;
      fail(2);
    }
    int s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) fail(3);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ss.ss_family == AF_INET6) setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(s, reinterpret_cast<sockaddr*>(&ss), len) != 0) fail(4);
    if (listen(s, 128) != 0) fail(5);
    char cbuf[CMSG_SPACE(sizeof(int))];
    memset(cbuf, 0, sizeof(cbuf));
    iovec iov{report, sizeof(report)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf;
    msg.msg_controllen = sizeof(cbuf);
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &s, sizeof(int));
    if (sendmsg(theirs.get(), &msg, 0) < 0) fail(6);
    _exit(0);
  }
  theirs.reset();
  int report[2] = {0, 0};
  char cbuf[CMSG_SPACE(sizeof(int))];
  memset(cbuf, 0, sizeof(cbuf));
  iovec iov{report, sizeof(report)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = cbuf;
  msg.msg_controllen = sizeof(cbuf);
  ssize_t n;
  do {
    n = recvmsg(mine.get(), &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  int saved = errno;
  while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (n < 0) return MakeSyscallError("recvmsg", saved, "listener helper");
  static const char* kSteps[] = {"",       "setns",  "ioctl(SIOCSIFFLAGS lo)", "socket", "bind",
                                 "listen", "sendmsg"};
  if (report[0] != 0) {
    int step = report[0] >= 1 && report[0] <= 6 ? report[0] : 0;
    return MakeSyscallError(kSteps[step], report[1],
                            fmt::format("{}:{} in the sandbox's network namespace", ip, port));
  }
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  if (n == 0 || cm == nullptr || cm->cmsg_type != SCM_RIGHTS) {
    return MakeError(ErrorCode::kInternal, "the listener helper passed no socket");
  }
  int fd;
  memcpy(&fd, CMSG_DATA(cm), sizeof(int));
  return UniqueFd(fd);
}

}  // namespace deepbox::local
