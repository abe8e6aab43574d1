// Shared support of the fuzz targets (fuzz/README.md): temporary trees, tree
// snapshots for "nothing changed outside X" properties, and a check that
// aborts (so that libFuzzer and the corpus driver both report it as a crash
// with the input that caused it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// The libFuzzer entry points every target defines (Initialize optionally:
// weak, as libFuzzer itself declares it).
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace deepbox::fuzz {

// A violated property: prints the message and aborts.
[[noreturn]] void Fail(std::string_view what);
#define FUZZ_CHECK(cond, what)                \
  do {                                        \
    if (!(cond)) ::deepbox::fuzz::Fail(what); \
  } while (0)

// A directory made with mkdtemp under $TMPDIR (or /tmp), removed with
// everything in it when the process ends (targets keep one per process).
class TempTree {
 public:
  explicit TempTree(std::string_view tag);
  ~TempTree();
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;
  const std::string& path() const { return path_; }
  std::string Path(std::string_view rel) const;

 private:
  std::string path_;
};

// Setup helpers; they abort on failure (a broken fixture is not a finding).
void WriteFile(const std::string& path, std::string_view content, unsigned mode = 0644);
void MakeDirs(const std::string& path);
void Symlink(const std::string& target, const std::string& link);
// Removes everything beneath `dir` (not `dir` itself), never following a
// symlink; makes unreadable or unwritable directories usable first.
void EmptyDir(const std::string& dir);
// Removes `path` and everything beneath it (if it exists).
void RemoveTree(const std::string& path);

// Every entry beneath `root` (not following symlinks), relative path ->
// "mode size mtime nlink [-> link target]" (directories: mode only),
// skipping the subtree `skip` (a path relative to root, "" = skip nothing).
using Snapshot = std::map<std::string, std::string>;
Snapshot TakeSnapshot(const std::string& root, std::string_view skip = "");
// The first difference between two snapshots, "" if equal.
std::string DescribeDifference(const Snapshot& before, const Snapshot& after);

// The path an fd refers to (readlink of /proc/self/fd/N).
std::string FdPath(int fd);
// Whether `path` is `dir` or lies beneath it (both absolute and normalized).
bool IsWithin(std::string_view path, std::string_view dir);

// Splits fuzz input at the first `sep`: (before, after); no separator gives
// (everything, "").
std::pair<std::string_view, std::string_view> SplitFirst(std::string_view in, char sep);

}  // namespace deepbox::fuzz
