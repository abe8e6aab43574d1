#include "sandboxd/fs/glob.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include "fs/dir_entries.h"
#include "sandboxd/fs/fs_util.h"

namespace deepbox::sandboxd::fs {

using deepbox::fs::DirEntry;
using deepbox::fs::JoinRelative;
using deepbox::fs::ReadDir;
using deepbox::fs::Root;

namespace {

constexpr size_t kMaxExpansions = 1000;
constexpr size_t kMaxGlobPatternBytes = 4096;

// One UTF-8 character at s[i]: its code point and length. An invalid byte is
// a character of its own, distinct from every valid code point.
inline uint32_t DecodeChar(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  size_t need = 0;
  uint32_t cp = 0;
  if ((b0 & 0xE0) == 0xC0) {
    need = 1;
    cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    need = 2;
    cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    need = 3;
    cp = b0 & 0x07;
  } else {
    *len = 1;
    return 0x110000u + b0;
  }
  if (i + need >= s.size()) {
    *len = 1;
    return 0x110000u + b0;
  }
  for (size_t k = 1; k <= need; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      *len = 1;
      return 0x110000u + b0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  *len = need + 1;
  return cp;
}

struct Token {
  enum Kind : uint8_t { kLiteral, kAny, kStar, kClass };
  Kind kind = kLiteral;
  bool negated = false;
  std::string literal;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive

  bool ClassMatches(uint32_t cp) const {
    bool in = false;
    for (const auto& [lo, hi] : ranges) {
      if (cp >= lo && cp <= hi) {
        in = true;
        break;
      }
    }
    return in != negated;
  }
};

bool MatchTokens(const std::vector<Token>& t, std::string_view s) {
  size_t ti = 0;
  size_t si = 0;
  size_t star_ti = std::string_view::npos;
  size_t star_si = 0;
  const size_t nt = t.size();
  while (si < s.size()) {
    if (ti < nt) {
      const Token& tok = t[ti];
      if (tok.kind == Token::kStar) {
        star_ti = ti++;
        star_si = si;
        continue;
      }
      if (tok.kind == Token::kLiteral) {
        if (s.compare(si, tok.literal.size(), tok.literal) == 0) {
          si += tok.literal.size();
          ++ti;
          continue;
        }
      } else {
        size_t len;
        uint32_t cp = DecodeChar(s, si, &len);
        if (tok.kind == Token::kAny || tok.ClassMatches(cp)) {
          si += len;
          ++ti;
          continue;
        }
      }
    }
    if (star_ti == std::string_view::npos) return false;
    // Let the last "*" swallow one more character and retry after it.
    size_t len;
    DecodeChar(s, star_si, &len);
    star_si += len;
    si = star_si;
    ti = star_ti + 1;
  }
  while (ti < nt && t[ti].kind == Token::kStar) ++ti;
  return ti == nt;
}

// Compiled pattern for one path segment.
struct Segment {
  enum Kind : uint8_t { kLiteral, kPattern, kGlobstar };
  Kind kind = kLiteral;
  bool explicit_dot = false;  // the pattern starts with '.': may match dot names
  std::string literal;        // kLiteral: the unescaped text
  std::vector<Token> tokens;  // kPattern
  // Fast forms of kPattern: "*lit" (suffix), "lit*" (prefix), "*" (any).
  enum Shape : uint8_t { kGeneral, kAnyName, kSuffix, kPrefix } shape = kGeneral;
  std::string affix;

  bool Matches(std::string_view name) const {
    if (kind == kGlobstar) return name[0] != '.';
    if (name[0] == '.' && !explicit_dot) return false;
    if (kind == kLiteral) return name == literal;
    switch (shape) {
      case kAnyName:
        return true;
      case kSuffix:
        return name.size() >= affix.size() &&
               name.compare(name.size() - affix.size(), affix.size(), affix) == 0;
      case kPrefix:
        return name.compare(0, affix.size(), affix) == 0;
      case kGeneral:
        break;
    }
    return MatchTokens(tokens, name);
  }
};

Segment CompileSegment(std::string_view text, bool allow_globstar) {
  Segment seg;
  if (text == "**" && allow_globstar) {
    seg.kind = Segment::kGlobstar;
    return seg;
  }
  seg.explicit_dot = text[0] == '.' || (text.size() > 1 && text[0] == '\\' && text[1] == '.');
  std::vector<Token> tokens;
  auto add_literal = [&tokens](std::string_view lit) {
    if (!tokens.empty() && tokens.back().kind == Token::kLiteral) {
      tokens.back().literal += lit;
    } else {
      Token t;
      t.kind = Token::kLiteral;
      t.literal = std::string(lit);
      tokens.push_back(std::move(t));
    }
  };
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c == '\\' && i + 1 < text.size()) {
      add_literal(text.substr(i + 1, 1));
      i += 2;
    } else if (c == '*') {
      if (tokens.empty() || tokens.back().kind != Token::kStar) {
        Token t;
        t.kind = Token::kStar;
        tokens.push_back(std::move(t));
      }
      ++i;
    } else if (c == '?') {
      Token t;
      t.kind = Token::kAny;
      tokens.push_back(std::move(t));
      ++i;
    } else if (c == '[') {
      // Parse a class; without a closing ']' the '[' is literal.
      Token t;
      t.kind = Token::kClass;
      size_t j = i + 1;
      if (j < text.size() && (text[j] == '!' || text[j] == '^')) {
        t.negated = true;
        ++j;
      }
      bool first = true;
      bool closed = false;
      while (j < text.size()) {
        if (text[j] == ']' && !first) {
          closed = true;
          break;
        }
        first = false;
        if (text[j] == '\\' && j + 1 < text.size()) ++j;
        size_t len;
        uint32_t lo = DecodeChar(text, j, &len);
        j += len;
        uint32_t hi = lo;
        if (j + 1 < text.size() && text[j] == '-' && text[j + 1] != ']') {
          ++j;
          if (text[j] == '\\' && j + 1 < text.size()) ++j;
          hi = DecodeChar(text, j, &len);
          j += len;
        }
        if (lo <= hi) t.ranges.emplace_back(lo, hi);
      }
      if (closed) {
        tokens.push_back(std::move(t));
        i = j + 1;
      } else {
        add_literal("[");
        ++i;
      }
    } else {
      size_t len;
      DecodeChar(text, i, &len);
      add_literal(text.substr(i, len));
      i += len;
    }
  }
  if (tokens.size() == 1 && tokens[0].kind == Token::kLiteral) {
    seg.kind = Segment::kLiteral;
    seg.literal = std::move(tokens[0].literal);
    return seg;
  }
  if (tokens.empty()) {  // only possible for "" which callers never pass
    seg.kind = Segment::kLiteral;
    return seg;
  }
  seg.kind = Segment::kPattern;
  if (tokens.size() == 1 && tokens[0].kind == Token::kStar) {
    seg.shape = Segment::kAnyName;
  } else if (tokens.size() == 2 && tokens[0].kind == Token::kStar &&
             tokens[1].kind == Token::kLiteral) {
    seg.shape = Segment::kSuffix;
    seg.affix = tokens[1].literal;
  } else if (tokens.size() == 2 && tokens[0].kind == Token::kLiteral &&
             tokens[1].kind == Token::kStar) {
    seg.shape = Segment::kPrefix;
    seg.affix = tokens[0].literal;
  }
  seg.tokens = std::move(tokens);
  return seg;
}

// Escapes every '{' that has no matching '}', so that it is a literal, in one
// pass (a '}' closes the nearest open '{'). Doing it inside ExpandBraces, one
// brace and one rescan of the whole pattern at a time, was quadratic and
// recursed once per brace: a 4 KB pattern of unmatched braces took seconds.
std::string EscapeUnmatchedBraces(const std::string& pat) {
  std::vector<size_t> open;
  std::vector<bool> unmatched(pat.size(), false);
  for (size_t i = 0; i < pat.size(); ++i) {
    if (pat[i] == '\\') {
      ++i;
    } else if (pat[i] == '{') {
      open.push_back(i);
    } else if (pat[i] == '}' && !open.empty()) {
      open.pop_back();
    }
  }
  if (open.empty()) return pat;
  for (size_t i : open) unmatched[i] = true;
  std::string out;
  out.reserve(pat.size() + open.size());
  for (size_t i = 0; i < pat.size(); ++i) {
    if (unmatched[i]) out += '\\';
    out += pat[i];
  }
  return out;
}

// Expands the leftmost brace group with a top-level comma, recursively. Every
// '{' has its '}' (EscapeUnmatchedBraces ran first). One pass finds the group
// (rescanning from each '{' made nested groups quadratic, for every expansion).
Status ExpandBraces(const std::string& pat, std::vector<std::string>* out) {
  struct Group {
    size_t open;
    std::vector<size_t> commas;  // at its top level
  };
  std::vector<Group> open_groups;
  std::optional<Group> first;  // the leftmost group with a comma
  size_t first_close = 0;
  for (size_t i = 0; i < pat.size(); ++i) {
    char c = pat[i];
    if (c == '\\') {
      ++i;
    } else if (c == '{') {
      open_groups.push_back({i, {}});
    } else if (c == ',' && !open_groups.empty()) {
      open_groups.back().commas.push_back(i);
    } else if (c == '}' && !open_groups.empty()) {
      Group g = std::move(open_groups.back());
      open_groups.pop_back();
      if (!g.commas.empty() && (!first || g.open < first->open)) {
        first = std::move(g);
        first_close = i;
      }
    }
  }
  if (first) {  // "{a}" alone is literal
    std::string prefix = pat.substr(0, first->open);
    std::string suffix = pat.substr(first_close + 1);
    size_t start = first->open + 1;
    first->commas.push_back(first_close);
    for (size_t end : first->commas) {
      if (auto st = ExpandBraces(prefix + pat.substr(start, end - start) + suffix, out); !st) {
        return st;
      }
      start = end + 1;
    }
    return {};
  }
  if (out->size() >= kMaxExpansions) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        fmt::format("glob pattern too broad: more than {} brace expansions", kMaxExpansions));
  }
  out->push_back(pat);
  return {};
}

}  // namespace

struct GlobMatcher::Impl {
  struct Alternative {
    bool basename = false;
    std::vector<Segment> segs;
  };
  std::vector<Alternative> alts;
  bool any_basename = false;

  static uint32_t Code(size_t alt, size_t idx) { return static_cast<uint32_t>(alt << 16 | idx); }
  // Adds (alt, idx) and, through "**" matching nothing, the positions after it.
  void AddClosed(State* s, size_t alt, size_t idx) const {
    const auto& segs = alts[alt].segs;
    while (idx < segs.size()) {
      s->push_back(Code(alt, idx));
      if (segs[idx].kind != Segment::kGlobstar) break;
      ++idx;
    }
  }
  static void Normalize(State* s) {
    std::sort(s->begin(), s->end());
    s->erase(std::unique(s->begin(), s->end()), s->end());
  }
};

GlobMatcher::GlobMatcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GlobMatcher::GlobMatcher(GlobMatcher&&) noexcept = default;
GlobMatcher& GlobMatcher::operator=(GlobMatcher&&) noexcept = default;
GlobMatcher::~GlobMatcher() = default;

Result<GlobMatcher> GlobMatcher::Compile(std::string_view pattern) {
  if (pattern.empty()) return MakeError(ErrorCode::kInvalidArgument, "empty glob pattern");
  if (pattern.size() > kMaxGlobPatternBytes || pattern.find('\0') != std::string_view::npos) {
    return MakeError(ErrorCode::kInvalidArgument, "glob pattern too long or contains NUL");
  }
  std::vector<std::string> expanded;
  if (auto st = ExpandBraces(EscapeUnmatchedBraces(std::string(pattern)), &expanded); !st) {
    return tl::unexpected(st.error());
  }
  auto impl = std::make_unique<Impl>();
  for (const auto& p : expanded) {
    Impl::Alternative alt;
    alt.basename = p.find('/') == std::string::npos;
    std::vector<std::string_view> parts;
    size_t i = 0;
    bool trailing_slash = false;
    while (i <= p.size()) {
      size_t j = p.find('/', i);
      if (j == std::string::npos) j = p.size();
      std::string_view part = std::string_view(p).substr(i, j - i);
      if (part == "..") {
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("'..' is not allowed in a glob pattern: {}", pattern));
      }
      if (!part.empty() && part != ".") parts.push_back(part);
      trailing_slash = j < p.size() && j + 1 == p.size();
      i = j + 1;
    }
    // Only files match: a pattern naming directories ("dir/") matches nothing.
    if (parts.empty() || trailing_slash) continue;
    if (alt.basename) {
      alt.segs.push_back(CompileSegment(parts[0], /*allow_globstar=*/false));
      impl->any_basename = true;
    } else {
      for (auto part : parts) {
        Segment seg = CompileSegment(part, /*allow_globstar=*/true);
        // "**/**" is "**".
        if (seg.kind == Segment::kGlobstar && !alt.segs.empty() &&
            alt.segs.back().kind == Segment::kGlobstar) {
          continue;
        }
        alt.segs.push_back(std::move(seg));
      }
    }
    if (alt.segs.size() >= 0xFFFF) {
      return MakeError(ErrorCode::kInvalidArgument, "glob pattern has too many segments");
    }
    impl->alts.push_back(std::move(alt));
  }
  return GlobMatcher(std::move(impl));
}

GlobMatcher::State GlobMatcher::Initial() const {
  State s;
  for (size_t a = 0; a < impl_->alts.size(); ++a) {
    if (!impl_->alts[a].basename) impl_->AddClosed(&s, a, 0);
  }
  Impl::Normalize(&s);
  return s;
}

GlobMatcher::State GlobMatcher::Descend(const State& state, std::string_view dir_name) const {
  State next;
  for (uint32_t code : state) {
    const size_t a = code >> 16;
    const size_t i = code & 0xFFFF;
    const auto& segs = impl_->alts[a].segs;
    const Segment& seg = segs[i];
    if (seg.kind == Segment::kGlobstar) {
      if (dir_name[0] != '.') impl_->AddClosed(&next, a, i);
    } else if (i + 1 < segs.size() && seg.Matches(dir_name)) {
      impl_->AddClosed(&next, a, i + 1);
    }
  }
  Impl::Normalize(&next);
  return next;
}

bool GlobMatcher::Alive(const State& state) const { return impl_->any_basename || !state.empty(); }

bool GlobMatcher::MatchesFile(const State& state, std::string_view file_name) const {
  if (file_name.empty()) return false;
  for (uint32_t code : state) {
    const size_t a = code >> 16;
    const size_t i = code & 0xFFFF;
    const auto& segs = impl_->alts[a].segs;
    if (i + 1 == segs.size() && segs[i].Matches(file_name)) return true;
  }
  if (impl_->any_basename) {
    for (const auto& alt : impl_->alts) {
      if (alt.basename && alt.segs[0].Matches(file_name)) return true;
    }
  }
  return false;
}

bool GlobMatcher::Matches(std::string_view rel_path) const {
  State state = Initial();
  size_t i = 0;
  for (;;) {
    size_t j = rel_path.find('/', i);
    if (j == std::string_view::npos) return MatchesFile(state, rel_path.substr(i));
    std::string_view dir = rel_path.substr(i, j - i);
    if (!dir.empty() && dir != ".") {
      state = Descend(state, dir);
      if (!Alive(state)) return false;
    }
    i = j + 1;
  }
}

Result<GlobResult> Glob(const Root& root, std::string_view pattern, const GlobOptions& options) {
  auto matcher = GlobMatcher::Compile(pattern);
  if (!matcher) return tl::unexpected(matcher.error());
  // No path: "." (the root, or its relative base when it has one).
  auto rel = root.ToRelative(options.path.empty() ? std::string_view(".") : options.path);
  if (!rel) return tl::unexpected(rel.error());
  std::string base_rel = std::move(*rel);
  auto base = root.Open(base_rel, O_RDONLY | O_DIRECTORY);
  if (!base) return tl::unexpected(base.error());
  const auto deadline = std::chrono::steady_clock::now() + options.time_budget;

  // Symlinks count when they lead to a file beneath the base (canonical).
  auto base_canon = root.Canonicalize(base_rel);
  if (!base_canon) return tl::unexpected(base_canon.error());
  const bool at_slash = root.ToAbsolute(*base_canon) == "/";
  GlobResult out;
  std::vector<std::string> found;  // relative to the base
  struct Pending {
    std::string rel;
    GlobMatcher::State state;
  };
  std::vector<Pending> stack;
  stack.push_back(Pending{std::string(), matcher->Initial()});
  size_t ticks = 0;
  bool stop = false;
  while (!stack.empty() && !stop) {
    Pending dir = std::move(stack.back());
    stack.pop_back();
    auto fd = root.OpenBeneathNoSymlinks(base->get(), dir.rel, O_RDONLY | O_DIRECTORY);
    if (!fd) {  // vanished, replaced by a symlink, unreadable: skip (and say so)
      if (fd.error().sys_errno == EACCES) out.unreadable = true;
      continue;
    }
    auto entries = ReadDir(fd->get(), dir.rel);
    if (!entries) {
      out.unreadable = true;
      continue;
    }
    std::sort(entries->begin(), entries->end(),
              [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    std::vector<Pending> children;
    for (const auto& e : *entries) {
      if ((++ticks & 63) == 0 && std::chrono::steady_clock::now() >= deadline) {
        out.truncated = true;
        stop = true;
        break;
      }
      unsigned char type = e.type;
      if (type == DT_UNKNOWN) {
        struct stat st;
        if (::fstatat(fd->get(), e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        type = S_ISDIR(st.st_mode)   ? DT_DIR
               : S_ISREG(st.st_mode) ? DT_REG
               : S_ISLNK(st.st_mode) ? DT_LNK
                                     : DT_UNKNOWN;
      }
      if (type == DT_DIR) {
        // Kernel trees are huge and hold no user files (as deepagents' glob).
        if (at_slash && dir.rel.empty() &&
            (e.name == "proc" || e.name == "sys" || e.name == "dev")) {
          continue;
        }
        GlobMatcher::State child = matcher->Descend(dir.state, e.name);
        if (matcher->Alive(child)) {
          children.push_back(Pending{JoinRelative(dir.rel, e.name), std::move(child)});
        }
        continue;
      }
      if (type != DT_REG && type != DT_LNK) continue;
      if (!matcher->MatchesFile(dir.state, e.name)) continue;
      std::string rel = JoinRelative(dir.rel, e.name);
      if (type == DT_LNK) {
        // A symlink counts when it leads to a regular file beneath the base.
        auto canon = root.Canonicalize(JoinRelative(base_rel, rel));
        if (!canon || !(base_canon->empty() || *canon == *base_canon ||
                        (canon->starts_with(*base_canon) && (*canon)[base_canon->size()] == '/'))) {
          continue;
        }
        auto target = root.Open(*canon, O_PATH);
        struct stat st;
        if (!target || ::fstat(target->get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      }
      found.push_back(std::move(rel));
      if (found.size() > options.max_results) {
        found.pop_back();
        out.truncated = true;
        stop = true;
        break;
      }
    }
    for (auto it = children.rbegin(); it != children.rend(); ++it) stack.push_back(std::move(*it));
  }
  std::sort(found.begin(), found.end());
  out.paths.reserve(found.size());
  for (const auto& rel : found) out.paths.push_back(root.ToAbsolute(JoinRelative(base_rel, rel)));
  return out;
}

}  // namespace deepbox::sandboxd::fs
