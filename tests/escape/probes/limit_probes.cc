// Resource probes: each tries to take more than the limit the driver set, or to
// outlive the sandbox. The limit comes in as an argument.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "probe.h"

namespace deepbox::escape {
namespace {

uint64_t ParseBytes(const std::string& s) { return std::strtoull(s.c_str(), nullptr, 0); }

std::string Mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

// Progress for the driver, in the host-visible workspace: survives an OOM kill.
class Progress {
 public:
  Progress()
      : fd_(open("/workspace/escape-progress", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) {}
  ~Progress() {
    if (fd_ >= 0) close(fd_);
  }
  void Set(uint64_t bytes) {
    if (fd_ < 0) return;
    std::string line = std::to_string(bytes) + "\n";
    (void)!write(fd_, line.data(), line.size());
  }

 private:
  int fd_;
};

// Be the OOM killer's first choice (raising the score needs no privilege).
void PreferOomKill() {
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    (void)!write(fd, "1000", 4);
    close(fd);
  }
}

// Writes 1 MiB chunks to `path` until an error or `stop` bytes; returns bytes written.
uint64_t Fill(const std::string& path, uint64_t stop, std::string* why) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = "open " + ErrnoName(errno);
    return 0;
  }
  std::vector<char> chunk(1 << 20);
  for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<char>(i * 31 + 7);
  uint64_t total = 0;
  Progress progress;
  *why = "stopped at 2x the limit";
  while (total < stop) {
    ssize_t n = write(fd, chunk.data(), chunk.size());
    if (n <= 0) {
      *why = n < 0 ? ErrnoName(errno) : "short write";
      break;
    }
    total += static_cast<uint64_t>(n);
    progress.Set(total);
  }
  if (fsync(fd) != 0 && why->rfind("stopped", 0) == 0) *why = "fsync " + ErrnoName(errno);
  close(fd);
  return total;
}

void FillProbe(Report& r, const Args& args, const std::string& path) {
  const uint64_t limit = ParseBytes(Arg(args, 0));
  if (limit == 0) return r.Error("usage: LIMIT_BYTES");
  PreferOomKill();
  std::string why;
  uint64_t wrote = Fill(path, 2 * limit, &why);
  unlink(path.c_str());
  std::string line = "wrote " + Mib(wrote) + " to " + path + " (limit " + Mib(limit) + "): " + why;
  if (wrote > limit) {
    r.Breach(line);
  } else {
    r.Held(line);
  }
}

}  // namespace

ESCAPE_PROBE(fork_bomb,
             "fork until refused (ARGS: PIDS_LIMIT): breach if more processes than the limit "
             "exist at once") {
  const long limit = std::atol(Arg(args, 0).c_str());
  if (limit <= 0) return r.Error("usage: fork_bomb LIMIT");
  std::vector<pid_t> kids;
  int last_errno = 0;
  for (long i = 0; i < 4 * limit; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      for (;;) pause();
    }
    if (pid < 0) {
      last_errno = errno;
      break;
    }
    kids.push_back(pid);
  }
  // Plus this probe itself (the daemon and its threads also count against the limit).
  long total = static_cast<long>(kids.size()) + 1;
  for (pid_t k : kids) kill(k, SIGKILL);
  for (pid_t k : kids) waitpid(k, nullptr, 0);
  std::string line = std::to_string(total) + " processes at once (limit " + std::to_string(limit) +
                     "), then fork " + (last_errno ? ErrnoName(last_errno) : "never failed");
  if (total > limit) {
    r.Breach(line);
  } else {
    r.Held(line);
  }
}

ESCAPE_PROBE(memory_bomb,
             "allocate and touch memory in 1 MiB steps (ARGS: LIMIT_BYTES): breach if more than "
             "the cgroup limit is resident (being OOM-killed is the expected outcome)") {
  const uint64_t limit = ParseBytes(Arg(args, 0));
  if (limit == 0) return r.Error("usage: memory_bomb LIMIT_BYTES");
  PreferOomKill();
  Progress progress;
  uint64_t touched = 0;
  std::string why = "stopped at 2x the limit";
  while (touched < 2 * limit) {
    void* p = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      why = "mmap " + ErrnoName(errno);
      break;
    }
    std::memset(p, 0x5a, 1 << 20);
    touched += 1 << 20;
    progress.Set(touched);
  }
  std::string line = "touched " + Mib(touched) + " (limit " + Mib(limit) + "): " + why;
  if (touched > limit) {
    r.Breach(line);
  } else {
    r.Held(line);
  }
}

ESCAPE_PROBE(tmpfs_memory_bomb,
             "hold memory in tmpfs pages, which outlive the writer, by filling /tmp (ARGS: "
             "MEMORY_LIMIT_BYTES): breach if more than the cgroup memory limit is written") {
  FillProbe(r, args, "/tmp/escape-tmpfs-bomb");
}

ESCAPE_PROBE(disk_fill,
             "fill the workspace disk (ARGS: LIMIT_BYTES): breach if more than the limit is "
             "written and synced") {
  FillProbe(r, args, "/workspace/escape-fill");
}

ESCAPE_PROBE(tmp_fill, "fill the private /tmp (ARGS: LIMIT_BYTES): breach if more than its size") {
  FillProbe(r, args, "/tmp/escape-fill");
}

ESCAPE_PROBE(cpu_quota,
             "burn CPU on 4 threads for 2 s of wall time (ARGS: CORES): breach if the process "
             "used more than twice the quota") {
  const double cores = std::atof(Arg(args, 0).c_str());
  if (cores <= 0) return r.Error("usage: cpu_quota CORES");
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&stop] {
      volatile uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  stop = true;
  for (auto& t : threads) t.join();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
               static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  double allowed = cores * 2.0;
  char line[160];
  std::snprintf(line, sizeof(line), "%.2f s of CPU in 2 s of wall time (quota %.2f cores = %.2f s)",
                cpu, cores, allowed);
  if (cpu > 2 * allowed + 0.1) {
    r.Breach(line);
  } else {
    r.Held(line);
  }
}

namespace {
// Detaches from everything it can: new session, ignored signals, closed stdio.
void Detach() {
  setsid();
  for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_IGN);
  int devnull = open("/dev/null", O_RDWR);
  dup2(devnull, 0);
  dup2(devnull, 1);
  dup2(devnull, 2);
  for (int fd = 3; fd < 1024; ++fd) close(fd);
}
}  // namespace

ESCAPE_PROBE(outlive,
             "outlive the sandbox: a detached 'pid hopper' that forks a new copy of itself and "
             "exits every millisecond, so a kill loop over a pid list always misses it (ARGS: "
             "TOKEN, kept in its command line; the driver looks for it after destruction)") {
  if (Arg(args, 0).empty()) return r.Error("usage: outlive TOKEN");
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    Detach();
    for (;;) {
      pid_t next = fork();
      if (next > 0) _exit(0);  // the child carries on; the parent's pid disappears
      if (next < 0) usleep(1000);
      usleep(1000);
    }
  }
  if (pid < 0) return r.Error("fork " + ErrnoName(errno));
  r.Held("hopper started (verdict by the driver)");
}

ESCAPE_PROBE(orphan,
             "leave an orphan behind after delete: double fork + setsid, every signal ignored, "
             "sleeping (ARGS: TOKEN, kept in its command line; the driver looks for it)") {
  if (Arg(args, 0).empty()) return r.Error("usage: orphan TOKEN");
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    Detach();
    if (fork() != 0) _exit(0);  // the grandchild is reparented to the sandbox's init
    for (;;) sleep(1);
  }
  if (pid < 0) return r.Error("fork " + ErrnoName(errno));
  waitpid(pid, nullptr, 0);
  r.Held("orphan started (verdict by the driver)");
}

}  // namespace deepbox::escape
