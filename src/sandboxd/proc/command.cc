#include "sandboxd/proc/command.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <string.h>

#include <cerrno>
#include <utility>

extern char** environ;

namespace deepbox::sandboxd::proc {
namespace {

std::string ShellQuote(std::string_view arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789_-+=/.,:@%") == std::string_view::npos) {
    return std::string(arg);
  }
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  out.push_back('\'');
  return out;
}

std::string DescribeStatus(const ExitStatus& s) {
  if (s.exited()) return fmt::format("exit code {}", s.exit_code);
  return SignalName(s.signal) + (s.core_dumped ? " (core dumped)" : "");
}

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace

bool HasNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

Status ValidateSpec(const CommandSpec& spec) {
  const bool has_argv = !spec.argv.empty();
  const bool has_shell = spec.shell.has_value();
  if (has_argv == has_shell) {
    return MakeError(ErrorCode::kInvalidArgument, "a command needs exactly one of argv and shell");
  }
  if (has_argv && spec.argv[0].empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "argv[0] is empty");
  }
  if (has_shell && (spec.shell_path.empty() || HasNul(spec.shell_path))) {
    return MakeError(ErrorCode::kInvalidArgument, "invalid shell_path");
  }
  for (const auto& a : spec.argv) {
    if (HasNul(a)) return MakeError(ErrorCode::kInvalidArgument, "argv contains a NUL byte");
  }
  if (has_shell && HasNul(*spec.shell)) {
    return MakeError(ErrorCode::kInvalidArgument, "shell command contains a NUL byte");
  }
  if (HasNul(spec.cwd)) return MakeError(ErrorCode::kInvalidArgument, "cwd contains a NUL byte");
  for (const auto& [key, value] : spec.env) {
    if (key.empty() || key.find('=') != std::string::npos || HasNul(key) || HasNul(value)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("invalid environment variable name '{}'", key));
    }
  }
  if (spec.tty && (spec.tty->rows == 0 || spec.tty->cols == 0)) {
    return MakeError(ErrorCode::kInvalidArgument, "a terminal needs at least 1 row and 1 column");
  }
  if (spec.timeout.count() < 0 || spec.kill_grace.count() < 0 || spec.drain_timeout.count() < 0) {
    return MakeError(ErrorCode::kInvalidArgument, "durations must not be negative");
  }
  return {};
}

std::vector<std::string> EffectiveArgv(const CommandSpec& spec) {
  if (spec.shell) return {spec.shell_path, "-c", *spec.shell};
  return spec.argv;
}

std::string CommandDisplay(const CommandSpec& spec) {
  if (spec.shell) return *spec.shell;
  std::string out;
  for (const auto& a : spec.argv) {
    if (!out.empty()) out.push_back(' ');
    out += ShellQuote(a);
  }
  return out;
}

std::vector<std::string> EffectiveEnv(const CommandSpec& spec) {
  std::map<std::string_view, std::string_view> merged;
  if (spec.inherit_env && environ != nullptr) {
    for (char** e = environ; *e != nullptr; ++e) {
      std::string_view kv(*e);
      size_t eq = kv.find('=');
      if (eq == std::string_view::npos || eq == 0) continue;
      merged[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  for (const auto& [key, value] : spec.env) merged[key] = value;
  std::vector<std::string> out;
  out.reserve(merged.size());
  for (const auto& [key, value] : merged) {
    std::string kv;
    kv.reserve(key.size() + 1 + value.size());
    kv.append(key).append("=").append(value);
    out.push_back(std::move(kv));
  }
  return out;
}

OutcomeKind KindOf(const Outcome& outcome) { return static_cast<OutcomeKind>(outcome.index()); }

std::string_view OutcomeKindName(OutcomeKind kind) {
  switch (kind) {
    case OutcomeKind::kExited:
      return "exited";
    case OutcomeKind::kSignaled:
      return "signaled";
    case OutcomeKind::kTimedOut:
      return "timed_out";
    case OutcomeKind::kKilled:
      return "killed";
    case OutcomeKind::kSpawnFailed:
      return "spawn_failed";
  }
  return "unknown";
}

std::string DescribeOutcome(const Outcome& outcome) {
  return std::visit(
      Overloaded{
          [](const Exited& e) { return fmt::format("exited with code {}", e.code); },
          [](const Signaled& s) {
            return fmt::format("killed by {}{}", SignalName(s.signal),
                               s.core_dumped ? " (core dumped)" : "");
          },
          [](const TimedOut& t) {
            return fmt::format("timed out after {} ms ({}; {})", t.timeout.count(),
                               t.sigkilled ? "SIGKILL after grace period" : "SIGTERM",
                               DescribeStatus(t.status));
          },
          [](const Killed& k) {
            return fmt::format("killed on request ({})", DescribeStatus(k.status));
          },
          [](const SpawnFailed& f) { return fmt::format("failed to start: {}", f.error.message); },
      },
      outcome);
}

int ShellExitCode(const Outcome& outcome) {
  auto from_status = [](const ExitStatus& s) { return s.exited() ? s.exit_code : 128 + s.signal; };
  return std::visit(Overloaded{
                        [](const Exited& e) { return e.code; },
                        [](const Signaled& s) { return 128 + s.signal; },
                        [](const TimedOut&) { return 124; },
                        [&](const Killed& k) { return from_status(k.status); },
                        [](const SpawnFailed& f) {
                          return f.error.code == ErrorCode::kPermissionDenied ? 126 : 127;
                        },
                    },
                    outcome);
}

Outcome OutcomeFromStatus(const ExitStatus& status) {
  if (status.exited()) return Exited{status.exit_code};
  return Signaled{status.signal, status.core_dumped};
}

std::string SignalName(int signal) {
  if (signal >= SIGRTMIN && signal <= SIGRTMAX) {
    if (signal == SIGRTMIN) return "SIGRTMIN";
    return fmt::format("SIGRTMIN+{}", signal - SIGRTMIN);
  }
  const char* abbrev = sigabbrev_np(signal);
  if (abbrev == nullptr) return fmt::format("signal {}", signal);
  return fmt::format("SIG{}", abbrev);
}

namespace {

Result<StartedCommand> StartOnTerminal(const CommandSpec& spec, StdinMode stdin_mode) {
  auto pty = OpenPty(*spec.tty);
  if (!pty) return tl::unexpected(pty.error());
  StartedCommand started;
  if (stdin_mode == StdinMode::kPipe) {
    started.stdin_fd.reset(::fcntl(pty->master.get(), F_DUPFD_CLOEXEC, 3));
    if (!started.stdin_fd) return MakeSyscallError("fcntl", errno, "F_DUPFD_CLOEXEC");
  }
  SpawnRequest request;
  request.argv = EffectiveArgv(spec);
  if (!spec.inherit_env || !spec.env.empty()) request.env = EffectiveEnv(spec);
  request.cwd = spec.cwd;
  request.stdin_fd = request.stdout_fd = request.stderr_fd = pty->slave.get();
  request.controlling_tty = true;
  auto child = Spawn(request);
  if (!child) return tl::unexpected(child.error());
  started.child = std::move(*child);
  started.stdout_fd = std::move(pty->master);
  // The slave closes here: once the command and its children have closed it
  // too, reads on the master end (EIO).
  return started;
}

}  // namespace

Result<StartedCommand> StartCommand(const CommandSpec& spec, StdinMode stdin_mode) {
  if (auto ok = ValidateSpec(spec); !ok) return tl::unexpected(ok.error());
  if (spec.tty) return StartOnTerminal(spec, stdin_mode);
  StartedCommand started;
  Pipe in_pipe;
  if (stdin_mode == StdinMode::kPipe) {
    auto p = MakePipe(/*nonblocking_read=*/false, /*nonblocking_write=*/true);
    if (!p) return tl::unexpected(p.error());
    in_pipe = std::move(*p);
  }
  auto out_pipe = MakePipe(/*nonblocking_read=*/true, /*nonblocking_write=*/false);
  if (!out_pipe) return tl::unexpected(out_pipe.error());
  auto err_pipe = MakePipe(/*nonblocking_read=*/true, /*nonblocking_write=*/false);
  if (!err_pipe) return tl::unexpected(err_pipe.error());

  SpawnRequest request;
  request.argv = EffectiveArgv(spec);
  if (!spec.inherit_env || !spec.env.empty()) request.env = EffectiveEnv(spec);
  request.cwd = spec.cwd;
  request.stdin_fd = in_pipe.read.get();  // -1 (/dev/null) without a pipe
  request.stdout_fd = out_pipe->write.get();
  request.stderr_fd = err_pipe->write.get();
  request.new_process_group = true;
  auto child = Spawn(request);
  if (!child) return tl::unexpected(child.error());
  started.child = std::move(*child);
  started.stdin_fd = std::move(in_pipe.write);
  started.stdout_fd = std::move(out_pipe->read);
  started.stderr_fd = std::move(err_pipe->read);
  // The child's ends close here, when the pipes go out of scope.
  return started;
}

}  // namespace deepbox::sandboxd::proc
