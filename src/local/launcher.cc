#include "local/launcher.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "local/address_policy.h"
#include "local/capabilities.h"
#include "local/daemon_socket.h"
#include "local/image_root.h"
#include "local/mounts.h"
#include "local/namespaces.h"
#include "local/netns.h"
#include "local/network_rules.h"
#include "local/rlimits.h"

namespace deepbox::local {
namespace fs = std::filesystem;

std::string SetupTimings::ToString() const {
  std::string out;
  for (size_t i = 0; i < ns.size(); ++i) {
    out += fmt::format("{}={:.2f}ms ", SetupStepName(static_cast<SetupStep>(i)), ns[i] / 1e6);
  }
  out += fmt::format("total={:.2f}ms", total_ns / 1e6);
  return out;
}

std::string ExitStatus::ToString() const {
  if (kind == Kind::kExited) return fmt::format("exited with status {}", code);
  return fmt::format("killed by signal {} ({})", signal, strsignal(signal));
}

namespace {

// Everything the child needs, built before the clone. The child only reads it.
struct ChildContext {
  int report_fd = -1;
  int sync_rd = -1;
  int sync_wr = -1;
  int stdio[3] = {-1, -1, -1};
  int daemon_listener = -1;           // dup'ed to kDaemonListenFd, inherited by init only
  const int* cgroup_tasks = nullptr;  // SandboxCgroup::OpenV1Tasks, written to and closed
  size_t cgroup_tasks_count = 0;
  const char* hostname = nullptr;
  const MountPlan* mounts = nullptr;
  int* source_fds = nullptr;  // room for mounts->sources.size() fds
  const RlimitPlan* rlimits = nullptr;
  CapDropPlan caps;
  sock_fprog filter{};
  const char* cwd = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  std::vector<const char*> exec_candidates;
  bool die_with_parent = true;
};

[[noreturn]] void RunChild(const ChildContext& c) {
  ChildReporter rep(c.report_fd);
  // Init starts with no signal blocked or ignored, whatever the launcher's
  // (a supervisor relaunching a sandbox serves its own signals on a signalfd).
  RestoreDefaultSignals();
  close(c.sync_wr);
  char go = 0;
  ssize_t n;
  do {
    n = read(c.sync_rd, &go, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1) syscall(SYS_exit_group, 1);  // the parent gave up: leave quietly
  close(c.sync_rd);
  // Into the sandbox's v1 cgroups before anything else (cgroups.h: a move of
  // oneself does not wait for an RCU grace period, as one by pid does).
  int failed = -1;
  int err = MoveSelfIntoCgroupsRaw(c.cgroup_tasks, c.cgroup_tasks_count, &failed);
  if (err != 0) rep.Fail(SetupStep::kCgroupAttach, ChildCall::kWrite, err, failed);
  for (size_t i = 0; i < c.cgroup_tasks_count; ++i) close(c.cgroup_tasks[i]);
  rep.Done(SetupStep::kCgroupAttach);
  // As host root (see mounts.h): root tmpfs, chdir into it, open the bind sources.
  umask(022);
  ExecuteMountPrologueOrDie(*c.mounts, c.source_fds, rep);
  ChildCall call = ChildCall::kNone;
  err = SwitchToSandboxIdsRaw(c.caps, &call);
  if (err != 0) rep.Fail(SetupStep::kChildStart, call, err);
  // After the uid change, which clears the parent-death signal.
  if (c.die_with_parent && prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
    rep.Fail(SetupStep::kChildStart, ChildCall::kPrctl, errno);
  }
  rep.Done(SetupStep::kChildStart);

  err = SetHostnameRaw(c.hostname);
  if (err != 0) rep.Fail(SetupStep::kUtsNet, ChildCall::kSethostname, err);
  err = BringUpLoopbackRaw(&call);
  if (err != 0) rep.Fail(SetupStep::kUtsNet, call, err);
  if (setsid() < 0) rep.Fail(SetupStep::kUtsNet, ChildCall::kSetsid, errno);
  rep.Done(SetupStep::kUtsNet);

  ExecuteMountOpsOrDie(*c.mounts, c.source_fds, rep);  // reports kMounts and kPivotRoot

  int resource = -1;
  err = ApplyRlimitsRaw(*c.rlimits, &resource);
  if (err != 0) rep.Fail(SetupStep::kRlimits, ChildCall::kPrlimit, err, resource);
  rep.Done(SetupStep::kRlimits);

  for (int i = 0; i < 3; ++i) {
    if (dup2(c.stdio[i], i) < 0) rep.Fail(SetupStep::kCapabilities, ChildCall::kDup2, errno, i);
  }
  // After stdio (a stdio source may sit at fd 3); the report pipe is above 9.
  if (c.daemon_listener >= 0 && dup2(c.daemon_listener, kDaemonListenFd) < 0) {
    rep.Fail(SetupStep::kCapabilities, ChildCall::kDup2, errno, kDaemonListenFd);
  }
  err = DropCapabilitiesRaw(c.caps, &call);
  if (err != 0) rep.Fail(SetupStep::kCapabilities, call, err);
  if (chdir(c.cwd) != 0) rep.Fail(SetupStep::kCapabilities, ChildCall::kChdir, errno);
  rep.Done(SetupStep::kCapabilities);

  // Every inherited fd above 2 (above 3 with a daemon listener) closes at exec
  // (the report pipe too, which signals success); dup2 left fd 3 without CLOEXEC.
  const unsigned first_closed = c.daemon_listener >= 0 ? kDaemonListenFd + 1U : 3U;
  if (syscall(SYS_close_range, first_closed, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    rep.Fail(SetupStep::kSeccomp, ChildCall::kCloseRange, errno);
  }
  err = LoadSeccompRaw(c.filter);
  if (err != 0) rep.Fail(SetupStep::kSeccomp, ChildCall::kSeccomp, err);
  rep.Done(SetupStep::kSeccomp);

  int exec_err = ENOENT;
  for (const char* path : c.exec_candidates) {
    execve(path, c.argv, c.envp);
    if (errno != ENOENT || exec_err == ENOENT) exec_err = errno;
  }
  rep.Fail(SetupStep::kExec, ChildCall::kExecve, exec_err);
}

bool ValidId(std::string_view id) {
  if (id.empty() || id.size() > 64 || id == "." || id == "..") return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

bool KernelAtLeast(int major, int minor) {
  struct utsname u;
  if (uname(&u) != 0) return false;
  int ma = 0, mi = 0;
  if (sscanf(u.release, "%d.%d", &ma, &mi) != 2) return false;
  return ma > major || (ma == major && mi >= minor);
}

Result<UniqueFd> DupAbove(int fd, int min_fd, const char* what) {
  UniqueFd out(fcntl(fd, F_DUPFD_CLOEXEC, min_fd));
  if (!out) return MakeSyscallError("fcntl(F_DUPFD_CLOEXEC)", errno, what);
  return out;
}

Result<UniqueFd> DupHigh(int fd, const char* what) {
  int src = fd;
  UniqueFd devnull;
  if (src < 0) {
    devnull.reset(open("/dev/null", O_RDWR | O_CLOEXEC));
    if (!devnull) return MakeSyscallError("open", errno, "/dev/null");
    src = devnull.get();
  }
  UniqueFd out(fcntl(src, F_DUPFD_CLOEXEC, 3));
  if (!out) return MakeSyscallError("fcntl(F_DUPFD_CLOEXEC)", errno, what);
  return out;
}

Status MakeDir(const fs::path& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return MakeSyscallError("mkdir", errno, path.string());
  }
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return MakeSyscallError("lstat", errno, path.string());
  if (!S_ISDIR(st.st_mode)) {
    return MakeError(ErrorCode::kNotDirectory, fmt::format("{} is not a directory", path.string()));
  }
  if (chmod(path.c_str(), mode) != 0) return MakeSyscallError("chmod", errno, path.string());
  return {};
}

LimitSupport RlimitSupport(const Limits& limits, LimitSupport base) {
  auto per_process = [](std::optional<uint64_t> v, const char* name) {
    LimitEnforcement e{false, Mechanism::kRlimitPerProcess, name};
    e.enforced = v.has_value();
    return e;
  };
  base.cpu_time = per_process(limits.cpu_time_seconds, "RLIMIT_CPU");
  base.file_size = per_process(limits.file_size_bytes, "RLIMIT_FSIZE");
  base.open_files = per_process(limits.open_files, "RLIMIT_NOFILE");
  base.address_space = per_process(limits.address_space_bytes, "RLIMIT_AS");
  if (!base.processes.enforced) {
    if (KernelAtLeast(5, 14)) {
      base.processes = {limits.max_processes.has_value(), Mechanism::kRlimitPerUserNs,
                        "RLIMIT_NPROC, counted per user namespace (one per sandbox)"};
    } else {
      base.processes = {limits.max_processes.has_value(), Mechanism::kRlimitPerProcess,
                        "RLIMIT_NPROC, counted per host uid (shared by sandboxes on one id)"};
    }
  }
  if (limits.memory_bytes && !base.memory.enforced) {
    base.memory = {false, Mechanism::kNone,
                   "no usable memory cgroup; RLIMIT_AS (address_space_bytes) is only per process"};
  }
  base.tmp_size = {true, Mechanism::kTmpfsSize, "tmpfs size= on /tmp and /dev/shm"};
  if (limits.workspace_bytes) {
    std::string why;
    if (WorkspaceDiskSupported(&why)) {
      base.workspace_disk = {true, Mechanism::kLoopImage, "ext4 image, ENOSPC when full"};
    } else {
      base.workspace_disk = {false, Mechanism::kNone, "workspace is a plain host dir: " + why};
    }
  }
  return base;
}

std::mutex g_probe_mu;
std::map<std::string, NetworkProbe> g_probe_cache;

NetworkProbe CachedProbe(const PublicNetworkConfig& config) {
  std::lock_guard<std::mutex> lock(g_probe_mu);
  std::string key =
      fmt::format("{}|{}|{}|{}|{}", config.uplink_netns, config.ip_path, config.nft_path,
                  config.pasta_path, static_cast<int>(config.uplink));
  auto it = g_probe_cache.find(key);
  if (it != g_probe_cache.end()) return it->second;
  NetworkProbe p = ChooseUplink(config);
  if (p.public_possible) g_probe_cache[key] = p;  // negative results are re-probed
  return p;
}

}  // namespace

SandboxProcess::SandboxProcess(SandboxProcess&& other) noexcept { *this = std::move(other); }

SandboxProcess& SandboxProcess::operator=(SandboxProcess&& other) noexcept {
  if (this != &other) {
    Destroy();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::move(other.pidfd_);
    exit_ = std::exchange(other.exit_, std::nullopt);
    cgroup_ = std::exchange(other.cgroup_, std::nullopt);
    net_ = std::exchange(other.net_, std::nullopt);
    disk_ = std::exchange(other.disk_, std::nullopt);
    public_addrs_ = std::exchange(other.public_addrs_, std::nullopt);
    pasta_ = std::exchange(other.pasta_, std::nullopt);
    host_watch_ = std::move(other.host_watch_);
    proxy_ = std::move(other.proxy_);
    secrets_proxy_ = other.secrets_proxy_;
    uplink_ = other.uplink_;
    timings_ = other.timings_;
    support_ = other.support_;
    network_mode_ = other.network_mode_;
    network_note_ = std::move(other.network_note_);
    runtime_dir_ = std::move(other.runtime_dir_);
    socket_dir_ = std::move(other.socket_dir_);
    daemon_socket_ = std::move(other.daemon_socket_);
    remove_runtime_dir_ = std::exchange(other.remove_runtime_dir_, false);
  }
  return *this;
}

SandboxProcess::~SandboxProcess() { Destroy(); }

void SandboxProcess::Destroy() {
  if (pid_ > 0) {
    (void)Kill();
    if (!exit_) {
      int status = 0;
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
    pid_ = -1;
  }
  pidfd_.reset();
  host_watch_.reset();  // its thread writes into the sandbox's netns: first
  if (cgroup_) {
    (void)cgroup_->KillAll();
    (void)cgroup_->Remove();
    cgroup_.reset();
  }
  proxy_.reset();  // joins its threads; the sandbox's listener closes with it
  pasta_.reset();
  net_.reset();
  disk_.reset();  // after every process is gone: the unmount is then not lazy
  if (!runtime_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(socket_dir_, ec);
    fs::remove(runtime_dir_ / "root", ec);
    fs::remove(runtime_dir_ / "uplink.log", ec);  // pasta's (see Launch)
    if (remove_runtime_dir_) fs::remove(runtime_dir_, ec);
    runtime_dir_.clear();
  }
}

Status SandboxProcess::Kill() {
  if (pid_ > 0 && !exit_) {
    if (syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0) != 0 && errno != ESRCH) {
      return MakeSyscallError("pidfd_send_signal", errno, fmt::format("pid {}", pid_));
    }
  }
  if (cgroup_) return cgroup_->KillAll();
  return {};
}

std::optional<WorkspaceDisk> SandboxProcess::TakeWorkspaceDisk() {
  return std::exchange(disk_, std::nullopt);
}

Status SandboxProcess::MakeWorkspaceDiskSpare() const {
  return disk_ ? disk_->MakeSpareLikeThis() : Status{};
}

Result<std::vector<pid_t>> SandboxProcess::Pids() const {
  if (cgroup_) return cgroup_->Pids();
  return MakeError(ErrorCode::kUnavailable, "sandbox has no cgroup");
}

namespace {
ExitStatus FromSiginfo(const siginfo_t& info) {
  ExitStatus st;
  if (info.si_code == CLD_EXITED) {
    st.kind = ExitStatus::Kind::kExited;
    st.code = info.si_status;
  } else {
    st.kind = ExitStatus::Kind::kSignaled;
    st.signal = info.si_status;
  }
  return st;
}
}  // namespace

Result<std::optional<ExitStatus>> SandboxProcess::TryWait() {
  if (exit_) return exit_;
  if (pid_ <= 0) return MakeError(ErrorCode::kInvalidArgument, "no sandbox process");
  siginfo_t info;
  memset(&info, 0, sizeof(info));
  if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG) != 0) {
    return MakeSyscallError("waitid", errno, fmt::format("pid {}", pid_));
  }
  if (info.si_pid == 0) return std::optional<ExitStatus>();
  exit_ = FromSiginfo(info);
  return exit_;
}

Result<ExitStatus> SandboxProcess::Wait(std::optional<std::chrono::milliseconds> timeout) {
  if (exit_) return *exit_;
  if (pid_ <= 0) return MakeError(ErrorCode::kInvalidArgument, "no sandbox process");
  if (timeout) {
    struct pollfd pfd = {pidfd_.get(), POLLIN, 0};
    int rc;
    do {
      rc = poll(&pfd, 1, static_cast<int>(timeout->count()));
    } while (rc < 0 && errno == EINTR);
    if (rc < 0) return MakeSyscallError("poll", errno, "pidfd");
    if (rc == 0) {
      return MakeError(ErrorCode::kTimeout,
                       fmt::format("sandbox init still running after {} ms", timeout->count()));
    }
  }
  siginfo_t info;
  memset(&info, 0, sizeof(info));
  while (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED) != 0) {
    if (errno != EINTR) return MakeSyscallError("waitid", errno, fmt::format("pid {}", pid_));
  }
  exit_ = FromSiginfo(info);
  return *exit_;
}

Result<SandboxProcess> Launch(const SandboxSpec& spec) {
  const int64_t t_start = MonotonicNs();
  std::array<int64_t, static_cast<size_t>(SetupStep::kCount)> ends{};
  auto mark = [&](SetupStep s) { ends[static_cast<size_t>(s)] = MonotonicNs(); };

  if (!ValidId(spec.id)) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("bad sandbox id '{}'", spec.id));
  }
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "argv is empty");
  }
  if (spec.runtime_dir.empty() || !spec.runtime_dir.is_absolute()) {
    return MakeError(ErrorCode::kInvalidArgument, "runtime_dir must be an absolute path");
  }
  struct stat ws_st;
  if (stat(spec.workspace_dir.c_str(), &ws_st) != 0) {
    return MakeSyscallError("stat", errno, spec.workspace_dir.string());
  }
  if (!S_ISDIR(ws_st.st_mode)) {
    return MakeError(ErrorCode::kNotDirectory,
                     fmt::format("workspace {} is not a directory", spec.workspace_dir.string()));
  }
  if (spec.sandboxd_binary && access(spec.sandboxd_binary->c_str(), X_OK) != 0) {
    return MakeSyscallError("access", errno, spec.sandboxd_binary->string());
  }

  SandboxProcess sp;
  IdMapPlan ids = PlanIdMap(spec.host_id, /*map_image_root=*/!spec.image_layers.empty());
  if (!spec.image_layers.empty() && spec.rootfs) {
    return MakeError(ErrorCode::kInvalidArgument, "a sandbox has an image or a rootfs, not both");
  }

  // Runtime dirs: <runtime> 0700 (owner only) now, for the disk's image; its
  // root/ mount point and run/ for the socket below.
  sp.remove_runtime_dir_ = !fs::exists(spec.runtime_dir);
  if (auto st = MakeDir(spec.runtime_dir, 0700); !st) return tl::unexpected(st.error());
  sp.runtime_dir_ = spec.runtime_dir;
  // The /workspace disk (a loop device and an ext4 mount: mostly waits for the
  // loop device's worker) is made first, on a thread of its own, while this one
  // detects the cgroups, plans the mounts, the seccomp filter and the rest; joined before the
  // clone, whose new mount namespace must already see it mounted. `disk_made` is declared first:
  // the thread writes it until it is joined (also when a step below fails and returns).
  std::optional<Result<WorkspaceDisk>> disk_made;
  int64_t disk_ns = 0;
  std::jthread disk_thread;
  if (spec.limits.workspace_bytes && !spec.workspace_disk_mounted) {
    if (WorkspaceDiskSupported()) {
      std::error_code ec;
      if (!fs::is_empty(spec.workspace_dir, ec)) {
        return MakeError(ErrorCode::kConflict,
                         fmt::format("workspace {} must be empty to hold a size-limited disk",
                                     spec.workspace_dir.string()));
      }
      auto make_disk = [&spec, &ids, &disk_made, &disk_ns] {
        const int64_t start = MonotonicNs();
        disk_made = WorkspaceDisk::Create(spec.runtime_dir / "workspace.img", spec.workspace_dir,
                                          *spec.limits.workspace_bytes, ids.host_uid, ids.host_gid,
                                          spec.workspace_disk_templates);
        disk_ns = MonotonicNs() - start;
      };
      try {
        disk_thread = std::jthread(make_disk);
      } catch (const std::system_error&) {
        make_disk();  // no thread to be had (EAGAIN): in line, as it was
      }
    }
  }
  std::optional<CgroupHostInfo> cgroup_host;
  if (spec.use_cgroups) {
    if (auto host = DetectCgroups(); host && host->layout != CgroupLayout::kNone) {
      cgroup_host = std::move(*host);
    }
  }

  if (auto st = MakeDir(spec.runtime_dir / "root", 0700); !st) return tl::unexpected(st.error());
  // run/ stays the launcher's (an older layout gave it to the sandbox: take it back).
  sp.socket_dir_ = spec.runtime_dir / "run";
  if (auto st = MakeDir(sp.socket_dir_, 0700); !st) return tl::unexpected(st.error());
  if (chown(sp.socket_dir_.c_str(), geteuid(), getegid()) != 0 ||
      chmod(sp.socket_dir_.c_str(), 0700) != 0) {
    return MakeSyscallError("chown/chmod", errno, sp.socket_dir_.string());
  }
  std::optional<DaemonSocket> daemon_socket;
  if (spec.daemon_listener) {
    auto ds = DaemonSocket::Create(sp.socket_dir_ / "sandboxd.sock");
    if (!ds) return tl::unexpected(ds.error());
    sp.daemon_socket_ = ds->path();
    daemon_socket = std::move(*ds);
  }
  // The disk in place (or none): the workspace's root belongs to the sandbox user.
  auto finish_workspace = [&]() -> Status {
    if (disk_thread.joinable()) disk_thread.join();
    if (disk_made) {
      if (!*disk_made) return tl::unexpected(disk_made->error());
      sp.disk_ = std::move(**disk_made);
      disk_made.reset();
      sp.timings_.workspace_disk_ns = disk_ns;
    }
    if (geteuid() == 0 && chown(spec.workspace_dir.c_str(), ids.host_uid, ids.host_gid) != 0) {
      return MakeSyscallError("chown", errno, spec.workspace_dir.string());
    }
    return {};
  };

  // Network mode: public only if this host can do it; otherwise fail closed to
  // none (with a note). allow never falls back.
  sp.network_mode_ = spec.network;
  std::vector<std::string> nameservers;
  std::optional<UplinkDns> pasta_dns;
  PublicNetworkConfig net_config = spec.public_network;
  if (spec.network == NetworkMode::kPublic || spec.network == NetworkMode::kAllow) {
    // The operator's exceptions: the spec's and the environment's, checked alike.
    auto from_env = AllowedCidrsFromEnv();
    if (!from_env) return tl::unexpected(from_env.error());
    std::string all;
    for (const auto& c : spec.public_network.allowed_cidrs) all += c + ",";
    for (const auto& c : *from_env) all += c + ",";
    auto allowed = ParseAllowedCidrs(all);
    if (!allowed) return tl::unexpected(allowed.error());
    net_config.allowed_cidrs = *allowed;
  }
  if (spec.network == NetworkMode::kPublic) {
    NetworkProbe probe = CachedProbe(spec.public_network);
    if (!probe.public_possible) {
      sp.network_mode_ = NetworkMode::kNone;
      sp.network_note_ =
          "network 'public' is not available on this host, using 'none': " + probe.reason;
    } else if (probe.uplink == Uplink::kVeth) {
      sp.uplink_ = Uplink::kVeth;
      nameservers = spec.public_network.nameservers.empty() ? HostNameservers()
                                                            : spec.public_network.nameservers;
      nameservers.erase(
          std::remove_if(nameservers.begin(), nameservers.end(),
                         [](const std::string& s) { return s.rfind("127.", 0) == 0; }),
          nameservers.end());
    } else {
      sp.uplink_ = Uplink::kPasta;
      pasta_dns = PlanUplinkDns(spec.public_network, HostNameservers());
      nameservers = pasta_dns->sandbox_nameservers;
    }
    net_config.nameservers = nameservers;
  } else if (spec.network == NetworkMode::kAllow) {
    // An empty allowlist is a proxy that refuses everything: a sandbox whose
    // policy was switched to none, and may be switched back (SetPolicy).
    if (std::string why = AllowModeObstacle(spec.public_network); !why.empty()) {
      return MakeError(ErrorCode::kUnavailable,
                       "network 'allow' is not available on this host: " + why);
    }
    sp.uplink_ = Uplink::kProxy;
  }

  // Secrets: a network that can carry them, hosts the policy allows, a CA.
  std::shared_ptr<SandboxCa> secrets_ca;
  if (!spec.secrets.empty()) {
    if (sp.network_mode_ == NetworkMode::kNone) {
      return MakeError(ErrorCode::kInvalidArgument,
                       spec.network == NetworkMode::kNone
                           ? "secrets need a network: use --network public or allow=HOSTS"
                           : "secrets need a network, and " + sp.network_note_);
    }
    std::vector<std::string> hosts;
    for (const auto& secret : spec.secrets) {
      for (const auto& host : secret.hosts) {
        if (sp.network_mode_ == NetworkMode::kAllow) {
          std::string probe = host.rfind("*.", 0) == 0 ? "x" + host.substr(1) : host;
          if (!AllowlistMatches(spec.public_network.allow, probe, 443)) {
            return MakeError(
                ErrorCode::kInvalidArgument,
                fmt::format("secret {}'s host {} is not allowed by the network policy: add it "
                            "to --network allow=",
                            secret.name, host));
          }
        }
        if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
      }
    }
    auto ca = SandboxCa::Create(spec.id.substr(0, 37), hosts);
    if (!ca) return tl::unexpected(ca.error());
    secrets_ca = std::move(*ca);
    if (sp.uplink_ != Uplink::kProxy) sp.secrets_proxy_ = true;
  }

  MountSpec ms;
  ms.staging_dir = spec.runtime_dir / "root";
  if (secrets_ca) ms.extra_ca_pem = secrets_ca->cert_pem();
  ms.rootfs = spec.rootfs;
  ms.workspace_dir = spec.workspace_dir;
  ms.sandboxd_binary = spec.sandboxd_binary;
  ms.sandboxd_bundle = spec.sandboxd_bundle;
  ms.sandboxd_bundle_loader = spec.sandboxd_bundle_loader;
  ms.hostname = spec.hostname;
  if (spec.limits.tmp_bytes) ms.tmp_bytes = *spec.limits.tmp_bytes;
  ms.image_layers = spec.image_layers;
  ms.image_upper_bytes = ms.tmp_bytes;
  ms.proc_subset_pid = spec.proc_subset_pid;
  ms.nameservers = nameservers;
  ms.uid = ids.sandbox_uid;
  ms.gid = ids.sandbox_gid;
  auto mount_plan = BuildMountPlan(ms);
  if (!mount_plan) return tl::unexpected(mount_plan.error());

  RlimitPlan rlimits = PlanRlimits(spec.limits);
  auto filter = BuildSandboxFilter(spec.seccomp);
  if (!filter) return tl::unexpected(filter.error());

  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  std::string path_var = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
  std::vector<std::string> proxy_env;
  if (sp.uplink_ == Uplink::kProxy || sp.secrets_proxy_) proxy_env = EgressProxyEnv();
  if (secrets_ca) {
    for (auto& e : SandboxCaEnv()) proxy_env.push_back(std::move(e));
    for (const auto& secret : spec.secrets) {
      proxy_env.push_back(secret.name + "=" + secret.placeholder);
    }
  }
  for (const auto& e : spec.env) {
    envp.push_back(const_cast<char*>(e.c_str()));
    if (e.rfind("PATH=", 0) == 0) path_var = e.substr(5);
  }
  for (const auto& e : proxy_env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::vector<std::string> candidates;
  if (spec.argv[0].find('/') != std::string::npos) {
    candidates.push_back(spec.argv[0]);
  } else {
    size_t start = 0;
    while (start <= path_var.size()) {
      size_t end = path_var.find(':', start);
      if (end == std::string::npos) end = path_var.size();
      std::string dir = path_var.substr(start, end - start);
      if (!dir.empty()) candidates.push_back(dir + "/" + spec.argv[0]);
      start = end + 1;
    }
  }

  auto in = DupHigh(spec.stdin_fd, "stdin");
  if (!in) return tl::unexpected(in.error());
  auto out = DupHigh(spec.stdout_fd, "stdout");
  if (!out) return tl::unexpected(out.error());
  auto err = DupHigh(spec.stderr_fd, "stderr");
  if (!err) return tl::unexpected(err.error());

  UniqueFd listener;
  if (daemon_socket) {
    auto l = DupAbove(daemon_socket->fd(), 10, "daemon listener");
    if (!l) return tl::unexpected(l.error());
    listener = std::move(*l);
  }

  int report[2], sync[2];
  if (pipe2(report, O_CLOEXEC) != 0) return MakeSyscallError("pipe2", errno);
  UniqueFd report_r(report[0]), report_w(report[1]);
  // The child dup2()s the listener onto fd 3: the report pipe must not be there.
  if (auto high = DupAbove(report_w.get(), 10, "report pipe"); high) {
    report_w = std::move(*high);
  } else {
    return tl::unexpected(high.error());
  }
  if (pipe2(sync, O_CLOEXEC) != 0) return MakeSyscallError("pipe2", errno);
  UniqueFd sync_r(sync[0]), sync_w(sync[1]);

  ChildContext ctx;
  ctx.report_fd = report_w.get();
  ctx.sync_rd = sync_r.get();
  ctx.sync_wr = sync_w.get();
  ctx.stdio[0] = in->get();
  ctx.stdio[1] = out->get();
  ctx.stdio[2] = err->get();
  ctx.daemon_listener = listener.get();
  ctx.hostname = spec.hostname.c_str();
  ctx.mounts = &*mount_plan;
  std::vector<int> source_fds(mount_plan->sources.size() + 1, -1);
  ctx.source_fds = source_fds.data();
  ctx.rlimits = &rlimits;
  ctx.caps = PlanCapDrop(ids.sandbox_uid, ids.sandbox_gid, ids.clear_groups);
  ctx.filter = filter->fprog();
  ctx.cwd = spec.cwd.c_str();
  ctx.argv = argv.data();
  ctx.envp = envp.data();
  for (const auto& c : candidates) ctx.exec_candidates.push_back(c.c_str());
  ctx.die_with_parent = spec.die_with_parent;
  if (auto st = finish_workspace(); !st) return tl::unexpected(st.error());
  mark(SetupStep::kPrepare);

  std::vector<SandboxCgroup::TasksFile> cgroup_tasks;  // their dirs name a failed move
  std::vector<int> cgroup_task_fds;
  if (cgroup_host) {
    auto cg = SandboxCgroup::Create(*cgroup_host, spec.id, spec.limits);
    if (!cg) return tl::unexpected(cg.error());
    sp.cgroup_ = std::move(*cg);
    auto tasks = sp.cgroup_->OpenV1Tasks();
    if (!tasks) return tl::unexpected(tasks.error());
    cgroup_tasks = std::move(*tasks);
    for (const auto& t : cgroup_tasks) cgroup_task_fds.push_back(t.fd.get());
  }
  ctx.cgroup_tasks = cgroup_task_fds.data();
  ctx.cgroup_tasks_count = cgroup_task_fds.size();
  sp.support_ = RlimitSupport(spec.limits, sp.cgroup_ ? sp.cgroup_->support() : LimitSupport{});
  mark(SetupStep::kCgroup);

  auto clone =
      CloneWithFlags(CloneFlags(NamespaceOptions{}), sp.cgroup_ ? sp.cgroup_->v2_fd() : -1);
  if (!clone) return tl::unexpected(clone.error());
  if (clone->pid == 0) RunChild(ctx);  // never returns
  sp.pid_ = clone->pid;
  sp.pidfd_ = std::move(clone->pidfd);
  report_w.reset();
  // Only init holds the listener from now on: when it dies, nothing answers.
  listener.reset();
  if (daemon_socket) daemon_socket->CloseFd();
  sync_r.reset();
  mark(SetupStep::kClone);
  // From here on, returning an error destroys `sp`, which kills and reaps the child.

  for (auto& t : cgroup_tasks) t.fd.reset();  // the child has its copies
  if (auto st = WriteIdMaps(sp.pid_, ids); !st) return tl::unexpected(st.error());
  mark(SetupStep::kIdMaps);
  if (sp.uplink_ == Uplink::kVeth) {
    auto net = PublicNetwork::Setup(sp.pid_, net_config);
    if (!net) return tl::unexpected(net.error());
    sp.public_addrs_ = net->addresses();
    sp.net_ = std::move(*net);
    // The uplink's subnets and gateways, kept current (its own addresses are
    // also dropped by the uplink's input chain). Init has not been released yet.
    auto watch = HostAddressWatch::Start(sp.pid_, net_config);
    if (!watch) return tl::unexpected(watch.error());
    sp.host_watch_ = std::move(*watch);
  } else if (sp.uplink_ == Uplink::kPasta) {
    // The rules first, with the uplink's own addresses, subnets and gateways
    // (kept current from now on), then pasta brings the interface up: there is
    // no moment without the policy.
    auto r =
        RunInSandboxNetns(sp.pid_, {net_config.nft_path, "-f", "-"}, SandboxNftRules(net_config));
    if (!r) return tl::unexpected(r.error());
    auto watch = HostAddressWatch::Start(sp.pid_, net_config);
    if (!watch) return tl::unexpected(watch.error());
    sp.host_watch_ = std::move(*watch);
    // pasta logs to a file of the runtime dir: holding the sandbox's stdout or
    // stderr would keep them open after the sandbox exits.
    fs::path log_path = spec.runtime_dir / "uplink.log";
    UniqueFd log(open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!log) return MakeSyscallError("open", errno, log_path.string());
    auto pasta = PastaUplink::Start(sp.pid_, net_config, *pasta_dns, log.get());
    if (!pasta) {
      Error e = pasta.error();
      std::string said;
      if (UniqueFd in(open(log_path.c_str(), O_RDONLY | O_CLOEXEC)); in) {
        char buf[2000];
        ssize_t n = pread(in.get(), buf, sizeof(buf), 0);
        if (n > 0) said.assign(buf, static_cast<size_t>(n));
      }
      while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
      if (!said.empty()) e.message += ": " + said;
      return tl::unexpected(e);
    }
    sp.pasta_ = std::move(*pasta);
  } else if (sp.uplink_ == Uplink::kProxy) {
    auto r =
        RunInSandboxNetns(sp.pid_, {net_config.nft_path, "-f", "-"}, SandboxAllowModeNftRules());
    if (!r) return tl::unexpected(r.error());
  }
  if (sp.uplink_ == Uplink::kProxy || sp.secrets_proxy_) {
    auto listener = ListenInSandboxNetns(sp.pid_, kEgressProxyAddress, kEgressProxyPort);
    if (!listener) return tl::unexpected(listener.error());
    EgressProxyOptions po;
    po.allow = net_config.allow;
    po.public_mode = sp.uplink_ != Uplink::kProxy;
    po.allowed_cidrs = net_config.allowed_cidrs;
    po.uplink_netns = net_config.uplink_netns;
    // Public mode's resolvers may be pasta's, inside the sandbox: the proxy
    // asks the configured ones or the host's.
    const auto& resolvers = spec.public_network.nameservers.empty()
                                ? HostNameservers()
                                : spec.public_network.nameservers;
    for (const auto& ns : resolvers) {
      if (auto server = ParseDnsServer(ns); server) po.nameservers.push_back(*server);
    }
    for (const auto& secret : spec.secrets) {
      po.secrets.push_back(
          {secret.name, secret.placeholder, secret.value, secret.hosts, secret.in_query});
      po.substitute_query = po.substitute_query || secret.in_query;
    }
    po.ca = secrets_ca;
    po.upstream_ca_file = spec.secrets_upstream_ca_file;
    po.on_event = spec.on_egress_event;
    auto proxy = EgressProxy::Start(std::move(*listener), std::move(po));
    if (!proxy) return tl::unexpected(proxy.error());
    sp.proxy_ = std::move(*proxy);
  }
  mark(SetupStep::kNetwork);

  char go = 1;
  if (write(sync_w.get(), &go, 1) != 1) return MakeSyscallError("write", errno, "sync pipe");
  sync_w.reset();

  // Collect the child's step reports until exec closes the pipe.
  const int64_t deadline = MonotonicNs() + spec.setup_timeout.count() * 1000000LL;
  bool reached_exec = false;
  for (;;) {
    int64_t left_ms = (deadline - MonotonicNs()) / 1000000;
    if (left_ms <= 0) {
      return MakeError(ErrorCode::kTimeout, "sandbox setup did not finish in time");
    }
    struct pollfd pfd = {report_r.get(), POLLIN, 0};
    int rc = poll(&pfd, 1, static_cast<int>(left_ms));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return MakeSyscallError("poll", errno, "report pipe");
    if (rc == 0) continue;
    ChildRecord rec;
    ssize_t n = read(report_r.get(), &rec, sizeof(rec));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeSyscallError("read", errno, "report pipe");
    if (n == 0) break;
    if (n != sizeof(rec)) return MakeError(ErrorCode::kInternal, "short read on report pipe");
    auto step = static_cast<SetupStep>(rec.step);
    if (rec.kind == 1) {
      Error e;
      auto call = static_cast<ChildCall>(rec.call);
      if (step == SetupStep::kMounts || step == SetupStep::kPivotRoot) {
        e = DescribeMountFailure(*mount_plan, rec.index, call, rec.err);
      } else {
        std::string subject;
        if (step == SetupStep::kExec) subject = spec.argv[0];
        if (step == SetupStep::kRlimits) subject = fmt::format("resource {}", rec.index);
        if (step == SetupStep::kCgroupAttach && rec.index >= 0 &&
            static_cast<size_t>(rec.index) < cgroup_tasks.size()) {
          subject = cgroup_tasks[static_cast<size_t>(rec.index)].dir + "/tasks";
        }
        e = SyscallError(ChildCallName(call), rec.err, subject);
        e.message += fmt::format(" during step '{}'", SetupStepName(step));
      }
      return tl::unexpected(e);
    }
    if (rec.step < ends.size()) ends[rec.step] = rec.mono_ns;
    if (step == SetupStep::kSeccomp) reached_exec = true;
  }
  mark(SetupStep::kExec);
  if (!reached_exec) {
    auto st = sp.Wait();
    return MakeError(ErrorCode::kInternal, fmt::format("sandbox init died during setup ({})",
                                                       st ? st->ToString() : st.error().message));
  }

  int64_t prev = t_start;
  for (size_t i = 0; i < ends.size(); ++i) {
    if (ends[i] == 0) ends[i] = prev;
    sp.timings_.ns[i] = std::max<int64_t>(0, ends[i] - prev);
    prev = std::max(prev, ends[i]);
  }
  sp.timings_.total_ns = prev - t_start;
  return sp;
}

LimitSupport ProbeHostLimitSupport() {
  Limits all;
  all.memory_bytes = 1;
  all.max_processes = 1;
  all.cpu_cores = 1;
  all.cpu_time_seconds = 1;
  all.file_size_bytes = 1;
  all.open_files = 1;
  all.address_space_bytes = 1;
  all.workspace_bytes = 1;
  LimitSupport base;
  auto host = DetectCgroups();
  if (host) base = ProbeCgroupSupport(*host);
  return RlimitSupport(all, base);
}

}  // namespace deepbox::local
