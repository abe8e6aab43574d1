#include "common/remove_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "common/unique_fd.h"

namespace deepbox {
namespace {

Status RemoveTreeAt(int parent_fd, const char* name, const std::string& display, int depth) {
  if (unlinkat(parent_fd, name, 0) == 0 || errno == ENOENT) return {};
  if (errno != EISDIR && errno != EPERM) return MakeSyscallError("unlinkat", errno, display);
  if (depth > 256) return MakeError(ErrorCode::kResourceExhausted, "tree too deep: " + display);
  int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == EACCES) {
    (void)fchmodat(parent_fd, name, 0700, AT_SYMLINK_NOFOLLOW);
    fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd < 0) {
    if (errno == ENOENT) return {};
    return MakeSyscallError("openat", errno, display);
  }
  (void)fchmod(fd, 0700);  // entries of a 0500 dir cannot be removed otherwise
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    int e = errno;
    close(fd);
    return MakeSyscallError("fdopendir", e, display);
  }
  Status result;
  std::vector<std::string> names;
  while (dirent* ent = readdir(d)) {
    std::string_view n = ent->d_name;
    if (n == "." || n == "..") continue;
    names.emplace_back(n);
  }
  for (const auto& n : names) {
    auto st = RemoveTreeAt(dirfd(d), n.c_str(), display + "/" + n, depth + 1);
    if (!st && result) result = st;
  }
  closedir(d);
  if (unlinkat(parent_fd, name, AT_REMOVEDIR) != 0 && errno != ENOENT && result) {
    result = MakeSyscallError("rmdir", errno, display);
  }
  return result;
}

}  // namespace

Status RemoveTree(const std::filesystem::path& path) {
  std::filesystem::path parent = path.parent_path();
  UniqueFd pfd(open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!pfd) {
    if (errno == ENOENT) return {};
    return MakeSyscallError("open", errno, parent.string());
  }
  return RemoveTreeAt(pfd.get(), path.filename().c_str(), path.string(), 0);
}

}  // namespace deepbox
