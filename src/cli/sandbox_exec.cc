// deepbox sandbox exec: runs a command in a sandbox like `docker exec`. Its
// output reaches stdout/stderr byte for byte (binary output stays intact),
// -i streams stdin to it as it arrives, -t runs it on a pseudo-terminal in
// the sandbox (with -i: an interactive session, this terminal in raw mode,
// window size changes passed on).
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/providers.h"
#include "common/io.h"
#include "common/terminal_text.h"
#include "common/unique_fd.h"

namespace deepbox::cli {
namespace {

int Say(int code, const std::string& message) {
  std::fprintf(stderr, "deepbox: %s\n", SanitizeForTerminal(message).c_str());
  return code;
}

// The host terminal in raw mode (bytes, ^C included, go to the sandbox's
// terminal unchanged), restored on destruction or by Restore() from the
// signal thread. Async-signal-safe restore is not needed: signals are taken
// by a thread (signalfd), never by a handler.
class RawTerminal {
 public:
  Status Enter(int fd) {
    if (::tcgetattr(fd, &saved_) != 0) return MakeSyscallError("tcgetattr", errno, "stdin");
    termios raw = saved_;
    ::cfmakeraw(&raw);
    if (::tcsetattr(fd, TCSADRAIN, &raw) != 0) return MakeSyscallError("tcsetattr", errno);
    fd_ = fd;
    return {};
  }
  void Restore() {
    std::lock_guard<std::mutex> lock(mu_);
    if (fd_ < 0) return;
    (void)::tcsetattr(fd_, TCSADRAIN, &saved_);
    fd_ = -1;
  }
  ~RawTerminal() { Restore(); }

 private:
  std::mutex mu_;
  int fd_ = -1;
  termios saved_{};
};

std::optional<TerminalSize> HostTerminalSize() {
  for (int fd : {STDOUT_FILENO, STDIN_FILENO, STDERR_FILENO}) {
    winsize ws{};
    if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
      return TerminalSize{ws.ws_row, ws.ws_col};
    }
  }
  return std::nullopt;
}

// How long a stopped exec waits for the command's `killed` exit after
// /exec/cancel (the daemon sends SIGTERM at its next keepalive, at most 2 s
// away, then SIGKILL after its grace): then deepbox exits anyway.
constexpr int kCancelWaitMs = 10000;

// Dies of `sig` (the shell sees 128+sig and, for SIGINT, stops a script as
// it should), after giving the terminal back.
[[noreturn]] void DieOf(int sig, RawTerminal* raw) {
  if (raw != nullptr) raw->Restore();
  ::signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  ::raise(sig);
  ::_exit(128 + sig);  // not reached
}

// What runs beside ExecStream: the stdin pump (-i, once the command has
// started) and the signal thread. Both wait on `stop_` too, so Stop() ends
// them whatever they wait for; a Write() in flight returns once the command
// has ended, which it has when ExecStream returns.
//
// Signals: with -t, SIGWINCH resizes the sandbox's terminal and a stop signal
// ends deepbox (the daemon kills a session's command when its stream closes).
// Without -t, SIGINT, SIGTERM and SIGHUP stop the command in the sandbox, as
// `docker exec` does: /exec/cancel for its exec id (SIGTERM, then SIGKILL
// after the daemon's grace), the stream read on to the `killed` exit (or for
// kCancelWaitMs at most), then deepbox dies of the signal (130, 143, 129). A
// second signal does not wait.
class Session {
 public:
  Session(bool pump_stdin, bool tty, RawTerminal* raw)
      : pump_stdin_(pump_stdin), tty_(tty), raw_(raw) {}
  ~Session() { Stop(); }

  // Before anything that may start a thread (so that every thread inherits
  // the mask): the signals the signal thread takes.
  Status Prepare() {
    stop_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!stop_) return MakeSyscallError("eventfd", errno);
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGTERM, SIGHUP, SIGINT}) sigaddset(&set, sig);
    if (tty_) {
      sigaddset(&set, SIGWINCH);
      sigaddset(&set, SIGQUIT);
    }
    if (int rc = pthread_sigmask(SIG_BLOCK, &set, &old_mask_); rc != 0) {
      return MakeSyscallError("pthread_sigmask", rc);
    }
    masked_ = true;
    signals_.reset(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!signals_) return MakeSyscallError("signalfd", errno);
    return {};
  }

  // The sandbox is reached: without -t, stop signals are taken from here on
  // (one before the command was sent ends deepbox at once).
  void Connected(SandboxdClient* client) {
    client_ = client;
    if (!tty_) signal_thread_ = std::thread([this] { WatchSignals(); });
  }
  // ExecRequest::on_exec_id.
  void Named(const std::string& exec_id) {
    std::lock_guard<std::mutex> lock(mu_);
    exec_id_ = exec_id;
    named_ = true;
  }

  // on_started: the command runs (stdin_stream requests only).
  void Started(ExecInput& input) {
    input_ = &input;
    if (pump_stdin_) pump_ = std::thread([this] { Pump(); });
    if (tty_) {
      // A resize between our size query and now would be lost: send the size once more.
      if (auto size = HostTerminalSize()) (void)input.Resize(*size);
      signal_thread_ = std::thread([this] { WatchSignals(); });
    }
  }

  // For on_output: false once a stop signal could not be passed on by id
  // (closing the stream then stops the command).
  bool abandoned() const { return abandon_.load(); }
  // The stop signal that arrived (0 = none).
  int stop_signal() const { return stop_signal_.load(); }

  void Stop() {
    if (stop_) {
      uint64_t one = 1;
      (void)::write(stop_.get(), &one, sizeof one);
    }
    if (pump_.joinable()) pump_.join();
    if (signal_thread_.joinable()) signal_thread_.join();
    if (masked_) {
      pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
      masked_ = false;
    }
  }

 private:
  // Host stdin -> the command's stdin, as bytes arrive; EOF -> Close().
  void Pump() {
    std::string buf(64 * 1024, '\0');
    for (;;) {
      pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {stop_.get(), POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[1].revents != 0) return;
      if ((fds[0].revents & POLLNVAL) != 0) {  // no stdin at all
        (void)input_->Close();
        return;
      }
      ssize_t n = ::read(STDIN_FILENO, buf.data(), buf.size());
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {  // EOF (or an unreadable stdin, which ends the input too)
        (void)input_->Close();
        return;
      }
      // Fails once the command has ended or stopped reading its stdin: then
      // there is nothing more to deliver.
      if (!input_->Write(std::string_view(buf.data(), static_cast<size_t>(n)))) return;
    }
  }

  void WatchSignals() {
    for (;;) {
      pollfd fds[2] = {{signals_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
      const int first = stop_signal_.load();
      int rc = ::poll(fds, 2, first != 0 ? kCancelWaitMs : -1);
      if (rc < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (rc == 0) DieOf(first, raw_);  // the command did not end in time
      if (fds[1].revents != 0) return;
      signalfd_siginfo info{};
      if (::read(signals_.get(), &info, sizeof info) != static_cast<ssize_t>(sizeof info)) {
        continue;
      }
      const int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGWINCH) {
        if (input_ != nullptr) {
          if (auto size = HostTerminalSize()) (void)input_->Resize(*size);
        }
        continue;
      }
      // -t: give the terminal back, then die of the signal; the daemon sees
      // the connection close and kills the command. A second signal: the same.
      if (tty_ || first != 0) DieOf(sig, raw_);
      std::string id;
      bool named = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        id = exec_id_;
        named = named_;
      }
      if (!named) DieOf(sig, raw_);  // nothing was sent yet: nothing runs
      stop_signal_.store(sig);
      std::fprintf(stderr, "deepbox: %s: stopping the command in the sandbox\n",
                   sig == SIGINT    ? "interrupted"
                   : sig == SIGTERM ? "terminated"
                                    : "hung up");
      // Without an id (an older daemon), or before the daemon knew it, the
      // stream is closed instead at its next event, which stops the command.
      if (id.empty() || client_ == nullptr || !client_->CancelExec(id)) abandon_.store(true);
    }
  }

  const bool pump_stdin_;
  const bool tty_;
  RawTerminal* raw_;
  SandboxdClient* client_ = nullptr;
  ExecInput* input_ = nullptr;
  UniqueFd stop_;
  UniqueFd signals_;
  sigset_t old_mask_{};
  bool masked_ = false;
  std::mutex mu_;
  std::string exec_id_;
  bool named_ = false;
  std::atomic<bool> abandon_{false};
  std::atomic<int> stop_signal_{0};
  std::thread pump_;
  std::thread signal_thread_;
};

// A sandbox that went away: exit 3 (NOT_FOUND) with its reason on one line
// (a tombstone's detail can end in a daemon's last stderr lines).
int SayGone(const Error& gone) {
  std::string line;
  bool space = false;
  for (char c : gone.message) {
    if (c == '\n' || c == '\r') {
      space = true;
      continue;
    }
    if (space) {
      while (!line.empty() && line.back() == ' ') line.pop_back();
      // "...detected\n (at ...)": the line break ends a sentence of the tail.
      if (!line.empty() && c != ' ' && c != '(') line += ';';
      if (!line.empty()) line += ' ';
      space = false;
      if (c == ' ') continue;
    }
    if (c == ' ' && !line.empty() && line.back() == ' ') continue;
    line += c;
  }
  return Say(gone.code == ErrorCode::kNotFound ? kExitNotFound : kExecDeepboxFailed,
             SanitizeLineForTerminal(line));
}

std::string ReadAllStdin() {
  std::string data;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  return data;
}

}  // namespace

int RunSandboxExec(const SandboxExecArgs& args) {
  std::vector<std::string> command = args.command;
  if (!command.empty() && command.front() == "--") command.erase(command.begin());
  if (command.empty()) {
    return Say(kExitUsage, "no command given: deepbox sandbox exec ID -- COMMAND [ARG...]");
  }
  ExecRequest req;
  req.argv = command;
  req.cwd = args.cwd;
  if (!(args.timeout_seconds >= 0) || args.timeout_seconds > 1e9) {
    return Say(kExitUsage, "--timeout: give seconds from 0 to 1000000000");
  }
  req.timeout = std::chrono::milliseconds(static_cast<int64_t>(args.timeout_seconds * 1000));
  for (const auto& e : args.env) {
    size_t eq = e.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Say(kExitUsage, fmt::format("bad --env '{}': use K=V", e));
    }
    req.env[e.substr(0, eq)] = e.substr(eq + 1);
  }
  const bool stdin_tty = ::isatty(STDIN_FILENO) == 1;
  if (args.tty && args.interactive && !stdin_tty) {
    return Say(kExitUsage,
               "the input device is not a TTY: -it needs a terminal on stdin (drop -t to "
               "pipe stdin into the command)");
  }

  RawTerminal raw;
  const bool raw_mode = args.tty && args.interactive && stdin_tty;
  Session session(/*pump_stdin=*/args.interactive, /*tty=*/args.tty, raw_mode ? &raw : nullptr);
  // Before the connection (a k8s port-forward starts threads): signals go to
  // the signal thread, never to a default action in another thread.
  if (auto st = session.Prepare(); !st) return Say(kExecDeepboxFailed, st.error().message);

  // The sandbox's daemon, whichever provider it is of (its id says).
  auto connect_failed = [](const Error& e) {
    if (e.code == ErrorCode::kNotFound) return SayGone(e);
    return Say(e.code == ErrorCode::kInvalidArgument ? kExitUsage : kExecDeepboxFailed, e.message);
  };
  auto provider = ProviderOfSandbox(args.id);
  if (!provider) return Say(kExecDeepboxFailed, provider.error().message);
  auto access = (*provider)->ConnectDaemon(args.id);
  if (!access) return connect_failed(access.error());
  auto& client = access->client;
  session.Connected(client.get());

  // A terminal also needs the session (for resizes) without -i.
  req.stdin_stream = args.interactive || args.tty;
  if (args.tty) {
    req.tty = HostTerminalSize().value_or(TerminalSize{});
    // Programs in the sandbox draw for the terminal that shows them: this one.
    const char* term = std::getenv("TERM");
    if (term != nullptr && *term != '\0' && !req.env.contains("TERM")) req.env["TERM"] = term;
  }
  req.on_started = [&](ExecInput& input) { session.Started(input); };
  // The stdin pump and the signal thread use the input: stopped before it goes.
  req.on_input_closing = [&] { session.Stop(); };
  req.on_exec_id = [&](const std::string& id) { session.Named(id); };

  bool output_closed = false;
  int write_errno = 0;
  auto on_output = [&](OutputStream s, std::string_view data) {
    if (session.abandoned()) return false;  // a stop signal: the stream closes
    if (data.empty()) {
      // A keepalive: a silent command's reader may have left meanwhile (a
      // pipe whose read end is closed polls POLLERR).
      pollfd p{STDOUT_FILENO, 0, 0};
      if (::poll(&p, 1, 0) == 1 && (p.revents & POLLERR) != 0) {
        output_closed = true;
        return false;
      }
      return true;
    }
    const bool to_stdout = s == OutputStream::kStdout;
    auto written =
        WriteAll(to_stdout ? STDOUT_FILENO : STDERR_FILENO, data, to_stdout ? "stdout" : "stderr");
    if (written) return true;
    // The reader went away (`| head`): a normal end, as SIGPIPE would be
    // (SIGPIPE is ignored by main()).
    if (written.error().sys_errno == EPIPE) {
      output_closed = true;
    } else {
      write_errno = written.error().sys_errno;
    }
    return false;
  };
  if (raw_mode) {
    if (auto st = raw.Enter(STDIN_FILENO); !st) return Say(kExecDeepboxFailed, st.error().message);
  }
  auto result = client->ExecStream(req, on_output);
  session.Stop();
  raw.Restore();
  // Stopped by a signal: the command was stopped with it (its `killed` exit
  // arrived, or the stream was closed); deepbox dies of the same signal.
  if (int sig = session.stop_signal(); sig != 0) DieOf(sig, nullptr);
  if (!result && result.error().code == ErrorCode::kUnimplemented && !args.tty) {
    // An older daemon cannot stream stdin: read it all, then run (the
    // command has not started).
    req.stdin_stream = false;
    req.on_started = nullptr;
    req.on_input_closing = nullptr;
    req.stdin_data = ReadAllStdin();
    result = client->ExecStream(req, on_output);
  }
  if (!result) {
    if (output_closed) return kExecOutputClosed;
    if (write_errno != 0) {
      return Say(kExecDeepboxFailed, fmt::format("writing the command's output: {}",
                                                 SyscallError("write", write_errno).message));
    }
    // The sandbox may have expired or been deleted while the command ran.
    if (auto gone = access->why_gone(result.error())) return SayGone(*gone);
    return Say(kExecDeepboxFailed, access->explain(result.error()).message);
  }
  if (std::string oom = OomKillNote(*result); !oom.empty()) Say(0, "the command was " + oom);
  switch (result->kind) {
    case ExitKind::kExited:
      return result->exit_code;
    case ExitKind::kSignaled:
      return 128 + result->signal;
    case ExitKind::kTimedOut:
      return Say(kExecTimedOut, fmt::format("the command timed out (after {} ms) and was killed",
                                            result->duration.count()));
    case ExitKind::kKilled:
      return 128 + SIGKILL;
    case ExitKind::kSpawnFailed: {
      // execve: the command itself (127 not found, 126 cannot run); any other
      // step (chdir to --cwd, ...) is deepbox's request failing.
      const std::string& why = result->error;
      if (!why.starts_with("execve(")) return Say(kExecDeepboxFailed, why);
      return Say(why.find("ENOENT") != std::string::npos ? kExecNotFound : kExecCannotRun, why);
    }
  }
  return kExecDeepboxFailed;
}

}  // namespace deepbox::cli
