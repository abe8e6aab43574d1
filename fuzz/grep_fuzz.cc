// grep (src/sandboxd/fs/grep.h): literal and RE2 patterns over a real file.
// Input: a flags byte, the pattern, a newline, then the file's text.
// Flags: bit 0 regex, bit 1 case-insensitive, bits 2-3 output mode, bit 4 the
// text repeated 4 times (lines longer than the 4 KiB minimum buffer). Oracle:
// the matching lines are those where the same search, run line by line on
// the whole line (std::string::find or RE2::PartialMatch with grep's options),
// matches: the buffer scanning, line bookkeeping, windows for long lines and
// the regex prefilter (RequiredLiteral) must not change the answer.
#include <fmt/format.h>
#include <re2/re2.h>

#include <set>
#include <string>
#include <vector>

#include "common/strings.h"
#include "fuzz/fuzz_util.h"
#include "sandboxd/fs/grep.h"

namespace {

namespace dfs = deepbox::sandboxd::fs;

struct Fixture {
  deepbox::fuzz::TempTree base{"grep"};
  deepbox::fs::Root root = [this] {
    auto r = deepbox::fs::Root::Open(base.path());
    if (!r) deepbox::fuzz::Fail("fixture: " + r.error().ToString());
    return std::move(*r);
  }();
};

Fixture& F() {
  static Fixture* f = new Fixture();
  return *f;
}

// grep's lines: split at '\n'; a final '\n' ends the last line.
std::vector<std::string_view> Lines(std::string_view text) {
  if (text.empty()) return {};
  auto lines = deepbox::Split(text, '\n');
  if (text.back() == '\n') lines.pop_back();
  return lines;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto [pattern_view, text_view] = deepbox::fuzz::SplitFirst(in, '\n');
  const std::string pattern(pattern_view);
  std::string text(text_view);
  if (flags & 16) text = text + text + text + text;

  dfs::GrepOptions options;
  options.path = "f.txt";
  options.regex = flags & 1;
  options.case_insensitive = flags & 2;
  options.output_mode = static_cast<dfs::GrepOutputMode>(((flags >> 2) & 3) % 3);
  options.threads = 1;
  deepbox::fuzz::WriteFile(F().base.Path("f.txt"), text);
  auto result = dfs::Grep(F().root, pattern, options);

  // The oracle's matcher.
  RE2::Options re_options;
  re_options.set_log_errors(false);
  re_options.set_never_nl(true);
  re_options.set_case_sensitive(!options.case_insensitive);
  re_options.set_max_mem(64 << 20);
  if (!options.regex) re_options.set_literal(true);
  const std::string re_pattern = options.regex ? "(?m)" + pattern : pattern;
  RE2 re(re_pattern, re_options);
  const bool plain = !options.regex && !options.case_insensitive;
  if (!plain && !re.ok()) {
    FUZZ_CHECK(!result.has_value(), "grep accepted a pattern RE2 refuses");
    return 0;
  }
  if (!result) {
    // Only a literal holding a newline may be refused (it cannot match a line).
    FUZZ_CHECK(!options.regex && pattern.find('\n') != std::string::npos,
               "grep refused a valid pattern: " + result.error().ToString());
    return 0;
  }
  const bool binary = text.substr(0, 8192).find('\0') != std::string::npos;
  if (binary) {
    FUZZ_CHECK(result->binary_files_skipped == 1 && result->matches.empty() &&
                   result->files.empty() && result->counts.empty(),
               "a file with a NUL byte in its first 8 KiB was searched");
    return 0;
  }
  std::set<uint64_t> want;
  bool long_lines = false;
  uint64_t n = 0;
  for (auto line : Lines(text)) {
    ++n;
    if (line.size() >= 4096) long_lines = true;
    const bool hit = plain ? line.find(pattern) != std::string_view::npos
                           : RE2::PartialMatch(re2::StringPiece(line.data(), line.size()), re);
    if (hit) want.insert(n);
  }
  // A regex match crossing a window boundary of a line longer than the
  // buffer may be missed (grep.h): then grep's lines are a subset.
  const bool exact = !(options.regex && long_lines);
  switch (options.output_mode) {
    case dfs::GrepOutputMode::kContent: {
      std::set<uint64_t> got;
      for (const auto& m : result->matches) {
        got.insert(m.line_number);
        FUZZ_CHECK(m.line_number >= 1 && m.line_number <= n, "a match on a line that is not there");
        if (!m.line_truncated) {
          std::string_view line = Lines(text)[m.line_number - 1];
          if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
          FUZZ_CHECK(m.line == line, fmt::format("line {} reported as other text", m.line_number));
        }
      }
      FUZZ_CHECK(got.size() == result->matches.size(), "a line reported twice");
      if (exact) {
        FUZZ_CHECK(got == want, fmt::format("grep found {} lines, line-by-line search {}",
                                            got.size(), want.size()));
      } else {
        for (auto l : got) FUZZ_CHECK(want.contains(l), "grep matched a line that does not match");
      }
      break;
    }
    case dfs::GrepOutputMode::kFilesWithMatches:
      FUZZ_CHECK(exact ? result->files.size() == (want.empty() ? 0u : 1u)
                       : result->files.size() <= (want.empty() ? 0u : 1u),
                 "files_with_matches disagrees with line-by-line search");
      break;
    case dfs::GrepOutputMode::kCount: {
      uint64_t got = result->counts.empty() ? 0 : result->counts[0].count;
      FUZZ_CHECK(exact ? got == want.size() : got <= want.size(),
                 fmt::format("count {} but line-by-line search finds {}", got, want.size()));
      break;
    }
  }
  return 0;
}
