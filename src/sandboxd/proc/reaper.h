// Zombie reaping for deepbox-sandboxd running as PID 1 or as a subreaper.
//
// When the daemon is PID 1 of a sandbox, or has called BecomeSubreaper(), every
// orphan below it is re-parented to it and must be reaped, or the sandbox fills
// with zombies. The difficulty is to reap those orphans without stealing the
// exit status of the children this library is waiting for. Design:
//
//  * Owned children. Every child spawned by this library is recorded in the
//    process-wide ChildRegistry. Its owner (Child) waits for it through its
//    pidfd: waitid(P_PIDFD, WNOWAIT) to learn the status while keeping the pid
//    (and the process-group id) pinned, and reaps it later with
//    ChildRegistry::ReapAndUnregister(), which reaps and unregisters under the
//    registry mutex, as one step.
//  * The spawn window. Between clone() and Register() a child could already have
//    exited while not yet being registered. Spawners therefore hold the
//    registry's spawn lock in shared mode from before clone() until Register();
//    the reaper takes it exclusively before deciding that a pid is unowned.
//    Spawns still run concurrently with each other.
//  * Orphans. Reaper runs a thread woken by SIGCHLD (an async-signal-safe
//    handler writes to an eventfd) and by a periodic rescan. It looks for
//    exited children with waitid(P_ALL, WEXITED | WNOHANG | WNOWAIT), which
//    consumes nothing, and reaps a pid with waitid(P_PID, pid, WNOHANG) only
//    through ChildRegistry::ReapIfUnregistered(), i.e. holding the spawn lock
//    exclusively and the registry mutex, after checking that it is not owned.
//    Hence an owned child is never reaped by the reaper, and an orphan is reaped
//    as soon as it is seen.
//  * P_ALL reports one zombie at a time. When the one it reports is owned (an
//    owner is still draining its output), the reaper cannot see past it, so it
//    enumerates its children (/proc/self/task/*/children when the kernel has
//    CONFIG_PROC_CHILDREN, else a /proc/<pid>/stat scan for ppid == getpid())
//    and tries each. To keep that cost off the exec hot path this full scan is
//    deferred by `full_scan_delay` (an owned zombie usually disappears first).
//
// Rule for the rest of the daemon: any code that forks children itself must take
// ChildRegistry::LockForSpawn() around the fork and Register() the pid, or the
// Reaper may reap them first. Only one Reaper can run at a time (it owns the
// SIGCHLD handler; a previous handler function is chained).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"

namespace deepbox::sandboxd::proc {

// The process-wide set of children owned by this library. Thread-safe.
class ChildRegistry {
 public:
  static ChildRegistry& Instance();

  // Held in shared mode from before fork/clone until Register(pid).
  std::shared_lock<std::shared_mutex> LockForSpawn() {
    return std::shared_lock<std::shared_mutex>(spawn_mu_);
  }
  void Register(pid_t pid);
  // Gives up ownership (the reaper will reap the pid once it exits).
  void Unregister(pid_t pid);
  bool IsRegistered(pid_t pid) const;
  size_t size() const;

  // waitid(P_PIDFD, pidfd, WEXITED | extra_flags) and, when that reaped the
  // child, unregisters `pid` in the same critical section. Returns 0 or errno.
  int ReapAndUnregister(int pidfd, pid_t pid, int extra_flags, siginfo_t* info);

  // Reaps `pid` if it is an exited child that is not registered. Returns true
  // when it reaped it. Used by the reaper only.
  bool ReapIfUnregistered(pid_t pid);

 private:
  std::shared_mutex spawn_mu_;
  mutable std::mutex mu_;
  std::unordered_set<pid_t> pids_;
};

// prctl(PR_SET_CHILD_SUBREAPER, 1): orphans below the daemon become its
// children. Not needed (but harmless) when the daemon is PID 1.
Status BecomeSubreaper();
// True when the daemon is PID 1 of its namespace or a child subreaper.
bool IsReaperOfOrphans();

// Reaps every exited child of this process that the ChildRegistry does not own;
// returns how many. Synchronous (the Reaper thread's pass; tests call it too).
// Without allow_full_scan it stops at the first owned zombie.
size_t ReapOrphansOnce(bool allow_full_scan = true);

class Reaper {
 public:
  struct Options {
    // Safety-net rescan even without SIGCHLD.
    std::chrono::milliseconds rescan_interval{2000};
    // How long an owned zombie may hide others before a full children scan.
    std::chrono::milliseconds full_scan_delay{200};
  };

  // Installs the SIGCHLD handler and starts the thread. kConflict if a Reaper
  // is already running.
  static Result<std::unique_ptr<Reaper>> Start(Options options);
  static Result<std::unique_ptr<Reaper>> Start() { return Start(Options{}); }
  // Stops the thread and restores the previous SIGCHLD disposition.
  ~Reaper();
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  // Orphans reaped so far by this reaper.
  uint64_t reaped() const { return reaped_.load(); }
  // Asks the thread for a pass now (e.g. after detaching a child).
  void Nudge();

 private:
  Reaper(Options options, UniqueFd wake, UniqueFd stop);
  void Loop();

  Options options_;
  UniqueFd wake_fd_;  // eventfd written by the SIGCHLD handler and Nudge()
  UniqueFd stop_fd_;  // eventfd: stop the thread
  struct sigaction previous_ {};
  std::atomic<uint64_t> reaped_{0};
  std::thread thread_;
};

}  // namespace deepbox::sandboxd::proc
