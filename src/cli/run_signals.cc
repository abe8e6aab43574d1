#include "cli/run_signals.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace deepbox::run {

namespace {

sigset_t WatchedSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

void Signal(int fd) {
  uint64_t one = 1;
  while (::write(fd, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

}  // namespace

Result<std::unique_ptr<SignalWatcher>> SignalWatcher::Start(Callback callback) {
  std::unique_ptr<SignalWatcher> w(new SignalWatcher());
  w->callback_ = std::move(callback);
  sigset_t set = WatchedSignals();
  if (int rc = pthread_sigmask(SIG_BLOCK, &set, &w->old_mask_); rc != 0) {
    return MakeSyscallError("pthread_sigmask", rc);
  }
  w->restore_ = true;
  w->signal_fd_.reset(signalfd(-1, &set, SFD_CLOEXEC));
  if (!w->signal_fd_) return MakeSyscallError("signalfd", errno);
  w->event_fd_.reset(eventfd(0, EFD_CLOEXEC));
  w->stop_fd_.reset(eventfd(0, EFD_CLOEXEC));
  if (!w->event_fd_ || !w->stop_fd_) return MakeSyscallError("eventfd", errno);
  w->thread_ = std::thread([raw = w.get()] { raw->Loop(); });
  return w;
}

SignalWatcher::~SignalWatcher() {
  if (thread_.joinable()) {
    Signal(stop_fd_.get());
    thread_.join();
  }
  if (restore_) {
    // Signals that arrived after the watcher stopped are still pending: they
    // take effect (default action) when unblocked, which is what a late
    // Ctrl-C should do.
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
}

void SignalWatcher::Loop() {
  for (;;) {
    struct pollfd fds[2] = {{signal_fd_.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    int rc = poll(fds, 2, -1);
    if (rc < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    struct signalfd_siginfo info;
    ssize_t n = ::read(signal_fd_.get(), &info, sizeof info);
    if (n != static_cast<ssize_t>(sizeof info)) continue;
    signal_.store(static_cast<int>(info.ssi_signo));
    int count = count_.fetch_add(1) + 1;
    Signal(event_fd_.get());
    if (callback_) callback_(static_cast<int>(info.ssi_signo), count);
  }
}

bool LineReader::Fill() {
  if (eof_ || interrupted_) return false;
  for (;;) {
    struct pollfd fds[2] = {{fd_, POLLIN, 0}, {interrupt_fd_, POLLIN, 0}};
    int nfds = interrupt_fd_ >= 0 ? 2 : 1;
    int rc = poll(fds, nfds, -1);
    if (rc < 0) {
      if (errno == EINTR) continue;
      eof_ = true;
      return false;
    }
    if (nfds == 2 && fds[1].revents != 0) {
      interrupted_ = true;
      return false;
    }
    if (fds[0].revents == 0) continue;
    char buf[4096];
    ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    buffer_.append(buf, static_cast<size_t>(n));
    return true;
  }
}

std::optional<std::string> LineReader::ReadLine() {
  for (;;) {
    if (size_t nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return line;
    }
    if (!Fill()) {
      if (interrupted_ || buffer_.empty()) return std::nullopt;
      std::string line = std::move(buffer_);
      buffer_.clear();
      return line;
    }
  }
}

std::optional<char> LineReader::ReadByte() {
  if (buffer_.empty() && !Fill()) return std::nullopt;
  char c = buffer_.front();
  buffer_.erase(0, 1);
  return c;
}

std::optional<std::string> LineReader::ReadAll() {
  while (Fill()) {
  }
  if (interrupted_) return std::nullopt;
  std::string all = std::move(buffer_);
  buffer_.clear();
  return all;
}

}  // namespace deepbox::run
