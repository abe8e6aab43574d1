#include "local/child.h"

#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <cerrno>

namespace deepbox::local {

std::string_view SetupStepName(SetupStep step) {
  static constexpr std::array<std::string_view, static_cast<size_t>(SetupStep::kCount)> kNames = {
      "prepare", "cgroup",        "clone",       "uid/gid maps",
      "network", "cgroup attach", "child start", "hostname + loopback",
      "mounts",  "pivot_root",    "rlimits",     "capabilities + uid",
      "seccomp", "exec"};
  static_assert(!kNames.back().empty(), "a setup step without a name");
  size_t i = static_cast<size_t>(step);
  return i < kNames.size() ? kNames[i] : "unknown step";
}

std::string_view ChildCallName(ChildCall call) {
  static constexpr std::array<std::string_view, static_cast<size_t>(ChildCall::kCount)> kNames = {
      "(none)",      "read",          "write",     "open",    "close",  "mount",
      "umount2",     "pivot_root",    "mkdir",     "symlink", "chdir",  "sethostname",
      "socket",      "ioctl",         "setsid",    "prctl",   "capset", "setresuid",
      "setresgid",   "setgroups",     "prlimit64", "seccomp", "execve", "dup2",
      "close_range", "mount_setattr", "statfs",    "chmod",   "fchown"};
  static_assert(!kNames.back().empty(), "a child call without a name");
  size_t i = static_cast<size_t>(call);
  return i < kNames.size() ? kNames[i] : "unknown call";
}

int64_t MonotonicNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO; async-signal-safe per POSIX
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

void RestoreDefaultSignals() {
  sigset_t none;
  sigemptyset(&none);
  (void)sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) {
    struct sigaction old {};
    if (sigaction(s, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) {
      (void)sigaction(s, &dfl, nullptr);
    }
  }
}

namespace {
void WriteRecord(int fd, const ChildRecord& rec) {
  const char* p = reinterpret_cast<const char*>(&rec);
  size_t left = sizeof(rec);
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}
}  // namespace

void ChildReporter::Done(SetupStep step) const {
  if (fd_ < 0) return;
  ChildRecord rec{0, static_cast<uint16_t>(step), 0, 0, 0, -1, MonotonicNs()};
  WriteRecord(fd_, rec);
}

void ChildReporter::Fail(SetupStep step, ChildCall call, int err, int index) const {
  if (fd_ >= 0) {
    ChildRecord rec{
        1, static_cast<uint16_t>(step), static_cast<uint16_t>(call), 0, err, index, MonotonicNs()};
    WriteRecord(fd_, rec);
  }
  syscall(SYS_exit_group, 127);
  __builtin_unreachable();
}

}  // namespace deepbox::local
