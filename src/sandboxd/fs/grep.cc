#include "sandboxd/fs/grep.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <re2/re2.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <system_error>
#include <thread>

#include "common/utf8.h"
#include "fs/dir_entries.h"
#include "sandboxd/fs/fs_util.h"
#include "sandboxd/fs/glob.h"

namespace deepbox::sandboxd::fs {

using deepbox::fs::JoinRelative;
using deepbox::fs::ReadDir;
using deepbox::fs::Root;
using deepbox::fs::SplitRelative;

namespace {

constexpr size_t kNpos = std::numeric_limits<size_t>::max();
constexpr size_t kInitialBuffer = 256 << 10;
constexpr size_t kRegexWindowOverlap = 4096;
constexpr size_t kMaxGrepPatternBytes = 64 << 10;

// How common each byte is in source code and text (0 = rarest, 255 = most
// common), measured on /usr/include and Python/Perl sources. A literal is
// found by memchr on its rarest byte, then verified.
constexpr uint8_t kByteRank[256] = {
    0,   1,   2,   3,   4,   5,   6,   51,  7,   186, 245, 8,   73,  9,   10,  11,  12,  13,  14,
    15,  16,  17,  18,  19,  20,  21,  22,  23,  24,  25,  26,  27,  255, 169, 182, 201, 171, 161,
    187, 189, 229, 230, 221, 172, 240, 209, 213, 228, 223, 225, 215, 204, 198, 200, 196, 190, 193,
    195, 236, 212, 208, 203, 211, 160, 167, 226, 205, 219, 202, 233, 197, 191, 181, 224, 165, 180,
    216, 199, 220, 232, 222, 168, 217, 235, 238, 192, 183, 173, 188, 178, 164, 176, 177, 174, 159,
    252, 163, 249, 214, 244, 241, 254, 237, 218, 227, 248, 170, 206, 242, 239, 251, 247, 243, 175,
    246, 250, 253, 234, 210, 194, 207, 231, 179, 185, 166, 184, 162, 28,  145, 146, 138, 134, 119,
    97,  115, 144, 142, 120, 88,  80,  113, 94,  84,  148, 125, 140, 122, 123, 139, 128, 151, 96,
    106, 141, 126, 91,  127, 105, 90,  156, 130, 103, 92,  100, 132, 99,  111, 131, 108, 137, 89,
    79,  81,  85,  104, 82,  101, 124, 102, 116, 110, 98,  117, 109, 154, 143, 83,  118, 136, 133,
    114, 121, 29,  30,  129, 149, 77,  78,  58,  57,  60,  66,  64,  53,  63,  52,  152, 135, 158,
    150, 61,  59,  55,  62,  107, 147, 95,  93,  56,  54,  50,  31,  32,  33,  153, 86,  157, 87,
    69,  76,  75,  74,  72,  71,  70,  68,  67,  65,  34,  112, 155, 35,  36,  37,  38,  39,  40,
    41,  42,  43,  44,  45,  46,  47,  48,  49,
};

// Finds the first match in a buffer of whole lines; a match never spans a
// '\n'. One instance per thread (RE2 is thread-safe, but its DFA cache lock
// would be contended).
class Finder {
 public:
  virtual ~Finder() = default;
  // Offset of the first match in [data, data + len), or kNpos.
  virtual size_t Find(const char* data, size_t len) const = 0;
  // Bytes to carry over when a line longer than the buffer is cut into
  // windows, so that a match across the cut is still seen.
  virtual size_t Overlap() const = 0;
};

class LiteralFinder final : public Finder {
 public:
  explicit LiteralFinder(std::string needle) : needle_(std::move(needle)) {
    auto rank = [this](size_t i) { return kByteRank[static_cast<unsigned char>(needle_[i])]; };
    for (size_t i = 0; i < needle_.size(); ++i) {
      if (rank(i) < rank(rare_off_)) rare_off_ = i;
    }
    // A second rare byte, checked before memcmp, weeds out most false hits.
    rare2_off_ = rare_off_ == 0 ? std::min<size_t>(1, needle_.size() - 1) : 0;
    for (size_t i = 0; i < needle_.size(); ++i) {
      if (i != rare_off_ && rank(i) < rank(rare2_off_)) rare2_off_ = i;
    }
  }

  size_t Find(const char* data, size_t len) const override {
    const size_t m = needle_.size();
    if (m == 0) return 0;
    if (len < m) return kNpos;
    if (m == 1) {
      const void* p = std::memchr(data, needle_[0], len);
      return p ? static_cast<size_t>(static_cast<const char*>(p) - data) : kNpos;
    }
    const char rare = needle_[rare_off_];
    const char* p = data + rare_off_;
    const char* last = data + (len - m) + rare_off_;  // last place the rare byte can be
    size_t misses = 0;
    while (p <= last) {
      p = static_cast<const char*>(std::memchr(p, rare, static_cast<size_t>(last - p) + 1));
      if (p == nullptr) return kNpos;
      const char* start = p - rare_off_;
      if (start[rare2_off_] == needle_[rare2_off_] && std::memcmp(start, needle_.data(), m) == 0) {
        return static_cast<size_t>(start - data);
      }
      ++p;
      // The "rare" byte is common here: look for both rare bytes at once.
      if (++misses > 64 && static_cast<size_t>(p - data) < misses * 128) {
        const size_t from = static_cast<size_t>(start - data) + 1;
        const size_t q = FindPair(data + from, len - from);
        return q == kNpos ? kNpos : from + q;
      }
    }
    return kNpos;
  }

  // Candidates where both rare bytes sit at their offsets, 16 positions per
  // step (SSE2), each verified with memcmp: fast even for common bytes,
  // because two bytes at a fixed distance rarely coincide by chance.
  size_t FindPair(const char* data, size_t len) const {
    const size_t m = needle_.size();
    if (len < m) return kNpos;
    const size_t last = len - m;  // last candidate start
    const char c1 = needle_[rare_off_];
    const char c2 = needle_[rare2_off_];
    size_t i = 0;
#if defined(__SSE2__)
    const __m128i v1 = _mm_set1_epi8(c1);
    const __m128i v2 = _mm_set1_epi8(c2);
    for (; i + 15 <= last; i += 16) {
      __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + i + rare_off_));
      __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + i + rare2_off_));
      unsigned mask = static_cast<unsigned>(
          _mm_movemask_epi8(_mm_and_si128(_mm_cmpeq_epi8(a, v1), _mm_cmpeq_epi8(b, v2))));
      while (mask != 0) {
        const size_t s = i + static_cast<size_t>(__builtin_ctz(mask));
        if (std::memcmp(data + s, needle_.data(), m) == 0) return s;
        mask &= mask - 1;
      }
    }
#endif
    for (; i <= last; ++i) {
      if (data[i + rare_off_] == c1 && data[i + rare2_off_] == c2 &&
          std::memcmp(data + i, needle_.data(), m) == 0) {
        return i;
      }
    }
    return kNpos;
  }

  size_t Overlap() const override { return needle_.empty() ? 0 : needle_.size() - 1; }

 private:
  std::string needle_;
  size_t rare_off_ = 0;
  size_t rare2_off_ = 0;
};

class RegexFinder final : public Finder {
 public:
  // `required`: a literal every match contains (RequiredLiteral), or "".
  RegexFinder(const std::string& pattern, const RE2::Options& options, std::string required)
      : re_(pattern, options), required_(std::move(required)), prefilter_(required_) {}

  size_t Find(const char* data, size_t len) const override {
    if (required_.empty()) return Match(data, len);
    // Only lines holding the required literal can match: find those with the
    // literal search and run the regex on them alone.
    size_t p = 0;  // always a line start
    while (p < len) {
      size_t hit = prefilter_.Find(data + p, len - p);
      if (hit == kNpos) return kNpos;
      const size_t at = p + hit;
      const void* lsp = at > p ? ::memrchr(data + p, '\n', at - p) : nullptr;
      const size_t ls = lsp ? static_cast<size_t>(static_cast<const char*>(lsp) - data) + 1 : p;
      const void* lep = std::memchr(data + at, '\n', len - at);
      const size_t le = lep ? static_cast<size_t>(static_cast<const char*>(lep) - data) : len;
      size_t m = Match(data + ls, le - ls);
      if (m != kNpos) return ls + m;
      p = le + 1;
    }
    return kNpos;
  }

  size_t Overlap() const override { return kRegexWindowOverlap; }

 private:
  size_t Match(const char* data, size_t len) const {
    re2::StringPiece text(data, len);
    re2::StringPiece match;
    if (!re_.Match(text, 0, len, RE2::UNANCHORED, &match, 1)) return kNpos;
    return static_cast<size_t>(match.data() - data);
  }

  RE2 re_;
  std::string required_;
  LiteralFinder prefilter_;
};

struct FinderSpec {
  bool use_regex = false;
  std::string pattern;  // literal needle, or the RE2 pattern
  RE2::Options options;
  std::string required;  // regex prefilter literal, or ""

  std::unique_ptr<Finder> Make() const {
    if (!use_regex) return std::make_unique<LiteralFinder>(pattern);
    return std::make_unique<RegexFinder>(pattern, options, required);
  }
};

struct FileHits {
  std::vector<GrepMatch> lines;  // path filled in when assembling
  uint64_t count = 0;            // matching lines
  bool searched = false;
  bool binary = false;
};

class Searcher {
 public:
  Searcher(const FinderSpec& spec, const GrepOptions& options)
      : finder_(spec.Make()), options_(options) {}

  void Search(int fd, uint64_t size, uint64_t limit, FileHits* out);

 private:
  bool ProcessRegion(const char* b, size_t start, size_t end, bool eof, uint64_t* line_no,
                     uint64_t limit, FileHits* out);
  void Record(uint64_t line_no, std::string_view text, bool cut, FileHits* out) const;

  std::unique_ptr<Finder> finder_;
  const GrepOptions& options_;
  std::vector<char> buf_;
};

void Searcher::Record(uint64_t line_no, std::string_view text, bool cut, FileHits* out) const {
  if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
  GrepMatch m;
  m.line_number = line_no;
  m.line_truncated = cut;
  if (text.size() > options_.max_line_bytes) {
    text = text.substr(0, options_.max_line_bytes);
    text = text.substr(0, Utf8CompletePrefix(text));
    m.line_truncated = true;
  }
  m.line.assign(text);
  out->lines.push_back(std::move(m));
}

// Searches the complete lines in [start, end) of the buffer. Returns true once
// the file needs no more searching.
bool Searcher::ProcessRegion(const char* b, size_t start, size_t end, bool eof, uint64_t* line_no,
                             uint64_t limit, FileHits* out) {
  const bool content = options_.output_mode == GrepOutputMode::kContent;
  size_t pos = start;
  size_t counted = start;  // *line_no is the number of the line starting here
  while (pos < end) {
    const size_t hit = finder_->Find(b + pos, end - pos);
    if (hit == kNpos) break;
    const size_t m = pos + hit;
    // An empty regex match at the very end belongs to no line, unless the
    // file ends without a newline.
    if (m >= end && !(eof && b[end - 1] != '\n')) break;
    const void* lep = m < end ? std::memchr(b + m, '\n', end - m) : nullptr;
    const size_t le = lep ? static_cast<size_t>(static_cast<const char*>(lep) - b) : end;
    ++out->count;
    if (options_.output_mode == GrepOutputMode::kFilesWithMatches) return true;
    if (content) {
      const void* lsp = m > pos ? ::memrchr(b + pos, '\n', m - pos) : nullptr;
      const size_t ls = lsp ? static_cast<size_t>(static_cast<const char*>(lsp) - b) + 1 : pos;
      *line_no += CountNewlines(b + counted, ls - counted);
      counted = ls;
      Record(*line_no, std::string_view(b + ls, le - ls), false, out);
    }
    if (out->count >= limit) return true;
    pos = le + 1;
  }
  if (content && !eof) *line_no += CountNewlines(b + counted, end - counted);
  return false;
}

void Searcher::Search(int fd, uint64_t size, uint64_t limit, FileHits* out) {
  out->searched = true;
  const size_t max_buffer = std::max(options_.max_buffer_bytes, size_t{4096});
  if (buf_.empty()) buf_.resize(std::min(kInitialBuffer, max_buffer));
  const bool content = options_.output_mode == GrepOutputMode::kContent;
  size_t len = 0;
  uint64_t total = 0;
  bool eof = false;
  bool first = true;
  uint64_t line_no = 1;
  // A line longer than the largest buffer is scanned in windows.
  bool in_long = false;
  bool long_matched = false;
  std::string long_head;
  auto record_long = [&]() {
    ++out->count;
    if (content) Record(line_no, long_head, true, out);
    long_matched = true;
    return options_.output_mode == GrepOutputMode::kFilesWithMatches || out->count >= limit;
  };
  for (;;) {
    while (!eof && len < buf_.size()) {
      ssize_t n = ::read(fd, buf_.data() + len, buf_.size() - len);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {  // EOF, or a read error: search what we have
        eof = true;
        break;
      }
      len += static_cast<size_t>(n);
      total += static_cast<uint64_t>(n);
      // The size at open time is the file we search: saves a read(2) that
      // would return 0 on every small file.
      if (total == size) eof = true;
    }
    char* b = buf_.data();
    if (first) {
      first = false;
      if (std::memchr(b, 0, std::min(len, kBinaryProbeBytes)) != nullptr) {
        out->binary = true;
        return;
      }
    }
    size_t start = 0;
    if (in_long) {
      const void* nl = std::memchr(b, '\n', len);
      if (nl != nullptr || eof) {
        // The end of the long line.
        const size_t tail = nl ? static_cast<size_t>(static_cast<const char*>(nl) - b) : len;
        if (!long_matched && finder_->Find(b, tail) != kNpos && record_long()) return;
        in_long = false;
        if (nl == nullptr) return;
        start = tail + 1;
        ++line_no;
      } else {
        if (!long_matched && finder_->Find(b, len) != kNpos && record_long()) return;
        const size_t keep = long_matched ? 0 : std::min(len, finder_->Overlap());
        std::memmove(b, b + len - keep, keep);
        len = keep;
        continue;
      }
    }
    size_t end = len;
    if (!eof) {
      const void* last_nl = ::memrchr(b + start, '\n', len - start);
      end = last_nl ? static_cast<size_t>(static_cast<const char*>(last_nl) - b) + 1 : start;
    }
    if (end == start && !eof) {
      // No complete line in the buffer.
      if (start > 0) {
        std::memmove(b, b + start, len - start);
        len -= start;
        continue;
      }
      if (buf_.size() < max_buffer) {
        buf_.resize(std::min(max_buffer, buf_.size() * 2));
        continue;
      }
      in_long = true;
      long_matched = false;
      long_head.assign(b, std::min(len, options_.max_line_bytes + 4));
      if (finder_->Find(b, len) != kNpos && record_long()) return;
      const size_t keep = long_matched ? 0 : std::min(len, finder_->Overlap());
      std::memmove(b, b + len - keep, keep);
      len = keep;
      continue;
    }
    if (ProcessRegion(b, start, end, eof, &line_no, limit, out)) return;
    if (eof) return;
    std::memmove(b, b + end, len - end);
    len -= end;
  }
}

Result<FinderSpec> MakeSpec(std::string_view pattern, const GrepOptions& options) {
  if (pattern.size() > kMaxGrepPatternBytes) {
    return MakeError(ErrorCode::kInvalidArgument, "grep pattern too long");
  }
  FinderSpec spec;
  spec.pattern = std::string(pattern);
  if (!options.regex) {
    if (pattern.find('\n') != std::string_view::npos) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "a grep pattern cannot contain a newline: matches never span lines");
    }
    if (!options.case_insensitive) return spec;
  }
  spec.use_regex = true;
  spec.options.set_log_errors(false);
  spec.options.set_never_nl(true);  // like grep and rg: a match stays within a line
  spec.options.set_case_sensitive(!options.case_insensitive);
  spec.options.set_max_mem(64 << 20);
  if (options.regex) {
    if (!options.case_insensitive) spec.required = RequiredLiteral(pattern);
    spec.pattern = fmt::format("(?m){}", spec.pattern);  // ^ and $ at line boundaries
  } else {
    spec.options.set_literal(true);
  }
  RE2 probe(spec.pattern, spec.options);
  if (!probe.ok()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("invalid regular expression: {}", probe.error()));
  }
  return spec;
}

// The regular files to search below `base` (relative to it), sorted.
std::vector<std::string> WalkFiles(const Root& root, int base_fd, const GlobMatcher* glob) {
  std::vector<std::string> files;
  struct Pending {
    std::string rel;
    GlobMatcher::State state;
  };
  std::vector<Pending> stack;
  stack.push_back(Pending{std::string(), glob ? glob->Initial() : GlobMatcher::State()});
  while (!stack.empty()) {
    Pending dir = std::move(stack.back());
    stack.pop_back();
    auto fd = root.OpenBeneathNoSymlinks(base_fd, dir.rel, O_RDONLY | O_DIRECTORY);
    if (!fd) continue;  // vanished, became a symlink, unreadable: skip like grep -r
    auto entries = ReadDir(fd->get(), dir.rel);
    if (!entries) continue;
    for (auto& e : *entries) {
      unsigned char type = e.type;
      if (type == DT_UNKNOWN) {
        struct stat st;
        if (::fstatat(fd->get(), e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN;
      }
      if (type == DT_DIR) {
        Pending child{JoinRelative(dir.rel, e.name), GlobMatcher::State()};
        if (glob) {
          child.state = glob->Descend(dir.state, e.name);
          if (!glob->Alive(child.state)) continue;
        }
        stack.push_back(std::move(child));
      } else if (type == DT_REG) {
        if (glob && !glob->MatchesFile(dir.state, e.name)) continue;
        files.push_back(JoinRelative(dir.rel, e.name));
      }
      // Symlinks, devices, FIFOs, sockets: never searched during a walk.
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::string RequiredLiteral(std::string_view re) {
  // Conservative: anything not understood gives up (an empty result only
  // costs speed; a wrong literal would lose matches).
  if (re.find("\\Q") != std::string_view::npos) return "";
  for (size_t i = re.find("(?"); i != std::string_view::npos; i = re.find("(?", i + 1)) {
    if (i + 2 >= re.size() || re[i + 2] != ':') return "";  // flags like (?i)
  }
  std::string best;
  std::string run;
  auto end_run = [&]() {
    if (run.size() > best.size()) best = run;
    run.clear();
  };
  auto is_quantifier = [&](size_t i) {
    return i < re.size() && (re[i] == '*' || re[i] == '?' || re[i] == '{' || re[i] == '+');
  };
  int depth = 0;
  size_t i = 0;
  while (i < re.size()) {
    const char c = re[i];
    if (c == '[') {  // a class: skip it, handling "[]...]", "[^]...]", "[:alpha:]", escapes
      size_t j = i + 1;
      if (j < re.size() && re[j] == '^') ++j;
      if (j < re.size() && re[j] == ']') ++j;
      while (j < re.size() && re[j] != ']') {
        if (re[j] == '\\') {
          j += 2;
        } else if (re[j] == '[' && j + 1 < re.size() && re[j + 1] == ':') {
          size_t close = re.find(":]", j + 2);
          if (close == std::string_view::npos) return "";
          j = close + 2;
        } else {
          ++j;
        }
      }
      if (j >= re.size()) return "";
      if (depth == 0) end_run();
      i = j + 1;
      continue;
    }
    if (c == '(') {
      ++depth;
      if (depth == 1) end_run();
      ++i;
      continue;
    }
    if (c == ')') {
      if (--depth < 0) return "";
      ++i;
      continue;
    }
    if (c == '{') {  // a repetition count: skip "{n}", "{n,}", "{n,m}"
      size_t close = re.find('}', i);
      if (close == std::string_view::npos) return "";
      for (size_t k = i + 1; k < close; ++k) {
        if (!(re[k] >= '0' && re[k] <= '9') && re[k] != ',') return "";
      }
      if (depth == 0) end_run();
      i = close + 1;
      continue;
    }
    if (depth > 0) {  // inside a group: only track nesting
      if (c == '\\') ++i;
      ++i;
      continue;
    }
    if (c == '|') return "";  // a top-level alternative: nothing is required
    char lit = 0;
    size_t next = i + 1;
    if (c == '\\') {
      if (i + 1 >= re.size()) return "";
      const char e = re[i + 1];
      next = i + 2;
      // Escaped punctuation is itself; \d \s \b... are classes or
      // assertions; anything with arguments (\x41, \pL, \C, digits) gives up.
      if (std::ispunct(static_cast<unsigned char>(e))) {
        lit = e;
      } else if (std::strchr("dDsSwWbBAz", e) == nullptr) {
        return "";
      }
    } else if (std::strchr(".^$*+?", c) == nullptr && static_cast<unsigned char>(c) < 0x80) {
      lit = c;
    }
    if (lit == 0) {
      end_run();
      i = next;
      continue;
    }
    if (is_quantifier(next)) {
      if (re[next] == '+') {  // at least once: required, but ends the run
        run += lit;
      }
      end_run();
      i = next;  // the quantifier itself is skipped below
      while (i < re.size() && (re[i] == '*' || re[i] == '?' || re[i] == '+')) ++i;
      continue;
    }
    run += lit;
    i = next;
  }
  if (depth != 0) return "";
  end_run();
  return best.size() >= 2 ? best : "";
}

Result<GrepResult> Grep(const Root& root, std::string_view pattern, const GrepOptions& options) {
  auto spec = MakeSpec(pattern, options);
  if (!spec) return tl::unexpected(spec.error());
  std::optional<GlobMatcher> glob;
  if (!options.glob.empty()) {
    auto g = GlobMatcher::Compile(options.glob);
    if (!g) return tl::unexpected(g.error());
    glob.emplace(std::move(*g));
  }
  // No path: "." (the root, or its relative base when it has one).
  auto rel = root.ToRelative(options.path.empty() ? std::string_view(".") : options.path);
  if (!rel) return tl::unexpected(rel.error());
  std::string base_rel = std::move(*rel);
  // O_PATH first: the base may be a file or a directory.
  auto base = root.Open(base_rel, O_PATH);
  if (!base) return tl::unexpected(base.error());
  struct stat st;
  if (::fstat(base->get(), &st) != 0) {
    return MakeSyscallError("fstat", errno, root.ToAbsolute(base_rel));
  }
  std::vector<std::string> files;  // relative to the base
  bool single_file = false;
  if (S_ISDIR(st.st_mode)) {
    auto dir = root.Open(base_rel, O_RDONLY | O_DIRECTORY);
    if (!dir) return tl::unexpected(dir.error());
    files = WalkFiles(root, dir->get(), glob ? &*glob : nullptr);
    base = std::move(dir);
  } else if (S_ISREG(st.st_mode)) {
    single_file = true;
    std::string name(SplitRelative(base_rel).second);
    if (!glob || glob->Matches(name.empty() ? root.path() : name)) files.emplace_back();
  } else {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("not a file or directory: {}", root.ToAbsolute(base_rel)));
  }

  const uint64_t cap = options.max_count;
  uint64_t per_file_limit = std::numeric_limits<uint64_t>::max();
  if (options.output_mode == GrepOutputMode::kContent) per_file_limit = cap + 1;
  if (options.output_mode == GrepOutputMode::kFilesWithMatches) per_file_limit = 1;

  std::vector<FileHits> hits(files.size());
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> entries{0};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> searched{0};
  auto worker = [&]() {
    Searcher searcher(*spec, options);
    Root::FsVerdicts verdicts;
    while (!stop.load(std::memory_order_relaxed)) {
      const size_t i = next.fetch_add(1);
      if (i >= files.size()) break;
      struct stat fst;
      // Never follow a symlink, even one swapped in since the walk.
      Result<UniqueFd> fd = single_file ? root.Open(base_rel, O_RDONLY | O_NONBLOCK | O_NOCTTY)
                                        : root.OpenBeneathNoSymlinksStat(
                                              base->get(), files[i],
                                              O_RDONLY | O_NONBLOCK | O_NOCTTY, &fst, &verdicts);
      if (!fd) continue;
      if (single_file && ::fstat(fd->get(), &fst) != 0) continue;
      if (!S_ISREG(fst.st_mode)) continue;
      searched.fetch_add(1, std::memory_order_relaxed);
      if (fst.st_size == 0) continue;
      FileHits& h = hits[i];
      searcher.Search(fd->get(), static_cast<uint64_t>(fst.st_size), per_file_limit, &h);
      if (!h.lines.empty()) {  // paths filled here: in parallel, not in the final merge
        const std::string path = root.ToAbsolute(JoinRelative(base_rel, files[i]));
        for (auto& m : h.lines) m.path = path;
      }
      uint64_t n =
          options.output_mode == GrepOutputMode::kContent ? h.lines.size() : (h.count > 0 ? 1 : 0);
      // Files are handed out in path order, so once more than `cap` entries
      // are found, every file before the last one handed out is searched and
      // the first `cap` entries are final.
      if (n > 0 && entries.fetch_add(n) + n > cap) stop.store(true);
    }
  };
  const size_t threads =
      std::min<size_t>(static_cast<size_t>(std::max(options.threads, 1)), files.size());
  if (threads <= 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(threads - 1);
    for (size_t t = 1; t < threads; ++t) {
      // No thread to be had (the sandbox's processes may have used up its
      // pids limit): search with fewer rather than let the exception end
      // the daemon.
      try {
        pool.emplace_back(worker);
      } catch (const std::system_error&) {
        break;
      }
    }
    worker();
    for (auto& t : pool) t.join();
  }

  GrepResult out;
  out.files_searched = searched.load();
  if (options.output_mode == GrepOutputMode::kContent) {
    out.matches.reserve(static_cast<size_t>(std::min<uint64_t>(entries.load(), cap)));
  }
  uint64_t taken = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    FileHits& h = hits[i];
    if (h.binary) ++out.binary_files_skipped;
    if (h.count == 0) continue;
    std::string path = root.ToAbsolute(JoinRelative(base_rel, files[i]));
    if (taken >= cap) {
      out.truncated = true;
      break;
    }
    switch (options.output_mode) {
      case GrepOutputMode::kContent:
        for (auto& m : h.lines) {
          if (taken >= cap) {
            out.truncated = true;
            break;
          }
          out.matches.push_back(std::move(m));
          ++taken;
        }
        break;
      case GrepOutputMode::kFilesWithMatches:
        out.files.push_back(std::move(path));
        ++taken;
        break;
      case GrepOutputMode::kCount:
        out.counts.push_back(GrepFileCount{std::move(path), h.count});
        ++taken;
        break;
    }
    if (out.truncated) break;
  }
  return out;
}

}  // namespace deepbox::sandboxd::fs
