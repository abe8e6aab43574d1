// Host-side child processes: run to completion with the output captured
// (exec credential plugins, helper tools), or long-running in their own
// process group and stopped with SIGTERM then SIGKILL (`kubectl
// port-forward`). posix_spawn only, so it is safe in a multi-threaded
// program; a spawn failure names the call and errno.
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

struct SubprocessOptions {
  // argv[0] is a path, or a bare name looked up in PATH.
  std::vector<std::string> argv;
  // Added to (or replacing in) this process's environment.
  std::vector<std::pair<std::string, std::string>> env;
  bool new_process_group = true;
  bool capture_stdout = false;  // else /dev/null
  bool capture_stderr = false;  // else /dev/null
  std::string stdin_data;       // written then closed (small payloads only)
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
  UniqueFd TakeStdout() { return std::move(stdout_); }
  UniqueFd TakeStderr() { return std::move(stderr_); }

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
