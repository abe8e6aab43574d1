#include "local/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/io_uring.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "local/testing/child_runner.h"

namespace deepbox::local {
namespace {

using testing::ExitCode;
using ::testing::HasSubstr;
using testing::RunInChild;
using testing::TermSignal;

// Runs `probe` after loading the filter; the child exits 0 if probe() returns true.
int WithFilter(const std::function<bool()>& probe) {
  auto prog = BuildSandboxFilter();
  if (!prog) return -1;
  return RunInChild([&] {
    sock_fprog f = prog->fprog();
    if (LoadSeccompRaw(f) != 0) return 100;
    return probe() ? 0 : 1;
  });
}

bool FailsWith(long rc, int err) { return rc == -1 && errno == err; }

TEST(SeccompTest, BuildsAProgram) {
  auto prog = BuildSandboxFilter();
  ASSERT_TRUE(prog.has_value()) << prog.error().ToString();
  EXPECT_GT(prog->size(), 50u);
  EXPECT_LT(prog->size(), 4096u);  // BPF_MAXINSNS
}

TEST(SeccompTest, PfcDumpNamesDeniedCalls) {
  auto pfc = DumpSandboxFilterPfc();
  ASSERT_TRUE(pfc.has_value());
  for (const char* name : {"ptrace", "mount", "bpf", "keyctl", "io_uring_setup", "unshare",
                           "clone3", "kexec_load", "open_by_handle_at", "setns"}) {
    EXPECT_THAT(*pfc, HasSubstr(std::string("\"") + name + "\"")) << name;
  }
}

TEST(SeccompTest, DeniedListIsDocumented) {
  const auto& list = DeniedSyscalls();
  EXPECT_GT(list.size(), 50u);
  for (const auto& d : list) {
    EXPECT_FALSE(d.reason.empty()) << d.name;
    EXPECT_FALSE(d.action.empty()) << d.name;
  }
}

TEST(SeccompTest, SetsNoNewPrivsAndFilterMode) {
  int st = WithFilter(
      [] { return prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1 && prctl(PR_GET_SECCOMP) == 2; });
  EXPECT_EQ(ExitCode(st), 0);
}

TEST(SeccompTest, DeniesPtraceAndProcessVm) {
  EXPECT_EQ(ExitCode(WithFilter([] { return FailsWith(ptrace(PTRACE_TRACEME, 0, 0, 0), EPERM); })),
            0);
  EXPECT_EQ(ExitCode(WithFilter([] {
              return FailsWith(syscall(SYS_process_vm_readv, getppid(), 0, 0, 0, 0, 0), EPERM);
            })),
            0);
}

TEST(SeccompTest, DeniesMountFamily) {
  EXPECT_EQ(ExitCode(WithFilter([] {
              return FailsWith(mount("none", "/tmp", "tmpfs", 0, nullptr), EPERM) &&
                     FailsWith(umount2("/proc", MNT_DETACH), EPERM) &&
                     FailsWith(syscall(SYS_pivot_root, ".", "."), EPERM) &&
                     FailsWith(syscall(SYS_fsopen, "tmpfs", 0), EPERM) &&
                     FailsWith(syscall(SYS_open_tree, AT_FDCWD, "/", 0), EPERM) &&
                     FailsWith(syscall(SYS_mount_setattr, AT_FDCWD, "/", 0, nullptr, 0), EPERM) &&
                     FailsWith(chroot("/"), EPERM);
            })),
            0);
}

TEST(SeccompTest, DeniesNamespaces) {
  EXPECT_EQ(ExitCode(WithFilter([] {
              return FailsWith(unshare(CLONE_NEWUSER), EPERM) &&
                     FailsWith(unshare(CLONE_NEWNS), EPERM) &&
                     FailsWith(unshare(CLONE_NEWNET), EPERM) &&
                     FailsWith(unshare(0x80 /* CLONE_NEWTIME */), EPERM) &&
                     FailsWith(syscall(SYS_setns, 0, 0), EPERM) &&
                     FailsWith(syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0), EPERM) &&
                     FailsWith(syscall(SYS_clone3, nullptr, 0), ENOSYS);
            })),
            0);
}

TEST(SeccompTest, AllowsPlainForkAndUnshareFiles) {
  EXPECT_EQ(ExitCode(WithFilter([] {
              pid_t p = fork();  // glibc: clone3 -> ENOSYS -> clone without namespace flags
              if (p == 0) _exit(7);
              int status = 0;
              waitpid(p, &status, 0);
              return p > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 7 &&
                     unshare(CLONE_FILES) == 0;
            })),
            0);
}

TEST(SeccompTest, DeniesKernelAttackSurface) {
  EXPECT_EQ(ExitCode(WithFilter([] {
              return FailsWith(syscall(SYS_bpf, 0, nullptr, 0), EPERM) &&
                     FailsWith(syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0), EPERM) &&
                     FailsWith(syscall(SYS_userfaultfd, 0), EPERM) &&
                     FailsWith(syscall(SYS_io_uring_setup, 1, nullptr), EPERM) &&
                     FailsWith(syscall(SYS_keyctl, 0, 0, 0, 0, 0), EPERM) &&
                     FailsWith(syscall(SYS_add_key, "user", "x", "y", 1, 0), EPERM) &&
                     FailsWith(syscall(SYS_kexec_load, 0, 0, nullptr, 0), EPERM) &&
                     FailsWith(syscall(SYS_init_module, nullptr, 0, ""), EPERM) &&
                     FailsWith(syscall(SYS_clock_settime, CLOCK_REALTIME, nullptr), EPERM) &&
                     FailsWith(syscall(SYS_open_by_handle_at, 0, nullptr, 0), EPERM) &&
                     FailsWith(syscall(SYS_iopl, 3), EPERM) &&
                     FailsWith(syscall(SYS_syslog, 3, nullptr, 0), EPERM);
            })),
            0);
}

TEST(SeccompTest, PersonalityFlags) {
  EXPECT_EQ(ExitCode(WithFilter([] {
              return personality(0xffffffff) != -1 && personality(PER_LINUX) != -1 &&
                     FailsWith(personality(READ_IMPLIES_EXEC), EPERM) &&
                     FailsWith(personality(static_cast<unsigned>(PER_LINUX) | ADDR_NO_RANDOMIZE),
                               EPERM);
            })),
            0);
}

TEST(SeccompTest, SocketFamilies) {
  EXPECT_EQ(ExitCode(WithFilter([] {
              int a = socket(AF_INET, SOCK_STREAM, 0);
              int u = socket(AF_UNIX, SOCK_STREAM, 0);
              int n = socket(AF_NETLINK, SOCK_RAW, 0);
              bool ok = a >= 0 && u >= 0 && n >= 0;
              ok &= FailsWith(socket(40 /* AF_VSOCK */, SOCK_STREAM, 0), EAFNOSUPPORT);
              ok &= FailsWith(socket(AF_PACKET, SOCK_RAW, 0), EAFNOSUPPORT);
              ok &= FailsWith(socket(38 /* AF_ALG */, SOCK_SEQPACKET, 0), EAFNOSUPPORT);
              ok &= FailsWith(socket(1000, SOCK_STREAM, 0), EAFNOSUPPORT);
              return ok;
            })),
            0);
}

TEST(SeccompTest, TiocstiDenied) {
  EXPECT_EQ(ExitCode(WithFilter([] {
              char c = 'x';
              // High bits set must not bypass the check (the cmd is 32 bits wide).
              return FailsWith(syscall(SYS_ioctl, 0, TIOCSTI, &c), EPERM) &&
                     FailsWith(syscall(SYS_ioctl, 0, 0x100000000ULL | TIOCSTI, &c), EPERM);
            })),
            0);
}

TEST(SeccompTest, X32SyscallsAreKilled) {
  int st = WithFilter([] {
    syscall(0x40000000 | SYS_getpid);
    return true;
  });
  EXPECT_EQ(TermSignal(st), SIGSYS);
}

TEST(SeccompTest, I386SyscallsAreKilled) {
  int st = WithFilter([] {
    long ret;
    // int 0x80 with eax = 20 (getpid on i386).
    asm volatile("int $0x80" : "=a"(ret) : "a"(20) : "memory");
    return true;
  });
  EXPECT_EQ(TermSignal(st), SIGSYS);
}

}  // namespace
}  // namespace deepbox::local
