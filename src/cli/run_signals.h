// Ctrl-C / SIGTERM / SIGHUP for `deepbox run`, without work in a signal
// handler: Start() blocks the signals in the calling thread (so in every
// thread created after it, which is why it must run before any other thread
// starts) and a watcher thread reads them from a signalfd. On each signal the
// watcher sets interrupted(), makes interrupt_fd() readable (blocking reads
// poll it, see LineReader) and calls the callback on its own thread, where
// heavy work (releasing the sandbox) is allowed.
#pragma once

#include <signal.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/error.h"
#include "common/unique_fd.h"

namespace deepbox::run {

class SignalWatcher {
 public:
  // count: 1 for the first signal, 2 for the second, ...
  using Callback = std::function<void(int signal, int count)>;

  static Result<std::unique_ptr<SignalWatcher>> Start(Callback callback);
  ~SignalWatcher();  // stops the watcher and restores the signal mask
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  bool interrupted() const { return count_.load() > 0; }
  int last_signal() const { return signal_.load(); }
  // Readable once a signal arrived (an eventfd that is never drained).
  int interrupt_fd() const { return event_fd_.get(); }

 private:
  SignalWatcher() = default;
  void Loop();

  Callback callback_;
  UniqueFd signal_fd_, event_fd_, stop_fd_;
  std::atomic<int> count_{0};
  std::atomic<int> signal_{0};
  std::thread thread_;
  bool restore_ = false;
  sigset_t old_mask_{};
};

// Reads lines from a descriptor (a terminal or a pipe), giving up when
// `interrupt_fd` becomes readable. Buffered: keep one reader per descriptor.
class LineReader {
 public:
  LineReader(int fd, int interrupt_fd) : fd_(fd), interrupt_fd_(interrupt_fd) {}
  // A line without its newline; nullopt at EOF (a last unterminated line is
  // returned first) or when interrupted.
  std::optional<std::string> ReadLine();
  // Everything until EOF (nullopt when interrupted).
  std::optional<std::string> ReadAll();
  // One byte (a key, on a terminal in non-canonical mode); nullopt at EOF or
  // when interrupted.
  std::optional<char> ReadByte();
  // Drops what was read ahead and not consumed yet.
  void DiscardBuffered() { buffer_.clear(); }
  bool interrupted() const { return interrupted_; }
  // After the interrupt fd was drained (a cancelled turn of an interactive
  // session): reads work again.
  void ResetInterrupt() { interrupted_ = false; }

 private:
  bool Fill();  // false at EOF / interrupt / error
  int fd_;
  int interrupt_fd_;
  std::string buffer_;
  bool eof_ = false;
  bool interrupted_ = false;
};

}  // namespace deepbox::run
