// Child processes for the Kubernetes provider: exec credential plugins (run to
// completion, output captured) and `kubectl port-forward` (long-running, in its
// own process group, stopped with SIGTERM then SIGKILL). posix_spawn only, so
// it is safe in a multi-threaded program.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"

namespace deepbox::k8s {

struct SpawnOptions {
  // argv[0] is a path, or a bare name looked up in PATH.
  std::vector<std::string> argv;
  // Added to (or replacing in) this process's environment.
  std::vector<std::pair<std::string, std::string>> env;
  bool new_process_group = true;
  bool capture_stdout = false;  // else /dev/null
  bool capture_stderr = false;  // else /dev/null
  std::string stdin_data;       // written then closed (small payloads only)
};

class Child {
 public:
  Child() = default;
  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  // Kills (SIGKILL) and reaps a child still running.
  ~Child();

  static Result<Child> Spawn(const SpawnOptions& options);

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

struct RunResult {
  int wait_status = 0;
  std::string out;
  std::string err;
  bool exited_ok() const;
};

// Runs to completion, capturing stdout and stderr (each capped at max_output).
// TIMEOUT (after killing the process group) when it outlives `timeout`.
Result<RunResult> RunCommand(const SpawnOptions& options, std::chrono::milliseconds timeout,
                             size_t max_output = 4u << 20);

// "exited with status 1", "killed by signal 9 (Killed)".
std::string DescribeWaitStatus(int wait_status);

}  // namespace deepbox::k8s
