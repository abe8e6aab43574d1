#include "local/namespaces.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "local/child.h"

namespace deepbox::local {

uint64_t CloneFlags(const NamespaceOptions& o) {
  uint64_t flags = 0;
  if (o.user) flags |= CLONE_NEWUSER;
  if (o.pid) flags |= CLONE_NEWPID;
  if (o.mount) flags |= CLONE_NEWNS;
  if (o.ipc) flags |= CLONE_NEWIPC;
  if (o.uts) flags |= CLONE_NEWUTS;
  if (o.net) flags |= CLONE_NEWNET;
  if (o.cgroup) flags |= CLONE_NEWCGROUP;
  return flags;
}

IdMapPlan PlanIdMap(std::optional<uint32_t> host_id, bool map_image_root) {
  IdMapPlan plan;
  if (geteuid() == 0) {
    plan.host_uid = host_id.value_or(kDefaultRootHostId);
    plan.host_gid = host_id.value_or(kDefaultRootHostId);
    plan.deny_setgroups = false;
    plan.clear_groups = true;
  } else {
    plan.host_uid = geteuid();
    plan.host_gid = getegid();
    plan.deny_setgroups = true;
    plan.clear_groups = false;
  }
  plan.uid_map = fmt::format("{} {} 1\n", plan.sandbox_uid, plan.host_uid);
  plan.gid_map = fmt::format("{} {} 1\n", plan.sandbox_gid, plan.host_gid);
  if (map_image_root && geteuid() == 0 && plan.host_uid != kImageRootHostId &&
      plan.host_gid != kImageRootHostId) {
    plan.uid_map = fmt::format("0 {} 1\n", kImageRootHostId) + plan.uid_map;
    plan.gid_map = fmt::format("0 {} 1\n", kImageRootHostId) + plan.gid_map;
  }
  return plan;
}

namespace {
Status WriteProcFile(pid_t pid, const char* name, const std::string& content) {
  std::string path = fmt::format("/proc/{}/{}", pid, name);
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return MakeSyscallError("open", errno, path);
  ssize_t n = write(fd.get(), content.data(), content.size());
  if (n < 0) return MakeSyscallError("write", errno, path);
  if (static_cast<size_t>(n) != content.size()) {
    return MakeError(ErrorCode::kInternal, fmt::format("short write to {}", path));
  }
  return {};
}
}  // namespace

Status WriteIdMaps(pid_t pid, const IdMapPlan& plan) {
  if (plan.deny_setgroups) {
    if (auto st = WriteProcFile(pid, "setgroups", "deny\n"); !st) return st;
  }
  if (auto st = WriteProcFile(pid, "gid_map", plan.gid_map); !st) return st;
  return WriteProcFile(pid, "uid_map", plan.uid_map);
}

Result<CloneResult> CloneWithFlags(uint64_t flags, int cgroup_fd) {
  int pidfd = -1;
  struct clone_args args;
  memset(&args, 0, sizeof(args));
  args.flags = flags | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  if (cgroup_fd >= 0) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(cgroup_fd);
  }
  long ret = syscall(SYS_clone3, &args, sizeof(args));
  if (ret < 0 && errno == ENOSYS && cgroup_fd < 0) {
    // clone(flags, stack=NULL, parent_tid=&pidfd, child_tid, tls) on x86_64.
    ret = syscall(SYS_clone, static_cast<unsigned long>((flags | CLONE_PIDFD) | SIGCHLD), nullptr,
                  &pidfd, nullptr, nullptr);
  }
  if (ret < 0) return MakeSyscallError("clone3", errno);
  CloneResult result;
  result.pid = static_cast<pid_t>(ret);
  if (ret > 0) result.pidfd.reset(pidfd);
  return result;
}

int SetHostnameRaw(const char* name) {
  if (syscall(SYS_sethostname, name, RawStrlen(name)) != 0) return errno;
  return 0;
}

bool UserNamespacesAvailable() {
  auto child = CloneWithFlags(CLONE_NEWUSER);
  if (!child) return false;
  if (child->pid == 0) syscall(SYS_exit_group, 0);
  int status = 0;
  while (waitpid(child->pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace deepbox::local
