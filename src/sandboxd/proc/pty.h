// Pseudo-terminals for interactive commands (`deepbox sandbox exec -t`).
#pragma once

#include <cstdint>

#include "common/error.h"
#include "common/unique_fd.h"

namespace deepbox::sandboxd::proc {

struct WindowSize {
  uint16_t rows = 24;
  uint16_t cols = 80;
};

struct PtyPair {
  UniqueFd master;  // O_NONBLOCK, O_CLOEXEC: the daemon's side
  UniqueFd slave;   // O_CLOEXEC, not the daemon's controlling terminal: the command's side
};

// Opens a new pseudo-terminal (/dev/ptmx) with the given window size and the
// default line discipline settings (echo, canonical mode, CR-LF output).
Result<PtyPair> OpenPty(WindowSize size);
// TIOCSWINSZ on the master: the kernel sends SIGWINCH to the terminal's
// foreground process group.
Status ResizePty(int master_fd, WindowSize size);

}  // namespace deepbox::sandboxd::proc
