#include "k8s/socket_owner.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <string>

#include "common/unique_fd.h"

namespace deepbox::k8s {

namespace {

constexpr unsigned kTcpListen = 0x0A;  // TCP_LISTEN in include/net/tcp_states.h

template <typename T>
bool ParseNumber(std::string_view s, T& out, int base) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return ec == std::errc() && p == s.data() + s.size();
}

std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

// The kernel prints each 32-bit word of the (network order) address with
// %08X as a native integer: reading it back natively restores the bytes.
bool ParseAddress(std::string_view hex, bool v6, in6_addr& out) {
  size_t words = v6 ? 4 : 1;
  if (hex.size() != words * 8) return false;
  out = in6_addr{};
  for (size_t w = 0; w < words; ++w) {
    uint32_t value = 0;
    if (!ParseNumber(hex.substr(w * 8, 8), value, 16)) return false;
    std::memcpy(&out.s6_addr[w * 4], &value, 4);
  }
  return true;
}

bool ReachableFromLoopback(const in6_addr& a, bool v6) {
  uint32_t v4 = 0;
  if (!v6) {
    std::memcpy(&v4, &a.s6_addr[0], 4);
  } else if (IN6_IS_ADDR_UNSPECIFIED(&a)) {
    return true;  // [::] takes IPv4 too unless IPV6_V6ONLY, which /proc does not show
  } else if (IN6_IS_ADDR_V4MAPPED(&a)) {
    std::memcpy(&v4, &a.s6_addr[12], 4);
  } else {
    return false;
  }
  return v4 == htonl(INADDR_LOOPBACK) || v4 == htonl(INADDR_ANY);
}

Result<std::string> ReadProcFile(const char* path) {
  UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (!fd) return MakeSyscallError("open", errno, path);
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return MakeSyscallError("read", errno, path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// The process group of `pid` from /proc/<pid>/stat ("pid (comm) S ppid pgrp ...";
// comm may hold spaces and parentheses, so parse after the last ')').
std::optional<pid_t> ProcessGroupOf(pid_t pid) {
  auto text = ReadProcFile(fmt::format("/proc/{}/stat", pid).c_str());
  if (!text) return std::nullopt;
  auto close = text->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  auto f = Fields(std::string_view(*text).substr(close + 1));
  pid_t pgrp = 0;
  if (f.size() < 3 || !ParseNumber(f[2], pgrp, 10)) return std::nullopt;
  return pgrp;
}

}  // namespace

Result<std::vector<uint64_t>> ParseLoopbackListeners(std::string_view table, bool v6,
                                                     uint16_t port) {
  std::vector<uint64_t> out;
  size_t line_no = 0;
  while (!table.empty()) {
    size_t nl = table.find('\n');
    std::string_view line = table.substr(0, nl);
    table.remove_prefix(nl == std::string_view::npos ? table.size() : nl + 1);
    if (line_no++ == 0) continue;  // the column header
    auto f = Fields(line);
    if (f.empty()) continue;
    auto bad = [&] {
      return MakeError(ErrorCode::kInternal,
                       fmt::format("/proc/net/tcp{}: line {} is not in the kernel's format",
                                   v6 ? "6" : "", line_no));
    };
    if (f.size() < 10) return bad();
    std::string_view local = f[1];
    auto colon = local.find(':');
    in6_addr addr{};
    unsigned local_port = 0, state = 0;
    uint64_t inode = 0;
    if (colon == std::string_view::npos || !ParseAddress(local.substr(0, colon), v6, addr) ||
        !ParseNumber(local.substr(colon + 1), local_port, 16) || !ParseNumber(f[3], state, 16) ||
        !ParseNumber(f[9], inode, 10)) {
      return bad();
    }
    if (state != kTcpListen || local_port != port || !ReachableFromLoopback(addr, v6)) continue;
    out.push_back(inode);
  }
  return out;
}

Result<std::vector<uint64_t>> LoopbackListeners(uint16_t port) {
  std::vector<uint64_t> out;
  for (bool v6 : {false, true}) {
    const char* path = v6 ? "/proc/net/tcp6" : "/proc/net/tcp";
    auto text = ReadProcFile(path);
    if (!text) {
      if (v6 && text.error().code == ErrorCode::kNotFound) continue;  // no IPv6
      return tl::unexpected(text.error());
    }
    auto found = ParseLoopbackListeners(*text, v6, port);
    if (!found) return tl::unexpected(found.error());
    out.insert(out.end(), found->begin(), found->end());
  }
  return out;
}

Result<std::set<uint64_t>> SocketInodesOf(pid_t pid) {
  std::string dir = fmt::format("/proc/{}/fd", pid);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return MakeSyscallError("opendir", errno, dir);
  std::set<uint64_t> out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char target[64];
    ssize_t n = ::readlinkat(::dirfd(d), e->d_name, target, sizeof target - 1);
    if (n <= 0) continue;  // closed meanwhile
    std::string_view t(target, static_cast<size_t>(n));
    constexpr std::string_view kPrefix = "socket:[";
    if (!t.starts_with(kPrefix) || !t.ends_with("]")) continue;
    uint64_t inode = 0;
    if (ParseNumber(t.substr(kPrefix.size(), t.size() - kPrefix.size() - 1), inode, 10)) {
      out.insert(inode);
    }
  }
  ::closedir(d);
  return out;
}

Status CheckListenerOwner(pid_t pid, uint16_t port) {
  auto listeners = LoopbackListeners(port);
  if (!listeners) {
    Error e = listeners.error();
    e.message = fmt::format("cannot check who listens on 127.0.0.1:{}: {}", port, e.message);
    return tl::unexpected(e);
  }
  if (listeners->empty()) {
    return MakeError(ErrorCode::kUnavailable, fmt::format("nothing listens on 127.0.0.1:{}", port));
  }
  auto held = SocketInodesOf(pid);
  if (!held) {
    Error e = held.error();
    e.message = fmt::format("cannot check who listens on 127.0.0.1:{}: {}", port, e.message);
    return tl::unexpected(e);
  }
  std::vector<uint64_t> foreign;
  for (uint64_t inode : *listeners) {
    if (!held->contains(inode)) foreign.push_back(inode);
  }
  if (!foreign.empty()) {
    // A wrapper that runs kubectl without exec: its processes share the
    // group. Only processes of our own uid count (a group id alone proves
    // nothing about who runs a process).
    if (DIR* d = ::opendir("/proc")) {
      uid_t me = ::geteuid();
      while (dirent* e = ::readdir(d)) {
        if (foreign.empty()) break;
        pid_t other = 0;
        std::string_view name(e->d_name);
        if (!ParseNumber(name, other, 10) || other == pid) continue;
        struct stat st {};
        if (::fstatat(::dirfd(d), e->d_name, &st, 0) != 0 || st.st_uid != me) continue;
        if (ProcessGroupOf(other) != pid) continue;
        auto theirs = SocketInodesOf(other);
        if (!theirs) continue;  // exited meanwhile
        std::erase_if(foreign, [&](uint64_t inode) { return theirs->contains(inode); });
      }
      ::closedir(d);
    }
  }
  if (!foreign.empty()) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("127.0.0.1:{} is listened on by a process other than kubectl "
                                 "port-forward (pid {}; socket inode {}): refusing to send the "
                                 "router token there (another local user may have taken the "
                                 "port)",
                                 port, pid, foreign.front()));
  }
  return {};
}

}  // namespace deepbox::k8s
