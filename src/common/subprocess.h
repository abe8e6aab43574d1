// Host-side child processes: run to completion with the output captured
// (exec credential plugins, helper tools), or long-running in their own
// process group and stopped with SIGTERM then SIGKILL (`kubectl
// port-forward`, an MCP server, test daemons). posix_spawn, so it is safe in
// a multi-threaded program; only a parent-death signal needs fork, and then
// the child runs async-signal-safe calls only until exec. A failure names the
// call and errno.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"

namespace deepbox {

// One of the child's standard streams when it is not captured or fed (see
// SubprocessOptions): /dev/null unless one of these is set.
struct StdioRedirect {
  bool inherit = false;  // this process's own
  std::string path;      // stdin reads it; stdout/stderr create or truncate it (0600)
  int fd = -1;           // a descriptor of this process, dup2'd (it stays open here)
};

struct SubprocessOptions {
  // argv[0] is a path, or a bare name looked up in PATH.
  std::vector<std::string> argv;
  // Added to (or replacing in) this process's environment; with
  // replace_environment, the whole environment.
  std::vector<std::pair<std::string, std::string>> env;
  bool replace_environment = false;
  // Names taken out of the inherited environment (a secret the child must not see).
  std::vector<std::string> unset_env;
  bool new_process_group = true;
  // setsid(): a session and process group of its own, no controlling terminal
  // until it opens one (stdin_from.path naming a terminal gives it that one).
  bool new_session = false;
  std::string cwd;              // empty: this process's
  bool capture_stdout = false;  // a pipe: stdout_fd()/TakeStdout()
  bool capture_stderr = false;  // a pipe: stderr_fd()/TakeStderr()
  std::string stdin_data;       // written then closed (small payloads only)
  bool stdin_pipe = false;      // a pipe kept open: TakeStdin() (closing it is EOF)
  StdioRedirect stdin_from;     // used when neither stdin_data nor stdin_pipe
  StdioRedirect stdout_to;      // used unless capture_stdout
  StdioRedirect stderr_to;      // used unless capture_stderr
  // A terminal (a pty's slave, by path) opened read-write as stdin, stdout
  // and stderr instead of all the above; with new_session it becomes the
  // controlling terminal, as login_tty(3) makes it after forkpty.
  std::string terminal;
  // Sent to the child when the thread that spawned it ends
  // (PR_SET_PDEATHSIG), so a test's helper never outlives the test. 0: none.
  int parent_death_signal = 0;
};

class Subprocess {
 public:
  Subprocess() = default;
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  // Kills (SIGKILL) and reaps a child still running.
  ~Subprocess();

  static Result<Subprocess> Spawn(const SubprocessOptions& options);

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !status_.has_value(); }
  int stdout_fd() const { return stdout_.get(); }
  int stderr_fd() const { return stderr_.get(); }
  // Readable when the child exits (-1 if pidfds are unavailable).
  int pidfd() const { return pidfd_.get(); }
  UniqueFd TakeStdin() { return std::move(stdin_); }
  UniqueFd TakeStdout() { return std::move(stdout_); }
  UniqueFd TakeStderr() { return std::move(stderr_); }
  // Hands the child over: this object forgets it (no kill, no wait) and the
  // caller reaps the returned pid. For code that manages bare pids.
  pid_t Release();

  // The wait status once the child has exited (reaping it), else nullopt.
  std::optional<int> TryWait();
  // Whether the child has exited, without reaping it (its pid stays ours).
  bool HasExited() const;
  // Blocks until the child exits; returns the wait status.
  int Wait();
  // Signals the process group (or the process without a group of its own).
  void Signal(int sig) const;
  // SIGTERM, up to `grace` to exit, then SIGKILL; always reaps.
  int Terminate(std::chrono::milliseconds grace);

 private:
  pid_t pid_ = -1;
  bool own_group_ = false;
  std::optional<int> status_;
  UniqueFd stdin_;
  UniqueFd stdout_;
  UniqueFd stderr_;
  UniqueFd pidfd_;
};

struct CommandResult {
  int wait_status = 0;
  std::string out;
  std::string err;
  bool exited_ok() const;
};

// Runs to completion, capturing stdout and stderr (each capped at max_output).
// TIMEOUT (after killing the process group) when it outlives `timeout`.
Result<CommandResult> RunCommand(const SubprocessOptions& options,
                                 std::chrono::milliseconds timeout, size_t max_output = 4u << 20);

// "exited with status 1", "killed by signal 9 (Killed)".
std::string DescribeWaitStatus(int wait_status);

}  // namespace deepbox
