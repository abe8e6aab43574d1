#include "local/lifecycle/selector.h"

#include <fmt/format.h>

#include <cctype>

#include "common/strings.h"

namespace deepbox::local::lifecycle {
namespace {

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// A label name or value: 1-63 chars, [A-Za-z0-9_.-], alphanumeric at both ends.
std::string NameProblem(std::string_view s) {
  if (s.empty()) return "must not be empty";
  if (s.size() > 63) return fmt::format("is {} characters long (at most 63)", s.size());
  for (char c : s) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') {
      return fmt::format("contains '{}' (allowed: letters, digits, '-', '_', '.')", c);
    }
  }
  if (!IsAlnum(s.front()) || !IsAlnum(s.back())) {
    return "must start and end with a letter or digit";
  }
  return {};
}

std::string PrefixProblem(std::string_view s) {
  if (s.empty()) return "the prefix before '/' must not be empty";
  if (s.size() > 253) return "the prefix before '/' is longer than 253 characters";
  size_t start = 0;
  while (start <= s.size()) {
    size_t dot = s.find('.', start);
    if (dot == std::string_view::npos) dot = s.size();
    std::string_view part = s.substr(start, dot - start);
    if (part.empty() || part.size() > 63 || !IsAlnum(part.front()) || !IsAlnum(part.back())) {
      return fmt::format("the prefix '{}' is not a DNS subdomain (e.g. example.com)", s);
    }
    for (char c : part) {
      if (!(std::islower(static_cast<unsigned char>(c)) ||
            std::isdigit(static_cast<unsigned char>(c)) || c == '-')) {
        return fmt::format("the prefix '{}' is not a lowercase DNS subdomain (e.g. example.com)",
                           s);
      }
    }
    start = dot + 1;
  }
  return {};
}

}  // namespace

Status ValidateLabelKey(std::string_view key) {
  std::string_view name = key;
  size_t slash = key.find('/');
  if (slash != std::string_view::npos) {
    if (auto p = PrefixProblem(key.substr(0, slash)); !p.empty()) {
      return MakeError(ErrorCode::kInvalidArgument, fmt::format("bad label key '{}': {}", key, p));
    }
    name = key.substr(slash + 1);
  }
  if (auto p = NameProblem(name); !p.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("bad label key '{}': the name {}", key, p));
  }
  return {};
}

Status ValidateLabelValue(std::string_view key, std::string_view value) {
  if (value.empty()) return {};
  if (auto p = NameProblem(value); !p.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("bad value '{}' for label '{}': it {}", value, key, p));
  }
  return {};
}

Result<std::pair<std::string, std::string>> ParseLabel(std::string_view text) {
  size_t eq = text.find('=');
  if (eq == std::string_view::npos) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("bad label '{}': expected KEY=VALUE", text));
  }
  std::string key(text.substr(0, eq));
  std::string value(text.substr(eq + 1));
  if (auto st = ValidateLabelKey(key); !st) return tl::unexpected(st.error());
  if (auto st = ValidateLabelValue(key, value); !st) return tl::unexpected(st.error());
  return std::make_pair(std::move(key), std::move(value));
}

Result<Selector> Selector::Parse(std::string_view text) {
  Selector sel;
  if (Trim(text).empty()) return sel;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view raw = Trim(text.substr(start, comma - start));
    start = comma + 1;
    auto bad = [&](std::string_view why) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("bad selector '{}': term '{}' {} (terms: K=V, K!=V, K, !K; "
                                   "comma-separated)",
                                   text, raw, why));
    };
    if (raw.empty()) return bad("is empty");
    Term term;
    size_t ne = raw.find("!=");
    size_t eq = raw.find('=');
    if (ne != std::string_view::npos) {
      term.op = Op::kNotEquals;
      term.key = std::string(Trim(raw.substr(0, ne)));
      term.value = std::string(Trim(raw.substr(ne + 2)));
    } else if (eq != std::string_view::npos) {
      term.op = Op::kEquals;
      term.key = std::string(Trim(raw.substr(0, eq)));
      std::string_view rest = raw.substr(eq + 1);
      if (!rest.empty() && rest.front() == '=') rest.remove_prefix(1);
      term.value = std::string(Trim(rest));
    } else if (raw.front() == '!') {
      term.op = Op::kNotExists;
      term.key = std::string(Trim(raw.substr(1)));
    } else {
      term.op = Op::kExists;
      term.key = std::string(raw);
    }
    if (term.key.empty()) return bad("has no key");
    if (term.value.find_first_of("=!") != std::string::npos)
      return bad("has more than one operator");
    if (auto st = ValidateLabelKey(term.key); !st) return bad("has a " + st.error().message);
    if (auto st = ValidateLabelValue(term.key, term.value); !st) {
      return bad("has a " + st.error().message);
    }
    sel.terms_.push_back(std::move(term));
  }
  return sel;
}

Selector Selector::FromLabels(const Labels& labels) {
  Selector sel;
  for (const auto& [k, v] : labels) sel.terms_.push_back(Term{Op::kEquals, k, v});
  return sel;
}

bool Selector::Matches(const Labels& labels) const {
  for (const auto& t : terms_) {
    auto it = labels.find(t.key);
    switch (t.op) {
      case Op::kEquals:
        if (it == labels.end() || it->second != t.value) return false;
        break;
      case Op::kNotEquals:
        if (it != labels.end() && it->second == t.value) return false;
        break;
      case Op::kExists:
        if (it == labels.end()) return false;
        break;
      case Op::kNotExists:
        if (it != labels.end()) return false;
        break;
    }
  }
  return true;
}

std::string Selector::ToString() const {
  std::string out;
  for (const auto& t : terms_) {
    if (!out.empty()) out += ',';
    switch (t.op) {
      case Op::kEquals:
        out += t.key + "=" + t.value;
        break;
      case Op::kNotEquals:
        out += t.key + "!=" + t.value;
        break;
      case Op::kExists:
        out += t.key;
        break;
      case Op::kNotExists:
        out += "!" + t.key;
        break;
    }
  }
  return out;
}

}  // namespace deepbox::local::lifecycle
