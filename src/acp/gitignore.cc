#include "acp/gitignore.h"

#include <fnmatch.h>

namespace deepbox::acp {

namespace {

std::vector<std::string> SplitSegments(std::string_view path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    if (j > i) out.emplace_back(path.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

bool SegmentMatch(const std::string& pattern, const std::string& name) {
  return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

// Whole-path match of pattern segments against path segments, "**" spanning
// any number of segments.
bool MatchSegments(const std::vector<std::string>& pat, size_t pi,
                   const std::vector<std::string>& path, size_t si) {
  while (pi < pat.size()) {
    if (pat[pi] == "**") {
      for (size_t k = si; k <= path.size(); ++k) {
        if (MatchSegments(pat, pi + 1, path, k)) return true;
      }
      return false;
    }
    if (si >= path.size() || !SegmentMatch(pat[pi], path[si])) return false;
    ++pi;
    ++si;
  }
  return si == path.size();
}

}  // namespace

void IgnoreRules::AddFile(std::string_view dir, std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find('\n', i);
    if (j == std::string_view::npos) j = text.size();
    std::string line(text.substr(i, j - i));
    i = j + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // Trailing spaces go unless escaped with a backslash.
    while (!line.empty() && line.back() == ' ' &&
           !(line.size() >= 2 && line[line.size() - 2] == '\\')) {
      line.pop_back();
    }
    if (line.empty() || line.front() == '#') continue;
    Rule rule;
    rule.base = std::string(dir);
    if (line.front() == '!') {
      rule.negate = true;
      line.erase(0, 1);
    } else if (line.starts_with("\\#") || line.starts_with("\\!")) {
      line.erase(0, 1);
    }
    if (!line.empty() && line.back() == '/') {
      rule.dir_only = true;
      while (!line.empty() && line.back() == '/') line.pop_back();
    }
    if (line.empty()) continue;
    rule.anchored = line.find('/') != std::string::npos;
    rule.segments = SplitSegments(line);
    if (rule.segments.empty()) continue;
    rules_.push_back(std::move(rule));
  }
}

bool IgnoreRules::Matches(const Rule& rule, std::string_view rel, bool is_dir) {
  if (rule.dir_only && !is_dir) return false;
  if (!rule.base.empty()) {
    if (!rel.starts_with(rule.base) || rel.size() <= rule.base.size() ||
        rel[rule.base.size()] != '/') {
      return false;
    }
    rel.remove_prefix(rule.base.size() + 1);
  }
  std::vector<std::string> path = SplitSegments(rel);
  if (path.empty()) return false;
  if (!rule.anchored) return SegmentMatch(rule.segments.front(), path.back());
  return MatchSegments(rule.segments, 0, path, 0);
}

bool IgnoreRules::Ignored(std::string_view path, bool is_dir) const {
  bool ignored = false;
  for (const auto& rule : rules_) {
    if (rule.negate == ignored && Matches(rule, path, is_dir)) ignored = !rule.negate;
  }
  return ignored;
}

}  // namespace deepbox::acp
