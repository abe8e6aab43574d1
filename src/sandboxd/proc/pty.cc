#include "sandboxd/proc/pty.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>

namespace deepbox::sandboxd::proc {

Result<PtyPair> OpenPty(WindowSize size) {
  if (size.rows == 0 || size.cols == 0) {
    return MakeError(ErrorCode::kInvalidArgument, "a terminal needs at least 1 row and 1 column");
  }
  PtyPair pair;
  pair.master.reset(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!pair.master) return MakeSyscallError("posix_openpt", errno, "/dev/ptmx");
  if (::grantpt(pair.master.get()) != 0) return MakeSyscallError("grantpt", errno);
  if (::unlockpt(pair.master.get()) != 0) return MakeSyscallError("unlockpt", errno);
  // TIOCGPTPEER opens the peer through the master itself: no path lookup in
  // /dev/pts, so nothing can substitute another file for it.
  pair.slave.reset(::ioctl(pair.master.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!pair.slave) return MakeSyscallError("ioctl", errno, "TIOCGPTPEER");
  if (auto st = ResizePty(pair.master.get(), size); !st) return tl::unexpected(st.error());
  int flags = ::fcntl(pair.master.get(), F_GETFL);
  if (flags < 0 || ::fcntl(pair.master.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return MakeSyscallError("fcntl", errno, "F_SETFL O_NONBLOCK");
  }
  return pair;
}

Status ResizePty(int master_fd, WindowSize size) {
  if (size.rows == 0 || size.cols == 0) {
    return MakeError(ErrorCode::kInvalidArgument, "a terminal needs at least 1 row and 1 column");
  }
  winsize ws{};
  ws.ws_row = size.rows;
  ws.ws_col = size.cols;
  if (::ioctl(master_fd, TIOCSWINSZ, &ws) != 0)
    return MakeSyscallError("ioctl", errno, "TIOCSWINSZ");
  return {};
}

}  // namespace deepbox::sandboxd::proc
