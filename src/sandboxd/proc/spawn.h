// Low-level process creation for deepbox-sandboxd.
//
// Spawn() starts one program with clone(CLONE_VM | CLONE_VFORK | CLONE_PIDFD):
// the child borrows the parent's memory (no page-table copy, so it costs the same
// whatever the daemon's size) and the calling thread sleeps until the child has
// called execve or died. Everything the child needs (argv/envp arrays, the PATH
// candidates, the fds) is prepared before the clone; the child runs only raw
// syscalls on its own small stack:
//   reset every signal to SIG_DFL -> setpgid(0, 0) (or setsid) -> dup3 onto 0/1/2 ->
//   [ioctl(0, TIOCSCTTY)] -> close_range(3, ~0, CLOSE_RANGE_CLOEXEC) ->
//   [prlimit(RLIMIT_NOFILE), see SetChildOpenFilesLimit] -> chdir -> unblock signals -> execve.
// A failing step stores {step, errno} in a struct shared through CLONE_VM (it
// plays the role of the classic CLOEXEC error pipe: because the parent resumes
// only after exec or _exit, reading it needs no pipe and no extra syscalls) and
// the child exits with 127. Spawn() then reaps it and returns an Error naming the
// call, e.g. "execve(nope): No such file or directory (ENOENT)" or
// "chdir(/missing): No such file or directory (ENOENT)".
//
// Signals: the parent blocks all signals around the clone so no handler of the
// daemon ever runs in the child (which shares its memory); the child restores
// default dispositions for every signal, including those the daemon ignores
// (SIGPIPE), and an empty mask, so each program starts pristine.
//
// SIGPIPE: the daemon must ignore SIGPIPE (call IgnoreSigpipe() at startup).
// This library does not rely on it: all its writes to children go through
// WriteNoSigpipe().
//
// Child is the RAII owner of a child process. The child is not reaped until
// Wait() (Poll() peeks with WNOWAIT), so while a Child is alive its pid and its
// process-group id cannot be reused and SignalGroup() can never hit a stranger.
// Destroying a Child that was neither waited for nor detached SIGKILLs its group
// and reaps it. See reaper.h for how this coexists with the orphan reaper.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"

namespace deepbox::sandboxd::proc {

// How a process ended (the decoded waitid() status).
struct ExitStatus {
  int exit_code = -1;  // >= 0 when the process exited
  int signal = 0;      // > 0 when a signal killed it
  bool core_dumped = false;

  bool exited() const { return signal == 0; }
  friend bool operator==(const ExitStatus&, const ExitStatus&) = default;
};

struct SpawnRequest {
  // argv[0] containing a '/' is executed as is (relative to cwd); otherwise it
  // is searched in the PATH of the child's environment (like execvpe), or in
  // "/usr/local/bin:/usr/bin:/bin" when that environment has no PATH.
  std::vector<std::string> argv = {};
  // The child's complete environment as "KEY=VALUE" strings; nullopt inherits
  // the daemon's environ.
  std::optional<std::vector<std::string>> env = std::nullopt;
  std::string cwd = {};  // empty: the daemon's cwd
  // Descriptors to install as the child's 0/1/2; -1 means /dev/null. They stay
  // owned by the caller. Nothing else is inherited by the child.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // setpgid(0, 0) in the child: the child leads a new process group whose id is
  // its pid. When false, SignalGroup() signals the child alone.
  bool new_process_group = true;
  // setsid() instead of setpgid() (the child leads a new session and process
  // group, id == pid), then stdin_fd, which must be a terminal, becomes its
  // controlling terminal (TIOCSCTTY).
  bool controlling_tty = false;
};

class Child {
 public:
  Child() = default;
  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  // Unless waited for or detached: SIGKILL to the group, then reap (blocking).
  ~Child();

  bool valid() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // The process group id (== pid) or 0 when the child shares the daemon's group.
  pid_t pgid() const { return own_group_ ? pid_ : 0; }
  // pidfd of the child (readable once it has exited); -1 after reaping.
  int pidfd() const { return pidfd_.get(); }
  bool reaped() const { return reaped_; }

  // The exit status if the child has exited, without reaping it (WNOWAIT).
  Result<std::optional<ExitStatus>> Poll();
  // Blocks until the child exits (EINTR-safe), then reaps it.
  Result<ExitStatus> Wait();
  // Sends `sig` to the child's process group (or to the child alone when it has
  // none). Fails with kConflict once the child has been reaped.
  Status SignalGroup(int sig);
  // Sends `sig` to the child process only (pidfd_send_signal).
  Status Signal(int sig);
  // Gives up ownership without killing: the child (and its exit status) is left
  // to the orphan reaper (see reaper.h). The Child becomes invalid.
  void Detach();

 private:
  friend Result<Child> Spawn(const SpawnRequest& request);
  Child(pid_t pid, int pidfd, bool own_group);
  void KillAndReap();

  pid_t pid_ = 0;
  UniqueFd pidfd_;
  bool own_group_ = false;
  bool reaped_ = false;
  std::optional<ExitStatus> status_;
};

// Starts a child. Errors: kInvalidArgument for an empty argv or strings with NUL
// bytes; the failing call (clone, setpgid, dup3, chdir, execve, ...) otherwise.
Result<Child> Spawn(const SpawnRequest& request);

// signal(SIGPIPE, SIG_IGN) for the daemon. Children never inherit it.
void IgnoreSigpipe();

// The daemon raises its own RLIMIT_NOFILE soft limit (each connection holds a
// descriptor); every child started afterwards gets `soft` back, the limit the
// daemon itself was started with, so programs see what their sandbox was
// configured with and select()-based ones keep fds below FD_SETSIZE. The hard
// limit is left as it is. Call once at startup, before any thread spawns.
Status SetChildOpenFilesLimit(uint64_t soft);

// write(2) that never raises SIGPIPE, whatever the process disposition is: on
// EPIPE a SIGPIPE generated by this call is consumed. Returns write's result and
// leaves errno set (EAGAIN, EPIPE, ...). EINTR is retried.
ssize_t WriteNoSigpipe(int fd, const void* data, size_t size);

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};
// pipe2(O_CLOEXEC), then O_NONBLOCK on the ends named by the flags.
Result<Pipe> MakePipe(bool nonblocking_read, bool nonblocking_write);

// Decodes a siginfo_t filled by waitid(WEXITED).
ExitStatus ExitStatusFromSiginfo(int code, int status);  // (si_code, si_status)

}  // namespace deepbox::sandboxd::proc
