#include "local/address_policy.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace deepbox::local {

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

void ClearHostBits(Cidr* c) {
  for (int bit = c->len; bit < (c->family == AF_INET ? 32 : 128); ++bit) {
    c->bytes[bit / 8] &= static_cast<unsigned char>(~(0x80 >> (bit % 8)));
  }
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
  ClearHostBits(&c);
  return c;
}

std::string CidrText(const Cidr& c) {
  char buf[INET6_ADDRSTRLEN] = {0};
  inet_ntop(c.family, c.bytes, buf, sizeof(buf));
  int max = c.family == AF_INET ? 32 : 128;
  return c.len == max ? std::string(buf) : fmt::format("{}/{}", buf, c.len);
}

bool CidrContains(const Cidr& a, const Cidr& b) {
  return a.family == b.family && a.len <= b.len && InCidr(a, b.bytes);
}

namespace {
bool Overlaps(const Cidr& a, const Cidr& b) { return CidrContains(a, b) || CidrContains(b, a); }

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
}  // namespace

std::optional<Cidr> AddressAsCidr(const struct sockaddr* addr) {
  if (addr == nullptr) return std::nullopt;
  Cidr out{};
  if (addr->sa_family == AF_INET) {
    out.family = AF_INET;
    out.len = 32;
    memcpy(out.bytes, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, 4);
    return out;
  }
  if (addr->sa_family == AF_INET6) {
    out.family = AF_INET6;
    out.len = 128;
    memcpy(out.bytes, &reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr, 16);
    return out;
  }
  return std::nullopt;
}

std::vector<std::string> NormaliseCidrs(std::vector<Cidr> v) {
  std::sort(v.begin(), v.end(), [](const Cidr& a, const Cidr& b) {
    if (a.family != b.family) return a.family < b.family;
    int c = memcmp(a.bytes, b.bytes, 16);
    if (c != 0) return c < 0;
    return a.len < b.len;
  });
  std::vector<Cidr> kept;
  for (const auto& c : v) {
    if (!kept.empty() && CidrContains(kept.back(), c)) continue;
    kept.push_back(c);
  }
  std::vector<std::string> out;
  for (const auto& c : kept) out.push_back(CidrText(c));
  return out;
}

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
  return NormaliseCidrs(std::move(cidrs));
}

Result<std::vector<std::string>> AllowedCidrsFromEnv() {
  const char* env = std::getenv(kAllowCidrsEnv);
  if (env == nullptr) return std::vector<std::string>{};
  return ParseAllowedCidrs(env);
}

bool AddressInCidrs(const struct sockaddr* addr, const std::vector<std::string>& allowed) {
  std::optional<Cidr> a = AddressAsCidr(addr);
  if (!a) return false;
  for (const auto& s : allowed) {
    auto c = ParseCidr(s);
    if (c && CidrContains(*c, *a)) return true;
  }
  return false;
}

bool AddressRefused(const struct sockaddr* addr, const std::vector<std::string>& allowed) {
  if (!AddressBlocked(addr)) return false;
  std::optional<Cidr> a = AddressAsCidr(addr);
  if (!a) return true;
  for (const auto& never : NeverAllowed()) {
    if (CidrContains(never, *a)) return true;
  }
  return !AddressInCidrs(addr, allowed);
}

namespace {
// Device routes shorter than these are not a LAN (e.g. wg-quick's 0.0.0.0/1).
constexpr int kMinOnLinkPrefix4 = 16;
constexpr int kMinOnLinkPrefix6 = 48;

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
  if (family != AF_INET && family != AF_INET6) return false;  // printed as ""
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
  // Never from the kernel; it would become a set entry that is no CIDR.
  if (r.dst_len > (r.family == AF_INET ? 32 : 128)) return RouteInfo{};
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
      // RTNH_OK reads rtnh_len before it compares it with `left`: after the
      // last next hop (RTA_MULTIPATH is the kernel's last attribute) that
      // read would be past the message.
      while (left >= static_cast<int>(sizeof(rtnexthop)) && RTNH_OK(nh, left)) {
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
  // The kernel's are clear; set ones would defeat NormaliseCidrs' nesting.
  ClearHostBits(&r.dst);
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
    if (CidrContains(never, c)) return true;
  }
  for (const auto& a : allowed) {
    if (Overlaps(a, c)) return false;
  }
  for (const auto& b : c.family == AF_INET ? v4 : v6) {
    if (CidrContains(b, c)) return true;
  }
  return false;
}
}  // namespace

RouteKind ClassifyRouteAnswer(const std::string& message, const Cidr& dst) {
  size_t alen = dst.family == AF_INET ? 4 : 16;
  RouteInfo r = ParseRoute(message);
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

HostNetworkSets HostNetworkSetsFromDumps(const std::vector<std::string>& address_messages,
                                         const std::vector<std::string>& route_messages,
                                         const std::vector<std::string>& allowed_text) {
  std::vector<Cidr> allowed = ParseCidrs(allowed_text);
  std::vector<Cidr> self, near;
  auto keep = [&](std::vector<Cidr>* into, const Cidr& c) {
    if (!AlreadyRefused(c, allowed)) into->push_back(c);
  };
  for (const auto& msg : address_messages) {
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
  for (const auto& msg : route_messages) {
    const auto* h = reinterpret_cast<const nlmsghdr*>(msg.data());
    if (h->nlmsg_type != RTM_NEWROUTE) continue;
    RouteInfo r = ParseRoute(msg);
    if (r.family != AF_INET && r.family != AF_INET6) continue;
    if (r.type == RTN_LOCAL) {
      if (r.has_dst) keep(&self, r.dst);
      continue;
    }
    for (const auto& g : r.gateways) keep(&near, g);
    if (IsOnLinkRoute(r) && r.table != RT_TABLE_LOCAL) keep(&near, r.dst);
  }
  HostNetworkSets sets;
  sets.self = NormaliseCidrs(std::move(self));
  sets.near = NormaliseCidrs(std::move(near));
  return sets;
}

}  // namespace deepbox::local
