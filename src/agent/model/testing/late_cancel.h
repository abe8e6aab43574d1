// Test support: a Ctrl-C that arrives while a model call waits on a silent
// server. Cancelling from inside a stream callback is not enough to test that
// (the client checks the flag right after the callback); this sets the flag
// and makes the fd readable from another thread once the calling thread is
// asleep in the kernel (waiting for bytes that never come).
#pragma once

#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>

namespace deepbox::agent::testing {

class LateCancel {
 public:
  LateCancel() : fd_(::eventfd(0, EFD_CLOEXEC)) {}
  ~LateCancel() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  LateCancel(const LateCancel&) = delete;
  LateCancel& operator=(const LateCancel&) = delete;

  const std::atomic<bool>* flag() const { return &cancel_; }
  int fd() const { return fd_; }

  // Call on the thread that will block (e.g. from on_text_delta): from then
  // on, the first time that thread sleeps in the kernel, cancel.
  void ArmForThisThread() {
    if (thread_.joinable()) return;
    pid_t tid = static_cast<pid_t>(::syscall(SYS_gettid));
    thread_ = std::thread([this, tid] {
      auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!stop_ && std::chrono::steady_clock::now() < give_up) {
        if (Sleeping(tid)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      Fire();
    });
  }
  void Fire() {
    cancel_ = true;
    uint64_t one = 1;
    (void)!::write(fd_, &one, sizeof one);
  }

 private:
  // State 'S' in /proc/self/task/<tid>/stat: an interruptible sleep (poll).
  static bool Sleeping(pid_t tid) {
    std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'S';
  }

  int fd_;
  std::atomic<bool> cancel_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace deepbox::agent::testing
