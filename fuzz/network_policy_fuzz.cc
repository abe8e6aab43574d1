// The network policy's grammar and allowlist matching
// (src/sandbox/network_policy.h), which decide what a sandbox may reach. Input:
// a policy text, then lines "NAME PORT" to match against it. Properties: a
// policy that parses prints (ToString) to a text that parses to the same
// policy; its entries are lower case, at most 256; matching ignores the case
// of the name and one trailing dot, and a name that matches is an entry's
// name or a subdomain of a "*." entry's.
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "sandbox/network_policy.h"

namespace {

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// The name part of an allow entry ("*.a.com:22!plain" -> "*.a.com").
std::string_view EntryName(std::string_view entry) {
  entry = entry.substr(0, entry.find('!'));
  return entry.substr(0, entry.rfind(':'));
}

bool NameCoveredBy(std::string_view name, const std::vector<std::string>& allow) {
  for (const auto& entry : allow) {
    std::string_view pattern = EntryName(entry);
    if (pattern.substr(0, 2) == "*.") {
      std::string_view suffix = pattern.substr(1);
      if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix) {
        return true;
      }
    } else if (name == pattern) {
      return true;
    }
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  size_t eol = input.find('\n');
  std::string_view text = input.substr(0, eol);
  auto policy = deepbox::ParseNetworkPolicy(text);
  if (!policy) return 0;
  FUZZ_CHECK(policy->allow.size() <= 256, "more than 256 allow entries");
  for (const auto& entry : policy->allow) {
    for (char c : entry) FUZZ_CHECK(!(c >= 'A' && c <= 'Z'), "an allow entry is not lower case");
  }
  auto again = deepbox::ParseNetworkPolicy(policy->ToString());
  FUZZ_CHECK(again.has_value(), "ToString() of a policy does not parse");
  FUZZ_CHECK(again->mode == policy->mode && again->allow == policy->allow,
             "ToString() of a policy parses to another policy");
  if (eol == std::string_view::npos) return 0;
  std::string_view rest = input.substr(eol + 1);
  while (!rest.empty()) {
    std::string_view line = rest.substr(0, rest.find('\n'));
    rest.remove_prefix(std::min(rest.size(), line.size() + 1));
    size_t space = line.rfind(' ');
    if (space == std::string_view::npos) continue;
    std::string_view name = line.substr(0, space);
    int port = 0;
    for (char c : line.substr(space + 1)) {
      if (c < '0' || c > '9' || port > 100000) break;
      port = port * 10 + (c - '0');
    }
    auto match = deepbox::MatchAllowlist(policy->allow, name, port);
    auto upper = deepbox::MatchAllowlist(policy->allow, Upper(name), port);
    FUZZ_CHECK(match.matched == upper.matched && match.plain == upper.plain,
               "matching depends on the name's case");
    if (name.empty() || name.back() != '.') {
      auto dotted = deepbox::MatchAllowlist(policy->allow, std::string(name) + ".", port);
      FUZZ_CHECK(dotted.matched == match.matched, "a trailing dot changes the match");
    }
    if (match.matched) {
      std::string lower(name);
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (!lower.empty() && lower.back() == '.') lower.pop_back();
      FUZZ_CHECK(NameCoveredBy(lower, policy->allow), "a name no entry names matched");
    }
  }
  return 0;
}
