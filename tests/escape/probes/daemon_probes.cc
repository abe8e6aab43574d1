// Probes against the sandbox's own daemon: take over its socket, kill it and
// answer in its place, borrow its listening fd. The daemon's socket lives in a
// host directory the sandbox cannot see, and its listener is held by the
// daemon alone (see src/local/daemon_socket.h); the driver checks from the
// host that only the real daemon ever answers.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "probe.h"

namespace deepbox::escape {
namespace {

constexpr const char* kImpostorLog = "/workspace/impostor.log";

// Paths of named unix sockets visible in this network namespace (the daemon's
// socket would be listed here if it were bound inside the sandbox).
std::vector<std::string> VisibleUnixSocketPaths() {
  std::vector<std::string> out;
  std::string table;
  if (!ReadFile("/proc/net/unix", &table)) return out;
  size_t pos = 0;
  while (pos < table.size()) {
    size_t eol = table.find('\n', pos);
    if (eol == std::string::npos) eol = table.size();
    std::string line = table.substr(pos, eol - pos);
    pos = eol + 1;
    size_t slash = line.find(" /");
    if (slash != std::string::npos) out.push_back(line.substr(slash + 1));
  }
  return out;
}

int ListenAt(const std::string& path) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(s, 64) != 0) {
    int e = errno;
    close(s);
    errno = e;
    return -1;
  }
  return s;
}

// A detached impostor that answers every connection on `fds` as if it were the
// daemon (HTTP 200 carrying `token`) and logs each one, for `seconds`.
void StartImpostor(const std::vector<int>& fds, const std::string& token, int seconds) {
  if (fds.empty()) return;
  pid_t pid = fork();
  if (pid != 0) return;
  setsid();
  int devnull = open("/dev/null", O_RDWR);
  dup2(devnull, 0);
  dup2(devnull, 1);
  dup2(devnull, 2);
  alarm(static_cast<unsigned>(seconds));
  for (int fd : fds) fcntl(fd, F_SETFL, O_NONBLOCK);
  const std::string body = "{\"impostor\":\"" + token + "\"}";
  const std::string reply =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  for (;;) {
    for (int fd : fds) {
      int c = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      int log = open(kImpostorLog, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (log >= 0) {
        (void)!write(log, "accepted\n", 9);
        close(log);
      }
      char buf[4096];
      (void)!read(c, buf, sizeof buf);
      (void)!write(c, reply.data(), reply.size());
      close(c);
    }
    usleep(2000);
  }
}

// Every plausible place for the daemon's socket, as seen from inside.
std::vector<std::string> CandidatePaths() {
  std::vector<std::string> paths = {"/.deepbox/run/sandboxd.sock", "/.deepbox/sandboxd.sock",
                                    "/run/sandboxd.sock", "/tmp/sandboxd.sock",
                                    "/workspace/sandboxd.sock"};
  for (const auto& p : VisibleUnixSocketPaths()) paths.push_back(p);
  return paths;
}

}  // namespace

ESCAPE_PROBE(daemon_socket_takeover,
             "take over the daemon's socket from inside (ARGS: TOKEN): find it (/.deepbox/run, "
             "/proc/net/unix), unlink it, rename over it, bind an impostor there and at every "
             "plausible path, and answer for 20 s; the driver then talks to the daemon and "
             "checks that only the real one answers") {
  const std::string token = Arg(args, 0);
  if (token.empty()) return r.Error("usage: daemon_socket_takeover TOKEN");
  std::vector<int> fds;
  for (const auto& path : CandidatePaths()) {
    struct stat st {};
    if (lstat(path.c_str(), &st) == 0) {
      r.Held(path + " exists (" + (S_ISSOCK(st.st_mode) ? "socket" : "not a socket") + ")");
      if (unlink(path.c_str()) == 0) {
        r.Held("unlinked " + path);
      } else {
        r.Held("unlink " + path + " " + ErrnoName(errno));
        std::string aside = path + ".impostor";
        int s = ListenAt(aside);
        if (s >= 0 && rename(aside.c_str(), path.c_str()) == 0) {
          r.Held("renamed an impostor over " + path);
          fds.push_back(s);
          continue;
        }
        if (s >= 0) close(s);
      }
    }
    if (mkdir("/.deepbox/run", 0755) == 0) r.Held("created /.deepbox/run");
    int s = ListenAt(path);
    if (s >= 0) {
      r.Held("impostor listening on " + path);
      fds.push_back(s);
    } else {
      r.Held("bind " + path + " " + ErrnoName(errno));
    }
  }
  StartImpostor(fds, token, 20);
  r.Held("verdict by the driver (impostor log " + std::string(kImpostorLog) + ")");
}

ESCAPE_PROBE(
    daemon_kill_impersonate,
    "kill the daemon (pid 1) with SIGKILL, SIGTERM, SIGINT, SIGQUIT, SIGSEGV, SIGSTOP, and "
    "bind an impostor where its socket could be (ARGS: TOKEN); the driver checks that the "
    "host then reaches the real daemon or nothing, never the impostor") {
  const std::string token = Arg(args, 0);
  if (token.empty()) return r.Error("usage: daemon_kill_impersonate TOKEN");
  std::vector<int> fds;
  for (const auto& path : CandidatePaths()) {
    int s = ListenAt(path);
    if (s >= 0) fds.push_back(s);
  }
  StartImpostor(fds, token, 20);
  for (int sig : {SIGKILL, SIGTERM, SIGINT, SIGQUIT, SIGSEGV, SIGSTOP, SIGHUP}) {
    r.Held(std::string("kill(1, ") + sigabbrev_np(sig) + ") " + Outcome(kill(1, sig)));
  }
  r.Held("verdict by the driver");
}

ESCAPE_PROBE(daemon_fd_steal,
             "borrow the daemon's listening socket: any listening socket among our own fds, "
             "/proc/1/fd/* (open, readlink), pidfd_getfd on pid 1, /proc/1/mem, process_vm_readv") {
  for (int fd = 0; fd < 1024; ++fd) {
    int accepting = 0;
    socklen_t len = sizeof accepting;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) == 0 && accepting) {
      r.Breach("inherited a listening socket as fd " + std::to_string(fd));
    }
  }
  DIR* d = opendir("/proc/1/fd");
  if (d == nullptr) {
    r.Held("opendir /proc/1/fd " + ErrnoName(errno));
  } else {
    int n = 0;
    while (readdir(d) != nullptr) ++n;
    closedir(d);
    r.Held("listed /proc/1/fd (" + std::to_string(n) + " entries)");
  }
  for (int fd = 0; fd < 16; ++fd) {
    std::string p = "/proc/1/fd/" + std::to_string(fd);
    int o = open(p.c_str(), O_RDWR | O_CLOEXEC);
    if (o >= 0) {
      int accepting = 0;
      socklen_t len = sizeof accepting;
      if (getsockopt(o, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) == 0 && accepting) {
        r.Breach("opened the daemon's listener through " + p);
      }
      close(o);
    }
  }
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, 1, 0));
  if (pidfd < 0) {
    r.Held("pidfd_open(1) " + ErrnoName(errno));
  } else {
    int got = 0;
    for (int fd = 0; fd < 16; ++fd) {
      int stolen = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, fd, 0));
      if (stolen >= 0) {
        ++got;
        int accepting = 0;
        socklen_t len = sizeof accepting;
        if (getsockopt(stolen, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) == 0 && accepting) {
          r.Breach("pidfd_getfd took the daemon's listener (fd " + std::to_string(fd) + ")");
        }
        close(stolen);
      }
    }
    if (got > 0) r.Breach("pidfd_getfd took " + std::to_string(got) + " fds of pid 1");
    r.Held("pidfd_getfd(1, *) " + ErrnoName(errno));
    close(pidfd);
  }
  int mem = open("/proc/1/mem", O_RDONLY | O_CLOEXEC);
  if (mem >= 0) {
    r.Breach("opened /proc/1/mem");
    close(mem);
  } else {
    r.Held("/proc/1/mem " + ErrnoName(errno));
  }
  char buf[16];
  iovec local{buf, sizeof buf};
  iovec remote{reinterpret_cast<void*>(0x400000), sizeof buf};
  long n = process_vm_readv(1, &local, 1, &remote, 1, 0);
  if (n > 0) {
    r.Breach("process_vm_readv read pid 1's memory");
  } else {
    r.Held("process_vm_readv(1) " + ErrnoName(errno));
  }
}

}  // namespace deepbox::escape
