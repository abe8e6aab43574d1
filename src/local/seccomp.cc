#include "local/seccomp.h"

#include <fmt/format.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "common/unique_fd.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

namespace deepbox::local {
namespace {

constexpr uint64_t kNamespaceFlags = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
                                     CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET;

struct Entry {
  const char* name;
  long nr;  // -1: not in this kernel's headers
  const char* reason;
};

#define DBX_SYS(n, why) \
  Entry { #n, __NR_##n, why }

// Always denied (EPERM). Reasons double as the documentation of the list.
const Entry kAlwaysDenied[] = {
    // Cross-process access (Codex, Docker).
    DBX_SYS(ptrace, "debug or inject into other processes"),
    DBX_SYS(process_vm_readv, "read another process's memory"),
    DBX_SYS(process_vm_writev, "write another process's memory"),
    DBX_SYS(pidfd_getfd, "steal file descriptors from another process"),
    DBX_SYS(kcmp, "compare kernel objects of other processes (info leak)"),
    // Mount family (nsjail, Docker): the sandbox's tree is fixed by the launcher.
    DBX_SYS(mount, "change the mount tree"),
    DBX_SYS(umount2, "unmount the masks the launcher put in place"),
    DBX_SYS(pivot_root, "change the root"),
    DBX_SYS(chroot, "chroot-based escapes"),
    DBX_SYS(move_mount, "new mount API"),
    DBX_SYS(open_tree, "new mount API: clone mount trees"),
    DBX_SYS(fsopen, "new mount API"),
    DBX_SYS(fsconfig, "new mount API"),
    DBX_SYS(fsmount, "new mount API"),
    DBX_SYS(fspick, "new mount API"),
    DBX_SYS(mount_setattr, "clear read-only on mounts"),
    // Namespaces: nested user namespaces give a fresh set of capabilities.
    DBX_SYS(setns, "join other namespaces"),
    // Kernel attack surface a workload never needs (Docker, Codex, nsjail).
    DBX_SYS(bpf, "eBPF programs: large kernel attack surface"),
    DBX_SYS(perf_event_open, "perf: side channels, kernel attack surface"),
    DBX_SYS(userfaultfd, "stalls kernel page faults, a classic exploit primitive"),
    DBX_SYS(io_uring_setup, "io_uring bypasses seccomp for its operations (Codex)"),
    DBX_SYS(io_uring_enter, "io_uring"),
    DBX_SYS(io_uring_register, "io_uring"),
    DBX_SYS(keyctl, "kernel keyring is not namespaced"),
    DBX_SYS(add_key, "kernel keyring is not namespaced"),
    DBX_SYS(request_key, "kernel keyring is not namespaced"),
    DBX_SYS(kexec_load, "replace the kernel"),
    DBX_SYS(kexec_file_load, "replace the kernel"),
    DBX_SYS(reboot, "reboot the host"),
    DBX_SYS(init_module, "load kernel modules"),
    DBX_SYS(finit_module, "load kernel modules"),
    DBX_SYS(delete_module, "unload kernel modules"),
    DBX_SYS(clock_settime, "the clock is not namespaced"),
    DBX_SYS(clock_adjtime, "the clock is not namespaced"),
    DBX_SYS(settimeofday, "the clock is not namespaced"),
    DBX_SYS(adjtimex, "the clock is not namespaced"),
    DBX_SYS(swapon, "host swap"),
    DBX_SYS(swapoff, "host swap"),
    DBX_SYS(acct, "process accounting is host-wide"),
    DBX_SYS(quotactl, "host quotas"),
#ifdef __NR_quotactl_fd
    DBX_SYS(quotactl_fd, "host quotas"),
#endif
    DBX_SYS(lookup_dcookie, "kernel profiling"),
    DBX_SYS(name_to_handle_at, "file handles bypass the mount tree (shocker)"),
    DBX_SYS(open_by_handle_at, "file handles bypass the mount tree (shocker)"),
    DBX_SYS(iopl, "raw I/O port access"),
    DBX_SYS(ioperm, "raw I/O port access"),
    DBX_SYS(modify_ldt, "LDT: old exploit surface (CVE-2015-5157)"),
    DBX_SYS(syslog, "kernel log: address leaks"),
    DBX_SYS(vhangup, "hang up the terminal"),
    DBX_SYS(uselib, "obsolete loader"),
    DBX_SYS(ustat, "obsolete"),
    DBX_SYS(sysfs, "obsolete"),
    DBX_SYS(migrate_pages, "move another process's pages between NUMA nodes"),
    DBX_SYS(move_pages, "move another process's pages"),
    DBX_SYS(fanotify_init, "filesystem-wide monitoring"),
    DBX_SYS(nfsservctl, "obsolete"),
};

// Personality flags that weaken the address space (Docker allows only a few values).
constexpr uint64_t kBadPersonality[] = {
    0x0400000,  // READ_IMPLIES_EXEC
    0x0040000,  // ADDR_NO_RANDOMIZE
    0x0100000,  // MMAP_PAGE_ZERO
    0x0200000,  // ADDR_COMPAT_LAYOUT
};

constexpr int kAllowedFamilies[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};
constexpr int kMaxFamily = 46;  // AF_MAX on 6.x

struct CtxDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};
using Ctx = std::unique_ptr<void, CtxDeleter>;

Status Check(int rc, std::string_view what) {
  if (rc < 0) return MakeSyscallError("libseccomp", -rc, what);
  return {};
}

Result<Ctx> BuildCtx(const SeccompOptions& options) {
  Ctx ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return MakeError(ErrorCode::kInternal, "seccomp_init failed");
  // Only the native arch: i386 (int 0x80) and x32 calls hit BADARCH -> kill.
  if (auto st = Check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS),
                      "attr BADARCH");
      !st)
    return tl::unexpected(st.error());
  // We set NNP ourselves in the child (before the load), not libseccomp.
  if (auto st = Check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0), "attr NNP"); !st)
    return tl::unexpected(st.error());
  const uint32_t deny = SCMP_ACT_ERRNO(static_cast<uint32_t>(options.deny_errno));
  for (const Entry& e : kAlwaysDenied) {
    if (e.nr < 0) continue;
    if (auto st = Check(seccomp_rule_add(ctx.get(), deny, static_cast<int>(e.nr), 0), e.name); !st)
      return tl::unexpected(st.error());
  }
  // clone3 passes flags in a struct seccomp cannot read: ENOSYS makes glibc fall back to clone.
  if (auto st =
          Check(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), __NR_clone3, 0), "clone3");
      !st)
    return tl::unexpected(st.error());
  // clone/unshare with any namespace flag (nested user namespaces give fresh capabilities).
  for (uint64_t bit = 1; bit != 0 && bit <= (1ULL << 31); bit <<= 1) {
    if ((kNamespaceFlags & bit) == 0) continue;
    for (int nr : {__NR_clone, __NR_unshare}) {
      if (auto st =
              Check(seccomp_rule_add(ctx.get(), deny, nr, 1, SCMP_A0(SCMP_CMP_MASKED_EQ, bit, bit)),
                    "clone/unshare flags");
          !st)
        return tl::unexpected(st.error());
    }
  }
  if (auto st = Check(seccomp_rule_add(ctx.get(), deny, __NR_unshare, 1,
                                       SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWTIME, CLONE_NEWTIME)),
                      "unshare CLONE_NEWTIME");
      !st)
    return tl::unexpected(st.error());
  // Denied when the flag is set; bit 31 excludes the query personality(0xffffffff).
  for (uint64_t bit : kBadPersonality) {
    if (auto st = Check(seccomp_rule_add(ctx.get(), deny, __NR_personality, 1,
                                         SCMP_A0(SCMP_CMP_MASKED_EQ, bit | 0x80000000ULL, bit)),
                        "personality");
        !st)
      return tl::unexpected(st.error());
  }
  // Fake terminal input into a shared tty (bwrap's TIOCSTI warning), and TIOCLINUX.
  for (uint64_t req : {static_cast<uint64_t>(TIOCSTI), static_cast<uint64_t>(TIOCLINUX)}) {
    if (auto st = Check(seccomp_rule_add(ctx.get(), deny, __NR_ioctl, 1,
                                         SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, req)),
                        "ioctl");
        !st)
      return tl::unexpected(st.error());
  }
  if (options.restrict_socket_families) {
    // AF_VSOCK reaches the hypervisor host (Codex denies it); AF_PACKET, AF_ALG,
    // AF_KEY, bluetooth, etc. are attack surface a workload does not need.
    for (int family = 0; family < kMaxFamily; ++family) {
      bool allowed = false;
      for (int a : kAllowedFamilies) allowed |= (a == family);
      if (allowed) continue;
      if (auto st = Check(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EAFNOSUPPORT), __NR_socket, 1,
                                           SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(family))),
                          "socket");
          !st)
        return tl::unexpected(st.error());
    }
    if (auto st =
            Check(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EAFNOSUPPORT), __NR_socket, 1,
                                   SCMP_A0(SCMP_CMP_GE, static_cast<scmp_datum_t>(kMaxFamily))),
                  "socket");
        !st)
      return tl::unexpected(st.error());
  }
  return ctx;
}

Result<std::string> ExportToString(void* ctx, bool pfc) {
  UniqueFd fd(memfd_create("deepbox-seccomp", MFD_CLOEXEC));
  if (!fd) return MakeSyscallError("memfd_create", errno);
  int rc = pfc ? seccomp_export_pfc(ctx, fd.get()) : seccomp_export_bpf(ctx, fd.get());
  if (rc < 0) return MakeSyscallError(pfc ? "seccomp_export_pfc" : "seccomp_export_bpf", -rc);
  off_t size = lseek(fd.get(), 0, SEEK_END);
  if (size < 0) return MakeSyscallError("lseek", errno);
  std::string out(static_cast<size_t>(size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = pread(fd.get(), out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return MakeSyscallError("pread", n < 0 ? errno : EIO, "seccomp export");
    done += static_cast<size_t>(n);
  }
  return out;
}

}  // namespace

const std::vector<DeniedSyscall>& DeniedSyscalls() {
  static const std::vector<DeniedSyscall> list = [] {
    std::vector<DeniedSyscall> v;
    for (const Entry& e : kAlwaysDenied) v.push_back({e.name, "", "EPERM", e.reason});
    v.push_back({"clone3", "", "ENOSYS",
                 "flags are in a struct seccomp cannot inspect; glibc "
                 "falls back to clone, which is filtered"});
    v.push_back({"clone", "flags & CLONE_NEW*", "EPERM", "no nested namespaces"});
    v.push_back({"unshare", "flags & CLONE_NEW*", "EPERM", "no nested namespaces"});
    v.push_back({"personality",
                 "READ_IMPLIES_EXEC|ADDR_NO_RANDOMIZE|MMAP_PAGE_ZERO|"
                 "ADDR_COMPAT_LAYOUT",
                 "EPERM", "weakens the address space"});
    v.push_back({"ioctl", "TIOCSTI, TIOCLINUX", "EPERM", "inject input into a terminal"});
    v.push_back({"socket", "family not in {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK}", "EAFNOSUPPORT",
                 "AF_VSOCK reaches the VM host; others are attack surface"});
    v.push_back({"(any)", "non-native arch (i386 int 0x80, x32)", "KILL",
                 "32-bit entry points bypass a filter written for x86_64 numbers"});
    return v;
  }();
  return list;
}

Result<BpfProgram> BuildSandboxFilter(const SeccompOptions& options) {
  auto ctx = BuildCtx(options);
  if (!ctx) return tl::unexpected(ctx.error());
  auto bytes = ExportToString(ctx->get(), /*pfc=*/false);
  if (!bytes) return tl::unexpected(bytes.error());
  if (bytes->size() % sizeof(sock_filter) != 0 || bytes->empty()) {
    return MakeError(ErrorCode::kInternal, "seccomp_export_bpf produced a malformed program");
  }
  std::vector<sock_filter> insns(bytes->size() / sizeof(sock_filter));
  memcpy(insns.data(), bytes->data(), bytes->size());
  return BpfProgram(std::move(insns));
}

Result<std::string> DumpSandboxFilterPfc(const SeccompOptions& options) {
  auto ctx = BuildCtx(options);
  if (!ctx) return tl::unexpected(ctx.error());
  return ExportToString(ctx->get(), /*pfc=*/true);
}

int LoadSeccompRaw(const sock_fprog& prog) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) return errno;
  return 0;
}

}  // namespace deepbox::local
