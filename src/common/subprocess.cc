#include "common/subprocess.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

extern char** environ;

namespace deepbox {

namespace {

UniqueFd PidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd >= 0) {
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    return UniqueFd(fd);
  }
#endif
  (void)pid;
  return UniqueFd();
}

std::string_view EnvName(std::string_view entry) { return entry.substr(0, entry.find('=')); }

std::vector<std::string> BuildEnv(const SubprocessOptions& options) {
  std::vector<std::string> env;
  if (!options.replace_environment) {
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      std::string_view entry(*e);
      std::string_view name = EnvName(entry);
      bool dropped = false;
      for (const auto& [k, v] : options.env) dropped = dropped || k == name;
      for (const auto& u : options.unset_env) dropped = dropped || u == name;
      if (!dropped) env.emplace_back(entry);
    }
  }
  for (const auto& [k, v] : options.env) env.push_back(k + "=" + v);
  return env;
}

std::vector<char*> CPointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// What one of fds 0-2 becomes in the child: a dup2 of one of our fds, a file
// opened there, or left as it is (inherited).
struct StreamAction {
  int target = -1;
  int from_fd = -1;
  std::string path;
  int flags = 0;
  bool inherit = false;
};

StreamAction Redirect(int target, const StdioRedirect& r) {
  StreamAction a;
  a.target = target;
  if (r.inherit) {
    a.inherit = true;
  } else if (r.fd >= 0) {
    a.from_fd = r.fd;
  } else {
    a.path = r.path.empty() ? "/dev/null" : r.path;
    a.flags = target == 0 ? O_RDONLY : O_WRONLY | (r.path.empty() ? 0 : O_CREAT | O_TRUNC);
  }
  return a;
}

// The child's fds 0-2; a pipe's end (>= 0) wins over the redirects.
std::vector<StreamAction> ChildStreams(const SubprocessOptions& options, int stdin_pipe,
                                       int stdout_pipe, int stderr_pipe) {
  if (!options.terminal.empty()) {
    // Opened, not dup2'd: a session leader takes it as its controlling terminal.
    return {{.target = 0, .path = options.terminal, .flags = O_RDWR},
            {.target = 1, .from_fd = 0},
            {.target = 2, .from_fd = 0}};
  }
  return {stdin_pipe >= 0 ? StreamAction{.target = 0, .from_fd = stdin_pipe}
                          : Redirect(0, options.stdin_from),
          stdout_pipe >= 0 ? StreamAction{.target = 1, .from_fd = stdout_pipe}
                           : Redirect(1, options.stdout_to),
          stderr_pipe >= 0 ? StreamAction{.target = 2, .from_fd = stderr_pipe}
                           : Redirect(2, options.stderr_to)};
}

// Signals the child starts with at their default action: those a parent
// commonly ignores or handles, which exec would otherwise pass on (ignored).
sigset_t DefaultedSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) sigaddset(&set, sig);
  return set;
}

// posix_spawnp's lookup, done before a fork (the child must not allocate);
// empty when not found.
std::string FindInPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/bin:/usr/bin";
  size_t start = 0;
  for (;;) {
    size_t colon = dirs.find(':', start);
    std::string_view dir =
        dirs.substr(start, colon == std::string_view::npos ? dirs.npos : colon - start);
    std::string candidate = (dir.empty() ? std::string(".") : std::string(dir)) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) return "";
    start = colon + 1;
  }
}

// The calls the forked child can fail in, reported through its error pipe.
constexpr const char* kChildCalls[] = {"setsid",    "setpgid",     "prctl(PR_SET_PDEATHSIG)",
                                       "sigaction", "open",        "dup2",
                                       "chdir",     "sigprocmask", "execve"};
enum ChildCall { kSetsid, kSetpgid, kPrctl, kSigaction, kOpen, kDup2, kChdir, kSigprocmask, kExec };

struct ChildFailure {
  int call = 0;
  int err = 0;
};

// fork + exec, for what posix_spawn cannot do (a parent-death signal). The
// child only makes async-signal-safe calls on what was prepared here.
Result<pid_t> ForkExec(const SubprocessOptions& options, const std::vector<StreamAction>& streams,
                       char* const* argv, char* const* envp) {
  const std::string exe = FindInPath(options.argv[0]);
  if (exe.empty()) return MakeSyscallError("execve", ENOENT, options.argv[0]);
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return MakeSyscallError("pipe2", errno);
  UniqueFd report_read(report[0]), report_write(report[1]);
  const sigset_t defaulted = DefaultedSignals();
  const pid_t parent = ::getpid();
  // No handler of ours may run in the child: every signal stays blocked
  // until the child has reset the handled ones.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = ::fork();
  if (pid == 0) {
    auto fail = [&](ChildCall call) {
      ChildFailure f{call, errno};
      (void)!::write(report_write.get(), &f, sizeof f);
      ::_exit(127);
    };
    if (options.new_session) {
      if (::setsid() < 0) fail(kSetsid);
    } else if (options.new_process_group && ::setpgid(0, 0) != 0) {
      fail(kSetpgid);
    }
    if (options.parent_death_signal != 0) {
      if (::prctl(PR_SET_PDEATHSIG, options.parent_death_signal) != 0) fail(kPrctl);
      if (::getppid() != parent) ::_exit(127);  // it died before the prctl
    }
    for (int sig = 1; sig < NSIG; ++sig) {
      struct sigaction current {};
      if (::sigaction(sig, nullptr, &current) != 0) continue;  // not a signal here
      bool handled = current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN;
      if (!handled && !sigismember(&defaulted, sig)) continue;
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      if (::sigaction(sig, &dfl, nullptr) != 0 && sig != SIGKILL && sig != SIGSTOP) {
        fail(kSigaction);
      }
    }
    for (const StreamAction& s : streams) {
      if (s.inherit) continue;
      int from = s.from_fd;
      if (from < 0) {
        from = ::open(s.path.c_str(), s.flags | O_CLOEXEC, 0600);
        if (from < 0) fail(kOpen);
      }
      if (::dup2(from, s.target) < 0) fail(kDup2);
      if (from == s.target) ::fcntl(from, F_SETFD, 0);  // dup2 onto itself keeps CLOEXEC
    }
    if (!options.cwd.empty() && ::chdir(options.cwd.c_str()) != 0) fail(kChdir);
    sigset_t none;
    sigemptyset(&none);
    if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) fail(kSigprocmask);
    ::execve(exe.c_str(), argv, envp);
    fail(kExec);
  }
  int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return MakeSyscallError("fork", fork_errno);
  report_write.reset();
  ChildFailure failure;
  ssize_t n;
  do {
    n = ::read(report_read.get(), &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return pid;  // closed on exec: it runs
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  Error e = SyscallError(kChildCalls[failure.call], failure.err, options.argv[0]);
  return tl::unexpected(e);
}

Result<pid_t> PosixSpawn(const SubprocessOptions& options, const std::vector<StreamAction>& streams,
                         char* const* argv, char* const* envp) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (const StreamAction& s : streams) {
    if (s.inherit) continue;
    if (s.from_fd >= 0) {
      posix_spawn_file_actions_adddup2(&actions, s.from_fd, s.target);
    } else {
      posix_spawn_file_actions_addopen(&actions, s.target, s.path.c_str(), s.flags, 0600);
    }
  }
  if (!options.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, options.cwd.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (options.new_session) {
    // glibc makes the session before the file actions: a terminal opened on
    // stdin becomes the controlling one.
    flags |= POSIX_SPAWN_SETSID;
  } else if (options.new_process_group) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&attr, 0);
  }
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&attr, &empty);
  sigset_t defaults = DefaultedSignals();
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, flags);
  pid_t pid = -1;
  int rc = options.argv[0].find('/') != std::string::npos
               ? ::posix_spawn(&pid, argv[0], &actions, &attr, argv, envp)
               : ::posix_spawnp(&pid, argv[0], &actions, &attr, argv, envp);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return MakeSyscallError("posix_spawn", rc, options.argv[0]);
  return pid;
}

}  // namespace

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      own_group_(other.own_group_),
      status_(std::exchange(other.status_, std::nullopt)),
      stdin_(std::move(other.stdin_)),
      stdout_(std::move(other.stdout_)),
      stderr_(std::move(other.stderr_)),
      pidfd_(std::move(other.pidfd_)) {}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    if (running()) {
      Signal(SIGKILL);
      Wait();
    }
    pid_ = std::exchange(other.pid_, -1);
    own_group_ = other.own_group_;
    status_ = std::exchange(other.status_, std::nullopt);
    stdin_ = std::move(other.stdin_);
    stdout_ = std::move(other.stdout_);
    stderr_ = std::move(other.stderr_);
    pidfd_ = std::move(other.pidfd_);
  }
  return *this;
}

Subprocess::~Subprocess() {
  if (running()) {
    Signal(SIGKILL);
    Wait();
  }
}

Result<Subprocess> Subprocess::Spawn(const SubprocessOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "no command to run");
  }
  const bool on_terminal = !options.terminal.empty();
  const bool feed_stdin = !on_terminal && (options.stdin_pipe || !options.stdin_data.empty());
  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  int in_pipe[2] = {-1, -1};
  if ((!on_terminal && options.capture_stdout && ::pipe2(out_pipe, O_CLOEXEC) != 0) ||
      (!on_terminal && options.capture_stderr && ::pipe2(err_pipe, O_CLOEXEC) != 0) ||
      (feed_stdin && ::pipe2(in_pipe, O_CLOEXEC) != 0)) {
    int err = errno;
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], in_pipe[0], in_pipe[1]}) {
      if (fd >= 0) ::close(fd);
    }
    return MakeSyscallError("pipe2", err);
  }
  UniqueFd out_read(out_pipe[0]), out_write(out_pipe[1]);
  UniqueFd err_read(err_pipe[0]), err_write(err_pipe[1]);
  UniqueFd in_read(in_pipe[0]), in_write(in_pipe[1]);

  std::vector<StreamAction> streams =
      ChildStreams(options, in_read.get(), out_write.get(), err_write.get());

  std::vector<std::string> argv_strings = options.argv;
  std::vector<std::string> env_strings = BuildEnv(options);
  auto argv = CPointers(argv_strings);
  auto envp = CPointers(env_strings);
  Result<pid_t> pid = options.parent_death_signal != 0
                          ? ForkExec(options, streams, argv.data(), envp.data())
                          : PosixSpawn(options, streams, argv.data(), envp.data());
  if (!pid) return tl::unexpected(pid.error());
  Subprocess child;
  child.pid_ = *pid;
  child.own_group_ = options.new_session || options.new_process_group;
  child.pidfd_ = PidfdOpen(*pid);
  child.stdout_ = std::move(out_read);
  child.stderr_ = std::move(err_read);
  if (options.stdin_pipe) {
    child.stdin_ = std::move(in_write);
  } else if (in_write) {
    // Small payloads fit the pipe buffer; a child that never reads gets EPIPE-free
    // truncation because we write non-blocking and then close.
    ::fcntl(in_write.get(), F_SETFL, O_NONBLOCK);
    std::string_view data = options.stdin_data;
    while (!data.empty()) {
      ssize_t n = ::write(in_write.get(), data.data(), data.size());
      if (n <= 0) break;
      data.remove_prefix(static_cast<size_t>(n));
    }
  }
  return child;
}

pid_t Subprocess::Release() {
  pidfd_.reset();
  status_.reset();
  return std::exchange(pid_, -1);
}

std::optional<int> Subprocess::TryWait() {
  if (status_) return status_;
  if (pid_ <= 0) return std::nullopt;
  int st = 0;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    status_ = st;
    pidfd_.reset();
  } else if (r < 0 && errno == ECHILD) {
    status_ = 0;  // reaped elsewhere
  }
  return status_;
}

bool Subprocess::HasExited() const {
  if (pid_ <= 0 || status_) return true;
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    return errno == ECHILD;
  }
  return info.si_pid == pid_;
}

int Subprocess::Wait() {
  if (status_) return *status_;
  if (pid_ <= 0) return 0;
  int st = 0;
  for (;;) {
    pid_t r = ::waitpid(pid_, &st, 0);
    if (r == pid_) break;
    if (r < 0 && errno != EINTR) {
      st = 0;
      break;
    }
  }
  status_ = st;
  pidfd_.reset();
  return st;
}

void Subprocess::Signal(int sig) const {
  if (pid_ <= 0 || status_) return;
  if (own_group_) {
    if (::kill(-pid_, sig) == 0) return;
  }
  ::kill(pid_, sig);
}

int Subprocess::Terminate(std::chrono::milliseconds grace) {
  if (!running()) return status_.value_or(0);
  Signal(SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    if (TryWait()) break;
    if (pidfd_.valid()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{pidfd_.get(), POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count())));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (!TryWait()) {
    Signal(SIGKILL);
    Wait();
  } else if (own_group_) {
    ::kill(-pid_, SIGKILL);  // stragglers left in the group
  }
  return *status_;
}

bool CommandResult::exited_ok() const {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

Result<CommandResult> RunCommand(const SubprocessOptions& options,
                                 std::chrono::milliseconds timeout, size_t max_output) {
  SubprocessOptions opts = options;
  opts.capture_stdout = true;
  opts.capture_stderr = true;
  auto child = Subprocess::Spawn(opts);
  if (!child) return tl::unexpected(child.error());
  CommandResult result;
  UniqueFd out = child->TakeStdout();
  UniqueFd err = child->TakeStderr();
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[8192];
  while (out.valid() || err.valid()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      child->Signal(SIGKILL);
      child->Wait();
      return MakeError(ErrorCode::kTimeout, fmt::format("'{}' did not finish within {} ms",
                                                        opts.argv[0], timeout.count()));
    }
    pollfd fds[2];
    int n = 0;
    int out_idx = -1, err_idx = -1;
    if (out.valid()) {
      out_idx = n;
      fds[n++] = {out.get(), POLLIN, 0};
    }
    if (err.valid()) {
      err_idx = n;
      fds[n++] = {err.get(), POLLIN, 0};
    }
    int pr = ::poll(fds, n, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (pr < 0 && errno != EINTR) return MakeSyscallError("poll", errno);
    if (pr <= 0) continue;
    auto drain = [&](int idx, UniqueFd& fd, std::string& sink) {
      if (idx < 0 || (fds[idx].revents & (POLLIN | POLLHUP | POLLERR)) == 0) return;
      ssize_t r = ::read(fd.get(), buf, sizeof buf);
      if (r <= 0) {
        if (r < 0 && errno == EINTR) return;
        fd.reset();
        return;
      }
      size_t room = max_output > sink.size() ? max_output - sink.size() : 0;
      sink.append(buf, std::min(room, static_cast<size_t>(r)));
    };
    drain(out_idx, out, result.out);
    drain(err_idx, err, result.err);
  }
  // Output closed: the child is exiting (or passed its pipes on; bound the wait).
  while (!child->TryWait()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      child->Signal(SIGKILL);
      child->Wait();
      return MakeError(ErrorCode::kTimeout, fmt::format("'{}' did not exit within {} ms",
                                                        opts.argv[0], timeout.count()));
    }
    if (child->pidfd() >= 0) {
      pollfd p{child->pidfd(), POLLIN, 0};
      ::poll(&p, 1, 100);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  result.wait_status = *child->TryWait();
  return result;
}

std::string DescribeWaitStatus(int st) {
  if (WIFEXITED(st)) return fmt::format("exited with status {}", WEXITSTATUS(st));
  if (WIFSIGNALED(st)) {
    return fmt::format("killed by signal {} ({})", WTERMSIG(st), ::strsignal(WTERMSIG(st)));
  }
  return fmt::format("ended with wait status {}", st);
}

}  // namespace deepbox
