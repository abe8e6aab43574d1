// Privilege probes: capabilities, ids, ptrace, setuid binaries, seccomp, personality, ABIs.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/fsuid.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "probe.h"

namespace deepbox::escape {
namespace {

// Nonzero capability sets of /proc/<pid>/status, e.g. "CapEff=0000003fffffffff".
std::string NonzeroCaps(const std::string& status_path) {
  std::string out;
  for (const char* k : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
    std::string v = StatusField(status_path, k);
    if (v.empty() || v.find_first_not_of('0') == std::string::npos) continue;
    out += std::string(out.empty() ? "" : " ") + k + "=" + v;
  }
  return out;
}

pid_t SpawnSleeper() {
  pid_t pid = fork();
  if (pid == 0) {
    for (;;) pause();
  }
  return pid;
}

void KillReap(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

}  // namespace

ESCAPE_PROBE(capabilities,
             "gain a capability: capset() every cap, raise ambient caps, PR_SET_KEEPCAPS, then "
             "read CapEff/CapPrm/CapBnd/CapAmb, also after an execve") {
  if (args.size() == 1 && args[0] == "child") {  // after execve: report our sets
    std::string caps = NonzeroCaps("/proc/self/status");
    if (!caps.empty()) r.Breach("after execve: " + caps);
    return;
  }
  std::string before = NonzeroCaps("/proc/self/status");
  if (!before.empty()) r.Breach("initial capabilities: " + before);
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2];
  for (auto& d : data) d = {0xffffffffu, 0xffffffffu, 0xffffffffu};
  r.Held("capset(all) " + Outcome(syscall(SYS_capset, &hdr, data)));
  int ambient_ok = 0;
  for (int cap = 0; cap <= 63; ++cap) {
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) == 0) ++ambient_ok;
  }
  if (ambient_ok > 0) r.Breach(std::to_string(ambient_ok) + " ambient caps raised");
  int bounding = 0;
  for (int cap = 0; cap <= 63; ++cap) {
    if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1) ++bounding;
  }
  if (bounding > 0) r.Breach(std::to_string(bounding) + " caps in the bounding set");
  prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0);
  std::string after = NonzeroCaps("/proc/self/status");
  if (!after.empty()) {
    r.Breach("after capset: " + after);
  } else {
    r.Held("all capability sets are 0");
  }
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    execl("/proc/self/exe", "escape_probe", "capabilities", "child", nullptr);
    _exit(2);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    r.Breach("capabilities after execve");
  } else {
    r.Held("none after execve");
  }
}

ESCAPE_PROBE(setuid_root,
             "become root or another id: setuid/setgid/setresuid/setresgid/setreuid(0), "
             "setgroups([0]), setfsuid(0), setuid(65534)") {
  r.Held("setuid(0) " + Outcome(setuid(0)));
  r.Held("setgid(0) " + Outcome(setgid(0)));
  r.Held("setresuid(0) " + Outcome(setresuid(0, 0, 0)));
  r.Held("setresgid(0) " + Outcome(setresgid(0, 0, 0)));
  r.Held("setreuid(0) " + Outcome(setreuid(0, 0)));
  gid_t zero = 0;
  r.Held("setgroups([0]) " + Outcome(setgroups(1, &zero)));
  setfsuid(0);
  setfsgid(0);
  r.Held("setuid(65534) " + Outcome(setuid(65534)));
  uid_t ru, eu, su;
  gid_t rg, eg, sg;
  getresuid(&ru, &eu, &su);
  getresgid(&rg, &eg, &sg);
  int fsuid = setfsuid(static_cast<uid_t>(-1));
  int fsgid = setfsgid(static_cast<gid_t>(-1));
  std::string ids = "uid " + std::to_string(ru) + "/" + std::to_string(eu) + "/" +
                    std::to_string(su) + "/fs" + std::to_string(fsuid) + " gid " +
                    std::to_string(rg) + "/" + std::to_string(eg) + "/" + std::to_string(sg) +
                    "/fs" + std::to_string(fsgid);
  bool changed = ru != 1000 || eu != 1000 || su != 1000 || rg != 1000 || eg != 1000 || sg != 1000 ||
                 fsuid != 1000 || fsgid != 1000;
  gid_t groups[64];
  int n = getgroups(64, groups);
  for (int i = 0; i < n; ++i) changed |= groups[i] == 0;
  if (changed) {
    r.Breach("ids changed: " + ids);
  } else {
    r.Held("still " + ids);
  }
}

ESCAPE_PROBE(ptrace,
             "ptrace another process: PTRACE_ATTACH/SEIZE a sibling and the daemon (pid 1), "
             "PTRACE_TRACEME in a child, process_vm_readv/writev, pidfd_getfd, kcmp") {
  pid_t victim = SpawnSleeper();
  if (victim < 0) return r.Error("fork");
  long rc = ptrace(PTRACE_ATTACH, victim, nullptr, nullptr);
  if (rc == 0) {
    r.Breach("PTRACE_ATTACH on a sibling");
  } else {
    r.Held("ATTACH " + ErrnoName(errno));
  }
  rc = ptrace(PTRACE_SEIZE, victim, nullptr, nullptr);
  if (rc == 0) {
    r.Breach("PTRACE_SEIZE on a sibling");
  } else {
    r.Held("SEIZE " + ErrnoName(errno));
  }
  if (InsideSandbox()) {  // never attach to a real init
    rc = ptrace(PTRACE_ATTACH, 1, nullptr, nullptr);
    if (rc == 0) {
      r.Breach("PTRACE_ATTACH on the daemon (pid 1)");
      ptrace(PTRACE_DETACH, 1, nullptr, nullptr);
    } else {
      r.Held("ATTACH pid 1 " + ErrnoName(errno));
    }
  }
  int status =
      InChild([](void*) -> int { return ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) == 0 ? 0 : 1; },
              nullptr);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    r.Breach("PTRACE_TRACEME in a child");
  } else {
    r.Held("TRACEME refused");
  }
  static char secret[16] = "x";
  char buf[16];
  iovec local{buf, sizeof(buf)}, remote{secret, sizeof(secret)};
  if (process_vm_readv(victim, &local, 1, &remote, 1, 0) > 0) {
    r.Breach("process_vm_readv on a sibling");
  } else {
    r.Held("process_vm_readv " + ErrnoName(errno));
  }
  if (process_vm_writev(victim, &local, 1, &remote, 1, 0) > 0) {
    r.Breach("process_vm_writev on a sibling");
  } else {
    r.Held("process_vm_writev " + ErrnoName(errno));
  }
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, 1, 0));
  if (pidfd >= 0) {
    int fd = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, 3, 0));
    if (fd >= 0) {
      r.Breach("pidfd_getfd stole fd 3 of the daemon");
      close(fd);
    } else {
      r.Held("pidfd_getfd " + ErrnoName(errno));
    }
    close(pidfd);
  }
  r.Held("kcmp " + Outcome(syscall(SYS_kcmp, getpid(), 1, 0 /*KCMP_FILE*/, 0, 0)));
  KillReap(victim);
}

ESCAPE_PROBE(setuid_binaries,
             "run every setuid/setgid/file-capability binary of the host system dirs and watch "
             "its credentials (/proc/PID/status while it runs and as a zombie)") {
  std::vector<std::string> candidates;
  for (const char* dir : {"/usr/bin", "/usr/sbin", "/usr/lib/openssh", "/usr/lib/dbus-1.0",
                          "/usr/libexec", "/usr/lib/polkit-1", "/usr/local/bin"}) {
    DIR* d = opendir(dir);
    if (d == nullptr) continue;
    while (dirent* e = readdir(d)) {
      std::string p = std::string(dir) + "/" + e->d_name;
      struct stat st;
      if (lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      char cap[64];
      bool fcaps = getxattr(p.c_str(), "security.capability", cap, sizeof(cap)) > 0;
      if ((st.st_mode & (S_ISUID | S_ISGID)) != 0 || fcaps) candidates.push_back(p);
    }
    closedir(d);
  }
  if (candidates.empty()) return r.Held("no setuid/setgid/fcaps binaries visible");
  int checked = 0;
  for (const auto& bin : candidates) {
    int in[2];
    if (pipe(in) != 0) return r.Error("pipe");
    pid_t pid = fork();
    if (pid == 0) {
      dup2(in[0], 0);
      int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 1);
      dup2(devnull, 2);
      close(in[1]);
      execl(bin.c_str(), bin.c_str(), "--help", nullptr);
      _exit(127);
    }
    close(in[0]);
    std::string status_path = "/proc/" + std::to_string(pid) + "/status";
    std::string worst;
    auto check = [&] {
      std::string uid = StatusField(status_path, "Uid");
      std::string gid = StatusField(status_path, "Gid");
      std::string caps = NonzeroCaps(status_path);
      if (uid.empty()) return;
      for (const std::string& ids : {uid, gid}) {
        size_t pos = 0;
        while (pos < ids.size()) {
          size_t end = ids.find_first_of(" \t", pos);
          std::string id = ids.substr(pos, end - pos);
          if (!id.empty() && id != "1000") worst = "ids " + uid + " / " + gid;
          if (end == std::string::npos) break;
          pos = ids.find_first_not_of(" \t", end);
        }
      }
      if (!caps.empty()) worst = caps;
    };
    // Sample while it runs, then once more as a zombie (credentials stay readable).
    for (int i = 0; i < 200; ++i) {
      check();
      siginfo_t info{};
      if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid == pid) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    check();
    close(in[1]);
    KillReap(pid);
    ++checked;
    if (!worst.empty()) r.Breach(bin + " ran with " + worst);
  }
  if (!r.breached()) {
    r.Held(std::to_string(checked) +
           " privileged binaries ran as uid 1000 without caps (nosuid + "
           "no_new_privs)");
  }
}

ESCAPE_PROBE(seccomp_removal,
             "drop the seccomp filter or no_new_privs: prctl(PR_SET_NO_NEW_PRIVS, 0), stack an "
             "allow-all filter (with TSYNC), then retry denied calls (unshare, mount, ptrace)") {
  r.Held("NNP=0 " + Outcome(prctl(PR_SET_NO_NEW_PRIVS, 0, 0, 0, 0)));
  sock_filter allow[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
  sock_fprog prog{1, allow};
  r.Held("allow-all filter " +
         Outcome(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog)));
  std::string nnp = StatusField("/proc/self/status", "NoNewPrivs");
  std::string mode = StatusField("/proc/self/status", "Seccomp");
  if (nnp != "1") r.Breach("NoNewPrivs is " + nnp);
  if (mode != "2") r.Breach("Seccomp mode is " + mode);
  int status = InChild([](void*) -> int { return unshare(CLONE_NEWUSER) == 0 ? 0 : 1; }, nullptr);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) r.Breach("unshare(CLONE_NEWUSER) now works");
  if (ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) == 0) r.Breach("ptrace now works");
  if (syscall(SYS_mount, "none", "/tmp", "tmpfs", 0, nullptr) == 0) r.Breach("mount now works");
  if (!r.breached()) r.Held("NoNewPrivs=1 Seccomp=2, denied calls still denied");
}

ESCAPE_PROBE(personality,
             "weaken the address space via personality(): READ_IMPLIES_EXEC, "
             "ADDR_NO_RANDOMIZE, MMAP_PAGE_ZERO, ADDR_COMPAT_LAYOUT") {
  for (unsigned long flag : {0x0400000UL, 0x0040000UL, 0x0100000UL, 0x0200000UL}) {
    long rc = personality(PER_LINUX | flag);
    int cur = personality(0xffffffff);
    if (rc != -1 && (static_cast<unsigned long>(cur) & flag) != 0) {
      r.Breach("personality flag " + std::to_string(flag) + " set");
      personality(PER_LINUX);
    } else {
      r.Held("flag 0x" +
             [&] {
               char b[16];
               std::snprintf(b, sizeof(b), "%lx", flag);
               return std::string(b);
             }() +
             " " + (rc == -1 ? ErrnoName(errno) : "ignored"));
    }
  }
}

namespace {
long Int80(long nr, long a1) {
  long ret;
  asm volatile("int $0x80" : "=a"(ret) : "a"(nr), "b"(a1) : "memory");
  return ret;
}
int I386Getpid(void*) { return Int80(20, 0) > 0 ? 0 : 1; }                 // __NR_getpid (i386)
int I386Unshare(void*) { return Int80(310, CLONE_NEWUSER) == 0 ? 0 : 1; }  // __NR_unshare (i386)
int X32Getpid(void*) { return syscall(0x40000000 | SYS_getpid) > 0 ? 0 : 1; }
int X32Unshare(void*) { return syscall(0x40000000 | SYS_unshare, CLONE_NEWUSER) == 0 ? 0 : 1; }

std::string Describe(int status) {
  if (WIFSIGNALED(status)) return std::string("killed by ") + sigabbrev_np(WTERMSIG(status));
  return "exit " + std::to_string(WEXITSTATUS(status));
}
}  // namespace

ESCAPE_PROBE(foreign_abi,
             "bypass the x86_64 seccomp filter through the i386 (int 0x80) and x32 syscall ABIs: "
             "getpid and unshare(CLONE_NEWUSER)") {
  struct Case {
    const char* what;
    int (*fn)(void*);
  };
  for (const Case& c : {Case{"i386 getpid", I386Getpid}, Case{"i386 unshare", I386Unshare},
                        Case{"x32 getpid", X32Getpid}, Case{"x32 unshare", X32Unshare}}) {
    int status = InChild(c.fn, nullptr);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      r.Breach(std::string(c.what) + " executed");
    } else {
      r.Held(std::string(c.what) + " " + Describe(status));
    }
  }
}

ESCAPE_PROBE(rlimit_raise,
             "raise hard rlimits above their values (NOFILE, NPROC, CORE, AS, CPU, FSIZE, "
             "MEMLOCK, RTPRIO, NICE)") {
  struct Res {
    int res;
    const char* name;
  };
  for (const Res& x :
       {Res{RLIMIT_NOFILE, "NOFILE"}, Res{RLIMIT_NPROC, "NPROC"}, Res{RLIMIT_CORE, "CORE"},
        Res{RLIMIT_AS, "AS"}, Res{RLIMIT_CPU, "CPU"}, Res{RLIMIT_FSIZE, "FSIZE"},
        Res{RLIMIT_MEMLOCK, "MEMLOCK"}, Res{RLIMIT_RTPRIO, "RTPRIO"}, Res{RLIMIT_NICE, "NICE"}}) {
    rlimit lim;
    if (getrlimit(x.res, &lim) != 0) continue;
    if (lim.rlim_max == RLIM_INFINITY) continue;
    rlimit more = lim;
    more.rlim_max = lim.rlim_max + 1;
    more.rlim_cur = more.rlim_max;
    if (setrlimit(x.res, &more) == 0) {
      r.Breach(std::string("raised hard RLIMIT_") + x.name);
      setrlimit(x.res, &lim);
    } else {
      r.Held(std::string(x.name) + " " + ErrnoName(errno));
    }
  }
}

ESCAPE_PROBE(realtime_sched,
             "starve the host CPU: SCHED_FIFO/SCHED_RR, nice -20, realtime I/O priority") {
  sched_param sp{};
  sp.sched_priority = 1;
  if (sched_setscheduler(0, SCHED_FIFO, &sp) == 0) {
    r.Breach("SCHED_FIFO granted");
    sp.sched_priority = 0;
    sched_setscheduler(0, SCHED_OTHER, &sp);
  } else {
    r.Held("SCHED_FIFO " + ErrnoName(errno));
  }
  sp.sched_priority = 1;
  if (sched_setscheduler(0, SCHED_RR, &sp) == 0) {
    r.Breach("SCHED_RR granted");
    sp.sched_priority = 0;
    sched_setscheduler(0, SCHED_OTHER, &sp);
  } else {
    r.Held("SCHED_RR " + ErrnoName(errno));
  }
  if (setpriority(PRIO_PROCESS, 0, -20) == 0 && getpriority(PRIO_PROCESS, 0) < 0) {
    r.Breach("nice -20 granted");
  } else {
    r.Held("nice -20 " + ErrnoName(errno));
  }
  // IOPRIO_CLASS_RT (1) << 13 | level 0, for IOPRIO_WHO_PROCESS (1), self.
  if (syscall(SYS_ioprio_set, 1, 0, (1 << 13)) == 0) {
    r.Breach("realtime I/O priority granted");
  } else {
    r.Held("ioprio RT " + ErrnoName(errno));
  }
}

}  // namespace deepbox::escape
