// Per-sandbox cgroups: detection of the host's layout, limits, kill-all, removal.
//
// Placement: <hierarchy>/<the launcher's own cgroup>/deepbox/<id>, in every
// hierarchy used, so a sandbox stays accounted to whoever runs the launcher.
//
// Per controller the mechanism is chosen independently:
//   memory, pids, cpu: cgroup v2 if the controller can be enabled there, else
//   the v1 hierarchy of that controller, else not enforced (rlimits are the
//   launcher's per-process fallback).
//   kill-all: a v2 cgroup (even one with no controllers, as on hybrid hosts)
//   gives CLONE_INTO_CGROUP and cgroup.kill; else the v1 freezer (freeze,
//   SIGKILL every pid, thaw, until empty); else SIGKILL of each listed pid.
// A limit is reported as enforced only after its file was written successfully.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"
#include "local/limits.h"

namespace deepbox::local {

struct CgroupHostInfo {
  CgroupLayout layout = CgroupLayout::kNone;
  std::string v2_mount;                          // "" if no cgroup2 mount
  std::string v2_self;                           // this process's v2 path, e.g. "/"
  std::set<std::string> v2_controllers;          // cgroup.controllers of v2_self
  std::map<std::string, std::string> v1_mounts;  // controller -> mount dir
  std::map<std::string, std::string> v1_self;    // controller -> this process's path
};
Result<CgroupHostInfo> DetectCgroups();
// For tests: parse the given files' contents.
CgroupHostInfo ParseCgroupHostInfo(std::string_view mountinfo, std::string_view proc_self_cgroup);

class SandboxCgroup {
 public:
  // `id`: [A-Za-z0-9_.-]{1,64}. Creates the cgroups and writes the limits.
  static Result<SandboxCgroup> Create(const CgroupHostInfo& host, std::string_view id,
                                      const Limits& limits);

  SandboxCgroup() = default;
  SandboxCgroup(SandboxCgroup&&) noexcept = default;
  SandboxCgroup& operator=(SandboxCgroup&& other) noexcept;
  SandboxCgroup(const SandboxCgroup&) = delete;
  SandboxCgroup& operator=(const SandboxCgroup&) = delete;
  ~SandboxCgroup();  // KillAll() + Remove()

  // fd of the v2 cgroup dir for CLONE_INTO_CGROUP, or -1.
  int v2_fd() const { return v2_fd_.get(); }
  // Moves `pid` into the v1 cgroups (the v2 one is joined by CLONE_INTO_CGROUP).
  // Slow: see MoveSelfIntoCgroupsRaw.
  Status AttachV1(pid_t pid) const;
  // The `tasks` file of each v1 cgroup of the sandbox, open for writing (none
  // without v1 cgroups): what MoveSelfIntoCgroupsRaw writes to. The kernel
  // checks the opener's credentials, so these fds move a process only into
  // this sandbox's cgroups; they are CLOEXEC and never reach the sandbox.
  struct TasksFile {
    std::string dir;  // the cgroup (for error messages)
    UniqueFd fd;
  };
  Result<std::vector<TasksFile>> OpenV1Tasks() const;
  // Moves `pid` into every cgroup including v2 (for a process not cloned into it).
  Status AttachAll(pid_t pid) const;
  // Kills every process in the sandbox's cgroups and waits until they are empty.
  Status KillAll() const;
  // Removes the directories (after KillAll). Idempotent.
  Status Remove();
  // Pids in the cgroups (host PID namespace), from the first hierarchy.
  Result<std::vector<pid_t>> Pids() const;

  // memory, processes, cpu_rate, kill_all filled in; the rest left kNone.
  const LimitSupport& support() const { return support_; }
  const std::vector<std::string>& dirs() const { return dirs_; }
  bool empty() const { return dirs_.empty(); }

 private:
  std::vector<std::string> dirs_;  // every created dir (deepest first on removal)
  std::string v2_dir_;
  std::map<std::string, std::string> v1_;  // controller -> dir
  UniqueFd v2_fd_;
  LimitSupport support_;
};

// A process moved into a v1 cgroup by pid (AttachV1) makes the kernel
// write-lock cgroup_threadgroup_rwsem, whose first writer after a quiet spell
// waits for an RCU grace period while it holds cgroup_mutex (8-22 ms measured
// here, Linux 6.18). A thread that moves itself, by writing "0" to a
// hierarchy's `tasks` file, takes no such lock and is moved in ~0.06 ms. So a
// sandbox's init moves itself: the launcher opens these files before the clone
// and the single-threaded child writes to them (MoveSelfIntoCgroupsRaw), right
// after the launcher releases it. (A kernel that took the lock anyway would
// make the child wait as long as the launcher used to.)

// Async-signal-safe (for a child between clone and exec): moves the calling
// thread, which must be its process's only one, into the cgroup of each of
// `count` fds from OpenV1Tasks. 0, or the errno of the first failed write
// with its position in *failed_index.
int MoveSelfIntoCgroupsRaw(const int* tasks_fds, size_t count, int* failed_index);

// Creates and removes a probe cgroup to find what this host really enforces.
LimitSupport ProbeCgroupSupport(const CgroupHostInfo& host);

// Whether `dir` can name a cgroup of sandbox `id` as SandboxCgroup::Create
// makes them: strictly beneath the mount of a hierarchy in `host`, ending in
// "/deepbox/<id>", with no ".", "..", empty or trailing components. Text only.
// A host-side reaper acts on a recorded cgroup dir only if this holds (and
// CheckSandboxCgroupDir): a record never makes it kill anything else.
bool IsSandboxCgroupPath(const CgroupHostInfo& host, std::string_view id, std::string_view dir);
// IsSandboxCgroupPath, then on disk: no symlink anywhere in the path, a
// directory on a cgroup file system, owned by this process's effective uid (the
// kernel gives a cgroup dir its creator's uid). NOT_FOUND if it does not exist.
Status CheckSandboxCgroupDir(const CgroupHostInfo& host, std::string_view id,
                             const std::string& dir);
// Freezes (frozen) or thaws every process in the given cgroup dirs of one
// sandbox -- cgroup v2's cgroup.freeze where a dir has it, else the v1
// freezer's freezer.state -- and waits until the kernel reports the change
// done (a frozen process uses no CPU and keeps its memory; SIGKILL still
// ends it). Missing dirs are skipped; UNIMPLEMENTED when none of them has a
// freezer (no cgroups, or neither cgroup v2 nor the v1 freezer); TIMEOUT if
// the kernel did not finish within `timeout`.
Status SetCgroupsFrozen(const std::vector<std::string>& dirs, bool frozen,
                        std::chrono::milliseconds timeout);

// The cgroup dirs process `pid` is in, one per hierarchy mounted here (from
// /proc/PID/cgroup, resolved like DetectCgroups resolves our own).
Result<std::vector<std::string>> ProcessCgroupDirs(pid_t pid);

}  // namespace deepbox::local
