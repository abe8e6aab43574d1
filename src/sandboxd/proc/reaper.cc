#include "sandboxd/proc/reaper.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace deepbox::sandboxd::proc {
namespace {

using Clock = std::chrono::steady_clock;

// The eventfd the SIGCHLD handler writes to. Created once and never closed, so
// a handler running late on another thread can never write to a reused fd.
std::atomic<int> g_wake_fd{-1};
// The SIGCHLD disposition the running Reaper replaced (for chaining).
struct sigaction g_previous_sigchld;
std::mutex g_reaper_mu;
bool g_reaper_running = false;

void Poke(int fd) {
  if (fd < 0) return;
  const uint64_t one = 1;
  ssize_t n;
  do {
    n = ::write(fd, &one, sizeof(one));
  } while (n < 0 && errno == EINTR);
}

void SigchldHandler(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  Poke(g_wake_fd.load(std::memory_order_relaxed));
  const struct sigaction& prev = g_previous_sigchld;
  if ((prev.sa_flags & SA_SIGINFO) != 0) {
    if (prev.sa_sigaction != nullptr) prev.sa_sigaction(sig, info, context);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN &&
             prev.sa_handler != nullptr) {
    prev.sa_handler(sig);
  }
  errno = saved_errno;
}

// Reads a small /proc file into buf; returns its size or -1.
ssize_t ReadSmallFile(const char* path, char* buf, size_t size) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t got = 0;
  while (got < size) {
    ssize_t n = ::read(fd, buf + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return static_cast<ssize_t>(got);
}

std::optional<pid_t> ParsePid(std::string_view s) {
  pid_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v <= 0) return std::nullopt;
  return v;
}

// State and ppid from /proc/<pid>/stat ("pid (comm) S ppid ...").
bool StatOf(pid_t pid, char* state, pid_t* ppid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  char buf[512];
  ssize_t n = ReadSmallFile(path, buf, sizeof(buf) - 1);
  if (n <= 0) return false;
  std::string_view s(buf, static_cast<size_t>(n));
  size_t close_paren = s.rfind(')');
  if (close_paren == std::string_view::npos || close_paren + 4 >= s.size()) return false;
  s.remove_prefix(close_paren + 2);  // "S ppid ..."
  *state = s[0];
  s.remove_prefix(2);
  size_t space = s.find(' ');
  auto parsed = ParsePid(s.substr(0, space));
  if (!parsed) return false;
  *ppid = *parsed;
  return true;
}

// The zombie children of this process.
std::vector<pid_t> ZombieChildren() {
  const pid_t self = getpid();
  std::vector<pid_t> candidates;
  bool have_children_files = false;
  // Fast path: /proc/self/task/<tid>/children (CONFIG_PROC_CHILDREN).
  if (DIR* tasks = opendir("/proc/self/task")) {
    while (dirent* e = readdir(tasks)) {
      if (!ParsePid(e->d_name)) continue;
      std::string path = std::string("/proc/self/task/") + e->d_name + "/children";
      char buf[4096];
      ssize_t n = ReadSmallFile(path.c_str(), buf, sizeof(buf));
      if (n < 0) break;  // no CONFIG_PROC_CHILDREN (or the thread is gone)
      have_children_files = true;
      std::string_view s(buf, static_cast<size_t>(n));
      while (!s.empty()) {
        size_t sp = s.find(' ');
        if (auto pid = ParsePid(s.substr(0, sp))) candidates.push_back(*pid);
        if (sp == std::string_view::npos) break;
        s.remove_prefix(sp + 1);
      }
      if (n == static_cast<ssize_t>(sizeof(buf))) have_children_files = false;  // truncated
    }
    closedir(tasks);
  }
  if (!have_children_files) {
    candidates.clear();
    if (DIR* proc = opendir("/proc")) {
      while (dirent* e = readdir(proc)) {
        if (auto pid = ParsePid(e->d_name)) candidates.push_back(*pid);
      }
      closedir(proc);
    }
  }
  std::vector<pid_t> zombies;
  for (pid_t pid : candidates) {
    char state = 0;
    pid_t ppid = 0;
    if (StatOf(pid, &state, &ppid) && ppid == self && state == 'Z') zombies.push_back(pid);
  }
  return zombies;
}

// One pass. *blocked: an owned zombie hid the others and no full scan was made.
size_t ReapPass(bool full_scan, bool* blocked) {
  ChildRegistry& registry = ChildRegistry::Instance();
  size_t reaped = 0;
  *blocked = false;
  for (int guard = 0; guard < 100000; ++guard) {
    siginfo_t info;
    std::memset(&info, 0, sizeof(info));
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
      if (errno == EINTR) continue;
      return reaped;  // ECHILD: no children at all
    }
    if (info.si_pid == 0) return reaped;  // no exited child
    if (registry.ReapIfUnregistered(info.si_pid)) {
      ++reaped;
      continue;
    }
    if (!registry.IsRegistered(info.si_pid)) continue;  // its owner just reaped it
    *blocked = true;
    break;
  }
  if (!*blocked || !full_scan) return reaped;
  *blocked = false;
  for (pid_t pid : ZombieChildren()) {
    if (!registry.IsRegistered(pid) && registry.ReapIfUnregistered(pid)) ++reaped;
  }
  return reaped;
}

}  // namespace

ChildRegistry& ChildRegistry::Instance() {
  // Never destroyed: Child objects may outlive static destruction order.
  static ChildRegistry* registry = new ChildRegistry();
  return *registry;
}

void ChildRegistry::Register(pid_t pid) {
  std::lock_guard<std::mutex> lock(mu_);
  pids_.insert(pid);
}

void ChildRegistry::Unregister(pid_t pid) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pids_.erase(pid);
  }
  Poke(g_wake_fd.load());  // a running reaper may now reap it
}

bool ChildRegistry::IsRegistered(pid_t pid) const {
  std::lock_guard<std::mutex> lock(mu_);
  return pids_.count(pid) != 0;
}

size_t ChildRegistry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pids_.size();
}

int ChildRegistry::ReapAndUnregister(int pidfd, pid_t pid, int extra_flags, siginfo_t* info) {
  std::lock_guard<std::mutex> lock(mu_);
  int rc;
  do {
    rc = waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), info,
                WEXITED | extra_flags);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    if (err == ECHILD) pids_.erase(pid);  // gone: not ours any more
    return err;
  }
  if ((extra_flags & WNOWAIT) == 0 && info->si_pid != 0) pids_.erase(pid);
  return 0;
}

bool ChildRegistry::ReapIfUnregistered(pid_t pid) {
  // Exclusive: no spawn is between clone() and Register().
  std::unique_lock<std::shared_mutex> spawn_lock(spawn_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  if (pids_.count(pid) != 0) return false;
  siginfo_t info;
  int rc;
  do {
    std::memset(&info, 0, sizeof(info));
    rc = waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG);
  } while (rc != 0 && errno == EINTR);
  return rc == 0 && info.si_pid == pid;
}

Status BecomeSubreaper() {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
    return MakeSyscallError("prctl", errno, "PR_SET_CHILD_SUBREAPER");
  }
  return {};
}

bool IsReaperOfOrphans() {
  if (getpid() == 1) return true;
  int value = 0;
  return prctl(PR_GET_CHILD_SUBREAPER, &value, 0, 0, 0) == 0 && value != 0;
}

size_t ReapOrphansOnce(bool allow_full_scan) {
  bool blocked = false;
  return ReapPass(allow_full_scan, &blocked);
}

Result<std::unique_ptr<Reaper>> Reaper::Start(Options options) {
  std::lock_guard<std::mutex> lock(g_reaper_mu);
  if (g_reaper_running) return MakeError(ErrorCode::kConflict, "a Reaper is already running");
  if (g_wake_fd.load() < 0) {
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) return MakeSyscallError("eventfd", errno);
    g_wake_fd.store(fd);
  }
  int stop = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop < 0) return MakeSyscallError("eventfd", errno);
  int wake = fcntl(g_wake_fd.load(), F_DUPFD_CLOEXEC, 0);
  if (wake < 0) {
    ::close(stop);
    return MakeSyscallError("fcntl", errno, "F_DUPFD_CLOEXEC");
  }
  std::unique_ptr<Reaper> reaper(new Reaper(options, UniqueFd(wake), UniqueFd(stop)));

  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_sigaction = SigchldHandler;
  action.sa_flags = SA_SIGINFO | SA_RESTART | SA_NOCLDSTOP;
  sigemptyset(&action.sa_mask);
  struct sigaction previous;
  if (sigaction(SIGCHLD, nullptr, &previous) != 0) return MakeSyscallError("sigaction", errno);
  if (previous.sa_handler == SIG_IGN && (previous.sa_flags & SA_SIGINFO) == 0) {
    // SIG_IGN means "auto-reap"; not something to chain to.
    previous.sa_handler = SIG_DFL;
  }
  g_previous_sigchld = previous;
  reaper->previous_ = previous;
  if (sigaction(SIGCHLD, &action, nullptr) != 0) return MakeSyscallError("sigaction", errno);
  g_reaper_running = true;
  reaper->thread_ = StartQuietThread([r = reaper.get()] { r->Loop(); });
  reaper->Nudge();  // reap what is already there
  return reaper;
}

Reaper::Reaper(Options options, UniqueFd wake, UniqueFd stop)
    : options_(options), wake_fd_(std::move(wake)), stop_fd_(std::move(stop)) {}

Reaper::~Reaper() {
  Poke(stop_fd_.get());
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(g_reaper_mu);
  sigaction(SIGCHLD, &previous_, nullptr);
  g_reaper_running = false;
}

void Reaper::Nudge() { Poke(wake_fd_.get()); }

void Reaper::Loop() {
  constexpr Clock::time_point kNever = Clock::time_point::max();
  Clock::time_point next_rescan = Clock::now() + options_.rescan_interval;
  Clock::time_point full_scan_at = kNever;  // a deferred full children scan
  for (;;) {
    Clock::time_point now = Clock::now();
    const Clock::time_point until = std::min(next_rescan, full_scan_at);
    auto wait_ms = std::chrono::ceil<std::chrono::milliseconds>(until - now).count();
    pollfd fds[2] = {{wake_fd_.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    int rc = ::poll(fds, 2, static_cast<int>(std::clamp<int64_t>(wait_ms, 0, 3600 * 1000)));
    if (rc < 0 && errno != EINTR) break;
    if (rc > 0 && (fds[1].revents & POLLIN) != 0) break;
    if (rc > 0 && (fds[0].revents & POLLIN) != 0) {
      uint64_t count;
      while (::read(wake_fd_.get(), &count, sizeof(count)) < 0 && errno == EINTR) {
      }
    }
    now = Clock::now();
    const bool full = now >= full_scan_at;
    bool blocked = false;
    reaped_ += ReapPass(full, &blocked);
    if (!blocked) {
      full_scan_at = kNever;
    } else if (full_scan_at == kNever) {
      full_scan_at = now + options_.full_scan_delay;
    }
    if (now >= next_rescan) next_rescan = now + options_.rescan_interval;
  }
}

}  // namespace deepbox::sandboxd::proc
#include "sandboxd/proc/quiet_thread.h"
