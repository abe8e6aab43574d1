#include "sandboxd/proc/runner.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <vector>

#include "sandboxd/proc/output_buffer.h"

namespace deepbox::sandboxd::proc {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kRunnerReadChunk = 64 * 1024;

// What the loop does with output; shared by Run and RunStreaming.
struct Hooks {
  // Return false to cancel.
  std::function<bool(StreamKind, std::string_view)> output;
  // End of a stream (EOF or closed at the drain deadline), unless cancelled.
  // Return false to cancel.
  std::function<bool(StreamKind)> end_of_stream;
  std::function<bool()> idle;
  std::chrono::milliseconds idle_interval{0};
  int cancel_fd = -1;
  std::function<void(UniqueFd, pid_t)> started;  // interactive stdin, see StreamCallbacks
};

struct CoreResult {
  Outcome outcome;
  uint64_t stdout_total = 0;
  uint64_t stderr_total = 0;
  bool drain_killed = false;
  std::chrono::nanoseconds duration{0};
  pid_t pid = 0;
};

class Execution {
 public:
  Execution(const CommandSpec& spec, const Hooks& hooks) : spec_(spec), hooks_(hooks) {}

  CoreResult Run() {
    start_ = Clock::now();
    const bool interactive = static_cast<bool>(hooks_.started);
    auto started =
        StartCommand(spec_, interactive || spec_.stdin_data ? StdinMode::kPipe : StdinMode::kNull);
    if (!started) {
      result_.outcome = SpawnFailed{started.error()};
      result_.duration = Clock::now() - start_;
      return std::move(result_);
    }
    child_ = std::move(started->child);
    in_ = std::move(started->stdin_fd);
    out_ = std::move(started->stdout_fd);
    err_ = std::move(started->stderr_fd);
    result_.pid = child_.pid();
    if (interactive) {
      hooks_.started(std::move(in_), child_.pid());
    } else {
      if (spec_.stdin_data) stdin_left_ = *spec_.stdin_data;
      if (in_ && stdin_left_.empty()) in_.reset();  // EOF right away
    }
    last_activity_ = start_;
    buf_.resize(kRunnerReadChunk);
    Loop();
    Finish();
    return std::move(result_);
  }

 private:
  enum class Stop { kNone, kTimeout, kCancel };

  void Loop() {
    const bool has_timeout = spec_.timeout.count() > 0;
    const Clock::time_point deadline = start_ + spec_.timeout;
    const bool idle_ticks = hooks_.idle && hooks_.idle_interval.count() > 0;
    for (;;) {
      if (!out_ && !err_ && status_) return;
      Clock::time_point now = Clock::now();

      // Deadlines.
      if (!status_ && stop_ == Stop::kNone && has_timeout && now >= deadline) {
        Terminate(Stop::kTimeout, now);
      }
      if (!status_ && kill_at_ && now >= *kill_at_) {
        (void)child_.SignalGroup(SIGKILL);
        sigkilled_ = true;
        kill_at_.reset();
      }
      if (status_ && drain_at_ && now >= *drain_at_) {
        // Other members of the group still hold the pipes: kill them, take what
        // is already buffered, stop.
        (void)child_.SignalGroup(SIGKILL);
        result_.drain_killed = true;
        DrainAvailable(out_, StreamKind::kStdout);
        DrainAvailable(err_, StreamKind::kStderr);
        return;
      }
      if (idle_ticks && delivering_ && now - last_activity_ >= hooks_.idle_interval) {
        last_activity_ = now;
        if (!hooks_.idle()) Cancel(now);
        continue;
      }

      // Wait.
      pollfd fds[5];
      int n = 0;
      int i_out = -1, i_err = -1, i_in = -1, i_pid = -1, i_cancel = -1;
      if (out_) {
        i_out = n;
        fds[n++] = {out_.get(), POLLIN, 0};
      }
      if (err_) {
        i_err = n;
        fds[n++] = {err_.get(), POLLIN, 0};
      }
      if (in_) {
        i_in = n;
        fds[n++] = {in_.get(), POLLOUT, 0};
      }
      if (!status_) {
        i_pid = n;
        fds[n++] = {child_.pidfd(), POLLIN, 0};
      }
      if (hooks_.cancel_fd >= 0 && delivering_ && stop_ == Stop::kNone) {
        i_cancel = n;
        fds[n++] = {hooks_.cancel_fd, POLLIN, 0};
      }
      std::optional<Clock::time_point> wake;
      auto consider = [&wake](Clock::time_point t) {
        if (!wake || t < *wake) wake = t;
      };
      if (!status_ && stop_ == Stop::kNone && has_timeout) consider(deadline);
      if (!status_ && kill_at_) consider(*kill_at_);
      if (status_ && drain_at_) consider(*drain_at_);
      if (idle_ticks && delivering_) consider(last_activity_ + hooks_.idle_interval);
      timespec ts{};
      if (wake) {
        auto left = std::max(Clock::duration::zero(), *wake - now);
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
        ts.tv_sec = static_cast<time_t>(ns / 1000000000);
        ts.tv_nsec = static_cast<long>(ns % 1000000000);
      }
      int rc = ppoll(fds, static_cast<nfds_t>(n), wake ? &ts : nullptr, nullptr);
      if (rc < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        // Cannot wait any more (EFAULT/EINVAL/ENOMEM): end the run hard.
        (void)child_.SignalGroup(SIGKILL);
        out_.reset();
        err_.reset();
        in_.reset();
        if (!status_) status_ = child_.Wait().value_or(ExitStatus{});
        return;
      }
      if (rc == 0) continue;
      now = Clock::now();
      constexpr short kReadable = POLLIN | POLLHUP | POLLERR;
      if (i_out >= 0 && (fds[i_out].revents & kReadable) != 0) {
        ReadOnce(out_, StreamKind::kStdout, now);
      }
      if (i_err >= 0 && (fds[i_err].revents & kReadable) != 0) {
        ReadOnce(err_, StreamKind::kStderr, now);
      }
      if (i_in >= 0 && in_ && (fds[i_in].revents & (POLLOUT | POLLHUP | POLLERR)) != 0) {
        WriteStdin();
      }
      if (i_pid >= 0 && (fds[i_pid].revents & (POLLIN | POLLHUP)) != 0) OnChildExit(now);
      if (i_cancel >= 0 && (fds[i_cancel].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        Cancel(now);
      }
    }
  }

  void Terminate(Stop why, Clock::time_point now) {
    stop_ = why;
    in_.reset();
    if (spec_.kill_grace.count() == 0) {
      (void)child_.SignalGroup(SIGKILL);
      sigkilled_ = true;
    } else {
      (void)child_.SignalGroup(SIGTERM);
      kill_at_ = now + spec_.kill_grace;
    }
  }

  void Cancel(Clock::time_point now) {
    if (!delivering_) return;
    delivering_ = false;
    out_.reset();
    err_.reset();
    in_.reset();
    if (!status_) {
      Terminate(Stop::kCancel, now);
    } else {
      (void)child_.SignalGroup(SIGKILL);  // the child is gone; so goes the rest
    }
  }

  void OnChildExit(Clock::time_point now) {
    auto polled = child_.Poll();
    if (polled && !*polled) return;  // spurious
    status_ = polled ? **polled : ExitStatus{};
    kill_at_.reset();
    // After a timeout or a cancel, nothing of the group may survive.
    if (stop_ != Stop::kNone) (void)child_.SignalGroup(SIGKILL);
    if (out_ || err_) drain_at_ = now + spec_.drain_timeout;
  }

  void ReadOnce(UniqueFd& fd, StreamKind kind, Clock::time_point now) {
    ssize_t n = ::read(fd.get(), buf_.data(), buf_.size());
    if (n > 0) {
      Deliver(kind, std::string_view(buf_.data(), static_cast<size_t>(n)), now);
      return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    CloseStream(fd, kind);  // EOF (or a read error, which ends the stream too)
  }

  // Reads what the pipe already holds (bounded), then closes it.
  void DrainAvailable(UniqueFd& fd, StreamKind kind) {
    for (int i = 0; fd && i < 64; ++i) {
      ssize_t n = ::read(fd.get(), buf_.data(), buf_.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      Deliver(kind, std::string_view(buf_.data(), static_cast<size_t>(n)), Clock::now());
    }
    if (fd) CloseStream(fd, kind);
  }

  void Deliver(StreamKind kind, std::string_view bytes, Clock::time_point now) {
    (kind == StreamKind::kStdout ? result_.stdout_total : result_.stderr_total) += bytes.size();
    last_activity_ = now;
    if (delivering_ && !hooks_.output(kind, bytes)) Cancel(now);
  }

  void CloseStream(UniqueFd& fd, StreamKind kind) {
    fd.reset();
    if (delivering_ && hooks_.end_of_stream && !hooks_.end_of_stream(kind)) {
      Cancel(Clock::now());
    }
  }

  void WriteStdin() {
    const size_t n = std::min(stdin_left_.size(), kRunnerReadChunk);
    ssize_t w = WriteNoSigpipe(in_.get(), stdin_left_.data(), n);
    if (w > 0) {
      stdin_left_.remove_prefix(static_cast<size_t>(w));
      if (stdin_left_.empty()) in_.reset();
    } else if (w < 0 && errno != EAGAIN) {
      in_.reset();  // EPIPE: the program does not read its stdin (any more)
    }
  }

  void Finish() {
    in_.reset();
    out_.reset();
    err_.reset();
    auto reaped = child_.Wait();
    const ExitStatus status = status_ ? *status_ : reaped.value_or(ExitStatus{});
    switch (stop_) {
      case Stop::kTimeout:
        result_.outcome = TimedOut{spec_.timeout, sigkilled_, status};
        break;
      case Stop::kCancel:
        result_.outcome = Killed{sigkilled_, status};
        break;
      case Stop::kNone:
        result_.outcome = OutcomeFromStatus(status);
        break;
    }
    result_.duration = Clock::now() - start_;
  }

  const CommandSpec& spec_;
  const Hooks& hooks_;
  CoreResult result_;
  Clock::time_point start_;
  Child child_;
  UniqueFd in_, out_, err_;
  std::string_view stdin_left_;
  std::vector<char> buf_;
  std::optional<ExitStatus> status_;
  Stop stop_ = Stop::kNone;
  bool sigkilled_ = false;
  bool delivering_ = true;
  std::optional<Clock::time_point> kill_at_;
  std::optional<Clock::time_point> drain_at_;
  Clock::time_point last_activity_;
};

}  // namespace

std::string_view StreamKindName(StreamKind kind) {
  return kind == StreamKind::kStdout ? "stdout" : "stderr";
}

RunResult Run(const CommandSpec& spec, int cancel_fd) {
  CappedBuffer out(spec.max_stdout_bytes);
  CappedBuffer err(spec.max_stderr_bytes);
  CappedBuffer combined(spec.max_combined_bytes);
  Hooks hooks;
  hooks.output = [&](StreamKind kind, std::string_view bytes) {
    (kind == StreamKind::kStdout ? out : err).Append(bytes);
    combined.Append(bytes);
    return true;
  };
  hooks.cancel_fd = cancel_fd;
  CoreResult core = Execution(spec, hooks).Run();
  RunResult r;
  r.outcome = std::move(core.outcome);
  r.stdout_truncated = out.truncated();
  r.stderr_truncated = err.truncated();
  r.combined_truncated = combined.truncated();
  r.stdout_data = out.Take();
  r.stderr_data = err.Take();
  r.combined = combined.Take();
  r.stdout_total = core.stdout_total;
  r.stderr_total = core.stderr_total;
  r.drain_killed = core.drain_killed;
  r.duration = core.duration;
  r.pid = core.pid;
  return r;
}

StreamResult RunStreaming(const CommandSpec& spec, const StreamCallbacks& callbacks) {
  Utf8Aligner aligners[2];
  Hooks hooks;
  hooks.output = [&](StreamKind kind, std::string_view bytes) {
    if (!callbacks.on_output) return true;
    if (callbacks.utf8_align) {
      bytes = aligners[static_cast<int>(kind)].Push(bytes);
      if (bytes.empty()) return true;
    }
    return callbacks.on_output(kind, bytes);
  };
  hooks.end_of_stream = [&](StreamKind kind) {
    if (!callbacks.on_output || !callbacks.utf8_align) return true;
    std::string rest = aligners[static_cast<int>(kind)].Flush();
    return rest.empty() || callbacks.on_output(kind, rest);
  };
  hooks.idle = callbacks.on_idle;
  hooks.idle_interval = callbacks.idle_interval;
  hooks.cancel_fd = callbacks.cancel_fd;
  hooks.started = callbacks.on_started;
  CoreResult core = Execution(spec, hooks).Run();
  StreamResult r;
  r.outcome = std::move(core.outcome);
  r.stdout_total = core.stdout_total;
  r.stderr_total = core.stderr_total;
  r.drain_killed = core.drain_killed;
  r.duration = core.duration;
  r.pid = core.pid;
  return r;
}

}  // namespace deepbox::sandboxd::proc
