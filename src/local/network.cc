#include "local/network.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/capability.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace deepbox::local {

std::string_view NetworkModeName(NetworkMode mode) {
  switch (mode) {
    case NetworkMode::kPublic:
      return "public";
    case NetworkMode::kAllow:
      return "allow";
    case NetworkMode::kNone:
      break;
  }
  return "none";
}

Result<NetworkMode> ParseNetworkMode(std::string_view text) {
  if (text == "none") return NetworkMode::kNone;
  if (text == "public") return NetworkMode::kPublic;
  return MakeError(ErrorCode::kInvalidArgument,
                   fmt::format("unknown network mode '{}' (expected none or public)", text));
}

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

std::string NetworkPolicy::ToString() const {
  if (mode != NetworkMode::kAllow) return std::string(NetworkModeName(mode));
  std::string out = "allow=";
  for (size_t i = 0; i < allow.size(); ++i) out += (i ? "," : "") + allow[i];
  return out;
}

namespace {
// A DNS name of letters, digits and '-' labels (1..63 each, 253 in all),
// optionally "*." first; then an optional ":port" (1..65535).
Status ValidateAllowEntry(std::string_view entry) {
  auto bad = [&](std::string_view why) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("bad allow entry '{}': {}", entry, why));
  };
  std::string_view name = entry;
  if (size_t colon = entry.rfind(':'); colon != std::string_view::npos) {
    std::string_view port = entry.substr(colon + 1);
    name = entry.substr(0, colon);
    if (port.empty() || port.size() > 5) return bad("port must be 1..65535");
    int value = 0;
    for (char c : port) {
      if (c < '0' || c > '9') return bad("port must be 1..65535");
      value = value * 10 + (c - '0');
    }
    if (value < 1 || value > 65535) return bad("port must be 1..65535");
  }
  if (name.substr(0, 2) == "*.") name.remove_prefix(2);
  if (name.empty() || name.size() > 253) return bad("empty or too long name");
  size_t label = 0;
  for (size_t i = 0; i <= name.size(); ++i) {
    if (i == name.size() || name[i] == '.') {
      if (label == 0 || label > 63) return bad("empty or too long label");
      if (name[i - 1] == '-' || name[i - label] == '-') return bad("label starts or ends with '-'");
      label = 0;
      continue;
    }
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    if (!ok) return bad("only lower-case letters, digits, '-' and '.' (and a leading '*.')");
    ++label;
  }
  if (name.find('.') == std::string_view::npos) return bad("a name needs a dot");
  if (name.substr(name.rfind('.') + 1).find_first_not_of("0123456789") == std::string::npos) {
    return bad("an address is not a name (only names can be allowed)");
  }
  return {};
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}
}  // namespace

Result<NetworkPolicy> ParseNetworkPolicy(std::string_view text) {
  NetworkPolicy policy;
  if (text == "none") return policy;
  if (text == "public") {
    policy.mode = NetworkMode::kPublic;
    return policy;
  }
  if (text.substr(0, 6) != "allow=") {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("unknown network mode '{}' (expected none, public or "
                                 "allow=NAME[,NAME...], e.g. allow=pypi.org,*.github.com)",
                                 text));
  }
  policy.mode = NetworkMode::kAllow;
  std::string rest = Lower(text.substr(6));
  size_t start = 0;
  while (start <= rest.size()) {
    size_t comma = rest.find(',', start);
    if (comma == std::string::npos) comma = rest.size();
    std::string entry = rest.substr(start, comma - start);
    if (auto st = ValidateAllowEntry(entry); !st) return tl::unexpected(st.error());
    policy.allow.push_back(entry);
    start = comma + 1;
  }
  if (policy.allow.size() > 256) {
    return MakeError(ErrorCode::kInvalidArgument, "at most 256 allow entries");
  }
  return policy;
}

bool AllowlistMatches(const std::vector<std::string>& allow, std::string_view name_in, int port) {
  std::string name = Lower(name_in);
  if (!name.empty() && name.back() == '.') name.pop_back();
  if (name.empty()) return false;
  for (const auto& entry : allow) {
    std::string_view pattern = entry;
    bool port_ok = port == 80 || port == 443;
    if (size_t colon = pattern.rfind(':'); colon != std::string_view::npos) {
      port_ok = port_ok || pattern.substr(colon + 1) == std::to_string(port);
      pattern = pattern.substr(0, colon);
    }
    if (!port_ok) continue;
    if (pattern.substr(0, 2) == "*.") {
      std::string_view suffix = pattern.substr(1);  // ".github.com"
      if (name.size() > suffix.size() &&
          std::string_view(name).substr(name.size() - suffix.size()) == suffix) {
        return true;
      }
    } else if (name == pattern) {
      return true;
    }
  }
  return false;
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
  static const std::vector<std::string> v = [] {
    std::vector<std::string> out = {
        "::/127",          // unspecified + loopback
        "::ffff:0:0/96",   // IPv4-mapped (all of it)
        "64:ff9b:1::/48",  // local-use NAT64
        "2001::/32",       // Teredo (tunnels to an embedded IPv4 server)
        "fc00::/7",        // ULA
        "fe80::/10",       // link-local
        "fec0::/10",       // site-local (deprecated)
        "ff00::/8",        // multicast
    };
    // The forms that embed a blocked IPv4 range: IPv4-compatible ::a.b.c.d,
    // NAT64 64:ff9b::a.b.c.d and 6to4 2002:AABB:CCDD::.
    for (const auto& range : BlockedIpv4Ranges()) {
      size_t slash = range.find('/');
      std::string ip = range.substr(0, slash);
      int len = std::atoi(range.c_str() + slash + 1);
      struct in_addr a;
      inet_pton(AF_INET, ip.c_str(), &a);
      uint32_t h = ntohl(a.s_addr);
      // Hex, not ::a.b.c.d: nft does not parse the dotted IPv6 forms.
      out.push_back(fmt::format("::{:x}:{:x}/{}", h >> 16, h & 0xffff, 96 + len));
      out.push_back(fmt::format("64:ff9b::{:x}:{:x}/{}", h >> 16, h & 0xffff, 96 + len));
      out.push_back(fmt::format("2002:{:x}:{:x}::/{}", h >> 16, h & 0xffff, 16 + len));
    }
    return out;
  }();
  return v;
}

namespace {
struct Cidr {
  int family;
  unsigned char bytes[16];
  int len;
};

std::vector<Cidr> ParseRanges(const std::vector<std::string>& ranges, int family) {
  std::vector<Cidr> out;
  for (const auto& r : ranges) {
    size_t slash = r.find('/');
    Cidr c{};
    c.family = family;
    c.len = std::atoi(r.c_str() + slash + 1);
    if (inet_pton(family, r.substr(0, slash).c_str(), c.bytes) == 1) out.push_back(c);
  }
  return out;
}

bool InCidr(const Cidr& c, const unsigned char* bytes) {
  int full = c.len / 8, rest = c.len % 8;
  if (memcmp(c.bytes, bytes, static_cast<size_t>(full)) != 0) return false;
  if (rest == 0) return true;
  unsigned char mask = static_cast<unsigned char>(0xff << (8 - rest));
  return (c.bytes[full] & mask) == (bytes[full] & mask);
}
}  // namespace

bool AddressBlocked(const struct sockaddr* addr) {
  static const std::vector<Cidr> v4 = ParseRanges(BlockedIpv4Ranges(), AF_INET);
  static const std::vector<Cidr> v6 = ParseRanges(BlockedIpv6Ranges(), AF_INET6);
  if (addr == nullptr) return true;
  if (addr->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    const auto* b = reinterpret_cast<const unsigned char*>(&in->sin_addr);
    for (const auto& c : v4) {
      if (InCidr(c, b)) return true;
    }
    return false;
  }
  if (addr->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
    const auto* b = reinterpret_cast<const unsigned char*>(&in6->sin6_addr);
    for (const auto& c : v6) {
      if (InCidr(c, b)) return true;
    }
    return false;
  }
  return true;  // not an IP address: never connect to it
}

bool AddressBlocked(std::string_view literal) {
  std::string s(literal);
  sockaddr_in a4{};
  sockaddr_in6 a6{};
  if (inet_pton(AF_INET, s.c_str(), &a4.sin_addr) == 1) {
    a4.sin_family = AF_INET;
    return AddressBlocked(reinterpret_cast<sockaddr*>(&a4));
  }
  if (inet_pton(AF_INET6, s.c_str(), &a6.sin6_addr) == 1) {
    a6.sin6_family = AF_INET6;
    return AddressBlocked(reinterpret_cast<sockaddr*>(&a6));
  }
  return true;
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

bool IsIpv6(const std::string& s) {
  struct in6_addr a;
  return inet_pton(AF_INET6, s.c_str(), &a) == 1;
}

// The veth path cannot reach the host's loopback (IPv4 only).
std::vector<std::string> UsableNameservers(const PublicNetworkConfig& c) {
  std::vector<std::string> out;
  for (const auto& ns : c.nameservers) {
    if (IsIpv4(ns) && ns.rfind("127.", 0) != 0) out.push_back(ns);
  }
  return out;
}
}  // namespace

std::string SandboxNftRules(const PublicNetworkConfig& config,
                            const std::vector<std::string>& host_addresses) {
  std::string dns;
  for (const auto& ns : config.nameservers) {
    const char* fam = IsIpv4(ns) ? "ip" : IsIpv6(ns) ? "ip6" : nullptr;
    // A loopback resolver would be the sandbox's own loopback: never the host's.
    if (fam == nullptr || ns.rfind("127.", 0) == 0 || ns == "::1") continue;
    dns += fmt::format(
        "    {0} daddr {1} udp dport 53 accept\n    {0} daddr {1} tcp dport 53 accept\n", fam, ns);
  }
  std::vector<std::string> v4 = BlockedIpv4Ranges(), v6 = BlockedIpv6Ranges();
  for (const auto& a : host_addresses) {
    if (IsIpv4(a)) v4.push_back(a);
    if (IsIpv6(a)) v6.push_back(a);
  }
  for (const auto& a : config.extra_blocked) {
    if (IsIpv4(a) || a.find('.') != std::string::npos)
      v4.push_back(a);
    else
      v6.push_back(a);
  }
  // Neighbour discovery must pass (multicast and link-local destinations are
  // otherwise refused); ICMPv6 errors ride on conntrack (related).
  return fmt::format(
      "table inet deepbox {{\n"
      "  set blocked4 {{ type ipv4_addr; flags interval; auto-merge; elements = {{ {} }} }}\n"
      "  set blocked6 {{ type ipv6_addr; flags interval; auto-merge; elements = {{ {} }} }}\n"
      "  chain output {{\n"
      "    type filter hook output priority 0; policy accept;\n"
      "    oifname \"lo\" accept\n"
      "    icmpv6 type {{ nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit }} "
      "ip6 hoplimit 255 accept\n"
      "{}"
      "    ip daddr @blocked4 reject with icmpx type admin-prohibited\n"
      "    ip6 daddr @blocked6 reject with icmpx type admin-prohibited\n"
      "  }}\n"
      "  chain input {{\n"
      "    type filter hook input priority 0; policy drop;\n"
      "    iifname \"lo\" accept\n"
      "    ct state established,related accept\n"
      "    icmpv6 type {{ nd-neighbor-solicit, nd-neighbor-advert, nd-router-advert }} "
      "ip6 hoplimit 255 accept\n"
      "  }}\n"
      "}}\n",
      Join(v4), Join(v6), dns);
}

std::string SandboxAllowModeNftRules() {
  // Only loopback: the proxy's listener is there. Everything else is refused.
  return "table inet deepbox {\n"
         "  chain output {\n"
         "    type filter hook output priority 0; policy drop;\n"
         "    oifname \"lo\" accept\n"
         "    meta l4proto { tcp, udp } reject with icmpx type admin-prohibited\n"
         "  }\n"
         "  chain input {\n"
         "    type filter hook input priority 0; policy drop;\n"
         "    iifname \"lo\" accept\n"
         "  }\n"
         "}\n";
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
}  // namespace

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

Result<std::vector<std::string>> NetnsAddresses(int netns_fd, const std::string& ip_path) {
  auto out = RunInNetns(netns_fd, {ip_path, "-o", "addr", "show"});
  if (!out) return tl::unexpected(out.error());
  std::vector<std::string> addrs;
  std::istringstream in(*out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string w, prev;
    while (words >> w) {
      if (prev == "inet" || prev == "inet6") {
        std::string a = w.substr(0, w.find('/'));
        if (IsIpv4(a) || IsIpv6(a)) addrs.push_back(a);
        break;
      }
      prev = w;
    }
  }
  return addrs;
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
