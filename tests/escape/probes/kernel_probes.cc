// Kernel attack surface: calls a workload never needs must be refused before they act.
// Where a call could do harm if it were allowed, it is made with arguments that fail
// harmlessly AFTER the permission check, so "errno != EPERM" means the check passed.
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/io_uring.h>
#include <linux/perf_event.h>
#include <linux/reboot.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/swap.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/timex.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "probe.h"

namespace deepbox::escape {
namespace {

// Records a call that must fail with EPERM (or ENOSYS: not in this kernel).
void MustBePerm(Report& r, const std::string& what, long rc) {
  int e = errno;
  if (rc >= 0) {
    r.Breach(what + " succeeded");
  } else if (e == EPERM || e == ENOSYS || e == EACCES) {
    r.Held(what + " " + ErrnoName(e));
  } else {
    r.Breach(what + " passed the permission check (" + ErrnoName(e) + ")");
  }
}

// Records a call that must not return a file descriptor.
void MustNotGiveFd(Report& r, const std::string& what, long fd) {
  if (fd >= 0) {
    r.Breach(what + " returned an fd");
    close(static_cast<int>(fd));
  } else {
    r.Held(what + " " + ErrnoName(errno));
  }
}

}  // namespace

ESCAPE_PROBE(mount,
             "mount: tmpfs, bind / and /proc/1/root, remount / and /usr read-write, "
             "proc, cgroup v1 (release_agent), umount /proc masks, new mount API") {
  mkdir("/tmp/escape-mnt", 0755);
  MustBePerm(r, "mount tmpfs", mount("none", "/tmp/escape-mnt", "tmpfs", 0, nullptr));
  MustBePerm(r, "bind /", mount("/", "/tmp/escape-mnt", nullptr, MS_BIND | MS_REC, nullptr));
  MustBePerm(r, "bind /proc/1/root",
             mount("/proc/1/root", "/tmp/escape-mnt", nullptr, MS_BIND, nullptr));
  MustBePerm(r, "remount / rw", mount(nullptr, "/", nullptr, MS_REMOUNT | MS_BIND, nullptr));
  MustBePerm(r, "remount /usr rw", mount(nullptr, "/usr", nullptr, MS_REMOUNT | MS_BIND, nullptr));
  MustBePerm(r, "mount proc", mount("proc", "/tmp/escape-mnt", "proc", 0, nullptr));
  MustBePerm(r, "mount cgroup", mount("cgroup", "/tmp/escape-mnt", "cgroup", 0, "memory"));
  MustBePerm(r, "umount /proc/kcore mask", umount2("/proc/kcore", MNT_DETACH));
  MustBePerm(r, "umount /proc/sys", umount2("/proc/sys", MNT_DETACH));
  MustBePerm(r, "fsopen(tmpfs)", syscall(SYS_fsopen, "tmpfs", 0));
  MustBePerm(r, "open_tree(/)", syscall(SYS_open_tree, AT_FDCWD, "/", 1 /*OPEN_TREE_CLONE*/));
  struct {
    uint64_t attr_set, attr_clr, propagation, userns_fd;
  } attr{0, 0x1 /*MOUNT_ATTR_RDONLY*/, 0, 0};
  MustBePerm(r, "mount_setattr(/usr, clear RDONLY)",
             syscall(SYS_mount_setattr, AT_FDCWD, "/usr", 0, &attr, sizeof(attr)));
  rmdir("/tmp/escape-mnt");
}

ESCAPE_PROBE(unshare_userns,
             "create namespaces: unshare(CLONE_NEWUSER) and every other CLONE_NEW*, clone() "
             "with CLONE_NEWUSER, clone3 (flags hidden from seccomp)") {
  struct Flag {
    int flag;
    const char* name;
  };
  for (const Flag& f :
       {Flag{CLONE_NEWUSER, "user"}, Flag{CLONE_NEWNS, "mnt"}, Flag{CLONE_NEWPID, "pid"},
        Flag{CLONE_NEWNET, "net"}, Flag{CLONE_NEWUTS, "uts"}, Flag{CLONE_NEWIPC, "ipc"},
        Flag{CLONE_NEWCGROUP, "cgroup"}, Flag{0x80 /*NEWTIME*/, "time"}}) {
    int status =
        InChild([](void* a) -> int { return unshare(*static_cast<int*>(a)) == 0 ? 0 : errno; },
                const_cast<int*>(&f.flag));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      r.Breach(std::string("unshare(") + f.name + ")");
    } else {
      r.Held(std::string("unshare ") + f.name + " " +
             (WIFEXITED(status) ? ErrnoName(WEXITSTATUS(status)) : "killed"));
    }
  }
  long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
  if (pid == 0) _exit(0);
  if (pid > 0) {
    r.Breach("clone(CLONE_NEWUSER)");
    waitpid(static_cast<pid_t>(pid), nullptr, 0);
  } else {
    r.Held("clone(NEWUSER) " + ErrnoName(errno));
  }
  struct {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
  } args3{};
  args3.flags = CLONE_NEWUSER;
  args3.exit_signal = SIGCHLD;
  pid = syscall(SYS_clone3, &args3, sizeof(args3));
  if (pid == 0) _exit(0);
  if (pid > 0) {
    r.Breach("clone3(CLONE_NEWUSER)");
    waitpid(static_cast<pid_t>(pid), nullptr, 0);
  } else {
    r.Held("clone3 " + ErrnoName(errno));
  }
}

ESCAPE_PROBE(setns,
             "join other namespaces: setns() on every /proc/1/ns/* and /proc/self/ns/*, on a "
             "pidfd, and NS_GET_PARENT/NS_GET_USERNS to reach the host's user namespace") {
  for (const char* pid : {"1", "self"}) {
    for (const char* ns : {"user", "mnt", "pid", "net", "uts", "ipc", "cgroup", "time"}) {
      std::string p = std::string("/proc/") + pid + "/ns/" + ns;
      int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      if (setns(fd, 0) == 0) {
        r.Breach("setns " + p);
      } else if (std::string(pid) == "1") {
        r.Held(std::string(ns) + " " + ErrnoName(errno));
      }
      close(fd);
    }
  }
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, 1, 0));
  if (pidfd >= 0) {
    MustBePerm(r, "setns(pidfd of 1)", setns(pidfd, CLONE_NEWNS | CLONE_NEWNET));
    close(pidfd);
  }
  int user = open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC);
  constexpr unsigned long kNsGetUserns = 0xb701, kNsGetParent = 0xb702;  // _IO(0xb7, 1/2)
  MustNotGiveFd(r, "NS_GET_PARENT(user)", ioctl(user, kNsGetParent));
  int net = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  long owner = ioctl(net, kNsGetUserns);  // our own user ns: allowed, harmless
  if (owner >= 0) {
    MustNotGiveFd(r, "NS_GET_PARENT(owner of netns)", ioctl(static_cast<int>(owner), kNsGetParent));
    close(static_cast<int>(owner));
  }
  close(user);
  close(net);
}

ESCAPE_PROBE(chroot_escape,
             "classic chroot escape: chroot into a subdir keeping an fd to the old root, "
             "fchdir out and chroot('.') (ARGS: HOSTDIR TOKEN to look for the host)") {
  mkdir("/tmp/escape-jail", 0755);
  int old = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (chroot("/tmp/escape-jail") != 0) {
    r.Held("chroot " + ErrnoName(errno));
  } else {
    r.Breach("chroot() allowed");
    if (fchdir(old) == 0) {
      for (int i = 0; i < 64; ++i) (void)!chdir("..");
      (void)!chroot(".");
    }
    std::string s;
    if (args.size() >= 2 && ReadFile(args[0] + "/marker", &s) && Contains(s, args[1])) {
      r.Breach("the host marker is reachable after the chroot escape");
    }
  }
  close(old);
}

ESCAPE_PROBE(pivot_root, "pivot_root() to a directory of the sandbox") {
  mkdir("/tmp/escape-pr", 0755);
  mkdir("/tmp/escape-pr/old", 0755);
  MustBePerm(r, "pivot_root", syscall(SYS_pivot_root, "/tmp/escape-pr", "/tmp/escape-pr/old"));
}

ESCAPE_PROBE(open_by_handle,
             "'shocker': open_by_handle_at() with a forged handle for the root inode of the "
             "workspace's host filesystem; name_to_handle_at()") {
  struct {
    file_handle fh;
    unsigned char bytes[MAX_HANDLE_SZ];
  } h{};
  h.fh.handle_bytes = 8;
  h.fh.handle_type = 1;          // FILEID_INO32_GEN
  uint32_t ino_gen[2] = {2, 0};  // inode 2: the root of an ext4 filesystem
  std::memcpy(h.fh.f_handle, ino_gen, sizeof(ino_gen));
  int mount_fd = open("/workspace", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  MustNotGiveFd(r, "open_by_handle_at(ino 2)",
                syscall(SYS_open_by_handle_at, mount_fd, &h.fh, O_RDONLY));
  h.fh.handle_bytes = MAX_HANDLE_SZ;
  int mnt_id = 0;
  MustBePerm(r, "name_to_handle_at(/workspace)",
             syscall(SYS_name_to_handle_at, AT_FDCWD, "/workspace", &h.fh, &mnt_id, 0));
  close(mount_fd);
}

ESCAPE_PROBE(kexec,
             "load a new kernel: kexec_load, kexec_file_load (invalid args after the cap "
             "check)") {
  MustBePerm(r, "kexec_load", syscall(SYS_kexec_load, 0, 0, nullptr, 0xdead0000UL));
  MustBePerm(r, "kexec_file_load", syscall(SYS_kexec_file_load, -1, -1, 0, "", 0));
}

ESCAPE_PROBE(kernel_modules,
             "load/unload kernel modules: init_module (garbage image), finit_module(/dev/null), "
             "delete_module(nonexistent)") {
  char junk[4] = {0, 0, 0, 0};
  MustBePerm(r, "init_module", syscall(SYS_init_module, junk, sizeof(junk), ""));
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  MustBePerm(r, "finit_module", syscall(SYS_finit_module, fd, "", 0));
  close(fd);
  MustBePerm(r, "delete_module", syscall(SYS_delete_module, "deepbox_no_such_module", O_NONBLOCK));
}

ESCAPE_PROBE(bpf, "load eBPF: BPF_PROG_LOAD of a 2-insn socket filter, BPF_MAP_CREATE") {
  bpf_insn insns[2] = {};
  insns[0].code = BPF_ALU64 | BPF_MOV | BPF_K;  // r0 = 0
  insns[1].code = BPF_JMP | BPF_EXIT;
  bpf_attr attr{};
  attr.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
  attr.insns = reinterpret_cast<uint64_t>(insns);
  attr.insn_cnt = 2;
  attr.license = reinterpret_cast<uint64_t>("GPL");
  MustNotGiveFd(r, "BPF_PROG_LOAD", syscall(SYS_bpf, BPF_PROG_LOAD, &attr, sizeof(attr)));
  bpf_attr map{};
  map.map_type = BPF_MAP_TYPE_ARRAY;
  map.key_size = 4;
  map.value_size = 4;
  map.max_entries = 1;
  MustNotGiveFd(r, "BPF_MAP_CREATE", syscall(SYS_bpf, BPF_MAP_CREATE, &map, sizeof(map)));
}

ESCAPE_PROBE(perf_event_open,
             "perf_event_open: a software cpu-clock counter on itself, and a "
             "system-wide one") {
  perf_event_attr attr{};
  attr.type = PERF_TYPE_SOFTWARE;
  attr.size = sizeof(attr);
  attr.config = PERF_COUNT_SW_CPU_CLOCK;
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  MustNotGiveFd(r, "self", syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0));
  attr.exclude_kernel = 0;
  MustNotGiveFd(r, "cpu 0 system-wide", syscall(SYS_perf_event_open, &attr, -1, 0, -1, 0));
}

ESCAPE_PROBE(userfaultfd, "userfaultfd(): the syscall and /dev/userfaultfd") {
  MustNotGiveFd(r, "userfaultfd()", syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  MustNotGiveFd(r, "/dev/userfaultfd", open("/dev/userfaultfd", O_RDWR | O_CLOEXEC));
}

ESCAPE_PROBE(io_uring, "io_uring_setup() (io_uring operations bypass seccomp)") {
  io_uring_params p{};
  MustNotGiveFd(r, "io_uring_setup", syscall(SYS_io_uring_setup, 4, &p));
}

ESCAPE_PROBE(keyctl,
             "the kernel keyring (not namespaced): add_key, request_key, keyctl on the "
             "user and session keyrings") {
  MustBePerm(
      r, "add_key",
      syscall(SYS_add_key, "user", "deepbox-escape", "x", 1, -2 /*KEY_SPEC_PROCESS_KEYRING*/));
  MustBePerm(r, "request_key", syscall(SYS_request_key, "user", "deepbox-escape", nullptr, 0));
  MustBePerm(r, "keyctl(GET_KEYRING_ID user)",
             syscall(SYS_keyctl, 0 /*GET_KEYRING_ID*/, -4 /*USER_KEYRING*/, 0));
  MustBePerm(r, "keyctl(JOIN_SESSION)", syscall(SYS_keyctl, 1 /*JOIN_SESSION_KEYRING*/, nullptr));
}

ESCAPE_PROBE(mknod,
             "create device nodes: block 8:0 (sda), char 1:1 (/dev/mem), 1:2 (kmem) in "
             "/tmp and /workspace") {
  struct Node {
    const char* path;
    mode_t type;
    unsigned maj, min;
  };
  for (const Node& n :
       {Node{"/tmp/escape-sda", S_IFBLK, 8, 0}, Node{"/tmp/escape-mem", S_IFCHR, 1, 1},
        Node{"/workspace/escape-kmem", S_IFCHR, 1, 2}}) {
    if (mknod(n.path, n.type | 0666, makedev(n.maj, n.min)) == 0) {
      r.Breach(std::string("mknod ") + n.path);
      int fd = open(n.path, O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        r.Breach(std::string("opened device ") + n.path);
        close(fd);
      }
      unlink(n.path);
    } else {
      r.Held(std::string(n.path) + " " + ErrnoName(errno));
    }
  }
}

ESCAPE_PROBE(dev_access,
             "open host devices: disks, /dev/mem, kmem, port, kmsg, loop, fuse, kvm, net/tun, "
             "console, tty0, mapper, vhost, hpet, watchdog") {
  int found = 0;
  for (const char* p : {"/dev/sda",
                        "/dev/vda",
                        "/dev/xvda",
                        "/dev/nvme0n1",
                        "/dev/mem",
                        "/dev/kmem",
                        "/dev/port",
                        "/dev/kmsg",
                        "/dev/loop0",
                        "/dev/loop-control",
                        "/dev/fuse",
                        "/dev/kvm",
                        "/dev/net/tun",
                        "/dev/console",
                        "/dev/tty0",
                        "/dev/tty1",
                        "/dev/mapper/control",
                        "/dev/vhost-net",
                        "/dev/vhost-vsock",
                        "/dev/hpet",
                        "/dev/watchdog",
                        "/dev/cpu/0/msr",
                        "/dev/dri/card0",
                        "/dev/vsock",
                        "/dev/btrfs-control",
                        "/dev/uinput",
                        "/dev/rtc0"}) {
    int fd = open(p, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd >= 0) {
      r.Breach(std::string("opened ") + p);
      close(fd);
    } else if (errno != ENOENT) {
      r.Held(std::string(p) + " " + ErrnoName(errno));
    } else {
      ++found;
    }
  }
  r.Held(std::to_string(found) + " device paths absent");
}

ESCAPE_PROBE(tiocsti,
             "inject keystrokes with TIOCSTI (and TIOCLINUX) into a terminal: /dev/tty, "
             "stdin/stdout, and a pty pair it opens itself") {
  int tty = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (tty >= 0) {
    char c = '#';
    if (ioctl(tty, TIOCSTI, &c) == 0) r.Breach("TIOCSTI into the controlling terminal");
    close(tty);
  } else {
    r.Held("/dev/tty " + ErrnoName(errno) + " (no controlling terminal)");
  }
  for (int fd : {0, 1, 2}) {
    if (isatty(fd)) {
      char c = '#';
      if (ioctl(fd, TIOCSTI, &c) == 0) r.Breach("TIOCSTI on fd " + std::to_string(fd));
    }
  }
  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master >= 0 && grantpt(master) == 0 && unlockpt(master) == 0) {
    int slave = open(ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
    char c = '#';
    MustBePerm(r, "TIOCSTI on a pty", ioctl(slave, TIOCSTI, &c));
    char sub = 2;  // TIOCL_SETSEL-ish subcode; TIOCLINUX must be refused
    MustBePerm(r, "TIOCLINUX", ioctl(slave, TIOCLINUX, &sub));
    close(slave);
    close(master);
  } else {
    r.Held("no pty: " + ErrnoName(errno));
  }
}

ESCAPE_PROBE(sethostname,
             "change the hostname/domainname (must at most affect the sandbox's UTS namespace; "
             "the driver checks the host's)") {
  const char name[] = "deepbox-escaped";
  MustBePerm(r, "sethostname", sethostname(name, sizeof(name) - 1));
  MustBePerm(r, "setdomainname", setdomainname(name, sizeof(name) - 1));
  utsname u;
  uname(&u);
  r.Held(std::string("hostname is ") + u.nodename);
}

ESCAPE_PROBE(clock_settime,
             "set the (not namespaced) clock to its current value: clock_settime, "
             "settimeofday, clock_adjtime/adjtimex") {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  MustBePerm(r, "clock_settime", clock_settime(CLOCK_REALTIME, &now));
  timeval tv;
  gettimeofday(&tv, nullptr);
  MustBePerm(r, "settimeofday", settimeofday(&tv, nullptr));
  timex tx{};
  tx.modes = ADJ_TICK;  // tick 0 is out of range: EINVAL once CAP_SYS_TIME is granted
  tx.tick = 0;
  MustBePerm(r, "clock_adjtime(ADJ_TICK)", syscall(SYS_clock_adjtime, CLOCK_REALTIME, &tx));
}

ESCAPE_PROBE(reboot,
             "reboot(2) with an invalid command (EINVAL would mean the CAP_SYS_BOOT check "
             "passed)") {
  MustBePerm(r, "reboot",
             syscall(SYS_reboot, LINUX_REBOOT_MAGIC1, LINUX_REBOOT_MAGIC2, 0xdeadbeef, nullptr));
}

ESCAPE_PROBE(swapon,
             "swapon/swapoff on a nonexistent file (ENOENT would mean the cap check "
             "passed)") {
  MustBePerm(r, "swapon", swapon("/workspace/escape-no-such-swap", 0));
  MustBePerm(r, "swapoff", swapoff("/workspace/escape-no-such-swap"));
}

ESCAPE_PROBE(acct, "enable host-wide process accounting: acct(nonexistent path)") {
  MustBePerm(r, "acct", acct("/workspace/escape-no-such-dir/acct"));
}

ESCAPE_PROBE(quotactl_ioperm,
             "host quotas and raw I/O ports: quotactl, iopl(3), ioperm, "
             "modify_ldt, lookup_dcookie, fanotify_init, syslog") {
  // quotactl resolves its device before checking rights: ENOENT/ENOTBLK also hold.
  constexpr long kGetUserQuota = 0x80000700L;  // QCMD(Q_GETQUOTA, USRQUOTA)
  long q = syscall(SYS_quotactl, kGetUserQuota, "/workspace", 0, nullptr);
  if (q >= 0 || (errno != EPERM && errno != ENOENT && errno != ENOTBLK && errno != ENODEV)) {
    r.Breach("quotactl " + Outcome(q));
  } else {
    r.Held("quotactl " + ErrnoName(errno));
  }
  MustBePerm(r, "iopl(3)", syscall(SYS_iopl, 3));
  MustBePerm(r, "ioperm", syscall(SYS_ioperm, 0x80, 1, 1));
  char ldt[16] = {};
  MustBePerm(r, "modify_ldt(read)", syscall(SYS_modify_ldt, 0, ldt, sizeof(ldt)));
  MustNotGiveFd(r, "fanotify_init", syscall(SYS_fanotify_init, 0, O_RDONLY));
  char buf[64];
  MustBePerm(r, "syslog(READ_ALL)", syscall(SYS_syslog, 3, buf, sizeof(buf)));
}

}  // namespace deepbox::escape
