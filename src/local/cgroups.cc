#include "local/cgroups.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <limits.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/strings.h"

namespace deepbox::local {
namespace {

Result<std::string> ReadFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return MakeSyscallError("open", errno, path);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeSyscallError("read", errno, path);
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Status WriteFile(const std::string& path, std::string_view content) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return MakeSyscallError("open", errno, path);
  ssize_t n = write(fd.get(), content.data(), content.size());
  if (n < 0) return MakeSyscallError("write", errno, fmt::format("{} <- {}", path, content));
  return {};
}

std::string JoinPath(std::string_view a, std::string_view b) {
  std::string out(a);
  while (!out.empty() && out.back() == '/') out.pop_back();
  if (b.empty() || b == "/") return out.empty() ? "/" : out;
  if (b.front() != '/') out += '/';
  out += b;
  return out;
}

bool ValidId(std::string_view id) {
  if (id.empty() || id.size() > 64 || id == "." || id == "..") return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

Result<std::vector<pid_t>> ReadPids(const std::string& dir) {
  auto text = ReadFile(dir + "/cgroup.procs");
  if (!text) return tl::unexpected(text.error());
  std::vector<pid_t> pids;
  std::istringstream in(*text);
  long v;
  while (in >> v) pids.push_back(static_cast<pid_t>(v));
  return pids;
}

}  // namespace

CgroupHostInfo ParseCgroupHostInfo(std::string_view mountinfo, std::string_view self_cgroup) {
  CgroupHostInfo info;
  std::map<std::string, std::string> v1_roots;
  std::istringstream in{std::string(mountinfo)};
  std::string line;
  while (std::getline(in, line)) {
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream pre(line.substr(0, dash));
    std::string id, parent, dev, root, mountpoint;
    pre >> id >> parent >> dev >> root >> mountpoint;
    std::istringstream post(line.substr(dash + 3));
    std::string fstype, source, superopts;
    post >> fstype >> source >> superopts;
    if (fstype == "cgroup2") {
      if (info.v2_mount.empty() || mountpoint == "/sys/fs/cgroup") info.v2_mount = mountpoint;
    } else if (fstype == "cgroup") {
      for (std::string_view option : Split(superopts, ',')) {
        const std::string opt(option);
        if (opt == "rw" || opt == "ro" || opt.rfind("name=", 0) == 0 ||
            opt.find('=') != std::string::npos) {
          continue;
        }
        if (!info.v1_mounts.count(opt)) {
          info.v1_mounts[opt] = mountpoint;
          v1_roots[opt] = root;
        }
      }
    }
  }
  std::istringstream cg{std::string(self_cgroup)};
  while (std::getline(cg, line)) {
    auto c1 = line.find(':');
    auto c2 = line.find(':', c1 + 1);
    if (c1 == std::string::npos || c2 == std::string::npos) continue;
    std::string controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string path = line.substr(c2 + 1);
    if (line.substr(0, c1) == "0" && controllers.empty()) {
      info.v2_self = path;
      continue;
    }
    for (std::string_view controller : Split(controllers, ',')) {
      const std::string c(controller);
      if (!info.v1_mounts.count(c)) continue;
      std::string rel = path;
      const std::string& root = v1_roots[c];
      if (root != "/" && rel.rfind(root, 0) == 0) rel = rel.substr(root.size());
      info.v1_self[c] = rel.empty() ? "/" : rel;
    }
  }
  bool has_v1 = !info.v1_mounts.empty();
  bool has_v2 = !info.v2_mount.empty();
  info.layout = has_v1 && has_v2 ? CgroupLayout::kHybrid
                : has_v1         ? CgroupLayout::kLegacy
                : has_v2         ? CgroupLayout::kUnified
                                 : CgroupLayout::kNone;
  return info;
}

Result<CgroupHostInfo> DetectCgroups() {
  auto mountinfo = ReadFile("/proc/self/mountinfo");
  if (!mountinfo) return tl::unexpected(mountinfo.error());
  auto self = ReadFile("/proc/self/cgroup");
  if (!self) return tl::unexpected(self.error());
  CgroupHostInfo info = ParseCgroupHostInfo(*mountinfo, *self);
  if (!info.v2_mount.empty()) {
    auto ctrls = ReadFile(JoinPath(info.v2_mount, info.v2_self) + "/cgroup.controllers");
    if (ctrls) {
      std::istringstream in(*ctrls);
      std::string c;
      while (in >> c) info.v2_controllers.insert(c);
    }
  }
  return info;
}

SandboxCgroup& SandboxCgroup::operator=(SandboxCgroup&& other) noexcept {
  if (this != &other) {
    (void)KillAll();
    (void)Remove();
    dirs_ = std::move(other.dirs_);
    other.dirs_.clear();
    v2_dir_ = std::move(other.v2_dir_);
    v1_ = std::move(other.v1_);
    other.v1_.clear();
    v2_fd_ = std::move(other.v2_fd_);
    support_ = std::move(other.support_);
  }
  return *this;
}

SandboxCgroup::~SandboxCgroup() {
  (void)KillAll();
  (void)Remove();
}

Result<SandboxCgroup> SandboxCgroup::Create(const CgroupHostInfo& host, std::string_view id,
                                            const Limits& limits) {
  if (!ValidId(id)) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("bad sandbox id '{}'", id));
  }
  SandboxCgroup cg;
  cg.support_.layout = host.layout;
  auto make_dir = [&](const std::string& parent) -> Result<std::string> {
    std::string base = JoinPath(parent, "deepbox");
    if (mkdir(base.c_str(), 0755) != 0 && errno != EEXIST) {
      return MakeSyscallError("mkdir", errno, base);
    }
    std::string dir = JoinPath(base, id);
    int rc = mkdir(dir.c_str(), 0755);
    if (rc != 0 && errno == ENOENT) {  // another sandbox removed the empty parent meanwhile
      (void)mkdir(base.c_str(), 0755);
      rc = mkdir(dir.c_str(), 0755);
    }
    if (rc != 0) return MakeSyscallError("mkdir", errno, dir);
    cg.dirs_.push_back(dir);
    return dir;
  };

  // cgroup v2: always try (cgroup.kill + CLONE_INTO_CGROUP need no controller).
  std::set<std::string> v2_enabled;
  if (!host.v2_mount.empty()) {
    std::string parent = JoinPath(host.v2_mount, host.v2_self);
    std::string wanted;
    for (const char* c : {"memory", "pids", "cpu"}) {
      if (host.v2_controllers.count(c)) {
        // Best effort: fails with EBUSY if the parent has processes and is not the root.
        if (WriteFile(parent + "/cgroup.subtree_control", fmt::format("+{}", c))) {
          v2_enabled.insert(c);
        }
      }
    }
    auto dir = make_dir(parent);
    if (dir) {
      std::string base = JoinPath(parent, "deepbox");
      for (auto it = v2_enabled.begin(); it != v2_enabled.end();) {
        if (WriteFile(base + "/cgroup.subtree_control", fmt::format("+{}", *it))) {
          ++it;
        } else {
          it = v2_enabled.erase(it);
        }
      }
      cg.v2_dir_ = *dir;
      cg.v2_fd_.reset(open(dir->c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!cg.v2_fd_) return MakeSyscallError("open", errno, *dir);
      struct stat st;
      bool has_kill = stat((*dir + "/cgroup.kill").c_str(), &st) == 0;
      if (has_kill) {
        cg.support_.kill_all = {true, Mechanism::kCgroupV2, "cgroup.kill"};
      }
    } else if (host.v1_mounts.empty()) {
      return tl::unexpected(dir.error());
    }
  }

  auto v1_dir = [&](const std::string& controller) -> Result<std::string> {
    auto it = cg.v1_.find(controller);
    if (it != cg.v1_.end()) return it->second;
    auto mount = host.v1_mounts.find(controller);
    if (mount == host.v1_mounts.end()) {
      return MakeError(ErrorCode::kUnavailable, "no v1 " + controller);
    }
    auto self = host.v1_self.find(controller);
    std::string parent = JoinPath(mount->second, self == host.v1_self.end() ? "/" : self->second);
    // Hierarchies shared by several controllers (cpu,cpuacct) get one dir.
    for (const auto& [c, d] : cg.v1_) {
      if (host.v1_mounts.at(c) == mount->second) {
        cg.v1_[controller] = d;
        return d;
      }
    }
    auto dir = make_dir(parent);
    if (!dir) return tl::unexpected(dir.error());
    cg.v1_[controller] = *dir;
    return *dir;
  };

  // memory
  if (v2_enabled.count("memory")) {
    cg.support_.memory = {false, Mechanism::kCgroupV2, "memory.max"};
    if (limits.memory_bytes) {
      auto st = WriteFile(cg.v2_dir_ + "/memory.max", std::to_string(*limits.memory_bytes));
      if (!st) return tl::unexpected(st.error());
      (void)WriteFile(cg.v2_dir_ + "/memory.swap.max", "0");
      cg.support_.memory.enforced = true;
    }
  } else if (host.v1_mounts.count("memory")) {
    // v1 dirs only for requested limits: each v1 attach costs an RCU grace period.
    cg.support_.memory = {false, Mechanism::kCgroupV1, "memory.limit_in_bytes"};
    if (limits.memory_bytes) {
      auto dir = v1_dir("memory");
      if (!dir) return tl::unexpected(dir.error());
      auto st = WriteFile(*dir + "/memory.limit_in_bytes", std::to_string(*limits.memory_bytes));
      if (!st) return tl::unexpected(st.error());
      if (WriteFile(*dir + "/memory.memsw.limit_in_bytes", std::to_string(*limits.memory_bytes))) {
        cg.support_.memory.detail += " + memory.memsw.limit_in_bytes (no swap)";
      }
      cg.support_.memory.enforced = true;
    }
  }
  // pids
  if (v2_enabled.count("pids")) {
    cg.support_.processes = {false, Mechanism::kCgroupV2, "pids.max"};
    if (limits.max_processes) {
      auto st = WriteFile(cg.v2_dir_ + "/pids.max", std::to_string(*limits.max_processes));
      if (!st) return tl::unexpected(st.error());
      cg.support_.processes.enforced = true;
    }
  } else if (host.v1_mounts.count("pids")) {
    cg.support_.processes = {false, Mechanism::kCgroupV1, "pids.max"};
    if (limits.max_processes) {
      auto dir = v1_dir("pids");
      if (!dir) return tl::unexpected(dir.error());
      auto st = WriteFile(*dir + "/pids.max", std::to_string(*limits.max_processes));
      if (!st) return tl::unexpected(st.error());
      cg.support_.processes.enforced = true;
    }
  }
  // cpu bandwidth
  constexpr uint64_t kPeriodUs = 100000;
  if (v2_enabled.count("cpu")) {
    cg.support_.cpu_rate = {false, Mechanism::kCgroupV2, "cpu.max"};
    if (limits.cpu_cores) {
      uint64_t quota = static_cast<uint64_t>(std::llround(*limits.cpu_cores * kPeriodUs));
      auto st = WriteFile(cg.v2_dir_ + "/cpu.max",
                          fmt::format("{} {}", std::max<uint64_t>(quota, 1000), kPeriodUs));
      if (!st) return tl::unexpected(st.error());
      cg.support_.cpu_rate.enforced = true;
    }
  } else if (host.v1_mounts.count("cpu")) {
    cg.support_.cpu_rate = {false, Mechanism::kCgroupV1, "cpu.cfs_quota_us"};
    if (limits.cpu_cores) {
      auto dir = v1_dir("cpu");
      if (!dir) return tl::unexpected(dir.error());
      uint64_t quota = static_cast<uint64_t>(std::llround(*limits.cpu_cores * kPeriodUs));
      auto st = WriteFile(*dir + "/cpu.cfs_period_us", std::to_string(kPeriodUs));
      if (!st) return tl::unexpected(st.error());
      st = WriteFile(*dir + "/cpu.cfs_quota_us", std::to_string(std::max<uint64_t>(quota, 1000)));
      if (!st) return tl::unexpected(st.error());
      cg.support_.cpu_rate.enforced = true;
    }
  }
  // kill-all fallback: the v1 freezer.
  if (!cg.support_.kill_all.enforced && host.v1_mounts.count("freezer")) {
    auto dir = v1_dir("freezer");
    if (!dir) return tl::unexpected(dir.error());
    cg.support_.kill_all = {true, Mechanism::kCgroupV1, "freezer.state + SIGKILL each pid"};
  }
  if (!cg.support_.kill_all.enforced && !cg.dirs_.empty()) {
    cg.support_.kill_all = {true, cg.v2_dir_.empty() ? Mechanism::kCgroupV1 : Mechanism::kCgroupV2,
                            "SIGKILL each pid of cgroup.procs until empty (racy with fork)"};
  }
  return cg;
}

Status SandboxCgroup::AttachV1(pid_t pid) const {
  std::set<std::string> done;
  for (const auto& [controller, dir] : v1_) {
    if (!done.insert(dir).second) continue;
    if (auto st = WriteFile(dir + "/cgroup.procs", std::to_string(pid)); !st) return st;
  }
  return {};
}

Result<std::vector<SandboxCgroup::TasksFile>> SandboxCgroup::OpenV1Tasks() const {
  std::vector<TasksFile> files;
  std::set<std::string> done;
  for (const auto& [controller, dir] : v1_) {
    if (!done.insert(dir).second) continue;
    std::string path = dir + "/tasks";
    UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd) return MakeSyscallError("open", errno, path);
    files.push_back({dir, std::move(fd)});
  }
  return files;
}

int MoveSelfIntoCgroupsRaw(const int* tasks_fds, size_t count, int* failed_index) {
  for (size_t i = 0; i < count; ++i) {
    ssize_t n;
    do {
      n = write(tasks_fds[i], "0", 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1) {
      *failed_index = static_cast<int>(i);
      return n < 0 ? errno : EIO;
    }
  }
  return 0;
}

Status SandboxCgroup::AttachAll(pid_t pid) const {
  if (!v2_dir_.empty()) {
    if (auto st = WriteFile(v2_dir_ + "/cgroup.procs", std::to_string(pid)); !st) return st;
  }
  return AttachV1(pid);
}

Result<std::vector<pid_t>> SandboxCgroup::Pids() const {
  if (!v2_dir_.empty()) return ReadPids(v2_dir_);
  if (!v1_.empty()) return ReadPids(v1_.begin()->second);
  return std::vector<pid_t>{};
}

Status SandboxCgroup::KillAll() const {
  if (dirs_.empty()) return {};
  using namespace std::chrono_literals;
  auto deadline = std::chrono::steady_clock::now() + 5s;
  if (!v2_dir_.empty() && support_.kill_all.detail == "cgroup.kill") {
    if (auto st = WriteFile(v2_dir_ + "/cgroup.kill", "1"); !st) return st;
  }
  auto freezer = v1_.find("freezer");
  std::vector<std::string> dirs;
  if (!v2_dir_.empty()) dirs.push_back(v2_dir_);
  for (const auto& [c, d] : v1_) dirs.push_back(d);
  for (;;) {
    bool any = false;
    if (freezer != v1_.end()) (void)WriteFile(freezer->second + "/freezer.state", "FROZEN");
    for (const auto& dir : dirs) {
      auto pids = ReadPids(dir);
      if (!pids) continue;
      for (pid_t p : *pids) {
        any = true;
        kill(p, SIGKILL);
      }
    }
    if (freezer != v1_.end()) (void)WriteFile(freezer->second + "/freezer.state", "THAWED");
    if (!any) return {};
    if (std::chrono::steady_clock::now() > deadline) {
      return MakeError(ErrorCode::kTimeout,
                       fmt::format("processes remain in cgroup {} after SIGKILL", dirs.front()));
    }
    std::this_thread::sleep_for(1ms);
  }
}

Status SandboxCgroup::Remove() {
  using namespace std::chrono_literals;
  Status result;
  // Deepest first; each sandbox dir, then its "deepbox" parent if now empty.
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
    auto deadline = std::chrono::steady_clock::now() + 2s;
    while (rmdir(it->c_str()) != 0) {
      if (errno == ENOENT) break;
      if (errno != EBUSY || std::chrono::steady_clock::now() > deadline) {
        if (result) result = MakeSyscallError("rmdir", errno, *it);
        break;
      }
      std::this_thread::sleep_for(1ms);
    }
    std::string parent = it->substr(0, it->rfind('/'));
    (void)rmdir(parent.c_str());  // only succeeds when no other sandbox uses it
  }
  dirs_.clear();
  v1_.clear();
  v2_dir_.clear();
  v2_fd_.reset();
  return result;
}

LimitSupport ProbeCgroupSupport(const CgroupHostInfo& host) {
  Limits probe;
  probe.memory_bytes = 256ULL << 20;
  probe.max_processes = 256;
  probe.cpu_cores = 1.0;
  auto cg = SandboxCgroup::Create(host, fmt::format("probe-{}", getpid()), probe);
  if (!cg) {
    LimitSupport s;
    s.layout = host.layout;
    s.memory.detail = s.processes.detail = s.cpu_rate.detail = cg.error().message;
    return s;
  }
  return cg->support();
}

bool IsSandboxCgroupPath(const CgroupHostInfo& host, std::string_view id, std::string_view dir) {
  if (!ValidId(id) || dir.empty() || dir.front() != '/' || dir.back() == '/') return false;
  for (const auto& part : Split(dir.substr(1), '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  std::string tail = fmt::format("/deepbox/{}", id);
  if (dir.size() <= tail.size() || dir.substr(dir.size() - tail.size()) != tail) return false;
  std::vector<std::string> mounts;
  if (!host.v2_mount.empty()) mounts.push_back(host.v2_mount);
  for (const auto& [controller, mount] : host.v1_mounts) mounts.push_back(mount);
  for (std::string mount : mounts) {
    while (!mount.empty() && mount.back() == '/') mount.pop_back();
    if (mount.empty()) continue;  // a hierarchy mounted at "/" is no host we know
    // ".../deepbox/<id>" itself must lie beneath the mount, not be it.
    if (dir.size() >= mount.size() + tail.size() &&
        dir.substr(0, mount.size() + 1) == mount + "/") {
      return true;
    }
  }
  return false;
}

Status CheckSandboxCgroupDir(const CgroupHostInfo& host, std::string_view id,
                             const std::string& dir) {
  if (!IsSandboxCgroupPath(host, id, dir)) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("{} is not a cgroup of sandbox {} (those are <a cgroup "
                                 "hierarchy>/.../deepbox/{})",
                                 dir, id, id));
  }
  char real[PATH_MAX];
  if (realpath(dir.c_str(), real) == nullptr) return MakeSyscallError("realpath", errno, dir);
  if (dir != real) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("cgroup dir {} goes through a symbolic link (to {})", dir, real));
  }
  UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return MakeSyscallError("open(O_DIRECTORY|O_NOFOLLOW)", errno, dir);
  struct statfs sfs {};
  if (fstatfs(fd.get(), &sfs) != 0) return MakeSyscallError("fstatfs", errno, dir);
  if (sfs.f_type != CGROUP2_SUPER_MAGIC && sfs.f_type != CGROUP_SUPER_MAGIC) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("{} is not on a cgroup file system", dir));
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return MakeSyscallError("fstat", errno, dir);
  if (st.st_uid != geteuid()) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("cgroup dir {} belongs to uid {}, not to uid {} who makes "
                                 "sandbox cgroups here",
                                 dir, st.st_uid, geteuid()));
  }
  return {};
}

Result<std::vector<std::string>> ProcessCgroupDirs(pid_t pid) {
  auto mountinfo = ReadFile("/proc/self/mountinfo");
  if (!mountinfo) return tl::unexpected(mountinfo.error());
  auto cgroup = ReadFile(fmt::format("/proc/{}/cgroup", pid));
  if (!cgroup) return tl::unexpected(cgroup.error());
  CgroupHostInfo info = ParseCgroupHostInfo(*mountinfo, *cgroup);
  std::vector<std::string> dirs;
  if (!info.v2_mount.empty() && !info.v2_self.empty()) {
    dirs.push_back(JoinPath(info.v2_mount, info.v2_self));
  }
  for (const auto& [controller, self] : info.v1_self) {
    dirs.push_back(JoinPath(info.v1_mounts.at(controller), self));
  }
  return dirs;
}

Status SetCgroupsFrozen(const std::vector<std::string>& dirs, bool frozen,
                        std::chrono::milliseconds timeout) {
  // What to write where, and what the kernel reports once it is done.
  struct Freezer {
    std::string control, value, report;  // report: a file whose text holds `done`
    std::string done;
  };
  std::vector<Freezer> freezers;
  for (const auto& dir : dirs) {
    struct stat st;
    if (stat((dir + "/cgroup.freeze").c_str(), &st) == 0) {
      freezers.push_back({dir + "/cgroup.freeze", frozen ? "1" : "0", dir + "/cgroup.events",
                          frozen ? "frozen 1" : "frozen 0"});
    } else if (stat((dir + "/freezer.state").c_str(), &st) == 0) {
      freezers.push_back({dir + "/freezer.state", frozen ? "FROZEN" : "THAWED",
                          dir + "/freezer.state", frozen ? "FROZEN" : "THAWED"});
    }
  }
  if (freezers.empty()) {
    return MakeError(ErrorCode::kUnimplemented,
                     "this sandbox has no cgroup freezer (its processes run without cgroups, "
                     "or the host has neither cgroup v2 nor the v1 freezer controller)");
  }
  // One freezer is enough, and two would race each other's reports (a v1
  // THAWED under a v2 freeze): the first, v2 where there is one.
  const Freezer& f = freezers.front();
  if (auto st = WriteFile(f.control, f.value); !st) return st;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto text = ReadFile(f.report);
    if (!text) return tl::unexpected(text.error());
    if (text->find(f.done) != std::string::npos) return {};
    if (std::chrono::steady_clock::now() > deadline) {
      return MakeError(ErrorCode::kTimeout, fmt::format("{} did not report '{}' within {} ms",
                                                        f.report, f.done, timeout.count()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace deepbox::local
