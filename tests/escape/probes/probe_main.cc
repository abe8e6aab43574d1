// escape_probe NAME [ARGS...]: runs one probe (see probe.h); --list prints them all.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "probe.h"

namespace deepbox::escape {

int Report::Finish() const {
  const char* verdict = breached_ ? "BREACH" : (error_ ? "ERROR" : "HELD");
  std::printf("%s: %s: %s\n", name_.c_str(), verdict, text_.c_str());
  std::fflush(stdout);
  if (breached_) return 0;
  return error_ ? 2 : 1;
}

namespace {
std::vector<ProbeInfo>& Registry() {
  static std::vector<ProbeInfo> probes;
  return probes;
}
}  // namespace

Registrar::Registrar(const char* name, const char* tries, ProbeFn fn) {
  Registry().push_back({name, tries, fn});
}

const std::vector<ProbeInfo>& AllProbes() { return Registry(); }

std::string ErrnoName(int err) {
  const char* n = strerrorname_np(err);
  return n != nullptr ? n : "errno " + std::to_string(err);
}

std::string Outcome(long rc) { return rc < 0 ? ErrnoName(errno) : "ok"; }

bool ReadFile(const std::string& path, std::string* out, size_t max) {
  out->clear();
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  char buf[8192];
  while (out->size() < max) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      close(fd);
      errno = e;
      return false;
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return true;
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return !needle.empty() && haystack.find(needle) != std::string::npos;
}

std::string Arg(const Args& args, size_t i) { return i < args.size() ? args[i] : ""; }

std::string StatusField(const std::string& status_path, const std::string& key) {
  std::string s;
  if (!ReadFile(status_path, &s)) return "";
  std::string k = "\n" + key + ":";
  size_t pos = s.find(k);
  if (pos == std::string::npos) return "";
  pos += k.size();
  size_t end = s.find('\n', pos);
  std::string v = s.substr(pos, end - pos);
  size_t b = v.find_first_not_of(" \t");
  return b == std::string::npos ? "" : v.substr(b);
}

int InChild(int (*fn)(void*), void* arg) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) _exit(fn(arg));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

std::vector<int> ProcPids() {
  std::vector<int> pids;
  DIR* d = opendir("/proc");
  if (d == nullptr) return pids;
  while (dirent* e = readdir(d)) {
    bool numeric = e->d_name[0] != '\0';
    for (const char* p = e->d_name; *p != '\0'; ++p) numeric &= (*p >= '0' && *p <= '9');
    if (numeric) pids.push_back(std::atoi(e->d_name));
  }
  closedir(d);
  return pids;
}

bool InsideSandbox() {
  std::string comm;
  return ReadFile("/proc/1/comm", &comm) && Contains(comm, "sandboxd");
}

}  // namespace deepbox::escape

int main(int argc, char** argv) {
  using deepbox::escape::AllProbes;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s NAME [ARGS...] | --list\n", argv[0]);
    return 2;
  }
  std::string name = argv[1];
  if (name == "--list") {
    for (const auto& p : AllProbes()) std::printf("%s\t%s\n", p.name, p.tries);
    return 0;
  }
  deepbox::escape::Args args(argv + 2, argv + argc);
  for (const auto& p : AllProbes()) {
    if (name == p.name) {
      deepbox::escape::Report report(name);
      p.fn(report, args);
      return report.Finish();
    }
  }
  std::fprintf(stderr, "unknown probe '%s'\n", name.c_str());
  return 2;
}
