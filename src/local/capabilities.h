// Dropping every capability and becoming uid/gid 1000.
//
// Two phases in the child (all raw syscalls; glibc's setresuid would try to
// broadcast to threads that do not exist after a raw clone):
// SwitchToSandboxIdsRaw, right after the id maps are written (files the child
// creates in its own tmpfs must belong to a mapped id, else EOVERFLOW):
//   1. securebits NOROOT | NO_SETUID_FIXUP | KEEP_CAPS(off) | NO_CAP_AMBIENT_RAISE, all locked
//      (NO_SETUID_FIXUP keeps the userns capabilities across the uid change)
//   2. setgroups(0, NULL) when allowed (launcher is root), setresgid, setresuid
// DropCapabilitiesRaw, after the mounts:
//   3. PR_CAPBSET_DROP for every cap up to /proc/sys/kernel/cap_last_cap
//   4. PR_CAP_AMBIENT_CLEAR_ALL
//   5. capset(): effective, permitted, inheritable = 0
// no_new_privs is set by LoadSeccompRaw() right after. PR_SET_DUMPABLE is not
// touched: execve resets it to 1 anyway, and ptrace is denied by seccomp.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/error.h"
#include "local/child.h"

namespace deepbox::local {

struct CapDropPlan {
  uid_t uid = 1000;
  gid_t gid = 1000;
  bool clear_groups = true;
  int last_cap = 40;
};
// Reads cap_last_cap (falls back to CAP_LAST_CAP of the headers).
CapDropPlan PlanCapDrop(uid_t uid, gid_t gid, bool clear_groups);

// Async-signal-safe. Each returns 0 or errno, with the failing call in *failed.
int SwitchToSandboxIdsRaw(const CapDropPlan& plan, ChildCall* failed);
int DropCapabilitiesRaw(const CapDropPlan& plan, ChildCall* failed);
// Both, in order.
int DropPrivilegesRaw(const CapDropPlan& plan, ChildCall* failed);

// Parsed from /proc/<pid>/status (tests, doctor). Not for the child.
struct ProcStatus {
  uint64_t cap_inh = 0, cap_prm = 0, cap_eff = 0, cap_bnd = 0, cap_amb = 0;
  int no_new_privs = -1;
  int seccomp = -1;  // 0 off, 1 strict, 2 filter
  uint32_t uid = 0, gid = 0;
  std::string groups;
};
Result<ProcStatus> ParseProcStatus(std::string_view text);
Result<ProcStatus> ReadProcStatus(pid_t pid = 0);  // 0 = self

}  // namespace deepbox::local
