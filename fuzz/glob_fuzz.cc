// Glob compilation and matching (src/sandboxd/fs/glob.h), and the directory
// walk. Input: a pattern, then paths to match, one per line. Properties: the
// walk over a real tree (dot-directories, odd names, symlinks to files,
// directories and outside) returns exactly the tree's files that Matches()
// accepts, all inside the root; a slow pattern is a timeout (libFuzzer).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "common/strings.h"
#include "fuzz/fuzz_util.h"
#include "sandboxd/fs/glob.h"

namespace {

namespace dfs = deepbox::sandboxd::fs;

// Regular files of the fixture, and symlinks that lead to one inside it.
const std::vector<std::string> kFiles = {
    "a.py",         "b.txt",         "src/main.py",        "src/.env",   "src/deep/er/file.txt",
    ".hidden/x.py", "unicode/é.txt", "brace/{a,b}.txt",    "star/*.txt", "q/?",
    "sp ace/f g",   "x/y/z/w.py",    ".git/objects/ab/cd", "file_link",
};

struct Fixture {
  deepbox::fuzz::TempTree base{"glob"};
  deepbox::fs::Root root = Build();

  deepbox::fs::Root Build() {
    using namespace deepbox::fuzz;
    for (const auto& f : kFiles) {
      if (f == "file_link") continue;
      std::string p = base.Path(f);
      MakeDirs(p.substr(0, p.rfind('/')));
      WriteFile(p, f);
    }
    Symlink("a.py", base.Path("file_link"));
    Symlink("src", base.Path("dir_link"));
    Symlink("/etc/hostname", base.Path("out_link"));
    Symlink("nowhere", base.Path("dangling"));
    auto r = deepbox::fs::Root::Open(base.path());
    if (!r) Fail("fixture: " + r.error().ToString());
    return std::move(*r);
  }
};

Fixture& F() {
  static Fixture* f = new Fixture();
  return *f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto [pattern, rest] = deepbox::fuzz::SplitFirst(in, '\n');
  auto matcher = dfs::GlobMatcher::Compile(pattern);
  if (!matcher) return 0;
  for (auto path : deepbox::Split(rest, '\n')) (void)matcher->Matches(path);

  std::vector<std::string> expected;
  for (const auto& f : kFiles) {
    if (matcher->Matches(f)) expected.push_back(F().base.Path(f));
  }
  std::sort(expected.begin(), expected.end());
  dfs::GlobOptions options;
  options.time_budget = std::chrono::milliseconds(60000);
  auto result = dfs::Glob(F().root, pattern, options);
  FUZZ_CHECK(result.has_value(), "a pattern that compiles fails to glob: " +
                                     (result ? std::string() : result.error().ToString()));
  FUZZ_CHECK(!result->truncated, "glob over 14 files was truncated");
  for (const auto& p : result->paths) {
    FUZZ_CHECK(deepbox::fuzz::IsWithin(p, F().base.path()), "glob returned a path outside: " + p);
  }
  if (result->paths != expected) {
    std::string got, want;
    for (const auto& p : result->paths) got += p + " ";
    for (const auto& p : expected) want += p + " ";
    deepbox::fuzz::Fail(
        fmt::format("glob '{}' found [{}], Matches() accepts [{}]", pattern, got, want));
  }
  return 0;
}
