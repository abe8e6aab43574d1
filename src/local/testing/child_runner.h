// Runs a test body in a forked child and returns its exit status (for facility
// tests that must change process-wide state: seccomp, capabilities, rlimits).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <functional>

namespace deepbox::local::testing {

// Returns the child's wait status; the body's return value is its exit code.
inline int RunInChild(const std::function<int()>& body) {
  pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return status;
}

inline int ExitCode(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
inline int TermSignal(int status) { return WIFSIGNALED(status) ? WTERMSIG(status) : 0; }

}  // namespace deepbox::local::testing
