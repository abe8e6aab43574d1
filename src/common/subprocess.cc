#include "common/subprocess.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
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

std::vector<std::string> BuildEnv(const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    auto eq = entry.find('=');
    std::string_view name = entry.substr(0, eq);
    bool overridden = false;
    for (const auto& [k, v] : extra) {
      if (k == name) overridden = true;
    }
    if (!overridden) env.emplace_back(entry);
  }
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  return env;
}

std::vector<char*> CPointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      own_group_(other.own_group_),
      status_(std::exchange(other.status_, std::nullopt)),
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
  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  int in_pipe[2] = {-1, -1};
  auto close_all = [&] {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], in_pipe[0], in_pipe[1]}) {
      if (fd >= 0) ::close(fd);
    }
  };
  if ((options.capture_stdout && ::pipe2(out_pipe, O_CLOEXEC) != 0) ||
      (options.capture_stderr && ::pipe2(err_pipe, O_CLOEXEC) != 0) ||
      (!options.stdin_data.empty() && ::pipe2(in_pipe, O_CLOEXEC) != 0)) {
    int err = errno;
    close_all();
    return MakeSyscallError("pipe2", err);
  }

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (in_pipe[0] >= 0) {
    posix_spawn_file_actions_adddup2(&actions, in_pipe[0], 0);
  } else {
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  }
  if (out_pipe[1] >= 0) {
    posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  } else {
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  }
  if (err_pipe[1] >= 0) {
    posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  } else {
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (options.new_process_group) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&attr, 0);
  }
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&attr, &empty);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, flags);

  std::vector<std::string> argv_strings = options.argv;
  std::vector<std::string> env_strings = BuildEnv(options.env);
  auto argv = CPointers(argv_strings);
  auto envp = CPointers(env_strings);
  pid_t pid = -1;
  int rc = options.argv[0].find('/') != std::string::npos
               ? ::posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data())
               : ::posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    close_all();
    Error e = SyscallError("posix_spawn", rc, options.argv[0]);
    if (rc == ENOENT) e.code = ErrorCode::kNotFound;
    return tl::unexpected(e);
  }
  Subprocess child;
  child.pid_ = pid;
  child.own_group_ = options.new_process_group;
  child.pidfd_ = PidfdOpen(pid);
  if (out_pipe[1] >= 0) ::close(out_pipe[1]);
  if (err_pipe[1] >= 0) ::close(err_pipe[1]);
  if (in_pipe[0] >= 0) ::close(in_pipe[0]);
  child.stdout_.reset(out_pipe[0]);
  child.stderr_.reset(err_pipe[0]);
  if (in_pipe[1] >= 0) {
    // Small payloads fit the pipe buffer; a child that never reads gets EPIPE-free
    // truncation because we write non-blocking and then close.
    ::fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
    std::string_view data = options.stdin_data;
    while (!data.empty()) {
      ssize_t n = ::write(in_pipe[1], data.data(), data.size());
      if (n <= 0) break;
      data.remove_prefix(static_cast<size_t>(n));
    }
    ::close(in_pipe[1]);
  }
  return child;
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
