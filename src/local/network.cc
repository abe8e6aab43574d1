#include "local/network.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/capability.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
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

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>

#include "local/child.h"

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
      "0.0.0.0/8",        // "this network"
      "10.0.0.0/8",       // RFC 1918
      "100.64.0.0/10",    // CGNAT (also every sandbox's own /30)
      "127.0.0.0/8",      // loopback (of the host, via the uplink)
      "169.254.0.0/16",   // link-local, cloud metadata 169.254.169.254
      "172.16.0.0/12",    // RFC 1918
      "192.0.0.0/24",     // IETF protocol assignments
      "192.0.2.0/24",     // documentation (TEST-NET-1)
      "192.88.99.0/24",   // 6to4 relay anycast (deprecated)
      "192.168.0.0/16",   // RFC 1918
      "198.18.0.0/15",    // benchmarking
      "198.51.100.0/24",  // documentation (TEST-NET-2)
      "203.0.113.0/24",   // documentation (TEST-NET-3)
      "224.0.0.0/4",      // multicast
      "240.0.0.0/4",      // reserved + broadcast
  };
  return v;
}

const std::vector<std::string>& BlockedIpv6Ranges() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> out = {
        "::/127",          // unspecified + loopback
        "::ffff:0:0/96",   // IPv4-mapped (all of it)
        "64:ff9b:1::/48",  // local-use NAT64
        "100::/64",        // discard-only
        "100:0:0:1::/64",  // dummy prefix (RFC 9780)
        "2001::/32",       // Teredo (tunnels to an embedded IPv4 server)
        "2001:2::/48",     // benchmarking
        "2001:10::/28",    // ORCHID (deprecated)
        "2001:db8::/32",   // documentation
        "3fff::/20",       // documentation (RFC 9637)
        "5f00::/16",       // SRv6 SIDs
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

namespace {
// "a.b.c.d", "a.b.c.d/n", "v6", "v6/n" -> a Cidr with the host bits cleared.
std::optional<Cidr> ParseCidr(std::string_view text) {
  std::string s(text);
  Cidr c{};
  size_t slash = s.find('/');
  std::string ip = s.substr(0, slash);
  if (inet_pton(AF_INET, ip.c_str(), c.bytes) == 1) {
    c.family = AF_INET;
  } else if (inet_pton(AF_INET6, ip.c_str(), c.bytes) == 1) {
    c.family = AF_INET6;
  } else {
    return std::nullopt;
  }
  int max = c.family == AF_INET ? 32 : 128;
  c.len = max;
  if (slash != std::string::npos) {
    std::string_view len = std::string_view(s).substr(slash + 1);
    if (len.empty() || len.size() > 3) return std::nullopt;
    int v = 0;
    for (char ch : len) {
      if (ch < '0' || ch > '9') return std::nullopt;
      v = v * 10 + (ch - '0');
    }
    if (v > max) return std::nullopt;
    c.len = v;
  }
  for (int bit = c.len; bit < max; ++bit)
    c.bytes[bit / 8] &= static_cast<unsigned char>(~(0x80 >> (bit % 8)));
  return c;
}

std::string CidrText(const Cidr& c) {
  char buf[INET6_ADDRSTRLEN] = {0};
  inet_ntop(c.family, c.bytes, buf, sizeof(buf));
  int max = c.family == AF_INET ? 32 : 128;
  return c.len == max ? std::string(buf) : fmt::format("{}/{}", buf, c.len);
}

// a contains b.
bool Contains(const Cidr& a, const Cidr& b) {
  return a.family == b.family && a.len <= b.len && InCidr(a, b.bytes);
}
bool Overlaps(const Cidr& a, const Cidr& b) { return Contains(a, b) || Contains(b, a); }

std::vector<Cidr> ParseCidrs(const std::vector<std::string>& list) {
  std::vector<Cidr> out;
  for (const auto& s : list) {
    if (auto c = ParseCidr(s)) out.push_back(*c);
  }
  return out;
}

// Ranges no operator exception may open: the host's (and the sandbox's own)
// loopback, "this host", link-local (cloud metadata), multicast, reserved,
// and the IPv4-mapped form (which would reach them too).
const std::vector<Cidr>& NeverAllowed() {
  static const std::vector<Cidr> v =
      ParseCidrs({"0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4",
                  "::/127", "::ffff:0:0/96", "fe80::/10", "fec0::/10", "ff00::/8"});
  return v;
}

bool AddressBytes(const struct sockaddr* addr, Cidr* out) {
  if (addr == nullptr) return false;
  *out = Cidr{};
  if (addr->sa_family == AF_INET) {
    out->family = AF_INET;
    out->len = 32;
    memcpy(out->bytes, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, 4);
    return true;
  }
  if (addr->sa_family == AF_INET6) {
    out->family = AF_INET6;
    out->len = 128;
    memcpy(out->bytes, &reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr, 16);
    return true;
  }
  return false;
}

// Sorted, unique, and no entry inside another.
std::vector<std::string> Normalise(std::vector<Cidr> v) {
  std::sort(v.begin(), v.end(), [](const Cidr& a, const Cidr& b) {
    if (a.family != b.family) return a.family < b.family;
    int c = memcmp(a.bytes, b.bytes, 16);
    if (c != 0) return c < 0;
    return a.len < b.len;
  });
  std::vector<Cidr> kept;
  for (const auto& c : v) {
    if (!kept.empty() && Contains(kept.back(), c)) continue;
    kept.push_back(c);
  }
  std::vector<std::string> out;
  for (const auto& c : kept) out.push_back(CidrText(c));
  return out;
}
}  // namespace

Result<std::vector<std::string>> ParseAllowedCidrs(std::string_view text) {
  std::vector<Cidr> cidrs;
  size_t i = 0;
  while (i < text.size()) {
    size_t end = text.find_first_of(", \t\n", i);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(i, end - i);
    i = end + 1;
    if (item.empty()) continue;
    auto c = ParseCidr(item);
    if (!c) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("{}: '{}' is not an address or CIDR (e.g. 192.0.2.0/24)",
                                   kAllowCidrsEnv, item));
    }
    for (const auto& never : NeverAllowed()) {
      if (Overlaps(*c, never)) {
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("{}: '{}' overlaps {}, which can never be allowed "
                                     "(loopback, link-local, multicast or reserved)",
                                     kAllowCidrsEnv, item, CidrText(never)));
      }
    }
    cidrs.push_back(*c);
  }
  return Normalise(std::move(cidrs));
}

Result<std::vector<std::string>> AllowedCidrsFromEnv() {
  const char* env = std::getenv(kAllowCidrsEnv);
  if (env == nullptr) return std::vector<std::string>{};
  return ParseAllowedCidrs(env);
}

bool AddressInCidrs(const struct sockaddr* addr, const std::vector<std::string>& allowed) {
  Cidr a;
  if (!AddressBytes(addr, &a)) return false;
  for (const auto& s : allowed) {
    auto c = ParseCidr(s);
    if (c && Contains(*c, a)) return true;
  }
  return false;
}

bool AddressRefused(const struct sockaddr* addr, const std::vector<std::string>& allowed) {
  if (!AddressBlocked(addr)) return false;
  Cidr a;
  if (!AddressBytes(addr, &a)) return true;
  for (const auto& never : NeverAllowed()) {
    if (Contains(never, a)) return true;
  }
  return !AddressInCidrs(addr, allowed);
}

namespace {
// Device routes shorter than these are not a LAN (e.g. wg-quick's 0.0.0.0/1).
constexpr int kMinOnLinkPrefix4 = 16;
constexpr int kMinOnLinkPrefix6 = 48;

class Netlink {
 public:
  Status Open() {
    fd_.reset(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
    if (!fd_) return MakeSyscallError("socket", errno, "AF_NETLINK");
    return {};
  }
  // Every object of a kind as the kernel lists them: RTM_GETADDR with
  // ifaddrmsg, RTM_GETROUTE with rtmsg. The header is all zero, so its family
  // is AF_UNSPEC (0): both address families.
  template <typename FamilyHeader>
  Result<std::vector<std::string>> Dump(uint16_t type) {
    struct {
      nlmsghdr h;
      FamilyHeader m;
    } req{};
    static_assert(AF_UNSPEC == 0);
    req.h.nlmsg_len = NLMSG_LENGTH(sizeof(FamilyHeader));
    req.h.nlmsg_type = type;
    req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    return Ask(&req, req.h.nlmsg_len, true);
  }
  // Sends `req` and collects every reply message until DONE (dump) or the
  // first non-multipart answer. An NLMSG_ERROR with an error becomes the result.
  Result<std::vector<std::string>> Ask(void* req, size_t len, bool dump) {
    auto* h = static_cast<nlmsghdr*>(req);
    h->nlmsg_seq = ++seq_;
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (sendto(fd_.get(), req, len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
      return MakeSyscallError("sendto", errno, "rtnetlink");
    }
    std::vector<std::string> out;
    std::vector<char> buf(1 << 16);
    for (;;) {
      ssize_t n = recv(fd_.get(), buf.data(), buf.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return MakeSyscallError("recv", errno, "rtnetlink");
      // Each message: a header, then nlmsg_len bytes in all, 4-aligned.
      size_t off = 0, total = static_cast<size_t>(n);
      while (off + sizeof(nlmsghdr) <= total) {
        auto* m = reinterpret_cast<nlmsghdr*>(buf.data() + off);
        if (m->nlmsg_len < sizeof(nlmsghdr) || m->nlmsg_len > total - off) break;
        off += NLMSG_ALIGN(m->nlmsg_len);
        if (m->nlmsg_seq != seq_) continue;
        if (m->nlmsg_type == NLMSG_DONE) return out;
        if (m->nlmsg_type == NLMSG_ERROR) {
          if (m->nlmsg_len < NLMSG_LENGTH(sizeof(nlmsgerr))) {
            return MakeError(ErrorCode::kInternal, "rtnetlink: a short error message");
          }
          auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(m));
          if (e->error != 0) return MakeSyscallError("rtnetlink", -e->error);
          return out;
        }
        out.emplace_back(reinterpret_cast<char*>(m), m->nlmsg_len);
        if (!dump) return out;
      }
    }
  }

 private:
  UniqueFd fd_;
  uint32_t seq_ = 0;
};

struct RouteInfo {
  int family = 0;
  int type = 0;
  int table = 0;
  int dst_len = 0;
  bool has_dst = false;
  Cidr dst{};
  std::vector<Cidr> gateways;
};

bool AttrAddress(int family, const rtattr* a, Cidr* out) {
  size_t n = RTA_PAYLOAD(a);
  size_t want = family == AF_INET ? 4 : 16;
  if (n != want) return false;
  *out = Cidr{};
  out->family = family;
  out->len = family == AF_INET ? 32 : 128;
  memcpy(out->bytes, RTA_DATA(a), want);
  return true;
}

RouteInfo ParseRoute(const std::string& msg) {
  RouteInfo r;
  if (msg.size() < NLMSG_LENGTH(sizeof(rtmsg))) return r;  // type 0: ignored
  const auto* h = reinterpret_cast<const nlmsghdr*>(msg.data());
  const auto* rt = static_cast<const rtmsg*>(NLMSG_DATA(h));
  r.family = rt->rtm_family;
  r.type = rt->rtm_type;
  r.table = rt->rtm_table;
  r.dst_len = rt->rtm_dst_len;
  int len = static_cast<int>(h->nlmsg_len) - static_cast<int>(NLMSG_LENGTH(sizeof(rtmsg)));
  for (const rtattr* a = RTM_RTA(rt); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
    Cidr c;
    if (a->rta_type == RTA_TABLE && RTA_PAYLOAD(a) == 4) {
      memcpy(&r.table, RTA_DATA(a), 4);
    } else if (a->rta_type == RTA_DST && AttrAddress(r.family, a, &c)) {
      r.dst = c;
      r.has_dst = true;
    } else if (a->rta_type == RTA_GATEWAY && AttrAddress(r.family, a, &c)) {
      r.gateways.push_back(c);
    } else if (a->rta_type == RTA_MULTIPATH) {
      const auto* nh = static_cast<const rtnexthop*>(RTA_DATA(a));
      int left = static_cast<int>(RTA_PAYLOAD(a));
      while (RTNH_OK(nh, left)) {
        int alen = static_cast<int>(nh->rtnh_len) - static_cast<int>(RTNH_LENGTH(0));
        for (const rtattr* na = RTNH_DATA(nh); RTA_OK(na, alen); na = RTA_NEXT(na, alen)) {
          if (na->rta_type == RTA_GATEWAY && AttrAddress(r.family, na, &c)) r.gateways.push_back(c);
        }
        left -= NLMSG_ALIGN(nh->rtnh_len);
        nh = RTNH_NEXT(nh);
      }
    }
  }
  r.dst.family = r.family;
  r.dst.len = r.dst_len;
  return r;
}

bool IsOnLinkRoute(const RouteInfo& r) {
  if (r.type != RTN_UNICAST || !r.gateways.empty() || r.dst_len == 0) return false;
  return r.dst_len >= (r.family == AF_INET ? kMinOnLinkPrefix4 : kMinOnLinkPrefix6);
}

// Whether a default refusal already covers `c` (and no exception reopens it).
bool AlreadyRefused(const Cidr& c, const std::vector<Cidr>& allowed) {
  static const std::vector<Cidr> v4 = ParseRanges(BlockedIpv4Ranges(), AF_INET);
  static const std::vector<Cidr> v6 = ParseRanges(BlockedIpv6Ranges(), AF_INET6);
  for (const auto& never : NeverAllowed()) {
    if (Contains(never, c)) return true;
  }
  for (const auto& a : allowed) {
    if (Overlaps(a, c)) return false;
  }
  for (const auto& b : c.family == AF_INET ? v4 : v6) {
    if (Contains(b, c)) return true;
  }
  return false;
}
}  // namespace

Result<RouteKind> ClassifyRoute(const struct sockaddr* addr) {
  Cidr dst;
  if (!AddressBytes(addr, &dst)) return RouteKind::kUnroutable;
  Netlink nl;
  if (auto st = nl.Open(); !st) return tl::unexpected(st.error());
  struct {
    nlmsghdr h;
    rtmsg r;
    char attrs[64];
  } req{};
  size_t alen = dst.family == AF_INET ? 4 : 16;
  req.h.nlmsg_type = RTM_GETROUTE;
  req.h.nlmsg_flags = NLM_F_REQUEST;
  req.r.rtm_family = static_cast<unsigned char>(dst.family);
  req.r.rtm_dst_len = static_cast<unsigned char>(dst.len);
  req.r.rtm_flags = RTM_F_FIB_MATCH;
  auto* a = reinterpret_cast<rtattr*>(req.attrs);
  a->rta_type = RTA_DST;
  a->rta_len = static_cast<unsigned short>(RTA_LENGTH(alen));
  memcpy(RTA_DATA(a), dst.bytes, alen);
  req.h.nlmsg_len = static_cast<uint32_t>(NLMSG_LENGTH(sizeof(rtmsg)) + RTA_SPACE(alen));
  auto answer = nl.Ask(&req, req.h.nlmsg_len, false);
  if (!answer) {
    // ENETUNREACH, EHOSTUNREACH, ...: nothing would carry it.
    return RouteKind::kUnroutable;
  }
  if (answer->empty()) return RouteKind::kUnroutable;
  RouteInfo r = ParseRoute(answer->front());
  if (r.type == RTN_LOCAL || r.type == RTN_BROADCAST || r.type == RTN_ANYCAST) {
    return RouteKind::kLocal;
  }
  if (r.type != RTN_UNICAST) return RouteKind::kUnroutable;
  for (const auto& g : r.gateways) {
    if (memcmp(g.bytes, dst.bytes, alen) == 0) return RouteKind::kGateway;
  }
  if (IsOnLinkRoute(r)) return RouteKind::kOnLink;
  return RouteKind::kVia;
}

Result<HostNetworkSets> ReadHostNetworkSets(const std::vector<std::string>& allowed_text) {
  std::vector<Cidr> allowed = ParseCidrs(allowed_text);
  Netlink nl;
  if (auto st = nl.Open(); !st) return tl::unexpected(st.error());
  std::vector<Cidr> self, near;
  auto keep = [&](std::vector<Cidr>* into, const Cidr& c) {
    if (!AlreadyRefused(c, allowed)) into->push_back(c);
  };
  auto addrs = nl.Dump<ifaddrmsg>(RTM_GETADDR);
  if (!addrs) return tl::unexpected(addrs.error());
  for (const auto& msg : *addrs) {
    const auto* h = reinterpret_cast<const nlmsghdr*>(msg.data());
    if (h->nlmsg_type != RTM_NEWADDR || msg.size() < NLMSG_LENGTH(sizeof(ifaddrmsg))) continue;
    const auto* ifa = static_cast<const ifaddrmsg*>(NLMSG_DATA(h));
    int len = static_cast<int>(h->nlmsg_len) - static_cast<int>(NLMSG_LENGTH(sizeof(ifaddrmsg)));
    for (const rtattr* a = IFA_RTA(ifa); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
      Cidr c;
      // IFA_LOCAL is the address (IFA_ADDRESS the peer on point-to-point v4).
      bool mine =
          a->rta_type == IFA_LOCAL || (ifa->ifa_family == AF_INET6 && a->rta_type == IFA_ADDRESS);
      if (mine && AttrAddress(ifa->ifa_family, a, &c)) keep(&self, c);
    }
  }
  auto routes = nl.Dump<rtmsg>(RTM_GETROUTE);
  if (!routes) return tl::unexpected(routes.error());
  for (const auto& msg : *routes) {
    const auto* h = reinterpret_cast<const nlmsghdr*>(msg.data());
    if (h->nlmsg_type != RTM_NEWROUTE) continue;
    RouteInfo r = ParseRoute(msg);
    if (r.family != AF_INET && r.family != AF_INET6) continue;
    if (r.type == RTN_LOCAL) {
      if (r.has_dst) keep(&self, r.dst);
      continue;
    }
    for (const auto& g : r.gateways) keep(&near, g);
    if (IsOnLinkRoute(r) && r.table != RT_TABLE_LOCAL) {
      Cidr net = r.dst;
      net.len = r.dst_len;
      for (int bit = net.len; bit < (net.family == AF_INET ? 32 : 128); ++bit) {
        net.bytes[bit / 8] &= static_cast<unsigned char>(~(0x80 >> (bit % 8)));
      }
      keep(&near, net);
    }
  }
  HostNetworkSets sets;
  sets.self = Normalise(std::move(self));
  sets.near = Normalise(std::move(near));
  return sets;
}

std::string HostSetsNftScript(const HostNetworkSets& sets) {
  std::string out;
  auto add = [&](const char* name, const std::vector<std::string>& list, bool v4) {
    out += fmt::format("flush set inet deepbox {}\n", name);
    std::string elems;
    for (const auto& e : list) {
      if ((e.find(':') == std::string::npos) != v4) continue;
      elems += (elems.empty() ? "" : ", ") + e;
    }
    if (!elems.empty()) out += fmt::format("add element inet deepbox {} {{ {} }}\n", name, elems);
  };
  add("self4", sets.self, true);
  add("self6", sets.self, false);
  add("near4", sets.near, true);
  add("near6", sets.near, false);
  return out;
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

namespace {
// "  set NAME { type ipvN_addr; flags interval; auto-merge; elements = { ... } }"
std::string NftSet(const char* name, bool v4, const std::vector<std::string>& elems) {
  std::string list;
  for (const auto& e : elems) {
    if ((e.find(':') == std::string::npos) != v4) continue;
    list += (list.empty() ? "" : ", ") + e;
  }
  return fmt::format("  set {} {{ type {}; flags interval; auto-merge;{} }}\n", name,
                     v4 ? "ipv4_addr" : "ipv6_addr",
                     list.empty() ? "" : " elements = { " + list + " }");
}
}  // namespace

std::string SandboxNftRules(const PublicNetworkConfig& config, const HostNetworkSets& host) {
  std::string dns;
  for (const auto& ns : config.nameservers) {
    const char* fam = IsIpv4(ns) ? "ip" : IsIpv6(ns) ? "ip6" : nullptr;
    // A loopback resolver would be the sandbox's own loopback: never the host's.
    if (fam == nullptr || ns.rfind("127.", 0) == 0 || ns == "::1") continue;
    dns += fmt::format(
        "    {0} daddr {1} udp dport 53 accept\n    {0} daddr {1} tcp dport 53 accept\n", fam, ns);
  }
  std::vector<std::string> blocked = BlockedIpv4Ranges();
  for (const auto& r : BlockedIpv6Ranges()) blocked.push_back(r);
  for (const auto& a : config.extra_blocked) blocked.push_back(a);
  // Neighbour discovery must pass (multicast and link-local destinations are
  // otherwise refused); ICMPv6 errors ride on conntrack (related). The uplink's
  // own addresses are refused before the operator's exceptions are accepted.
  return fmt::format(
      "table inet deepbox {{\n"
      "{}{}{}{}{}{}{}{}"
      "  chain output {{\n"
      "    type filter hook output priority 0; policy accept;\n"
      "    oifname \"lo\" accept\n"
      "    icmpv6 type {{ nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit }} "
      "ip6 hoplimit 255 accept\n"
      "{}"
      "    ip daddr @self4 reject with icmpx type admin-prohibited\n"
      "    ip6 daddr @self6 reject with icmpx type admin-prohibited\n"
      "    ip daddr @allow4 accept\n"
      "    ip6 daddr @allow6 accept\n"
      "    ip daddr @blocked4 reject with icmpx type admin-prohibited\n"
      "    ip6 daddr @blocked6 reject with icmpx type admin-prohibited\n"
      "    ip daddr @near4 reject with icmpx type admin-prohibited\n"
      "    ip6 daddr @near6 reject with icmpx type admin-prohibited\n"
      "  }}\n"
      "  chain input {{\n"
      "    type filter hook input priority 0; policy drop;\n"
      "    iifname \"lo\" accept\n"
      "    ct state established,related accept\n"
      "    icmpv6 type {{ nd-neighbor-solicit, nd-neighbor-advert, nd-router-advert }} "
      "ip6 hoplimit 255 accept\n"
      "  }}\n"
      "}}\n",
      NftSet("blocked4", true, blocked), NftSet("blocked6", false, blocked),
      NftSet("self4", true, host.self), NftSet("self6", false, host.self),
      NftSet("near4", true, host.near), NftSet("near6", false, host.near),
      NftSet("allow4", true, config.allowed_cidrs), NftSet("allow6", false, config.allowed_cidrs),
      dns);
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
  std::string allowed;
  for (const auto& c : config.allowed_cidrs) {
    if (c.find(':') == std::string::npos) allowed += (allowed.empty() ? "" : ", ") + c;
  }
  if (!allowed.empty()) {
    dns += fmt::format("    iifname \"{}\" ip daddr {{ {} }} accept\n", a.host_if, allowed);
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
