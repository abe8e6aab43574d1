// Recursive content search, with the semantics of `grep -r` / `rg --hidden
// --no-ignore`: every file under the base is searched (dot-files and
// dot-directories included, no ignore files), symlinks met during the walk are
// never followed (a symlinked base is), binary files (a NUL byte in the first
// 8 KiB, as ripgrep decides) are skipped, and a match never spans lines.
//
// Speed: the pattern is searched over whole buffers, never line by line; line
// boundaries and numbers are only computed around matches. Literal patterns
// use memchr on their rarest byte (memmem when that byte turns out common),
// regexes and case-insensitive literals use RE2 (linear time, never_nl).
// Files are searched by a small pool of threads, each with one reusable read
// buffer: memory stays bounded whatever the file sizes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "fs/path_resolver.h"

namespace deepbox::sandboxd::fs {

enum class GrepOutputMode { kContent, kFilesWithMatches, kCount };

struct GrepOptions {
  std::string path;  // base: a file or a directory (API path); "" = the root
  // Only files matching this glob (glob.h semantics, relative to the base; a
  // pattern without "/" matches basenames). "" = every file.
  std::string glob;
  bool regex = false;  // RE2 syntax; false: `pattern` is a literal string
  bool case_insensitive = false;
  GrepOutputMode output_mode = GrepOutputMode::kContent;
  // Cap on result entries: matching lines (content), files (the other modes).
  // The first entries in path/line order are kept, deterministically.
  size_t max_count = 10000;
  size_t max_line_bytes = 2000;  // longer lines are cut (line_truncated)
  int threads = 2;
  // Largest read buffer per thread. A line longer than this is scanned in
  // windows: literal matches are still all found; a regex match crossing a
  // window boundary of such a line may be missed.
  size_t max_buffer_bytes = 16 << 20;
};

struct GrepMatch {
  std::string path;          // absolute
  uint64_t line_number = 0;  // 1-based
  std::string line;          // without its terminator; raw bytes (may be invalid UTF-8)
  bool line_truncated = false;
};
struct GrepFileCount {
  std::string path;
  uint64_t count = 0;  // matching lines
};
struct GrepResult {
  std::vector<GrepMatch> matches;     // kContent: sorted by path, then line
  std::vector<std::string> files;     // kFilesWithMatches: sorted
  std::vector<GrepFileCount> counts;  // kCount: sorted by path
  bool truncated = false;             // max_count cut the result
  uint64_t files_searched = 0;
  uint64_t binary_files_skipped = 0;
};

// A literal string that every match of the RE2 regex `re` contains (the
// longest such run found by a conservative scan), or "" if none is certain.
// Grep searches for it first and runs the regex only on lines holding it.
std::string RequiredLiteral(std::string_view re);

// INVALID_ARGUMENT for a bad regex, a literal containing a newline, or a bad
// glob; NOT_FOUND / PERMISSION_DENIED for the base path. Unreadable files met
// during the walk are skipped.
Result<GrepResult> Grep(const deepbox::fs::Root& root, std::string_view pattern,
                        const GrepOptions& options = {});

}  // namespace deepbox::sandboxd::fs
