// Reading a directory's entries and a symlink's target through fds: what the
// confined walks (path_resolver.h), the tar writer and the daemon's tree
// operations list and follow with.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace deepbox::fs {

// readlinkat(2) into a string; on failure returns nullopt and sets *err
// (EINVAL: not a symlink). An empty `name` reads the link `dirfd` refers to.
std::optional<std::string> ReadLinkAt(int dirfd, const char* name, int* err);

struct DirEntry {
  std::string name;
  unsigned char type;  // DT_* from getdents64; DT_UNKNOWN on some filesystems
};
// All entries of an open directory (O_RDONLY|O_DIRECTORY fd) but "." and "..",
// unsorted. getdents64 directly: no DIR*, one 32 KiB buffer per call.
Result<std::vector<DirEntry>> ReadDir(int dirfd, std::string_view subject);

}  // namespace deepbox::fs
