#include "sandbox/network_policy.h"

#include <fmt/format.h>

#include "common/strings.h"

namespace deepbox {

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
  if (size_t bang = name.find('!'); bang != std::string_view::npos) {
    if (name.substr(bang) != "!plain") return bad("the only flag is '!plain'");
    name = name.substr(0, bang);
  }
  if (size_t colon = name.rfind(':'); colon != std::string_view::npos) {
    std::string_view port = name.substr(colon + 1);
    name = name.substr(0, colon);
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
  std::string rest = AsciiLower(text.substr(6));
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

AllowMatch MatchAllowlist(const std::vector<std::string>& allow, std::string_view name_in,
                          int port) {
  AllowMatch result;
  std::string name = AsciiLower(name_in);
  if (!name.empty() && name.back() == '.') name.pop_back();
  if (name.empty()) return result;
  for (const auto& entry : allow) {
    std::string_view pattern = entry;
    bool plain = false;
    if (size_t bang = pattern.find('!'); bang != std::string_view::npos) {
      plain = pattern.substr(bang) == "!plain";
      pattern = pattern.substr(0, bang);
    }
    bool port_ok = port == 80 || port == 443;
    if (size_t colon = pattern.rfind(':'); colon != std::string_view::npos) {
      port_ok = port_ok || pattern.substr(colon + 1) == std::to_string(port);
      pattern = pattern.substr(0, colon);
    }
    if (!port_ok) continue;
    bool hit = false;
    if (pattern.substr(0, 2) == "*.") {
      std::string_view suffix = pattern.substr(1);  // ".github.com"
      hit = name.size() > suffix.size() &&
            std::string_view(name).substr(name.size() - suffix.size()) == suffix;
    } else {
      hit = name == pattern;
    }
    if (hit) {
      result.matched = true;
      result.plain = result.plain || plain;
    }
  }
  return result;
}

bool AllowlistMatches(const std::vector<std::string>& allow, std::string_view name, int port) {
  return MatchAllowlist(allow, name, port).matched;
}

}  // namespace deepbox
