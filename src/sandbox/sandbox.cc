#include "sandbox/sandbox.h"

#include <iterator>
#include <string>

namespace deepbox {

std::string_view ExitKindName(ExitKind kind) {
  switch (kind) {
    case ExitKind::kExited:
      return "exited";
    case ExitKind::kSignaled:
      return "signaled";
    case ExitKind::kTimedOut:
      return "timed_out";
    case ExitKind::kKilled:
      return "killed";
    case ExitKind::kSpawnFailed:
      return "spawn_failed";
  }
  return "exited";
}

std::string OomKillNote(const ExecResult& result) {
  if (!result.oom_killed) return "";
  std::string note = "killed at the sandbox's memory limit";
  const uint64_t b = result.memory_limit_bytes;
  if (b == 0) return note;
  static constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  size_t u = 0;
  uint64_t n = b;
  while (u + 1 < std::size(kUnits) && n % 1024 == 0) {
    n /= 1024;
    ++u;
  }
  return note + " (" + std::to_string(n) + " " + kUnits[u] + ")";
}

std::string_view FileTypeName(FileType type) {
  switch (type) {
    case FileType::kFile:
      return "file";
    case FileType::kDirectory:
      return "directory";
    case FileType::kSymlink:
      return "symlink";
    case FileType::kOther:
      return "other";
  }
  return "other";
}

Result<std::vector<FileInfo>> Sandbox::ListNames(const std::string& path) { return List(path); }

Result<TreeResult> Sandbox::Tree(const TreeRequest&) {
  return MakeError(ErrorCode::kUnimplemented, "this sandbox cannot list a tree in one call");
}

}  // namespace deepbox
