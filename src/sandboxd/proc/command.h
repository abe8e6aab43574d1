// What to run (CommandSpec) and how it ended (Outcome), shared by the runner
// and the process table, plus StartCommand(): spawn a spec with pipes.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"
#include "sandboxd/proc/pty.h"
#include "sandboxd/proc/spawn.h"

namespace deepbox::sandboxd::proc {

inline constexpr size_t kDefaultOutputCap = 1 << 20;  // 1 MiB

struct CommandSpec {
  // Exactly one of `argv` (non-empty) and `shell` must be set. `shell` runs as
  // `shell_path -c SHELL`.
  std::vector<std::string> argv;
  std::optional<std::string> shell;
  std::string shell_path = "/bin/sh";

  std::string cwd;  // empty: the daemon's cwd
  // The child's environment: exactly `env` unless inherit_env, in which case the
  // daemon's environment overlaid with `env`.
  std::map<std::string, std::string> env;
  bool inherit_env = false;

  // Bytes for stdin; nullopt gives /dev/null (the process table always opens a
  // stdin pipe, see ProcessTable::StartOptions).
  std::optional<std::string> stdin_data;

  // Run on a new pseudo-terminal of this size: stdin, stdout and stderr are
  // its slave side (so stderr merges into stdout), which is also the
  // command's controlling terminal (it leads a new session). StartCommand
  // hands the master out as stdout_fd (and a duplicate as stdin_fd with
  // StdinMode::kPipe). Run/RunStreaming only.
  std::optional<WindowSize> tty;

  // 0 = no timeout. On timeout: SIGTERM to the process group, SIGKILL to the
  // group kill_grace later (0 = SIGKILL at once).
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds kill_grace{2000};
  // After the direct child has exited, how long to keep reading output that
  // other members of its group still produce (they hold the pipes) before
  // SIGKILLing the group. Run/RunStreaming only.
  std::chrono::milliseconds drain_timeout{500};

  // Bytes kept (the head) per stream and for the interleaved combined output;
  // the rest is read and discarded, and counted. 0 keeps nothing.
  size_t max_stdout_bytes = kDefaultOutputCap;
  size_t max_stderr_bytes = kDefaultOutputCap;
  size_t max_combined_bytes = kDefaultOutputCap;

  static CommandSpec Argv(std::vector<std::string> argv) {
    CommandSpec spec;
    spec.argv = std::move(argv);
    return spec;
  }
  static CommandSpec Shell(std::string command) {
    CommandSpec spec;
    spec.shell = std::move(command);
    return spec;
  }
};

// kInvalidArgument when the spec cannot be run (neither or both of argv/shell,
// NUL bytes, bad env keys, negative durations).
Status ValidateSpec(const CommandSpec& spec);

// Whether `s` holds a NUL byte (an argv, env or path string cannot: exec
// would cut it there).
bool HasNul(std::string_view s);
// The argv actually executed (shell commands become {shell_path, "-c", shell}).
std::vector<std::string> EffectiveArgv(const CommandSpec& spec);
// Human-readable command: the shell string, or the argv shell-quoted.
std::string CommandDisplay(const CommandSpec& spec);
// The child's environment as "KEY=VALUE" strings (sorted by key).
std::vector<std::string> EffectiveEnv(const CommandSpec& spec);

// --- Outcome ----------------------------------------------------------------

struct Exited {
  int code = 0;
};
struct Signaled {
  int signal = 0;
  bool core_dumped = false;
};
// The timeout expired while the process was running; it was then terminated.
struct TimedOut {
  std::chrono::milliseconds timeout{0};
  bool sigkilled = false;  // SIGTERM was not enough: SIGKILL after the grace
  ExitStatus status;       // how the direct child finally ended
};
// Terminated on request (streaming client went away, Kill, Remove, Shutdown).
struct Killed {
  bool sigkilled = false;
  ExitStatus status;
};
struct SpawnFailed {
  Error error;  // e.g. "execve(nope): No such file or directory (ENOENT)"
};

using Outcome = std::variant<Exited, Signaled, TimedOut, Killed, SpawnFailed>;

enum class OutcomeKind { kExited, kSignaled, kTimedOut, kKilled, kSpawnFailed };

OutcomeKind KindOf(const Outcome& outcome);
// Stable names: "exited", "signaled", "timed_out", "killed", "spawn_failed".
std::string_view OutcomeKindName(OutcomeKind kind);
// "exited with code 1", "killed by SIGSEGV (core dumped)", "timed out after 5000 ms
// (SIGTERM)", "killed on request (SIGKILL)", "failed to start: execve(x): ...".
std::string DescribeOutcome(const Outcome& outcome);
// The code a shell would report: the exit code, 128+signal, 124 for a timeout
// (like timeout(1)), 137/143-style for Killed, 127 (126 for permission
// problems) when the spawn failed.
int ShellExitCode(const Outcome& outcome);
// The outcome of a process that ended on its own with `status`.
Outcome OutcomeFromStatus(const ExitStatus& status);
// "SIGTERM", "SIGRTMIN+3", or "signal 99".
std::string SignalName(int signal);

// --- Starting a spec --------------------------------------------------------

struct StartedCommand {
  Child child;
  UniqueFd stdin_fd;   // write end (O_NONBLOCK), only with StdinMode::kPipe
  UniqueFd stdout_fd;  // read ends (O_NONBLOCK); with spec.tty the terminal's master
  UniqueFd stderr_fd;  // not set with spec.tty
};

enum class StdinMode { kNull, kPipe };

// Validates and spawns the spec in its own process group with stdout/stderr
// pipes (and a stdin pipe for kPipe). spec.stdin_data is NOT written here.
Result<StartedCommand> StartCommand(const CommandSpec& spec, StdinMode stdin_mode);

}  // namespace deepbox::sandboxd::proc
