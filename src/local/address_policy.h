// Which destinations a sandbox's network may reach, decided from addresses
// alone: the refused IPv4/IPv6 ranges, CIDRs, the operator's exceptions
// (DEEPBOX_NETWORK_ALLOW_CIDRS), and what the kernel's rtnetlink answers about
// the uplink mean for the policy. Pure functions of their inputs (no syscalls
// beyond inet_pton/ntop and getenv): the nftables rules (network_rules.h) and
// the allow-mode proxy (egress_proxy.h) both rest on them, and
// fuzz/address_policy_fuzz.cc checks them against brute force.
#pragma once

#include <sys/socket.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace deepbox::local {

const std::vector<std::string>& BlockedIpv4Ranges();
// Native IPv6 ranges plus the IPv6 forms that embed a blocked IPv4 range
// (IPv4-mapped, IPv4-compatible, NAT64 64:ff9b::/96, 6to4 2002::/16).
const std::vector<std::string>& BlockedIpv6Ranges();
// The same check in code (the proxy's): true if `addr` (AF_INET or AF_INET6)
// lies in a blocked range, or is an IPv6 form of a blocked IPv4 address.
bool AddressBlocked(const struct sockaddr* addr);
bool AddressBlocked(std::string_view literal);  // unparsable: true

// The operator's exceptions (see network.h): the environment variable holds
// CIDRs or addresses separated by commas or spaces.
inline constexpr const char* kAllowCidrsEnv = "DEEPBOX_NETWORK_ALLOW_CIDRS";
// Normalised ("192.0.2.0/24", "2001:db8::/32"); an error names the bad entry,
// or the range that can never be allowed (loopback, 0/8, ::, link-local,
// multicast, 240/4, ::ffff:0:0/96, fec0::/10) if one overlaps it.
Result<std::vector<std::string>> ParseAllowedCidrs(std::string_view text);
Result<std::vector<std::string>> AllowedCidrsFromEnv();  // unset or empty: none
// True if `addr` lies in one of `allowed` (normalised CIDRs).
bool AddressInCidrs(const struct sockaddr* addr, const std::vector<std::string>& allowed);
// AddressBlocked unless an operator exception allows it.
bool AddressRefused(const struct sockaddr* addr, const std::vector<std::string>& allowed);

// An IPv4 or IPv6 prefix: `len` leading bits of `bytes` (4 or 16 used).
struct Cidr {
  int family;  // AF_INET or AF_INET6
  unsigned char bytes[16];
  int len;
};
// "a.b.c.d", "a.b.c.d/n", "v6", "v6/n" -> a Cidr with the host bits cleared.
std::optional<Cidr> ParseCidr(std::string_view text);
// "192.0.2.0/24"; a single address without "/32" or "/128".
std::string CidrText(const Cidr& cidr);
bool CidrContains(const Cidr& outer, const Cidr& inner);
// An AF_INET or AF_INET6 address as a /32 or /128; anything else: nullopt.
std::optional<Cidr> AddressAsCidr(const struct sockaddr* addr);
// `ranges` sorted, without duplicates or entries nested in another, as text.
std::vector<std::string> NormaliseCidrs(std::vector<Cidr> ranges);

// What the uplink netns would do with a destination, as a route lookup
// (RTM_GETROUTE with RTM_F_FIB_MATCH) answers it.
enum class RouteKind {
  kVia,         // through a gateway (or a device default route): the internet
  kLocal,       // an address of this netns itself (or a broadcast address)
  kOnLink,      // a directly connected subnet (no gateway, prefix >= /16 v4, /48 v6)
  kGateway,     // the gateway of the route that matches it
  kUnroutable,  // no route, blackhole, prohibit, ...
};
// `message`: the kernel's one answer to the lookup of `destination` (an
// address: len 32 or 128), a whole rtnetlink message whose nlmsg_len is its size.
RouteKind ClassifyRouteAnswer(const std::string& message, const Cidr& destination);

// The uplink netns as the sandbox rules need it: `self` = its own addresses,
// `near` = its directly connected subnets and its gateways. Entries that a
// blocked range already refuses (and no allowed CIDR overlaps) and
// loopback/link-local ones are left out; the rest is sorted, without
// duplicates or nested entries.
struct HostNetworkSets {
  std::vector<std::string> self;
  std::vector<std::string> near;
  bool operator==(const HostNetworkSets& o) const { return self == o.self && near == o.near; }
};
// From the messages of an RTM_GETADDR and an RTM_GETROUTE dump (each a whole
// rtnetlink message whose nlmsg_len is its size; others are skipped) and the
// operator's exceptions (ParseAllowedCidrs form).
HostNetworkSets HostNetworkSetsFromDumps(const std::vector<std::string>& address_messages,
                                         const std::vector<std::string>& route_messages,
                                         const std::vector<std::string>& allowed);

}  // namespace deepbox::local
