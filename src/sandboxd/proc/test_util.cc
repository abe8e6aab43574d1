#include "sandboxd/proc/test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace deepbox::sandboxd::proc::testing {
namespace {

struct Stat {
  char state = 0;
  pid_t ppid = 0;
  pid_t pgrp = 0;
};

bool ReadStat(pid_t pid, Stat* out) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return false;
  size_t paren = line.rfind(')');
  if (paren == std::string::npos) return false;
  std::istringstream rest(line.substr(paren + 1));
  rest >> out->state >> out->ppid >> out->pgrp;
  return static_cast<bool>(rest);
}

std::vector<pid_t> AllPids() {
  std::vector<pid_t> pids;
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      char* end = nullptr;
      long v = strtol(e->d_name, &end, 10);
      if (end != e->d_name && *end == '\0' && v > 0) pids.push_back(static_cast<pid_t>(v));
    }
    closedir(d);
  }
  return pids;
}

}  // namespace

std::vector<pid_t> LiveGroupMembers(pid_t pgid) {
  std::vector<pid_t> out;
  for (pid_t pid : AllPids()) {
    Stat s;
    if (ReadStat(pid, &s) && s.pgrp == pgid && s.state != 'Z' && s.state != 'X') {
      out.push_back(pid);
    }
  }
  return out;
}

char ProcState(pid_t pid) {
  Stat s;
  return ReadStat(pid, &s) ? s.state : 0;
}

pid_t ParentOf(pid_t pid) {
  Stat s;
  return ReadStat(pid, &s) ? s.ppid : 0;
}

std::vector<pid_t> ZombieChildrenOfSelf() {
  std::vector<pid_t> out;
  const pid_t self = getpid();
  for (pid_t pid : AllPids()) {
    Stat s;
    if (ReadStat(pid, &s) && s.ppid == self && s.state == 'Z') out.push_back(pid);
  }
  return out;
}

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds bound) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

void WriteFile(const std::string& path, const std::string& content, int mode) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << content;
  }
  chmod(path.c_str(), static_cast<mode_t>(mode));
}

}  // namespace deepbox::sandboxd::proc::testing
