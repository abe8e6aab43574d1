// The sandbox's address policy (src/local/address_policy.h), which decides
// which destinations a sandbox may reach, checked against a bit-by-bit
// reimplementation here. Input: a CIDR text line, an operator-exception line
// (DEEPBOX_NETWORK_ALLOW_CIDRS), 16 address bytes, then rtnetlink messages
// (each: a kind byte, a 2-byte length, the bytes). Properties:
//   - a CIDR that parses has its host bits clear and prints to a text that
//     parses to the same CIDR;
//   - AddressBlocked agrees with a brute-force check against the range list,
//     for the sockaddr and the literal, and refuses every IPv6 form that
//     embeds a refused IPv4 address (mapped, compatible, NAT64, 6to4);
//   - accepted exceptions are normalised, none overlaps a never-allowed range,
//     and they parse again to themselves; AddressInCidrs and AddressRefused
//     agree with brute force;
//   - the host sets made from any rtnetlink messages hold only CIDRs that a
//     default does not already refuse (or an exception reopens), never a
//     never-allowed one, and HostSetsNftScript names each of them.
#include <arpa/inet.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "local/address_policy.h"
#include "local/network_rules.h"

namespace {

using deepbox::local::Cidr;

// A prefix as this file reads it (inet_pton and a decimal length; the lists
// below are well formed).
struct Prefix {
  int family;
  unsigned char bytes[16];
  int len;
};

Prefix ReadPrefix(const std::string& text) {
  Prefix p{};
  size_t slash = text.find('/');
  std::string ip = text.substr(0, slash);
  p.family = ip.find(':') == std::string::npos ? AF_INET : AF_INET6;
  FUZZ_CHECK(inet_pton(p.family, ip.c_str(), p.bytes) == 1, "a range of the list does not parse");
  p.len = slash == std::string::npos ? (p.family == AF_INET ? 32 : 128)
                                     : std::stoi(text.substr(slash + 1));
  return p;
}

std::vector<Prefix> ReadPrefixes(const std::vector<std::string>& texts) {
  std::vector<Prefix> out;
  for (const auto& t : texts) out.push_back(ReadPrefix(t));
  return out;
}

bool Bit(const unsigned char* bytes, int i) { return (bytes[i / 8] >> (7 - i % 8)) & 1; }

// `bytes` (an address of `family`) lies in `p`.
bool Inside(int family, const unsigned char* bytes, const Prefix& p) {
  if (family != p.family) return false;
  for (int i = 0; i < p.len; ++i) {
    if (Bit(bytes, i) != Bit(p.bytes, i)) return false;
  }
  return true;
}

bool InsideAny(int family, const unsigned char* bytes, const std::vector<Prefix>& list) {
  return std::any_of(list.begin(), list.end(),
                     [&](const Prefix& p) { return Inside(family, bytes, p); });
}

// A CIDR lies in `p` when its first address does and it is no wider.
bool CidrInside(const Cidr& c, const Prefix& p) {
  return c.len >= p.len && Inside(c.family, c.bytes, p);
}
bool CidrsOverlap(const Cidr& c, const Prefix& p) {
  Prefix as_prefix{c.family, {}, c.len};
  memcpy(as_prefix.bytes, c.bytes, 16);
  return CidrInside(c, p) ||
         (p.len >= c.len && p.family == c.family && Inside(p.family, p.bytes, as_prefix));
}

const std::vector<Prefix>& Blocked() {
  static const std::vector<Prefix> v = [] {
    auto out = ReadPrefixes(deepbox::local::BlockedIpv4Ranges());
    auto v6 = ReadPrefixes(deepbox::local::BlockedIpv6Ranges());
    out.insert(out.end(), v6.begin(), v6.end());
    return out;
  }();
  return v;
}

// As address_policy.h documents them.
const std::vector<Prefix>& NeverAllowed() {
  static const std::vector<Prefix> v =
      ReadPrefixes({"0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4",
                    "::/127", "::ffff:0:0/96", "fe80::/10", "fec0::/10", "ff00::/8"});
  return v;
}

struct Address {
  sockaddr_storage storage{};
  int family = 0;
  unsigned char bytes[16] = {};
  const sockaddr* sa() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

Address MakeAddress(int family, const unsigned char* bytes) {
  Address a;
  a.family = family;
  if (family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&a.storage);
    in->sin_family = AF_INET;
    memcpy(&in->sin_addr, bytes, 4);
    memcpy(a.bytes, bytes, 4);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
    in6->sin6_family = AF_INET6;
    memcpy(&in6->sin6_addr, bytes, 16);
    memcpy(a.bytes, bytes, 16);
  }
  return a;
}

// The IPv4 address an IPv6 one embeds (mapped, compatible, NAT64, 6to4), if any.
bool EmbeddedIpv4(const unsigned char* v6, unsigned char* v4) {
  static const unsigned char kZero[12] = {};
  static const unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static const unsigned char kNat64[12] = {0, 0x64, 0xff, 0x9b};
  if (memcmp(v6, kZero, 12) == 0 || memcmp(v6, kMapped, 12) == 0 || memcmp(v6, kNat64, 12) == 0) {
    memcpy(v4, v6 + 12, 4);
    return true;
  }
  if (v6[0] == 0x20 && v6[1] == 0x02) {
    memcpy(v4, v6 + 2, 4);
    return true;
  }
  return false;
}

void CheckAddress(const Address& a, const std::vector<std::string>& allowed) {
  bool blocked = deepbox::local::AddressBlocked(a.sa());
  FUZZ_CHECK(blocked == InsideAny(a.family, a.bytes, Blocked()),
             "AddressBlocked disagrees with the range list");
  char text[INET6_ADDRSTRLEN] = {};
  FUZZ_CHECK(inet_ntop(a.family, a.bytes, text, sizeof(text)) != nullptr, "inet_ntop failed");
  FUZZ_CHECK(deepbox::local::AddressBlocked(std::string_view(text)) == blocked,
             "AddressBlocked of the literal differs from the sockaddr's");
  static const std::vector<Prefix> blocked_v4 = ReadPrefixes(deepbox::local::BlockedIpv4Ranges());
  unsigned char v4[4];
  if (a.family == AF_INET6 && EmbeddedIpv4(a.bytes, v4) && InsideAny(AF_INET, v4, blocked_v4)) {
    FUZZ_CHECK(blocked, "an IPv6 form of a refused IPv4 address is not refused");
  }
  std::vector<Prefix> allowed_prefixes = ReadPrefixes(allowed);
  bool in_allowed = InsideAny(a.family, a.bytes, allowed_prefixes);
  FUZZ_CHECK(deepbox::local::AddressInCidrs(a.sa(), allowed) == in_allowed,
             "AddressInCidrs disagrees with brute force");
  bool refused = blocked && (InsideAny(a.family, a.bytes, NeverAllowed()) || !in_allowed);
  FUZZ_CHECK(deepbox::local::AddressRefused(a.sa(), allowed) == refused,
             "AddressRefused disagrees with brute force");
}

void CheckCidrText(std::string_view text, std::vector<Address>* addresses) {
  auto c = deepbox::local::ParseCidr(text);
  if (!c) return;
  int max = c->family == AF_INET ? 32 : 128;
  FUZZ_CHECK(c->family == AF_INET || c->family == AF_INET6, "a CIDR of another family");
  FUZZ_CHECK(c->len >= 0 && c->len <= max, "a prefix length out of range");
  for (int i = c->len; i < 128; ++i) FUZZ_CHECK(!Bit(c->bytes, i), "a host bit is set");
  std::string printed = deepbox::local::CidrText(*c);
  auto again = deepbox::local::ParseCidr(printed);
  FUZZ_CHECK(again.has_value(), "CidrText of a CIDR does not parse");
  FUZZ_CHECK(
      again->family == c->family && again->len == c->len && memcmp(again->bytes, c->bytes, 16) == 0,
      "CidrText of a CIDR parses to another CIDR");
  FUZZ_CHECK(deepbox::local::CidrText(*again) == printed, "CidrText is not stable");
  FUZZ_CHECK(deepbox::local::CidrContains(*c, *c), "a CIDR does not contain itself");
  addresses->push_back(MakeAddress(c->family, c->bytes));
}

std::vector<std::string> CheckAllowed(std::string_view text) {
  auto allowed = deepbox::local::ParseAllowedCidrs(text);
  if (!allowed) {
    FUZZ_CHECK(allowed.error().message.find(deepbox::local::kAllowCidrsEnv) != std::string::npos,
               "an exception error does not name the variable");
    return {};
  }
  std::vector<Cidr> cidrs;
  for (const auto& entry : *allowed) {
    auto c = deepbox::local::ParseCidr(entry);
    FUZZ_CHECK(c.has_value(), "an accepted exception does not parse");
    FUZZ_CHECK(deepbox::local::CidrText(*c) == entry, "an accepted exception is not normalised");
    for (const auto& never : NeverAllowed()) {
      FUZZ_CHECK(!CidrsOverlap(*c, never), "an exception overlaps a never-allowed range");
    }
    cidrs.push_back(*c);
  }
  for (size_t i = 0; i < cidrs.size(); ++i) {
    for (size_t j = 0; j < cidrs.size(); ++j) {
      if (i == j) continue;
      FUZZ_CHECK(!deepbox::local::CidrContains(cidrs[i], cidrs[j]),
                 "an exception lies inside another");
    }
  }
  std::string joined;
  for (const auto& e : *allowed) joined += (joined.empty() ? "" : ",") + e;
  auto again = deepbox::local::ParseAllowedCidrs(joined);
  FUZZ_CHECK(again.has_value() && *again == *allowed, "exceptions do not parse to themselves");
  return *allowed;
}

// Splits the rest into rtnetlink messages, each whole as Netlink::Ask keeps
// them: at least a header, nlmsg_len equal to its size. Bit 0 of the kind
// picks the dump; unless bit 1 is set the type is the dump's.
void ReadMessages(std::string_view rest, std::vector<std::string>* addresses,
                  std::vector<std::string>* routes) {
  while (rest.size() >= 3) {
    auto kind = static_cast<unsigned char>(rest[0]);
    size_t len = static_cast<unsigned char>(rest[1]) |
                 static_cast<size_t>(static_cast<unsigned char>(rest[2])) << 8;
    rest.remove_prefix(3);
    len = std::min(len, rest.size());
    std::string msg(rest.substr(0, len));
    rest.remove_prefix(len);
    if (msg.size() < sizeof(nlmsghdr)) msg.resize(sizeof(nlmsghdr));
    auto* h = reinterpret_cast<nlmsghdr*>(msg.data());
    h->nlmsg_len = static_cast<uint32_t>(msg.size());
    bool route = kind & 1;
    if (!(kind & 2)) h->nlmsg_type = route ? RTM_NEWROUTE : RTM_NEWADDR;
    (route ? routes : addresses)->push_back(std::move(msg));
  }
}

void CheckHostSets(const std::vector<std::string>& address_messages,
                   const std::vector<std::string>& route_messages,
                   const std::vector<std::string>& allowed, const std::vector<Address>& tests) {
  for (const auto& msg : route_messages) {
    for (const auto& a : tests) {
      Cidr dst{a.family, {}, a.family == AF_INET ? 32 : 128};
      memcpy(dst.bytes, a.bytes, 16);
      auto kind = deepbox::local::ClassifyRouteAnswer(msg, dst);
      FUZZ_CHECK(
          kind >= deepbox::local::RouteKind::kVia && kind <= deepbox::local::RouteKind::kUnroutable,
          "a route kind out of range");
    }
  }
  auto sets = deepbox::local::HostNetworkSetsFromDumps(address_messages, route_messages, allowed);
  std::vector<Prefix> allowed_prefixes = ReadPrefixes(allowed);
  std::string script = deepbox::local::HostSetsNftScript(sets);
  for (const auto* list : {&sets.self, &sets.near}) {
    std::vector<Cidr> parsed;
    for (const std::string& entry : *list) {
      auto c = deepbox::local::ParseCidr(entry);
      FUZZ_CHECK(c.has_value(), "a host set entry does not parse");
      parsed.push_back(*c);
      for (const auto& never : NeverAllowed()) {
        FUZZ_CHECK(!CidrInside(*c, never), "a host set holds a never-allowed range");
      }
      bool reopened = std::any_of(allowed_prefixes.begin(), allowed_prefixes.end(),
                                  [&](const Prefix& p) { return CidrsOverlap(*c, p); });
      bool refused = std::any_of(Blocked().begin(), Blocked().end(),
                                 [&](const Prefix& p) { return CidrInside(*c, p); });
      FUZZ_CHECK(reopened || !refused, "a host set holds what a default already refuses");
      FUZZ_CHECK(std::count(list->begin(), list->end(), entry) == 1, "a host set repeats");
      FUZZ_CHECK(script.find(entry) != std::string::npos, "HostSetsNftScript leaves one out");
    }
    for (size_t i = 0; i < parsed.size(); ++i) {
      for (size_t j = 0; j < parsed.size(); ++j) {
        FUZZ_CHECK(i == j || !deepbox::local::CidrContains(parsed[i], parsed[j]),
                   "a host set entry lies inside another");
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  auto [cidr_line, after_cidr] = deepbox::fuzz::SplitFirst(input, '\n');
  auto [allowed_line, rest] = deepbox::fuzz::SplitFirst(after_cidr, '\n');
  std::vector<Address> addresses;
  CheckCidrText(cidr_line, &addresses);
  std::vector<std::string> allowed = CheckAllowed(allowed_line);
  unsigned char raw[16] = {};
  if (!rest.empty()) memcpy(raw, rest.data(), std::min<size_t>(16, rest.size()));
  rest.remove_prefix(std::min<size_t>(16, rest.size()));
  addresses.push_back(MakeAddress(AF_INET, raw));
  addresses.push_back(MakeAddress(AF_INET6, raw));
  for (const auto& entry : allowed) {
    auto c = deepbox::local::ParseCidr(entry);
    addresses.push_back(MakeAddress(c->family, c->bytes));
  }
  for (const auto& a : addresses) CheckAddress(a, allowed);
  std::vector<std::string> address_messages, route_messages;
  ReadMessages(rest, &address_messages, &route_messages);
  CheckHostSets(address_messages, route_messages, allowed, addresses);
  return 0;
}
