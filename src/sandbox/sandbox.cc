#include "sandbox/sandbox.h"

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

}  // namespace deepbox
