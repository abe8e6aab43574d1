// The protocol between the launcher and its child between clone and exec.
//
// The child runs only async-signal-safe code: raw syscalls over data the parent
// built before the clone. It reports each finished setup step, and at most one
// failure as (step, syscall, errno, plan index), through a CLOEXEC pipe; a
// successful execve closes the pipe, which the parent sees as EOF.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace deepbox::local {

// Setup steps in the order they happen; parent steps first.
enum class SetupStep : uint16_t {
  kPrepare,       // parent: plans, directories, seccomp export
  kCgroup,        // parent: create the cgroup
  kClone,         // parent: clone3 into the new namespaces
  kIdMaps,        // parent: uid_map / gid_map
  kNetwork,       // parent: veth + nftables for public mode
  kCgroupAttach,  // child: woken up, moves itself into its v1 cgroups
  kChildStart,    // child: root tmpfs, mount sources, sandbox ids
  kUtsNet,        // child: hostname, loopback up, new session
  kMounts,        // child: build the new root
  kPivotRoot,     // child: pivot_root + detach the old root
  kRlimits,       // child: setrlimit
  kCapabilities,  // child: securebits, capabilities, uid/gid 1000
  kSeccomp,       // child: no_new_privs + seccomp filter
  kExec,          // child: execve until the pipe closes
  kCount,
};
std::string_view SetupStepName(SetupStep step);

// Syscalls the child can fail in (names for error messages).
enum class ChildCall : uint16_t {
  kNone,
  kRead,
  kWrite,
  kOpen,
  kClose,
  kMount,
  kUmount2,
  kPivotRoot,
  kMkdir,
  kSymlink,
  kChdir,
  kSethostname,
  kSocket,
  kIoctl,
  kSetsid,
  kPrctl,
  kCapset,
  kSetresuid,
  kSetresgid,
  kSetgroups,
  kPrlimit,
  kSeccomp,
  kExecve,
  kDup2,
  kCloseRange,
  kMountSetattr,
  kStatfs,
  kChmod,
  kFchown,
  kCount,
};
std::string_view ChildCallName(ChildCall call);

struct ChildRecord {
  uint16_t kind;  // 0 = step done, 1 = failure
  uint16_t step;  // SetupStep
  uint16_t call;  // ChildCall
  uint16_t pad;
  int32_t err;    // errno
  int32_t index;  // index into the mount plan, or -1
  int64_t mono_ns;
};
static_assert(sizeof(ChildRecord) == 24);

// Async-signal-safe helpers for the child.
int64_t MonotonicNs();
// No signal blocked, none ignored: what a program exec'd from a launcher
// (the sandbox's init, pasta, nft, ip) starts with, whatever the launching
// process's own mask (a supervisor blocks the signals it reads on a
// signalfd) and ignored signals (SIGPIPE).
void RestoreDefaultSignals();

class ChildReporter {
 public:
  explicit ChildReporter(int fd) : fd_(fd) {}
  void Done(SetupStep step) const;
  [[noreturn]] void Fail(SetupStep step, ChildCall call, int err, int index = -1) const;

 private:
  int fd_;
};

// Async-signal-safe strlen.
inline size_t RawStrlen(const char* s) {
  size_t n = 0;
  while (s[n] != '\0') ++n;
  return n;
}

}  // namespace deepbox::local
