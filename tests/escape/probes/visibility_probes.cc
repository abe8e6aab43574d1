// What the sandbox can see or touch of the host: processes, environment, fds,
// IPC objects, terminals, signals.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "probe.h"

extern char** environ;

namespace deepbox::escape {

ESCAPE_PROBE(host_pids,
             "see host processes (ARGS: TESTPID): count /proc entries, look for the test "
             "process by pid and by its command line, check pid 1 is the daemon") {
  const std::string test_pid = Arg(args, 0);
  std::vector<int> pids = ProcPids();
  if (pids.size() > 20) {
    r.Breach(std::to_string(pids.size()) + " processes visible");
  } else {
    r.Held(std::to_string(pids.size()) + " processes visible");
  }
  for (int pid : pids) {
    std::string cmd;
    ReadFile("/proc/" + std::to_string(pid) + "/cmdline", &cmd);
    if (Contains(cmd, "escape_probe_test"))
      r.Breach("the test process is visible as pid " + std::to_string(pid));
  }
  struct stat st;
  if (!test_pid.empty() && stat(("/proc/" + test_pid).c_str(), &st) == 0) {
    std::string cmd;
    ReadFile("/proc/" + test_pid + "/cmdline", &cmd);
    if (Contains(cmd, "escape_probe_test")) r.Breach("/proc/" + test_pid + " is the test");
  } else {
    r.Held("/proc/" + test_pid + " " + ErrnoName(errno));
  }
  std::string comm;
  ReadFile("/proc/1/comm", &comm);
  if (Contains(comm, "systemd") || Contains(comm, "init")) r.Breach("pid 1 is the host's init");
  r.Held("pid 1 is " + comm.substr(0, comm.find('\n')));
}

ESCAPE_PROBE(env_leak,
             "find a secret from the launcher's environment (ARGS: SECRET): getenv, environ, "
             "/proc/*/environ and /proc/*/cmdline of every visible process") {
  const std::string secret = Arg(args, 0);
  if (secret.empty()) return r.Error("usage: env_leak SECRET");
  for (char** e = environ; *e != nullptr; ++e) {
    if (Contains(*e, secret)) r.Breach("own environment holds the secret");
  }
  int scanned = 0;
  for (int pid : ProcPids()) {
    if (pid == getpid()) continue;  // our own argv carries the secret to look for
    for (const char* f : {"environ", "cmdline"}) {
      std::string s;
      if (!ReadFile("/proc/" + std::to_string(pid) + "/" + f, &s)) continue;
      ++scanned;
      if (Contains(s, secret)) r.Breach("/proc/" + std::to_string(pid) + "/" + f + " holds it");
    }
  }
  if (!r.breached()) r.Held("secret absent from " + std::to_string(scanned) + " proc files");
}

ESCAPE_PROBE(fd_leak,
             "use fds inherited from the launcher (ARGS: TOKEN; the test holds a host file open "
             "without O_CLOEXEC): scan /proc/*/fd, read every fd for the token") {
  const std::string token = Arg(args, 0);
  if (token.empty()) return r.Error("usage: fd_leak TOKEN");
  std::string seen;
  for (int pid : ProcPids()) {
    std::string dir = "/proc/" + std::to_string(pid) + "/fd";
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) continue;
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::string p = dir + "/" + e->d_name;
      char target[512] = {};
      ssize_t n = readlink(p.c_str(), target, sizeof(target) - 1);
      if (n > 0) seen += std::to_string(pid) + ":" + e->d_name + "=" + target + " ";
      std::string s;
      if (ReadFile(p, &s, 1 << 16) && Contains(s, token)) {
        r.Breach("token read through " + p + " -> " + target);
      }
    }
    closedir(d);
  }
  // Our own fd table, by number (also catches fds /proc would not list).
  for (int fd = 3; fd < 1024; ++fd) {
    char buf[256];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n > 0 && Contains(std::string(buf, static_cast<size_t>(n)), token)) {
      r.Breach("token read from own fd " + std::to_string(fd));
    }
  }
  if (!r.breached()) r.Held("no fd reaches the host file; fds: " + seen);
}

ESCAPE_PROBE(ipc_namespace,
             "reach the host's IPC objects (ARGS: SHMKEY MSGKEY TOKEN): SysV shm and message "
             "queue the test created, host POSIX shm") {
  const key_t shm_key = static_cast<key_t>(std::strtol(Arg(args, 0).c_str(), nullptr, 0));
  const key_t msg_key = static_cast<key_t>(std::strtol(Arg(args, 1).c_str(), nullptr, 0));
  const std::string token = Arg(args, 2);
  int id = shmget(shm_key, 0, 0);
  if (id >= 0) {
    void* p = shmat(id, nullptr, SHM_RDONLY);
    if (p != reinterpret_cast<void*>(-1) && Contains(static_cast<const char*>(p), token)) {
      r.Breach("attached the host's SysV shm segment");
    } else {
      r.Breach("found the host's SysV shm key");
    }
  } else {
    r.Held("shmget " + ErrnoName(errno));
  }
  if (msgget(msg_key, 0) >= 0) {
    r.Breach("found the host's SysV message queue");
  } else {
    r.Held("msgget " + ErrnoName(errno));
  }
  std::string s;
  if (ReadFile("/dev/shm/deepbox-escape-" + token, &s)) {
    r.Breach("host POSIX shm object visible in /dev/shm");
  } else {
    r.Held("/dev/shm object " + ErrnoName(errno));
  }
  shmid_ds info{};
  int max = shmctl(0, SHM_INFO, &info);
  r.Held("SHM_INFO highest index " + std::to_string(max));
}

ESCAPE_PROBE(signal_host,
             "signal a host process running as the sandbox's own host uid (ARGS: PID): kill(PID), "
             "pidfd_open(PID), kill(-1) (the driver checks it survived)") {
  const pid_t pid = static_cast<pid_t>(std::atoi(Arg(args, 0).c_str()));
  if (pid <= 1) return r.Error("usage: signal_host PID");
  if (kill(pid, 0) == 0) {
    std::string comm;
    ReadFile("/proc/" + std::to_string(pid) + "/comm", &comm);
    if (!Contains(comm, "escape_probe")) r.Breach("host pid " + std::to_string(pid) + " visible");
  } else {
    r.Held("kill(" + std::to_string(pid) + ", 0) " + ErrnoName(errno));
  }
  long fd = syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) {
    std::string comm;
    ReadFile("/proc/" + std::to_string(pid) + "/comm", &comm);
    if (!Contains(comm, "escape_probe")) r.Breach("pidfd_open on the host pid");
    close(static_cast<int>(fd));
  } else {
    r.Held("pidfd_open " + ErrnoName(errno));
  }
  // kill(-1) reaches every process we may signal except pid 1 and ourselves.
  if (InsideSandbox()) r.Held("kill(-1, SIGKILL) " + Outcome(kill(-1, SIGKILL)));
}

ESCAPE_PROBE(devpts_host,
             "see the host's terminals: /dev/pts must be a fresh instance (the test holds a host "
             "pty open)") {
  DIR* d = opendir("/dev/pts");
  if (d == nullptr) return r.Held("/dev/pts " + ErrnoName(errno));
  std::string names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == ".." || n == "ptmx") continue;
    names += n + " ";
    int fd = open(("/dev/pts/" + n).c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (fd >= 0) {
      r.Breach("opened host terminal /dev/pts/" + n);
      close(fd);
    }
  }
  closedir(d);
  if (!names.empty()) {
    r.Breach("/dev/pts lists " + names);
  } else {
    r.Held("/dev/pts holds only ptmx");
  }
}

}  // namespace deepbox::escape
