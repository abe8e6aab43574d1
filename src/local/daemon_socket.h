// The sandbox daemon's listening socket, owned by the host.
//
// Why: if the daemon created its own socket in a directory the sandbox can
// write, any process in the sandbox (same uid as the daemon) could unlink it and
// bind its own listener in its place, and the host would take the impostor's
// answers for the daemon's. Instead the host binds the socket in a directory
// only the host user can reach (never mounted into the sandbox) and hands the
// listening fd to the daemon as fd kDaemonListenFd; the daemon marks it
// close-on-exec (no sandbox process inherits it) and makes itself non-dumpable
// (its fds cannot be borrowed through /proc or pidfd_getfd). If the daemon dies,
// the listener dies with it: connections are refused, nobody else can answer.
#pragma once

#include <filesystem>

#include "common/error.h"
#include "common/unique_fd.h"

namespace deepbox::local {

// The fd number the daemon receives its listener on ("--listen fd:3").
inline constexpr int kDaemonListenFd = 3;

class DaemonSocket {
 public:
  // Binds and listens on `path`. Its parent directory must be a real directory
  // (not a symlink), owned by this process's euid and not accessible to group
  // or others; a stale socket at `path` is replaced, anything else refused.
  static Result<DaemonSocket> Create(const std::filesystem::path& path);

  DaemonSocket() = default;
  DaemonSocket(DaemonSocket&&) noexcept = default;
  DaemonSocket& operator=(DaemonSocket&&) noexcept = default;

  int fd() const { return fd_.get(); }
  const std::filesystem::path& path() const { return path_; }
  // Closes the host's copy (after the daemon has its own).
  void CloseFd() { fd_.reset(); }

 private:
  UniqueFd fd_;
  std::filesystem::path path_;
};

}  // namespace deepbox::local
