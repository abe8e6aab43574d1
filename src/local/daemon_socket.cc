#include "local/daemon_socket.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace deepbox::local {

Result<DaemonSocket> DaemonSocket::Create(const std::filesystem::path& path) {
  if (path.empty() || !path.is_absolute() || !path.has_filename()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("daemon socket path '{}' must be absolute", path.string()));
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // Bound relative to the directory fd (/proc/self/fd/N/name) so the checked
  // directory is the one used, whatever happens to the path meanwhile.
  const std::string dir = path.parent_path().string();
  UniqueFd dfd(open(dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dfd) return MakeSyscallError("open(O_DIRECTORY|O_NOFOLLOW)", errno, dir);
  struct stat st {};
  if (fstat(dfd.get(), &st) != 0) return MakeSyscallError("fstat", errno, dir);
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("the daemon socket directory {} must be owned by uid {} and "
                                 "closed to group and others (it is uid {}, mode {:o})",
                                 dir, geteuid(), st.st_uid, st.st_mode & 07777));
  }
  const std::string name = path.filename().string();
  std::string via = fmt::format("/proc/self/fd/{}/{}", dfd.get(), name);
  if (via.size() >= sizeof(addr.sun_path)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("daemon socket name '{}' is too long", name));
  }
  struct stat existing {};
  if (fstatat(dfd.get(), name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISSOCK(existing.st_mode)) {
      return MakeError(
          ErrorCode::kConflict,
          fmt::format("{} exists and is not a socket; refusing to replace it", path.string()));
    }
    if (unlinkat(dfd.get(), name.c_str(), 0) != 0) {
      return MakeSyscallError("unlinkat", errno, path.string());
    }
  }
  std::memcpy(addr.sun_path, via.c_str(), via.size() + 1);
  DaemonSocket s;
  s.fd_.reset(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.fd_) return MakeSyscallError("socket(AF_UNIX)", errno);
  if (bind(s.fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return MakeSyscallError("bind", errno, path.string());
  }
  // The directory already keeps everyone else out; no umask games (they are
  // process-wide, and the caller may have threads).
  if (fchmodat(dfd.get(), name.c_str(), 0600, 0) != 0 && errno != EOPNOTSUPP) {
    return MakeSyscallError("fchmodat", errno, path.string());
  }
  if (listen(s.fd_.get(), 512) != 0) return MakeSyscallError("listen", errno, path.string());
  s.path_ = path;
  return s;
}

}  // namespace deepbox::local
