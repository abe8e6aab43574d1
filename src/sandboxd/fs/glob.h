// Glob with the semantics of deepagents' glob tool, which models expect:
//
//  * A pattern without "/" matches the basename of files at any depth, and the
//    search descends into every directory, dot-directories included:
//    "*.py" finds "/.hidden/x.py".
//  * A pattern with "/" matches the path relative to the search base ("/" at
//    the start only anchors it there). "**" matches zero or more whole path
//    segments but never a dot-named one.
//  * A dot-named file or directory only matches a segment pattern that itself
//    starts with "." ("*" never matches ".env").
//  * "*", "?", "[ab]", "[a-z]", "[!a]" (= "[^a]"), "{a,b}" (nested, at most
//    1000 expansions), "\" escapes. "?" and classes match one UTF-8 character.
//  * Only files match (never directories); a symlink to a file beneath the
//    search base counts as a file; symlinked directories are not entered.
//    Searched from "/", the kernel's proc, sys and dev trees are skipped.
// Segments are matched by a hand-written matcher over precompiled tokens
// (no regex): the walk prunes every directory no pattern can match below.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "fs/path_resolver.h"

namespace deepbox::sandboxd::fs {

// A compiled glob pattern. Immutable and thread-safe once compiled.
class GlobMatcher {
 public:
  // INVALID_ARGUMENT for an empty pattern, a ".." segment, or more than 1000
  // brace expansions ("pattern too broad").
  static Result<GlobMatcher> Compile(std::string_view pattern);

  GlobMatcher(GlobMatcher&&) noexcept;
  GlobMatcher& operator=(GlobMatcher&&) noexcept;
  ~GlobMatcher();

  // Whether the file at `rel_path` ('/'-separated, relative to the search
  // base) matches. For filtering a list of paths (grep --glob).
  bool Matches(std::string_view rel_path) const;

  // Incremental matching for directory walks: a State stands for the pattern
  // positions alive in one directory; descending into a child directory
  // computes the child's State once for all the files below it.
  using State = std::vector<uint32_t>;
  State Initial() const;
  State Descend(const State& state, std::string_view dir_name) const;
  // Whether a walk must enter a directory with this State.
  bool Alive(const State& state) const;
  bool MatchesFile(const State& state, std::string_view file_name) const;

  struct Impl;

 private:
  explicit GlobMatcher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct GlobOptions {
  std::string path;  // search base (an API path, a directory); "" = the root
  size_t max_results = 10000;
  // Wall-clock budget of the walk; when spent, the result so far is returned
  // with `truncated` set (a glob over a huge tree must not hang a request).
  std::chrono::milliseconds time_budget{5000};
};
struct GlobResult {
  std::vector<std::string> paths;  // absolute, sorted
  bool truncated = false;          // max_results or time_budget cut the walk
  // A directory could not be read (EACCES): the paths are incomplete, and a
  // narrower search will not find the rest.
  bool unreadable = false;
};
Result<GlobResult> Glob(const deepbox::fs::Root& root, std::string_view pattern,
                        const GlobOptions& options = {});

}  // namespace deepbox::sandboxd::fs
