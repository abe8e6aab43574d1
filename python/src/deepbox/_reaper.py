"""Deletes a sandbox once the processes it was made for are gone.

dcode (deepagents-code) creates its sandbox in its ``langgraph dev`` server and
deletes it from an ``atexit`` hook there, but stops that server with SIGTERM to
its process group and SIGKILL 3 s later, and a SIGKILLed dcode client never
stops it at all: the hook does not run, and the sandbox stayed until its TTL.
So ``deepbox.dcode`` starts this watcher, which depends on nobody's cleanup:

    python -m deepbox._reaper SANDBOX_ID DEEPBOX_BIN PIDFD[,PIDFD...] DONE_FD

It runs in its own session (a signal to dcode's process group or terminal does
not reach it), forks once more so that nobody has to wait for it (the first
process's exit status and stderr tell the creator that it started), and polls:

* each ``PIDFD`` (a pidfd of a watched process, opened by the creator before
  this process existed, so a reused pid cannot fool it): readable once that
  process has exited;
* ``DONE_FD``, the read end of a pipe whose write end only the creator holds:
  a byte ``d`` means "the provider deleted the sandbox itself" (exit quietly),
  end of file means the creator is gone.

When a watched process is gone it runs ``deepbox sandbox rm SANDBOX_ID`` once
(exit code 3, "no such sandbox", is fine) and exits. Standard library only.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys


def watch(pidfds: list[int], done_fd: int) -> bool:
    """Waits until a watched process exits (True) or the provider says done (False)."""
    poller = select.poll()
    for fd in (*pidfds, done_fd):
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while True:
        for fd, _ in poller.poll():
            if fd != done_fd:
                return True
            try:
                data = os.read(done_fd, 1)
            except OSError:
                return True
            return data != b"d"  # EOF: the creator (the pipe's only writer) is gone


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: python -m deepbox._reaper SANDBOX_ID DEEPBOX_BIN PIDFD[,PIDFD...] DONE_FD", file=sys.stderr)
        return 2
    sandbox_id, deepbox_bin, pidfds_arg, done_arg = argv
    pidfds = [int(x) for x in pidfds_arg.split(",") if x]
    done_fd = int(done_arg)
    # Fork once more: the creator waits only for this first process, and the
    # watcher is nobody's child it would have to reap.
    if os.fork() != 0:
        os._exit(0)
    # The creator reads the first process's stderr until it closes: the
    # watcher keeps none of the creator's pipes.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    if not watch(pidfds, done_fd):
        return 0
    try:
        subprocess.run(
            [deepbox_bin, "sandbox", "rm", sandbox_id],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return 1  # the sandbox's TTL still ends it
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
