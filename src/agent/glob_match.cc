#include "agent/glob_match.h"

#include "agent/text.h"
#include "common/strings.h"

namespace deepbox::agent {
namespace {

size_t Utf8Len(std::string_view s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  return i + len <= s.size() ? len : 1;
}

// Matches a bracket expression at pat[pi] ('[') against ch. Sets `end` past
// the closing ']'. Returns false with end = npos when the bracket is
// unterminated (then '[' is literal).
bool MatchBracket(std::string_view pat, size_t pi, unsigned char ch, size_t& end, bool& ok) {
  size_t i = pi + 1;
  bool negate = false;
  if (i < pat.size() && (pat[i] == '!' || pat[i] == '^')) {
    negate = true;
    ++i;
  }
  bool matched = false;
  bool first = true;
  while (i < pat.size() && (first || pat[i] != ']')) {
    first = false;
    unsigned char lo = static_cast<unsigned char>(pat[i]);
    if (lo == '\\' && i + 1 < pat.size()) lo = static_cast<unsigned char>(pat[++i]);
    unsigned char hi = lo;
    if (i + 2 < pat.size() && pat[i + 1] == '-' && pat[i + 2] != ']') {
      hi = static_cast<unsigned char>(pat[i + 2]);
      i += 2;
    }
    if (ch >= lo && ch <= hi) matched = true;
    ++i;
  }
  if (i >= pat.size()) {
    ok = false;
    return false;
  }
  ok = true;
  end = i + 1;
  return matched != negate;
}

bool MatchSegmentFrom(std::string_view pat, size_t pi, std::string_view name, size_t ni) {
  while (pi < pat.size()) {
    char p = pat[pi];
    if (p == '*') {
      while (pi < pat.size() && pat[pi] == '*') ++pi;
      if (pi == pat.size()) return true;
      for (size_t k = ni; k <= name.size(); ++k) {
        if (MatchSegmentFrom(pat, pi, name, k)) return true;
      }
      return false;
    }
    if (ni >= name.size()) return false;
    if (p == '?') {
      ni += Utf8Len(name, ni);
      ++pi;
      continue;
    }
    if (p == '[') {
      size_t end = 0;
      bool ok = false;
      bool m = MatchBracket(pat, pi, static_cast<unsigned char>(name[ni]), end, ok);
      if (ok) {
        if (!m) return false;
        pi = end;
        ++ni;
        continue;
      }
      // Unterminated: literal '['.
    }
    if (p == '\\' && pi + 1 < pat.size()) {
      ++pi;
      p = pat[pi];
    }
    if (name[ni] != p) return false;
    ++pi;
    ++ni;
  }
  return ni == name.size();
}

bool MatchSegment(std::string_view pat, std::string_view name) {
  // A leading dot must be matched literally.
  if (!name.empty() && name[0] == '.' && (pat.empty() || pat[0] != '.')) return false;
  return MatchSegmentFrom(pat, 0, name, 0);
}

bool MatchSegments(const std::vector<std::string_view>& pat, size_t pi,
                   const std::vector<std::string_view>& segs, size_t si) {
  while (pi < pat.size()) {
    if (pat[pi] == "**") {
      // Zero segments, or one more non-dot segment.
      if (MatchSegments(pat, pi + 1, segs, si)) return true;
      if (si < segs.size() && !(segs[si].size() > 0 && segs[si][0] == '.')) {
        return MatchSegments(pat, pi, segs, si + 1);
      }
      return false;
    }
    if (si >= segs.size()) return false;
    if (!MatchSegment(pat[pi], segs[si])) return false;
    ++pi;
    ++si;
  }
  return si == segs.size();
}

std::vector<std::string_view> Segments(std::string_view path) {
  std::vector<std::string_view> out;
  bool absolute = path.starts_with("/");
  if (absolute) out.push_back("");
  for (std::string_view part : Split(path, '/')) {
    if (part.empty()) continue;
    out.push_back(part);
  }
  return out;
}

void Expand(std::string_view pattern, std::vector<std::string>& out, size_t limit) {
  // Find the first top-level brace group with at least one comma.
  size_t depth = 0;
  size_t open = std::string_view::npos;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\') {
      ++i;
      continue;
    }
    if (c == '{') {
      if (depth == 0) open = i;
      ++depth;
    } else if (c == '}' && depth > 0) {
      --depth;
      if (depth == 0 && open != std::string_view::npos) {
        std::string_view inner = pattern.substr(open + 1, i - open - 1);
        // Split inner on top-level commas.
        std::vector<std::string_view> alts;
        size_t d = 0;
        size_t start = 0;
        for (size_t k = 0; k < inner.size(); ++k) {
          if (inner[k] == '\\') {
            ++k;
            continue;
          }
          if (inner[k] == '{') ++d;
          if (inner[k] == '}' && d > 0) --d;
          if (inner[k] == ',' && d == 0) {
            alts.push_back(inner.substr(start, k - start));
            start = k + 1;
          }
        }
        alts.push_back(inner.substr(start));
        if (alts.size() < 2) {
          open = std::string_view::npos;
          continue;  // "{x}" is literal
        }
        std::string_view prefix = pattern.substr(0, open);
        std::string_view suffix = pattern.substr(i + 1);
        for (std::string_view alt : alts) {
          if (out.size() >= limit) return;
          std::string combined;
          combined.append(prefix).append(alt).append(suffix);
          Expand(combined, out, limit);
        }
        return;
      }
    }
  }
  if (out.size() < limit) out.emplace_back(pattern);
}

}  // namespace

std::vector<std::string> ExpandBraces(std::string_view pattern, size_t limit) {
  std::vector<std::string> out;
  Expand(pattern, out, limit);
  return out;
}

bool GlobMatch(std::string_view path, std::string_view pattern) {
  auto segs = Segments(path);
  for (const std::string& alt : ExpandBraces(pattern)) {
    auto pat = Segments(alt);
    if (MatchSegments(pat, 0, segs, 0)) return true;
  }
  return false;
}

bool HasGlobMagic(std::string_view text) {
  return text.find_first_of("*?[{") != std::string_view::npos;
}

std::string GlobAnchor(std::string_view pattern) {
  std::string out;
  for (std::string_view part : Split(pattern, '/')) {
    if (part.empty()) continue;
    if (HasGlobMagic(part)) break;
    out.push_back('/');
    out.append(part);
  }
  return out.empty() ? "/" : out;
}

}  // namespace deepbox::agent
