#include "local/network_rules.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>

#include "common/strings.h"

namespace deepbox::local {

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
      config.slot, a.host_if, Join(BlockedIpv4Ranges(), ", "), a.sandbox, dns);
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

}  // namespace deepbox::local
