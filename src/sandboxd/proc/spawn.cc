#include "sandboxd/proc/spawn.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sandboxd/proc/command.h"
#include "sandboxd/proc/reaper.h"

extern char** environ;

namespace deepbox::sandboxd::proc {
namespace {

constexpr std::string_view kDefaultPath = "/usr/local/bin:/usr/bin:/bin";
constexpr size_t kChildStackSize = 64 * 1024;
constexpr const char* kScriptShell = "/bin/sh";

// Steps of the child, reported back on failure.
enum ChildStep : int {
  kStepNone = 0,
  kStepSetpgid,
  kStepSetsid,
  kStepDup,
  kStepControllingTty,
  kStepCloseRange,
  kStepRlimit,
  kStepChdir,
  kStepSigmask,
  kStepExecve,
};

const char* StepCall(int step) {
  switch (step) {
    case kStepSetpgid:
      return "setpgid";
    case kStepSetsid:
      return "setsid";
    case kStepDup:
      return "dup3";
    case kStepControllingTty:
      return "ioctl(TIOCSCTTY)";
    case kStepCloseRange:
      return "close_range";
    case kStepRlimit:
      return "prlimit(RLIMIT_NOFILE)";
    case kStepChdir:
      return "chdir";
    case kStepSigmask:
      return "rt_sigprocmask";
    case kStepExecve:
      return "execve";
    default:
      return "spawn";
  }
}

// Everything the child reads, prepared by the parent; the child writes only
// `step` and `err`. Shared through CLONE_VM.
struct ChildArgs {
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* const* exec_paths = nullptr;  // candidates for execve, in order
  size_t exec_path_count = 0;
  // {"/bin/sh", <slot for the path>, argv[1], ..., nullptr}: a file execve
  // rejects with ENOEXEC (an executable script without "#!") is run by the
  // shell, as execvp does. The child fills the slot.
  char** script_argv = nullptr;
  const char* cwd = nullptr;  // nullptr: no chdir
  int fds[3] = {-1, -1, -1};  // all >= 3, installed as 0, 1, 2
  bool setpgid = true;
  bool controlling_tty = false;  // setsid() instead of setpgid(), then fd 0 becomes the ctty
  // The kernel's struct rlimit64 for prlimit64(2); set_nofile false: inherit.
  bool set_nofile = false;
  struct {
    uint64_t cur, max;
  } nofile{};
  volatile int step = kStepNone;
  volatile int err = 0;
};

// The kernel's struct sigaction for rt_sigaction(2) (not glibc's).
struct KernelSigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  uint64_t mask;
};

// Runs in the child, on its own stack, sharing the parent's memory. Only raw
// syscalls; no sanitizer instrumentation (its shadow bookkeeping would happen in
// the parent's address space for a stack the sanitizer does not know).
__attribute__((no_sanitize("address", "undefined"))) int ChildMain(void* arg) {
  auto* a = static_cast<ChildArgs*>(arg);
  // Default disposition for every signal: handlers of the daemon must never run
  // here, and ignored signals (SIGPIPE) must not leak into the program. Signals
  // are all blocked (by the parent) while this runs.
  KernelSigaction dfl{SIG_DFL, 0, nullptr, 0};
  for (int sig = 1; sig < 65; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    syscall(SYS_rt_sigaction, sig, &dfl, nullptr, sizeof(uint64_t));
  }
  if (a->controlling_tty) {
    // A new session (and process group, id == pid) without a controlling terminal.
    if (syscall(SYS_setsid) < 0) {
      a->err = errno;
      a->step = kStepSetsid;
      return 127;
    }
  } else if (a->setpgid && syscall(SYS_setpgid, 0, 0) != 0) {
    a->err = errno;
    a->step = kStepSetpgid;
    return 127;
  }
  for (int i = 0; i < 3; ++i) {
    if (syscall(SYS_dup3, a->fds[i], i, 0) < 0) {
      a->err = errno;
      a->step = kStepDup;
      return 127;
    }
  }
  // The terminal on stdin becomes the session's controlling terminal, so that
  // ^C, ^Z and job control reach the foreground group.
  if (a->controlling_tty && syscall(SYS_ioctl, 0, TIOCSCTTY, 0) != 0) {
    a->err = errno;
    a->step = kStepControllingTty;
    return 127;
  }
  // Every descriptor above 2 gets FD_CLOEXEC, so execve closes them all (only the
  // copy of the table in this child is touched).
  if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    a->err = errno;
    a->step = kStepCloseRange;
    return 127;
  }
  if (a->set_nofile && syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, &a->nofile, nullptr) != 0) {
    a->err = errno;
    a->step = kStepRlimit;
    return 127;
  }
  if (a->cwd != nullptr && syscall(SYS_chdir, a->cwd) != 0) {
    a->err = errno;
    a->step = kStepChdir;
    return 127;
  }
  uint64_t empty = 0;
  if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &empty, nullptr, sizeof(empty)) != 0) {
    a->err = errno;
    a->step = kStepSigmask;
    return 127;
  }
  // execvpe semantics: go on after ENOENT/ENOTDIR/ESTALE/ENODEV/ETIMEDOUT;
  // remember EACCES; stop at any other error.
  int err = ENOENT;
  bool saw_eacces = false;
  for (size_t i = 0; i < a->exec_path_count; ++i) {
    syscall(SYS_execve, a->exec_paths[i], a->argv, a->envp);
    err = errno;
    if (err == ENOEXEC) {
      a->script_argv[1] = const_cast<char*>(a->exec_paths[i]);
      syscall(SYS_execve, a->script_argv[0], a->script_argv, a->envp);
      err = ENOEXEC;  // report the program's problem, not the shell's
      break;
    }
    if (err == EACCES) {
      saw_eacces = true;
      continue;
    }
    if (err == ENOENT || err == ENOTDIR || err == ESTALE || err == ENODEV || err == ETIMEDOUT) {
      continue;
    }
    break;
  }
  if (saw_eacces && err != ENOEXEC && err != E2BIG && err != ENOMEM && err != ETXTBSY) {
    err = EACCES;
  }
  a->err = err;
  a->step = kStepExecve;
  return 127;
}

// A per-thread stack for ChildMain, mapped once. CLONE_VFORK suspends the
// calling thread until the child is done with it, so one per thread suffices.
class ChildStack {
 public:
  ~ChildStack() {
    if (base_ != nullptr) munmap(base_, kChildStackSize);
  }
  Result<void*> Top() {
    if (base_ == nullptr) {
      void* p = mmap(nullptr, kChildStackSize, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
      if (p == MAP_FAILED) return MakeSyscallError("mmap", errno, "spawn stack");
      base_ = p;
    }
    return static_cast<char*>(base_) + kChildStackSize;
  }

 private:
  void* base_ = nullptr;
};

int DevNull() {
  // Opened once, O_CLOEXEC, never closed.
  static const int fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  return fd;
}

// SetChildOpenFilesLimit: written once at startup, before any thread spawns.
bool g_child_nofile_set = false;
struct rlimit g_child_nofile {};

// PATH of an environment given as "K=V" strings (nullptr: environ).
std::string_view FindPath(const std::vector<std::string>* env) {
  if (env != nullptr) {
    for (const auto& kv : *env) {
      if (kv.starts_with("PATH=")) return std::string_view(kv).substr(5);
    }
    return kDefaultPath;
  }
  const char* p = getenv("PATH");
  return p != nullptr ? std::string_view(p) : kDefaultPath;
}

std::vector<std::string> ExecCandidates(const std::string& file, std::string_view path) {
  std::vector<std::string> out;
  if (file.find('/') != std::string::npos) {
    out.push_back(file);
    return out;
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view dir = path.substr(start, end - start);
    std::string candidate;
    if (dir.empty()) {
      candidate = file;  // an empty element means the current directory
    } else {
      candidate.reserve(dir.size() + 1 + file.size());
      candidate.append(dir);
      if (dir.back() != '/') candidate.push_back('/');
      candidate.append(file);
    }
    out.push_back(std::move(candidate));
    start = end + 1;
  }
  return out;
}

uint64_t RawSigmask(int how, uint64_t set) {
  uint64_t old = 0;
  syscall(SYS_rt_sigprocmask, how, &set, &old, sizeof(uint64_t));
  return old;
}

}  // namespace

ExitStatus ExitStatusFromSiginfo(int code, int status) {
  ExitStatus s;
  if (code == CLD_EXITED) {
    s.exit_code = status;
  } else {
    s.signal = status;
    s.core_dumped = code == CLD_DUMPED;
  }
  return s;
}

Child::Child(pid_t pid, int pidfd, bool own_group)
    : pid_(pid), pidfd_(pidfd), own_group_(own_group) {}

Child::Child(Child&& other) noexcept
    : pid_(std::exchange(other.pid_, 0)),
      pidfd_(std::move(other.pidfd_)),
      own_group_(other.own_group_),
      reaped_(other.reaped_),
      status_(std::move(other.status_)) {}

Child& Child::operator=(Child&& other) noexcept {
  if (this != &other) {
    KillAndReap();
    pid_ = std::exchange(other.pid_, 0);
    pidfd_ = std::move(other.pidfd_);
    own_group_ = other.own_group_;
    reaped_ = other.reaped_;
    status_ = std::move(other.status_);
  }
  return *this;
}

Child::~Child() { KillAndReap(); }

void Child::KillAndReap() {
  if (pid_ <= 0 || reaped_) return;
  (void)SignalGroup(SIGKILL);
  (void)Wait();
}

Result<std::optional<ExitStatus>> Child::Poll() {
  if (status_) return status_;
  if (pid_ <= 0) return MakeError(ErrorCode::kInvalidArgument, "no child");
  siginfo_t info;
  for (;;) {
    std::memset(&info, 0, sizeof(info));
    if (waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd_.get()), &info,
               WEXITED | WNOHANG | WNOWAIT) == 0) {
      break;
    }
    if (errno != EINTR) return MakeSyscallError("waitid", errno, std::to_string(pid_));
  }
  if (info.si_pid == 0) return std::optional<ExitStatus>();
  status_ = ExitStatusFromSiginfo(info.si_code, info.si_status);
  return status_;
}

Result<ExitStatus> Child::Wait() {
  if (pid_ <= 0) return MakeError(ErrorCode::kInvalidArgument, "no child");
  if (reaped_) return *status_;
  siginfo_t info;
  // Wait without reaping (and without holding the registry mutex), then reap and
  // unregister in one step.
  for (;;) {
    std::memset(&info, 0, sizeof(info));
    if (waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd_.get()), &info,
               WEXITED | WNOWAIT) == 0) {
      break;
    }
    if (errno == EINTR) continue;
    // Not our child any more (someone else reaped it): forget it, never signal it.
    const int err = errno;
    ChildRegistry::Instance().Unregister(pid_);
    reaped_ = true;
    pidfd_.reset();
    status_ = ExitStatus{};
    return MakeSyscallError("waitid", err, std::to_string(pid_));
  }
  status_ = ExitStatusFromSiginfo(info.si_code, info.si_status);
  std::memset(&info, 0, sizeof(info));
  int err = ChildRegistry::Instance().ReapAndUnregister(pidfd_.get(), pid_, WNOHANG, &info);
  reaped_ = true;
  pidfd_.reset();
  if (err != 0) return MakeSyscallError("waitid", err, std::to_string(pid_));
  if (info.si_pid != 0) status_ = ExitStatusFromSiginfo(info.si_code, info.si_status);
  return *status_;
}

Status Child::SignalGroup(int sig) {
  if (pid_ <= 0) return MakeError(ErrorCode::kInvalidArgument, "no child");
  if (reaped_) {
    return MakeError(ErrorCode::kConflict,
                     "process " + std::to_string(pid_) + " has already been reaped");
  }
  if (!own_group_) return Signal(sig);
  // The group id is pinned: its leader is our unreaped child.
  if (::kill(-pid_, sig) != 0 && errno != ESRCH) {
    return MakeSyscallError("kill", errno, fmt::format("-{}", pid_));
  }
  return {};
}

Status Child::Signal(int sig) {
  if (pid_ <= 0) return MakeError(ErrorCode::kInvalidArgument, "no child");
  if (reaped_) {
    return MakeError(ErrorCode::kConflict,
                     "process " + std::to_string(pid_) + " has already been reaped");
  }
  // Raw syscall: glibc 2.36's <sys/pidfd.h> lacks extern "C" for C++.
  if (syscall(SYS_pidfd_send_signal, pidfd_.get(), sig, nullptr, 0) != 0 && errno != ESRCH) {
    return MakeSyscallError("pidfd_send_signal", errno, std::to_string(pid_));
  }
  return {};
}

void Child::Detach() {
  if (pid_ <= 0) return;
  if (!reaped_) ChildRegistry::Instance().Unregister(pid_);
  pid_ = 0;
  pidfd_.reset();
  status_.reset();
  reaped_ = false;
}

Result<Child> Spawn(const SpawnRequest& request) {
  if (request.argv.empty() || request.argv[0].empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "empty argv");
  }
  for (const auto& a : request.argv) {
    if (HasNul(a)) return MakeError(ErrorCode::kInvalidArgument, "argv contains a NUL byte");
  }
  if (HasNul(request.cwd)) return MakeError(ErrorCode::kInvalidArgument, "cwd contains a NUL byte");

  std::vector<char*> argv;
  argv.reserve(request.argv.size() + 1);
  for (const auto& a : request.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  std::vector<char*> envp;
  char* const* envp_ptr = environ;
  if (request.env) {
    envp.reserve(request.env->size() + 1);
    for (const auto& kv : *request.env) {
      if (HasNul(kv) || kv.find('=') == std::string::npos || kv.front() == '=') {
        return MakeError(ErrorCode::kInvalidArgument,
                         "environment entries must be KEY=VALUE without NUL bytes");
      }
      envp.push_back(const_cast<char*>(kv.c_str()));
    }
    envp.push_back(nullptr);
    envp_ptr = envp.data();
  }

  std::vector<std::string> candidates =
      ExecCandidates(request.argv[0], FindPath(request.env ? &*request.env : nullptr));
  std::vector<const char*> candidate_ptrs;
  candidate_ptrs.reserve(candidates.size());
  for (const auto& c : candidates) candidate_ptrs.push_back(c.c_str());

  // Descriptors for 0/1/2 must be >= 3 so that dup3 never gets old == new (which
  // would leave O_CLOEXEC set) and no install clobbers a later source.
  UniqueFd low_copies[3];
  ChildArgs args;
  const int wanted[3] = {request.stdin_fd, request.stdout_fd, request.stderr_fd};
  for (int i = 0; i < 3; ++i) {
    int fd = wanted[i] >= 0 ? wanted[i] : DevNull();
    if (fd < 0) return MakeSyscallError("open", EBADF, "/dev/null");
    if (fd < 3) {
      int copy = fcntl(fd, F_DUPFD_CLOEXEC, 3);
      if (copy < 0) return MakeSyscallError("fcntl", errno, "F_DUPFD_CLOEXEC");
      low_copies[i].reset(copy);
      fd = copy;
    }
    args.fds[i] = fd;
  }
  args.argv = argv.data();
  args.envp = envp_ptr;
  args.exec_paths = candidate_ptrs.data();
  args.exec_path_count = candidate_ptrs.size();
  std::vector<char*> script_argv;
  script_argv.reserve(argv.size() + 1);
  script_argv.push_back(const_cast<char*>(kScriptShell));
  script_argv.push_back(nullptr);  // the path, set by the child
  script_argv.insert(script_argv.end(), argv.begin() + 1, argv.end());  // incl. nullptr
  args.script_argv = script_argv.data();
  args.cwd = request.cwd.empty() ? nullptr : request.cwd.c_str();
  args.setpgid = request.new_process_group;
  args.controlling_tty = request.controlling_tty;
  if (g_child_nofile_set) {
    args.set_nofile = true;
    args.nofile.cur = g_child_nofile.rlim_cur;
    args.nofile.max = g_child_nofile.rlim_max;
  }

  static thread_local ChildStack stack;
  auto top = stack.Top();
  if (!top) return tl::unexpected(top.error());

  int pidfd = -1;
  pid_t pid;
  int clone_errno = 0;
  {
    ChildRegistry& registry = ChildRegistry::Instance();
    auto spawn_lock = registry.LockForSpawn();
    const uint64_t old_mask = RawSigmask(SIG_SETMASK, ~uint64_t{0});
    pid = clone(ChildMain, *top, CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, &args, &pidfd);
    clone_errno = errno;
    if (pid > 0) registry.Register(pid);
    RawSigmask(SIG_SETMASK, old_mask);
  }
  if (pid < 0) return MakeSyscallError("clone", clone_errno);

  Child child(pid, pidfd, request.new_process_group || request.controlling_tty);
  if (args.step != kStepNone) {
    const int step = args.step;
    const int err = args.err;
    (void)child.Wait();  // it has exited with 127 already
    std::string subject;
    if (step == kStepExecve) subject = request.argv[0];
    if (step == kStepChdir) subject = request.cwd;
    return tl::unexpected(SyscallError(StepCall(step), err, subject));
  }
  return child;
}

void IgnoreSigpipe() { ::signal(SIGPIPE, SIG_IGN); }

Status SetChildOpenFilesLimit(uint64_t soft) {
  if (getrlimit(RLIMIT_NOFILE, &g_child_nofile) != 0) {
    return MakeSyscallError("getrlimit", errno, "RLIMIT_NOFILE");
  }
  g_child_nofile.rlim_cur = std::min<rlim_t>(soft, g_child_nofile.rlim_max);
  g_child_nofile_set = true;
  return {};
}

ssize_t WriteNoSigpipe(int fd, const void* data, size_t size) {
  // Block SIGPIPE for this thread; if the write raised one, consume it before
  // unblocking (unless one was already pending, which belongs to someone else).
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  sigset_t old_set;
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  ssize_t n;
  do {
    n = ::write(fd, data, size);
  } while (n < 0 && errno == EINTR);
  const int saved = errno;
  if (n < 0 && saved == EPIPE && !was_pending) {
    const struct timespec zero = {0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  errno = saved;
  return n;
}

Result<Pipe> MakePipe(bool nonblocking_read, bool nonblocking_write) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return MakeSyscallError("pipe2", errno);
  Pipe p{UniqueFd(fds[0]), UniqueFd(fds[1])};
  if (nonblocking_read && fcntl(p.read.get(), F_SETFL, O_NONBLOCK) != 0) {
    return MakeSyscallError("fcntl", errno, "F_SETFL O_NONBLOCK");
  }
  if (nonblocking_write && fcntl(p.write.get(), F_SETFL, O_NONBLOCK) != 0) {
    return MakeSyscallError("fcntl", errno, "F_SETFL O_NONBLOCK");
  }
  return p;
}

}  // namespace deepbox::sandboxd::proc
