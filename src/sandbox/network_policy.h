// The network a sandbox may use, as every provider names it: the modes
// (none, public, allow=L) and the allowlist's grammar and matching. Pure
// (no I/O), so it is fuzzed (fuzz/network_policy_fuzz.cc) and shared: the
// local provider enforces it (local/network.h: nftables and a filtering
// proxy), the CLI, MCP and run configuration check it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace deepbox {

enum class NetworkMode { kNone, kPublic, kAllow };
std::string_view NetworkModeName(NetworkMode mode);  // "none" | "public" | "allow"
// "none" or "public" only (an allowlist needs ParseNetworkPolicy).
Result<NetworkMode> ParseNetworkMode(std::string_view text);

struct NetworkPolicy {
  NetworkMode mode = NetworkMode::kNone;
  // kAllow: lower-case names; "*.example.com" matches every subdomain (not
  // example.com itself); "name:port" allows that port besides 80 and 443.
  // A "!plain" suffix ("git.example.com:22!plain") lets a CONNECT tunnel to
  // that entry carry anything; without it the tunnel's first bytes must be a
  // TLS ClientHello whose server name is the CONNECT host (egress_proxy.h).
  std::vector<std::string> allow;
  std::string ToString() const;  // "none" | "public" | "allow=a,b" (parses back)
};
// "none" | "public" | "allow=NAME[,NAME...]"; names are checked (letters,
// digits, '-', '.', an optional leading "*.", an optional ":port", an
// optional "!plain").
Result<NetworkPolicy> ParseNetworkPolicy(std::string_view text);
struct AllowMatch {
  bool matched = false;
  bool plain = false;  // a matching entry has "!plain"
};
// Whether `name` (a DNS name, any case, optional trailing dot) and `port`
// are allowed by `allow`.
AllowMatch MatchAllowlist(const std::vector<std::string>& allow, std::string_view name, int port);
bool AllowlistMatches(const std::vector<std::string>& allow, std::string_view name, int port);

}  // namespace deepbox
