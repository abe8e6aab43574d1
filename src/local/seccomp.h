// The sandbox's seccomp filter: a deny list (default ALLOW) of the calls a
// sandboxed workload never needs. Built with libseccomp and exported to BPF in
// the parent BEFORE the clone; the child loads it with the raw seccomp syscall.
//
// Compared with peers (peers.md): Codex denies ptrace, process_vm_*, io_uring_*
// and AF_VSOCK; nsjail/Docker's default profile deny the mount family, kexec,
// bpf, keyctl, perf, userfaultfd, module loading, clock setting, namespaces,
// reboot, swap, acct, quotactl, lookup_dcookie, open_by_handle_at, iopl,
// personality flags. deepbox takes the union; the reason for each entry is in
// DeniedSyscalls() (seccomp.cc).
#pragma once

#include <linux/filter.h>

#include <string>
#include <vector>

#include "common/error.h"

namespace deepbox::local {

struct SeccompOptions {
  // Refuse socket() families other than AF_UNIX, AF_INET, AF_INET6, AF_NETLINK.
  bool restrict_socket_families = true;
  // Action for the denied calls: EPERM (default) — friendlier than a kill,
  // and tests can tell a refusal from a crash.
  int deny_errno = 1;  // EPERM
};

// One denied syscall and why.
struct DeniedSyscall {
  std::string name;
  std::string condition;  // "" = always; else e.g. "flags & CLONE_NEWUSER"
  std::string action;     // "EPERM", "ENOSYS", "KILL"
  std::string reason;
};
const std::vector<DeniedSyscall>& DeniedSyscalls();

class BpfProgram {
 public:
  BpfProgram() = default;
  explicit BpfProgram(std::vector<sock_filter> insns) : insns_(std::move(insns)) {}
  // A view the child can pass to seccomp(); valid while *this lives.
  sock_fprog fprog() const {
    return sock_fprog{static_cast<unsigned short>(insns_.size()),
                      const_cast<sock_filter*>(insns_.data())};
  }
  size_t size() const { return insns_.size(); }
  bool empty() const { return insns_.empty(); }

 private:
  std::vector<sock_filter> insns_;
};

// Builds the filter for the native arch; other arches (i386, x32) are killed.
Result<BpfProgram> BuildSandboxFilter(const SeccompOptions& options = {});
// Human-readable PFC dump (for debugging / doctor).
Result<std::string> DumpSandboxFilterPfc(const SeccompOptions& options = {});

// Async-signal-safe. Sets no_new_privs and loads `prog`. Returns 0 or errno.
int LoadSeccompRaw(const sock_fprog& prog);

}  // namespace deepbox::local
