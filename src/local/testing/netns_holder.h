// A network namespace held by a paused child process, for tests that build
// their own networks (root only: a bare `unshare(CLONE_NEWNET)`).
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "common/error.h"
#include "common/unique_fd.h"
#include "local/netns.h"

namespace deepbox::local::testing {

class NetnsHolder {
 public:
  NetnsHolder() {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(p[0]);
      // Dies with the test, also when a crash skips the destructor.
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || unshare(CLONE_NEWNET) != 0) _exit(1);
      (void)!write(p[1], "r", 1);
      for (;;) pause();
    }
    close(p[1]);
    char c;
    if (read(p[0], &c, 1) == 1) fd_.reset(open(path().c_str(), O_RDONLY | O_CLOEXEC));
    close(p[0]);
  }
  ~NetnsHolder() {
    fd_.reset();
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  NetnsHolder(const NetnsHolder&) = delete;
  NetnsHolder& operator=(const NetnsHolder&) = delete;
  std::string path() const { return "/proc/" + std::to_string(pid_) + "/ns/net"; }
  int fd() const { return fd_.get(); }
  pid_t pid() const { return pid_; }
  bool ok() const { return fd_.valid(); }
  Result<std::string> Ip(const std::string& batch) const {
    return RunInNetns(fd(), {"/usr/sbin/ip", "-batch", "-"}, batch);
  }
  Result<std::string> Sh(const std::string& script) const {
    return RunInNetns(fd(), {"/bin/sh", "-c", script});
  }

 private:
  pid_t pid_ = -1;
  UniqueFd fd_;
};

}  // namespace deepbox::local::testing
