#include "local/lifecycle/supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "common/io.h"
#include "common/time.h"
#include "common/unique_fd.h"
#include "local/cgroups.h"
#include "local/egress_log.h"
#include "local/launcher.h"
#include "local/lifecycle/pool.h"
#include "local/namespaces.h"
#include "local/network.h"
#include "local/sandboxd_bundle.h"
#include "net/conn.h"
#include "net/http_client.h"

extern char** environ;

namespace deepbox::local::lifecycle {
namespace {

using namespace std::chrono_literals;

constexpr size_t kStderrTail = 8192;
// How often the supervisor looks whether its state dir is still there.
constexpr int kStateCheckMs = 2000;

int64_t Us(int64_t ns) { return ns / 1000; }

std::string ErrorLine(const Error& e) {
  json::object o;
  o["ok"] = false;
  o["error"] = ErrorToJson(e)["error"];
  return ToJson(o) + "\n";
}

// Writes without SIGPIPE (the creator may be gone).
void SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

void Log(const std::string& msg) {
  std::string line =
      fmt::format("{} deepbox supervisor[{}]: {}\n", FormatRfc3339Ms(NowMs()), getpid(), msg);
  (void)!write(STDERR_FILENO, line.data(), line.size());
}

// Expected cgroup dirs of sandbox `id` when launched by this process (see
// cgroups.h: <hierarchy>/<our cgroup>/deepbox/<id>); recorded before the
// launch so a reaper finds them even if we die half-way.
std::vector<std::string> CgroupCandidates(const std::string& id) {
  std::vector<std::string> out;
  auto host = DetectCgroups();
  if (!host) return out;
  auto join = [](std::string a, const std::string& b) {
    while (!a.empty() && a.back() == '/') a.pop_back();
    if (!b.empty() && b != "/") a += (b.front() == '/' ? "" : "/") + b;
    return a;
  };
  if (!host->v2_mount.empty())
    out.push_back(join(join(host->v2_mount, host->v2_self), "deepbox/" + id));
  std::set<std::string> seen;
  for (const auto& [controller, mount] : host->v1_mounts) {
    if (!seen.insert(mount).second) continue;
    auto self = host->v1_self.find(controller);
    std::string base = join(mount, self == host->v1_self.end() ? "/" : self->second);
    out.push_back(join(base, "deepbox/" + id));
  }
  return out;
}

// Whether `public` can work here and through what (veth or pasta, see
// local/uplink.h; the launcher probes again and fails closed to `none` too).
NetworkProbe PublicNetworkProbe() { return ChooseUplink(PublicNetworkConfig{}); }

// Secrets as JSON: name, hosts, placeholder (and the value only for
// secrets.json and the ready socket).
json::array SecretsToJson(const std::vector<SecretGrant>& secrets, bool with_values) {
  json::array a;
  for (const auto& s : secrets) {
    json::array hosts;
    for (const auto& h : s.hosts) hosts.emplace_back(JsonString(h));
    json::object o{{"name", s.name}, {"hosts", std::move(hosts)}, {"placeholder", s.placeholder}};
    if (s.in_query) o["in_query"] = true;
    if (with_values) o["value"] = JsonString(s.value);
    a.emplace_back(std::move(o));
  }
  return a;
}

Result<std::vector<SecretGrant>> SecretsFromJson(const json::value& v) {
  auto bad = MakeError(ErrorCode::kInvalidArgument, "malformed secrets");
  if (!v.is_array()) return bad;
  std::vector<SecretGrant> out;
  for (const auto& e : v.as_array()) {
    if (!e.is_object()) return bad;
    const auto& o = e.as_object();
    SecretGrant g;
    g.name = GetOptString(o, "name").value_or("");
    g.placeholder = GetOptString(o, "placeholder").value_or("");
    g.value = GetOptString(o, "value").value_or("");
    g.in_query = GetOptBool(o, "in_query").value_or(std::nullopt).value_or(false);
    if (const auto* h = o.if_contains("hosts"); h && h->is_array()) {
      for (const auto& x : h->as_array()) {
        if (x.is_string()) g.hosts.emplace_back(x.as_string());
      }
    }
    if (g.name.empty() || !IsSecretPlaceholder(g.placeholder) || g.hosts.empty()) return bad;
    out.push_back(std::move(g));
  }
  return out;
}

class Supervisor {
 public:
  Supervisor(SupervisorRequest req, UniqueFd ready)
      : req_(std::move(req)),
        store_(req_.state_dir),
        paths_(store_.Paths(req_.id)),
        ready_(std::move(ready)) {}

  int Run();

 private:
  Status Prepare();
  // SupervisorRequest::adopt instead of Prepare + launch.
  Status Adopt();
  void FailAdopt(const Error& e);
  // Tells the creator we are ready (the record as it is now).
  void ReportReady();
  void MakeSpareDisk();
  Status LaunchSandbox();
  // What LaunchSandbox decided, into the record `m` (written with `ready`).
  void RecordLaunch(SandboxMeta& m) const;
  Status WaitHealthy();
  void Serve();
  // The daemon died: restart it (false: the sandbox was deleted meanwhile).
  bool DaemonDied(const std::string& how);
  Status Restart();
  void Break(const std::string& why);
  // Makes the sandbox what meta_.requested_mode asks for and records the
  // outcome (false: the sandbox was deleted meanwhile).
  bool ApplyRequestedMode();
  // Whether the daemon reports nothing going on for idle_suspend_seconds
  // (GET /deepbox/v1/activity; false when it cannot tell).
  bool IdleLongEnough();
  // The state dir (or our record in it) was removed or replaced.
  bool StateRemoved() const;
  bool HoldsStateDir() const;
  Status HoldStateMarkers();
  void Delete(const std::optional<Tombstone>& why);
  void Fail(const Error& e);
  void ArmTimer(std::optional<int64_t> at_ms = std::nullopt);
  void DrainStderr();
  bool HandleSignals();  // true: delete requested
  // meta_.network changed (`deepbox sandbox network`): applies it to the
  // proxy, logs it, records network_applied.
  void ApplyNetworkChange(const std::string& before);
  Status SaveSecrets();
  Status LoadSecrets();

  SupervisorRequest req_;
  Store store_;
  SandboxPaths paths_;
  UniqueFd ready_;
  SandboxMeta meta_;
  // The /workspace disk once a restart took it from a dead sandbox; declared
  // before sp_, so it is unmounted after every process is gone.
  std::optional<WorkspaceDisk> disk_;
  SandboxProcess sp_;
  UniqueFd dir_fd_;  // the sandbox's state dir (O_PATH): is it still ours?
  // The state dir's trash/ and tombstones/ (O_PATH): both gone when the
  // whole state dir is being removed.
  std::vector<std::pair<fs::path, UniqueFd>> state_markers_;
  std::vector<int64_t> restart_times_;  // NowMs() of the restarts within the window
  UniqueFd stderr_r_;
  std::string stderr_tail_;
  UniqueFd sigfd_;
  UniqueFd timerfd_;
  std::unique_ptr<net::HttpClient> activity_http_;  // the idle timer's probe
  std::shared_ptr<EgressLog> egress_log_;           // network.jsonl, across restarts
  int64_t start_ns_ = 0;
  int64_t launched_ns_ = 0;
  bool dir_created_ = false;
};

Status Supervisor::Prepare() {
  // Our creator made the state directory. If it is gone, it was removed since
  // (a test's TearDown, `rm -rf`): making it again would give a sandbox that
  // nothing asked for and nothing lists.
  if (access(req_.state_dir.c_str(), F_OK) != 0) {
    return MakeSyscallError("access", errno,
                            req_.state_dir + " (the state directory: removed meanwhile?)");
  }
  if (auto st = store_.Init(); !st) return st;
  if (auto st = HoldStateMarkers(); !st) return st;
  if (mkdir(paths_.dir.c_str(), 0700) != 0) {
    return MakeSyscallError("mkdir", errno, paths_.dir.string());
  }
  dir_created_ = true;
  dir_fd_.reset(open(paths_.dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd_) return MakeSyscallError("open", errno, paths_.dir.string());
  // Our own messages go to the sandbox's log.
  UniqueFd log(open(paths_.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (log) dup2(log.get(), STDERR_FILENO);

  auto self = SelfRef();
  if (!self) return tl::unexpected(self.error());
  meta_.id = req_.id;
  meta_.labels = req_.labels;
  meta_.created_at_ms = NowMs();
  if (req_.ttl_seconds > 0) meta_.expires_at_ms = meta_.created_at_ms + req_.ttl_seconds * 1000;
  meta_.idle_suspend_seconds = req_.idle_suspend_seconds;
  // A warm sandbox nobody claims does not live for ever (a claim sets the
  // claimer's TTL): the pool replaces it.
  if (!req_.pool.empty() && !meta_.expires_at_ms) {
    meta_.expires_at_ms =
        meta_.created_at_ms +
        std::chrono::duration_cast<std::chrono::milliseconds>(kWarmLifetime).count();
  }
  meta_.pool = req_.pool;
  meta_.state = req_.pool.empty() ? "claimed" : "warm";
  meta_.network_requested = req_.network;
  meta_.rootfs = req_.rootfs;
  meta_.image = req_.image;
  meta_.limits = req_.limits;
  meta_.supervisor = *self;
  meta_.socket = paths_.socket.string();
  meta_.cgroups = CgroupCandidates(req_.id);
  if (req_.requested_at_ns > 0) meta_.timings["spawn"] = Us(start_ns_ - req_.requested_at_ns);
  if (meta_.socket.size() >= sizeof(sockaddr_un::sun_path)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("the state directory {} is too deep: the socket path {} is longer "
                                 "than a unix socket allows (107 bytes); set DEEPBOX_STATE_DIR to "
                                 "a shorter path",
                                 req_.state_dir, meta_.socket));
  }
  // The first record names us, before anything that could leak is created.
  if (auto st = store_.Write(meta_); !st) return st;

  // Network: public where the host can do it, else fail closed to none; an
  // allowlist never falls back (the create fails with the reason).
  std::string want = req_.network.empty() ? "public" : req_.network;
  meta_.network = "none";
  if (want == "public") {
    NetworkProbe probe = PublicNetworkProbe();
    if (probe.public_possible) {
      if (probe.uplink == Uplink::kVeth) {  // only veth uses a slot (its /30)
        auto slot = store_.ReserveNetSlot(req_.id);
        if (!slot) return tl::unexpected(slot.error());
        meta_.net_slot = *slot;
      }
      meta_.network = "public";
    } else {
      meta_.network_note =
          "network 'public' is not available on this host, using 'none': " + probe.reason;
    }
  } else if (want != "none") {
    auto policy = ParseNetworkPolicy(want);
    if (!policy) return tl::unexpected(policy.error());
    if (std::string why = AllowModeObstacle(PublicNetworkConfig{}); !why.empty()) {
      return MakeError(ErrorCode::kUnavailable,
                       fmt::format("network '{}' is not available on this host: {}", want, why));
    }
    meta_.network = policy->ToString();
    meta_.network_live = true;  // a proxy and no uplink: its policy can change
  }
  meta_.network_applied = meta_.network;
  for (const auto& secret : req_.secrets) meta_.secrets.emplace_back(secret.name, secret.hosts);
  if (auto st = SaveSecrets(); !st) return st;
  if (auto st = store_.Write(meta_); !st) return st;
  if (mkdir(paths_.workspace.c_str(), 0700) != 0) {
    return MakeSyscallError("mkdir", errno, paths_.workspace.string());
  }
  if (!req_.workspace_image.empty()) {
    // A fork: the disk cloned from its source, consistent (cloned frozen).
    if (mkdir(paths_.runtime.c_str(), 0700) != 0) {
      return MakeSyscallError("mkdir", errno, paths_.runtime.string());
    }
    fs::path image = paths_.runtime / "workspace.img";
    if (rename(req_.workspace_image.c_str(), image.c_str()) != 0) {
      return MakeSyscallError("rename", errno, req_.workspace_image + " -> " + image.string());
    }
    auto disk = WorkspaceDisk::Adopt(image, paths_.workspace, /*check=*/false);
    if (!disk) return tl::unexpected(disk.error());
    disk_ = std::move(*disk);
  }
  return {};
}

Status Supervisor::Adopt() {
  if (auto st = store_.Init(); !st) return st;
  if (auto st = HoldStateMarkers(); !st) return st;
  dir_fd_.reset(open(paths_.dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir_fd_) return MakeSyscallError("open", errno, paths_.dir.string());
  UniqueFd log(open(paths_.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (log) dup2(log.get(), STDERR_FILENO);
  auto self = SelfRef();
  if (!self) return tl::unexpected(self.error());
  // Under the record's lock: exactly one adopter wins, and only over a dead
  // supervisor of a sandbox that is suspended.
  SandboxMeta before;
  auto taken = store_.Update(req_.id, [&](SandboxMeta& m) -> Status {
    if (IsSupervisorOf(m.supervisor, req_.id)) {
      return MakeError(
          ErrorCode::kConflict,
          fmt::format("sandbox '{}' has a supervisor already (pid {})", req_.id, m.supervisor.pid));
    }
    if (m.state != "claimed" || m.mode != "suspended" || !m.broken.empty()) {
      return MakeError(ErrorCode::kConflict,
                       fmt::format("sandbox '{}' is not suspended (it is {}): its supervisor's "
                                   "death ended it",
                                   req_.id, m.broken.empty() ? m.mode : "broken"));
    }
    if (m.expired(NowMs())) {
      return MakeError(ErrorCode::kNotFound,
                       fmt::format("sandbox '{}' expired while it was suspended", req_.id));
    }
    before = m;
    m.supervisor = *self;
    m.init = {};
    m.ready = false;
    m.hold = {};
    m.cgroups = CgroupCandidates(req_.id);  // ours now (we may sit in another cgroup)
    return Status{};
  });
  if (!taken) return tl::unexpected(taken.error());
  meta_ = *taken;
  dir_created_ = true;  // ours to remove on delete from now on
  Log(fmt::format("adopting this suspended sandbox (its supervisor, pid {}, is gone)",
                  before.supervisor.pid));
  // What a supervisor killed half-way through a launch may have left.
  (void)KillAndRemoveCgroups(req_.id, before.cgroups);
  if (before.net_slot) RemoveSlotNetwork(*before.net_slot);
  // The launch reads these from the request.
  req_.labels = meta_.labels;
  req_.rootfs = meta_.rootfs;
  req_.image = meta_.image;
  req_.limits = meta_.limits;
  req_.network = meta_.network_requested;
  req_.pool.clear();
  req_.idle_suspend_seconds = meta_.idle_suspend_seconds;
  if (auto st = LoadSecrets(); !st) return st;
  fs::path image = paths_.runtime / "workspace.img";
  if (access(image.c_str(), F_OK) == 0) {
    auto disk = WorkspaceDisk::Adopt(image, paths_.workspace);
    if (!disk) return tl::unexpected(disk.error());
    disk_ = std::move(*disk);
  }
  return {};
}

void Supervisor::FailAdopt(const Error& e) {
  Log("adoption failed (the sandbox stays suspended, its files kept): " + e.ToString());
  if (ready_) SendAll(ready_.get(), ErrorLine(e));
  ready_.reset();
  // Nothing of the sandbox is removed: the next resume tries again.
  if (disk_) disk_->KeepImage();
  disk_.reset();
  (void)store_.Update(req_.id, [&](SandboxMeta& m) {
    if (m.requested_mode == "running") m.requested_mode = "suspended";
    m.mode_error = e.message;
    return Status{};
  });
}

void Supervisor::ReportReady() {
  json::object msg;
  msg["ok"] = true;
  msg["meta"] = meta_.ToJson();
  SendAll(ready_.get(), ToJson(msg) + "\n");
  ready_.reset();
}

// Once the sandbox is up, at the lowest CPU priority: a spare /workspace disk
// for the next sandbox (local/workspace_disk.h), so that its create neither
// copies one nor waits for the copy's write-back.
void Supervisor::MakeSpareDisk() {
  errno = 0;
  int nice_before = getpriority(PRIO_PROCESS, 0);  // this thread's: nice is per thread on Linux
  bool lowered = errno == 0 && setpriority(PRIO_PROCESS, 0, 19) == 0;
  if (auto st = sp_.MakeWorkspaceDiskSpare(); !st) {
    Log("no spare /workspace disk made: " + st.error().ToString());
  }
  if (lowered) (void)setpriority(PRIO_PROCESS, 0, nice_before);
}

Status Supervisor::LaunchSandbox() {
  SandboxSpec spec;
  spec.id = req_.id;
  spec.runtime_dir = paths_.runtime;
  spec.workspace_dir = paths_.workspace;
  if (!req_.rootfs.empty()) spec.rootfs = req_.rootfs;
  spec.sandboxd_binary = req_.sandboxd_binary;
  spec.argv = {kSandboxdPath, "--listen", kSandboxdListen, "--root-dir", "/workspace"};
  spec.daemon_listener = true;  // the host owns the socket: see local/daemon_socket.h
  // /.deepbox/bin last: its `python` (mounts.h) never shadows the image's own.
  spec.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/.deepbox/bin",
              "HOME=/workspace", "LANG=C.UTF-8", "USER=sandbox", "TERM=xterm-256color"};
  if (!req_.image.empty()) {
    // The image's layers under a writable layer of its own (a tmpfs, as /tmp),
    // the daemon with its own libraries at /deepbox (local/sandboxd_bundle.h).
    for (const auto& layer : req_.image.layers) spec.image_layers.emplace_back(layer);
    auto bundle = ResolveSandboxdBundle(req_.sandboxd_binary, store_.root() / "sandboxd-bundles");
    if (!bundle) return tl::unexpected(bundle.error());
    spec.sandboxd_binary.reset();
    spec.sandboxd_bundle = bundle->files;
    spec.sandboxd_bundle_loader = bundle->loader;
    std::vector<std::string> args = {"--listen", kSandboxdListen, "--root-dir", "/workspace"};
    if (std::string cwd = SandboxImageCwd(req_.image); cwd != "/workspace") {
      args.insert(args.end(), {"--exec-cwd", cwd});
    }
    spec.argv = SandboxdBundleArgv(args);
    spec.env = SandboxImageEnv(req_.image, spec.env);
  }
  spec.hostname = req_.id;
  spec.network = meta_.network == "public" ? NetworkMode::kPublic : NetworkMode::kNone;
  if (auto policy = ParseNetworkPolicy(meta_.network);
      policy && policy->mode == NetworkMode::kAllow) {
    spec.network = NetworkMode::kAllow;
    spec.public_network.allow = policy->allow;
  } else if (meta_.network_live) {
    spec.network = NetworkMode::kAllow;  // switched to none: its proxy allows nothing
  }
  spec.secrets = req_.secrets;
  if (!egress_log_ && (spec.network == NetworkMode::kAllow || !spec.secrets.empty())) {
    auto log = EgressLog::Open(paths_.dir / kEgressLogFile);
    if (!log) return tl::unexpected(log.error());
    egress_log_ = std::move(*log);
  }
  if (egress_log_) {
    spec.on_egress_event = [log = egress_log_](EgressEvent e) { log->Append(std::move(e)); };
  }
  if (meta_.net_slot) spec.public_network.slot = *meta_.net_slot;
  if (spec.network == NetworkMode::kPublic) {  // what Prepare chose (a slot: veth)
    spec.public_network.uplink = meta_.net_slot ? UplinkChoice::kVeth : UplinkChoice::kPasta;
  }
  spec.limits = req_.limits.ToLaunchLimits();
  spec.workspace_disk_mounted = disk_.has_value();  // a restart: the same disk, mounted
  spec.workspace_disk_templates = store_.disk_templates_dir();
  spec.die_with_parent = true;  // we are the launching (main) thread: our death kills it
  spec.use_cgroups = geteuid() == 0;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return MakeSyscallError("pipe2", errno);
  stderr_r_.reset(fds[0]);
  // Only our end is non-blocking; we always drain it (the daemon's writes must not fail).
  if (fcntl(fds[0], F_SETFL, O_NONBLOCK) != 0)
    return MakeSyscallError("fcntl", errno, "O_NONBLOCK");
  UniqueFd stderr_w(fds[1]);
  spec.stderr_fd = stderr_w.get();

  auto sp = Launch(spec);
  if (!sp) {
    Error e = sp.error();
    if (!UserNamespacesAvailable()) {
      e = Error(ErrorCode::kUnavailable,
                "this host does not let deepbox create user namespaces (needed for every "
                "sandbox): " +
                    e.message +
                    ". Enable them (sysctl kernel.unprivileged_userns_clone=1 or "
                    "user.max_user_namespaces > 0); run `deepbox doctor` for details");
    }
    return tl::unexpected(e);
  }
  sp_ = std::move(*sp);
  launched_ns_ = MonotonicNs();
  meta_.init.pid = sp_.pid();
  meta_.init.start_time = ProcessStartTime(sp_.pid()).value_or(0);
  if (sp_.network() != NetworkMode::kAllow) {  // allow keeps its list ("allow=a,b")
    meta_.network = std::string(NetworkModeName(sp_.network()));
  }
  meta_.network_applied = meta_.network;
  if (!sp_.network_note().empty()) meta_.network_note = sp_.network_note();
  meta_.limits_note = UnenforcedLimitsNote(req_.limits, sp_.limits());
  const auto& t = sp_.timings();
  for (size_t i = 0; i < t.ns.size(); ++i) {
    meta_.timings[SetupStepName(static_cast<SetupStep>(i))] = Us(t.ns[i]);
  }
  meta_.timings["launch"] = Us(t.total_ns);
  if (t.workspace_disk_ns > 0) meta_.timings["workspace disk"] = Us(t.workspace_disk_ns);
  // Recorded once the daemon answers (RecordLaunch), in the same write as
  // `ready`: each rewrite of the record is a rename over it, which ext4
  // (auto_da_alloc) follows with the new file's write-back, 0.2-0.5 ms of a
  // create; and nothing reads these before then (a supervisor that dies
  // meanwhile takes the sandbox with it: die_with_parent).
  return {};
}

void Supervisor::RecordLaunch(SandboxMeta& m) const {
  // Only what the launch decides: a claim may have changed labels and TTL.
  m.init = meta_.init;
  m.network = meta_.network;
  m.network_applied = meta_.network_applied;
  m.network_note = meta_.network_note;
  m.limits_note = meta_.limits_note;
  if (restart_times_.empty()) m.timings = meta_.timings;
}

void Supervisor::DrainStderr() {
  if (!stderr_r_) return;
  char buf[4096];
  for (;;) {
    ssize_t n = read(stderr_r_.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // EAGAIN
    if (n == 0) {
      stderr_r_.reset();
      return;
    }
    stderr_tail_.append(buf, static_cast<size_t>(n));
    if (stderr_tail_.size() > kStderrTail) {
      stderr_tail_.erase(0, stderr_tail_.size() - kStderrTail);
    }
  }
}

bool Supervisor::HandleSignals() {
  bool del = false;
  signalfd_siginfo si;
  while (read(sigfd_.get(), &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
    if (si.ssi_signo == SIGHUP) {
      auto m = store_.Read(req_.id);
      if (m) {
        std::string network_before = meta_.network_applied;
        meta_ = *m;
        if (meta_.network != network_before) ApplyNetworkChange(network_before);
        Log(fmt::format("meta.json re-read: state {}, expires {}", meta_.state,
                        meta_.expires_at_ms ? FormatRfc3339Ms(*meta_.expires_at_ms) : "never"));
        ArmTimer();
      } else {
        Log("re-reading meta.json failed: " + m.error().ToString());
      }
    } else {
      Log(fmt::format("signal {} from pid {}: deleting", strsignal(static_cast<int>(si.ssi_signo)),
                      si.ssi_pid));
      del = true;
    }
  }
  return del;
}

void Supervisor::ApplyNetworkChange(const std::string& before) {
  std::string applied = before;
  std::string error;
  auto policy = ParseNetworkPolicy(meta_.network);
  if (!policy) {
    error = policy.error().message;
  } else if (!meta_.network_live || policy->mode == NetworkMode::kPublic) {
    error =
        "this sandbox's network cannot change while it runs (only one created with "
        "--network allow=... can switch between allowlists and none)";
  } else {
    applied = policy->ToString();
    EgressProxy* proxy = sp_.mutable_proxy();
    size_t closed = 0;
    if (proxy != nullptr) closed = proxy->SetPolicy(policy->allow, /*public_mode=*/false);
    // Not running (suspended): the next launch reads meta_.network.
    Log(fmt::format("network policy: {} -> {} ({} open connection(s) closed)", before, applied,
                    closed));
    if (egress_log_) {
      EgressEvent e;
      e.event = "policy";
      e.verdict = "allowed";
      e.rule = fmt::format("{} (was {}; {} connection(s) closed)", applied, before, closed);
      egress_log_->Append(std::move(e));
    }
  }
  if (!error.empty()) Log("network change refused: " + error);
  auto updated = store_.Update(req_.id, [&](SandboxMeta& m) {
    m.network = applied;
    m.network_applied = applied;
    m.network_note = error.empty() ? "" : "network change refused: " + error;
    return Status{};
  });
  if (updated) meta_ = *updated;
}

Status Supervisor::SaveSecrets() {
  if (req_.secrets.empty()) return {};
  return WriteFileAtomic(paths_.dir / kSecretsFile,
                         ToJson(SecretsToJson(req_.secrets, /*with_values=*/true)));
}

Status Supervisor::LoadSecrets() {
  if (meta_.secrets.empty()) return {};
  fs::path path = paths_.dir / kSecretsFile;
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return MakeSyscallError("open", errno, path.string());
  auto text = ReadAll(fd.get(), path.string(), 4u << 20);
  if (!text) return tl::unexpected(text.error());
  auto parsed = ParseJson(*text);
  if (!parsed) return tl::unexpected(parsed.error());
  auto secrets = SecretsFromJson(*parsed);
  if (!secrets) return tl::unexpected(secrets.error());
  req_.secrets = std::move(*secrets);
  return {};
}

Status Supervisor::WaitHealthy() {
  net::ClientOptions options;
  options.connect_timeout = 5000ms;
  options.max_idle_connections = 1;
  auto http = net::HttpClient::Create("unix:" + meta_.socket, std::move(options));
  if (!http) return tl::unexpected(http.error());
  // The listener exists before the daemon runs (the launcher bound it), so a
  // request simply waits in its backlog until the daemon accepts. The pidfd
  // cancels a wait at once if the daemon dies; signals are checked in between.
  const int64_t deadline = MonotonicNs() + 30'000'000'000LL;
  for (;;) {
    net::ClientRequest req;
    req.target = "/deepbox/v1/health";
    req.timeout = 250ms;
    req.cancel_fd = sp_.pidfd();
    auto r = (*http)->Send(req);
    if (r && r->status == 200) return {};
    (*http)->CloseIdle();
    if (MonotonicNs() > deadline) {
      return MakeError(ErrorCode::kTimeout,
                       "the sandbox daemon did not answer its health check within 30 s" +
                           (stderr_tail_.empty() ? "" : "; its stderr: " + stderr_tail_));
    }
    struct pollfd pfds[3] = {{sp_.pidfd(), POLLIN, 0},
                             {sigfd_.get(), POLLIN, 0},
                             {stderr_r_ ? stderr_r_.get() : -1, POLLIN, 0}};
    // A refused or failed request is retried after 1 ms (not a busy loop).
    struct timespec ts = {0, 1'000'000};
    int rc = ppoll(pfds, 3, &ts, nullptr);
    if (rc < 0 && errno != EINTR) return MakeSyscallError("ppoll", errno);
    if (pfds[2].revents) DrainStderr();
    if (pfds[1].revents && HandleSignals()) {
      return MakeError(ErrorCode::kCancelled, "sandbox deleted while starting");
    }
    if (pfds[0].revents) {
      DrainStderr();
      auto st = sp_.TryWait();
      std::string how = st && *st ? (*st)->ToString() : "ended";
      const bool killed =
          st && *st && (*st)->kind == ExitStatus::Kind::kSignaled && (*st)->signal == SIGKILL;
      return MakeError(ErrorCode::kInternal,
                       fmt::format("the sandbox daemon {} before it was ready{}", how,
                                   stderr_tail_.empty() ? "" : "; its stderr: " + stderr_tail_),
                       killed ? std::string(kReasonKilled) : std::string());
    }
  }
}

void Supervisor::ArmTimer(std::optional<int64_t> at_ms) {
  struct itimerspec its {};
  if (!at_ms) at_ms = meta_.expires_at_ms;
  if (at_ms) {
    int64_t at = std::max<int64_t>(*at_ms, 1);
    its.it_value.tv_sec = at / 1000;
    its.it_value.tv_nsec = (at % 1000) * 1000000;
  }
  if (timerfd_settime(timerfd_.get(), TFD_TIMER_ABSTIME, &its, nullptr) != 0) {
    Log("timerfd_settime: " + SyscallError("timerfd_settime", errno).message);
  }
}

void Supervisor::Serve() {
  for (;;) {
    // The idle timer (--idle-suspend): checked at least every kStateCheckMs.
    if (meta_.idle_suspend_seconds > 0 && meta_.mode == "running" &&
        meta_.requested_mode == "running" && meta_.ready && meta_.broken.empty() &&
        meta_.state == "claimed" && IdleLongEnough()) {
      auto asked = store_.Update(req_.id, [&](SandboxMeta& m) {
        if (m.requested_mode == "running") m.requested_mode = "suspended";
        return Status{};
      });
      if (asked) {
        meta_ = *asked;
        Log(fmt::format("unused for {} s (--idle-suspend): suspending",
                        meta_.idle_suspend_seconds));
      }
    }
    // A pause, suspend or resume asked for (SIGHUP re-read the record).
    if (meta_.requested_mode != meta_.mode && meta_.broken.empty() && meta_.state != "warm") {
      if (!ApplyRequestedMode()) return;
    }
    // No pidfd once broken (see Break): only a delete or the TTL end it.
    struct pollfd pfds[4] = {{sp_.pid() > 0 ? sp_.pidfd() : -1, POLLIN, 0},
                             {sigfd_.get(), POLLIN, 0},
                             {timerfd_.get(), POLLIN, 0},
                             {stderr_r_ ? stderr_r_.get() : -1, POLLIN, 0}};
    int rc = poll(pfds, 4, kStateCheckMs);
    if (rc < 0) {
      if (errno == EINTR) continue;
      Log(SyscallError("poll", errno).message);
      Delete(std::nullopt);
      return;
    }
    if (StateRemoved()) {
      // Nothing could list, reach or delete this sandbox any more: it ends.
      Log(
          fmt::format("the state directory {} (or this sandbox's record in it) was removed: "
                      "deleting the sandbox",
                      paths_.dir.string()));
      Delete(Tombstone{req_.id, "state-removed", "its state directory was removed", NowMs()});
      return;
    }
    if (pfds[3].revents) DrainStderr();
    if (pfds[1].revents && HandleSignals()) {
      Delete(std::nullopt);
      return;
    }
    if (pfds[2].revents) {
      uint64_t ticks;
      (void)!read(timerfd_.get(), &ticks, sizeof(ticks));
      if (auto m = store_.Read(req_.id)) meta_ = *m;  // a claim may have changed the TTL
      if (meta_.expired(NowMs())) {
        // A warm sandbox goes only if no claimer has its marker (the rename
        // decides); one being claimed gets its claimer's TTL in a moment,
        // unless that claim was abandoned half-way (see pool.h).
        const int64_t abandoned_ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(kAbandonedClaimAfter).count();
        if (meta_.state == "warm" && rename(paths_.warm.c_str(), paths_.claimed.c_str()) != 0 &&
            NowMs() < *meta_.expires_at_ms + abandoned_ms) {
          ArmTimer(NowMs() + 1000);
          continue;
        }
        Log("TTL reached: deleting");
        Delete(Tombstone{req_.id, "expired",
                         "its TTL ran out at " + FormatRfc3339Ms(*meta_.expires_at_ms), NowMs()});
        return;
      }
      ArmTimer();
    }
    if (pfds[0].revents) {
      DrainStderr();
      auto st = sp_.TryWait();
      std::string how = st && *st ? (*st)->ToString() : "ended";
      if (!DaemonDied(how)) return;
    }
  }
}

bool Supervisor::DaemonDied(const std::string& how) {
  std::string tail = stderr_tail_;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  std::string last = how;  // what ended the daemon, then why a restart failed
  std::string said = tail.empty() ? "" : "; its last stderr: " + tail;
  // A warm sandbox nobody claimed holds nobody's files: it goes (its pool
  // makes another). Taking its marker keeps claimers away.
  if (rename(paths_.warm.c_str(), paths_.claimed.c_str()) == 0) {
    Log("the sandbox daemon " + last + ": deleting this unclaimed warm sandbox" + said);
    Delete(Tombstone{req_.id, "daemon-exited", "its daemon (deepbox-sandboxd) " + last + said,
                     NowMs()});
    return false;
  }
  for (;;) {
    const int64_t now = NowMs();
    const int64_t window_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(kDaemonRestartWindow).count();
    std::erase_if(restart_times_, [&](int64_t t) { return now - t > window_ms; });
    if (static_cast<int>(restart_times_.size()) >= kMaxDaemonRestarts) {
      Break(fmt::format("its daemon (deepbox-sandboxd) died {} times within {} s (last: {}{})",
                        restart_times_.size() + 1, kDaemonRestartWindow.count(), last, said));
      return true;
    }
    restart_times_.push_back(now);
    const int n = meta_.restarts + 1;
    Log(
        fmt::format("the sandbox daemon {}: restarting it over the same /workspace (restart {}; "
                    "at most {} within {} s){}",
                    last, n, kMaxDaemonRestarts, kDaemonRestartWindow.count(), said));
    stderr_tail_.clear();
    auto marked = store_.Update(req_.id, [&](SandboxMeta& m) {
      m.ready = false;
      m.restarts = n;
      return Status{};
    });
    if (marked) meta_ = *marked;
    meta_.restarts = n;
    auto st = Restart();
    if (st) {
      Log(fmt::format("restarted: the daemon (pid {}) is ready", sp_.pid()));
      return true;
    }
    if (st.error().code == ErrorCode::kCancelled) {  // deleted while restarting
      Delete(std::nullopt);
      return false;
    }
    last = "could not be restarted: " + st.error().message;
    said.clear();
    Log("the sandbox daemon " + last);
  }
}

Status Supervisor::Restart() {
  // Whatever is left of the old sandbox goes, except its /workspace (a plain
  // dir of ours, or the disk we take over): cgroups, network, socket, root.
  (void)sp_.Kill();
  if (auto disk = sp_.TakeWorkspaceDisk()) disk_ = std::move(*disk);
  sp_ = SandboxProcess();
  if (auto st = LaunchSandbox(); !st) return st;
  if (auto st = WaitHealthy(); !st) return st;
  auto updated = store_.Update(req_.id, [&](SandboxMeta& m) {
    m.ready = true;
    RecordLaunch(m);
    return Status{};
  });
  if (!updated) return tl::unexpected(updated.error());
  meta_ = *updated;
  return {};
}

bool Supervisor::IdleLongEnough() {
  if (!activity_http_) {
    net::ClientOptions options;
    options.connect_timeout = 250ms;
    options.max_idle_connections = 1;
    auto http = net::HttpClient::Create("unix:" + meta_.socket, std::move(options));
    if (!http) return false;
    activity_http_ = std::move(*http);
  }
  net::ClientRequest req;
  req.target = "/deepbox/v1/activity";
  req.timeout = 1000ms;
  auto r = activity_http_->Send(req);
  if (!r || r->status != 200) {
    activity_http_->CloseIdle();
    return false;
  }
  auto o = ParseJsonObject(r->body);
  if (!o) return false;
  auto number = [&](const char* key) -> int64_t {
    auto it = o->find(key);
    return it != o->end() && it->value().is_int64() ? it->value().as_int64() : -1;
  };
  return number("requests_in_flight") == 0 && number("processes_running") == 0 &&
         number("idle_ms") >= meta_.idle_suspend_seconds * 1000;
}

bool Supervisor::ApplyRequestedMode() {
  const std::string want = meta_.requested_mode;
  const std::string from = meta_.mode;
  Log(fmt::format("{} requested (the sandbox is {})", want, from));
  Status st;
  if (want == "paused" && from == "running") {
    st = SetCgroupsFrozen(meta_.cgroups, true, 10s);
    if (!st) (void)SetCgroupsFrozen(meta_.cgroups, false, 10s);  // not half-frozen
  } else if (want == "suspended") {
    // Every process goes (memory and CPU freed); the /workspace files stay,
    // the disk image mounted on the host as for a restart. A frozen
    // sandbox is thawed first so that nothing waits on a frozen process.
    if (from == "paused") (void)SetCgroupsFrozen(meta_.cgroups, false, 10s);
    (void)sp_.Kill();
    if (auto disk = sp_.TakeWorkspaceDisk()) disk_ = std::move(*disk);
    sp_ = SandboxProcess();
    stderr_r_.reset();
  } else if (want == "running" && from == "paused") {
    st = SetCgroupsFrozen(meta_.cgroups, false, 10s);
  } else if (want == "running" && from == "suspended") {
    // As a restart: a fresh sandbox and daemon over the same /workspace.
    st = Restart();
    if (!st && st.error().code == ErrorCode::kCancelled) {  // deleted while resuming
      Delete(std::nullopt);
      return false;
    }
  } else {
    st = MakeError(ErrorCode::kConflict, fmt::format("a {} sandbox cannot be {}", from, want));
  }
  const std::string reached = st ? want : from;
  if (!st) Log(fmt::format("{} failed: {}", want, st.error().message));
  auto updated = store_.Update(req_.id, [&](SandboxMeta& m) {
    m.mode = reached;
    m.mode_since_ms = reached == "running" ? std::nullopt : std::optional<int64_t>(NowMs());
    m.ready = reached != "suspended";
    if (reached == "suspended") m.init = {};
    // A newer request (made while this one ran) is left for the next round.
    if (m.requested_mode == want) {
      m.mode_error = st ? "" : st.error().message;
      if (!st) m.requested_mode = from;
    }
    return Status{};
  });
  if (updated) {
    meta_ = *updated;
  } else {
    meta_.mode = reached;
    meta_.requested_mode = reached;  // no record to act on: do not loop
  }
  return true;
}

void Supervisor::Break(const std::string& why) {
  Log(why + ": not restarting it again; the sandbox is kept, broken, with its files in " +
      paths_.workspace.string() + ", until its TTL or `deepbox sandbox rm " + req_.id + "`");
  (void)sp_.Kill();
  if (auto disk = sp_.TakeWorkspaceDisk()) disk_ = std::move(*disk);
  sp_ = SandboxProcess();  // no process, cgroup or network is left; the files are
  stderr_r_.reset();
  auto updated = store_.Update(req_.id, [&](SandboxMeta& m) {
    m.ready = false;
    m.broken = why;
    return Status{};
  });
  if (updated) meta_ = *updated;
}

// Whether `held` (an O_PATH fd) is still the directory at `path`.
bool StillAt(const UniqueFd& held_fd, const fs::path& path) {
  struct stat held, now;
  if (!held_fd || fstat(held_fd.get(), &held) != 0) return false;
  if (held.st_nlink == 0 || stat(path.c_str(), &now) != 0) return false;
  return now.st_dev == held.st_dev && now.st_ino == held.st_ino;
}

bool Supervisor::HoldsStateDir() const { return StillAt(dir_fd_, paths_.dir); }

Status Supervisor::HoldStateMarkers() {
  for (const char* sub : {"trash", "tombstones"}) {
    fs::path dir = store_.root() / sub;
    UniqueFd fd(open(dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return MakeSyscallError("open", errno, dir.string());
    state_markers_.emplace_back(dir, std::move(fd));
  }
  return {};
}

bool Supervisor::StateRemoved() const {
  if (!dir_fd_) return false;
  if (!HoldsStateDir()) return true;  // removed, or renamed away and replaced
  // A recursive removal of the whole state dir that began while this sandbox
  // was being made can miss our dir (listed before it existed, or kept by
  // the workspace mount) and our record (written again after): the loss of
  // trash/ and tombstones/, which deepbox never removes, tells.
  if (!state_markers_.empty() &&
      std::none_of(state_markers_.begin(), state_markers_.end(),
                   [](const auto& m) { return StillAt(m.second, m.first); })) {
    return true;
  }
  // A recursive removal that could not remove the mounted workspace leaves the dir.
  return access(paths_.meta.c_str(), F_OK) != 0 && errno == ENOENT;
}

void Supervisor::Delete(const std::optional<Tombstone>& why) {
  // Take it away from claimers first (a warm sandbox being deleted is not claimable).
  (void)rename(paths_.warm.c_str(), paths_.claimed.c_str());
  if (why) (void)store_.WriteTombstone(*why);
  if (auto m = store_.Read(req_.id)) store_.ReleaseName(m->name, req_.id);
  if (meta_.mode == "paused") (void)SetCgroupsFrozen(meta_.cgroups, false, 10s);
  (void)sp_.Kill();
  sp_ = SandboxProcess();  // reaps init; removes cgroups, network, runtime dirs
  disk_.reset();           // a restarted sandbox's /workspace disk: unmounted, image deleted
  if (meta_.net_slot) store_.ReleaseNetSlot(*meta_.net_slot);
  if (!dir_created_) return;
  UnpinSandboxImage(req_.image, req_.id);  // its upper layer goes with the dir
  uint64_t r = 0;
  (void)getrandom(&r, sizeof(r), 0);
  fs::path trash = store_.root() / "trash" / fmt::format("{}-{:x}", req_.id, r);
  if (rename(paths_.dir.c_str(), trash.c_str()) == 0) {
    if (auto st = RemoveTree(trash); !st)
      Log("removing " + trash.string() + ": " + st.error().message);
  } else if (errno != ENOENT) {
    (void)RemoveTree(paths_.dir);
  } else if (HoldsStateDir()) {
    // The state dir is being removed (trash/ is gone) but not our dir yet
    // (its workspace was a mount point until now): what is left of it goes,
    // and the parents it leaves empty.
    (void)RemoveTree(paths_.dir);
    (void)rmdir(store_.sandboxes_dir().c_str());
    (void)rmdir(store_.root().c_str());
  }
}

void Supervisor::Fail(const Error& e) {
  Log("setup failed: " + e.ToString());
  if (ready_) SendAll(ready_.get(), ErrorLine(e));
  ready_.reset();
  Delete(std::nullopt);
}

int Supervisor::Run() {
  start_ns_ = MonotonicNs();
  // Blocked before any thread exists (the launch starts some, e.g. a public
  // network's uplink watcher, which inherit this mask): a SIGHUP (a claim's
  // new labels and TTL) delivered to a thread that did not block it would
  // kill the supervisor. The sandbox's init starts with no signal blocked or
  // ignored whatever this mask (local/launcher.cc).
  signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) sigaddset(&set, s);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  sigfd_.reset(signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  timerfd_.reset(timerfd_create(CLOCK_REALTIME, TFD_CLOEXEC | TFD_NONBLOCK));
  if (!sigfd_ || !timerfd_) {
    Fail(SyscallError(!sigfd_ ? "signalfd" : "timerfd_create", errno));
    return 1;
  }
  if (req_.adopt) {
    if (auto st = Adopt(); !st) {
      FailAdopt(st.error());
      return 1;
    }
    ArmTimer();
    ReportReady();
    Serve();  // the resume that asked for us is its first request
    return 0;
  }
  if (auto st = Prepare(); !st) {
    Fail(st.error());
    return 1;
  }
  if (auto st = LaunchSandbox(); !st) {
    Fail(st.error());
    return 1;
  }
  if (auto st = WaitHealthy(); !st) {
    Fail(st.error());
    return 1;
  }
  int64_t ready_ns = MonotonicNs();
  auto updated = store_.Update(req_.id, [&](SandboxMeta& m) {
    m.ready = true;
    RecordLaunch(m);  // the first launch: its timings too
    m.timings["daemon ready"] = Us(ready_ns - launched_ns_);
    m.timings["supervisor total"] = Us(ready_ns - start_ns_);
    if (req_.requested_at_ns > 0) m.timings["total"] = Us(ready_ns - req_.requested_at_ns);
    return Status{};
  });
  if (!updated) {
    Fail(updated.error());
    return 1;
  }
  meta_ = *updated;
  if (meta_.state == "warm") {
    UniqueFd marker(open(paths_.warm.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!marker) {
      Fail(SyscallError("open", errno, paths_.warm.string()));
      return 1;
    }
    marker.reset();
    store_.NotifyPool(meta_.pool);
  }
  ArmTimer();
  ReportReady();
  Log(fmt::format("ready: {}", ToJson(meta_.timings)));
  MakeSpareDisk();
  Serve();
  return 0;
}

}  // namespace

json::object SupervisorRequest::ToJson() const {
  json::object o;
  o["state_dir"] = JsonString(state_dir);
  o["id"] = id;
  json::object l;
  for (const auto& [k, v] : labels) l[k] = v;
  o["labels"] = std::move(l);
  o["ttl_seconds"] = ttl_seconds;
  o["idle_suspend_seconds"] = idle_suspend_seconds;
  o["network"] = network;
  o["rootfs"] = JsonString(rootfs);
  if (!image.empty()) o["image"] = image.ToJson();
  o["pool"] = pool;
  o["sandboxd_binary"] = JsonString(sandboxd_binary);
  o["limits"] = limits.ToJson();
  o["requested_at_ns"] = requested_at_ns;
  if (adopt) o["adopt"] = true;
  if (!workspace_image.empty()) o["workspace_image"] = JsonString(workspace_image);
  if (!secrets.empty()) o["secrets"] = SecretsToJson(secrets, /*with_values=*/false);
  return o;
}

Result<SupervisorRequest> SupervisorRequest::FromJson(const json::object& o) {
  SupervisorRequest r;
  auto state_dir = GetString(o, "state_dir");
  if (!state_dir) return tl::unexpected(state_dir.error());
  r.state_dir = *state_dir;
  auto id = GetString(o, "id");
  if (!id) return tl::unexpected(id.error());
  r.id = *id;
  if (!Store::ValidId(r.id)) return MakeError(ErrorCode::kInvalidArgument, "bad id " + r.id);
  if (auto it = o.find("labels"); it != o.end() && it->value().is_object()) {
    for (const auto& [k, v] : it->value().as_object()) {
      if (v.is_string()) r.labels[std::string(k)] = std::string(v.as_string());
    }
  }
  r.ttl_seconds = GetOptInt(o, "ttl_seconds").value_or(std::nullopt).value_or(0);
  r.idle_suspend_seconds =
      std::max<int64_t>(0, GetOptInt(o, "idle_suspend_seconds").value_or(std::nullopt).value_or(0));
  r.network = GetOptString(o, "network").value_or("");
  r.rootfs = GetOptString(o, "rootfs").value_or("");
  if (auto it = o.find("image"); it != o.end() && it->value().is_object()) {
    auto image = SandboxImage::FromJson(it->value().as_object());
    if (!image) return tl::unexpected(image.error());
    r.image = std::move(*image);
  }
  r.pool = GetOptString(o, "pool").value_or("");
  auto sbd = GetString(o, "sandboxd_binary");
  if (!sbd) return tl::unexpected(sbd.error());
  r.sandboxd_binary = *sbd;
  if (auto it = o.find("limits"); it != o.end() && it->value().is_object()) {
    r.limits = SandboxLimits::FromJson(it->value().as_object());
  }
  r.requested_at_ns = GetOptInt(o, "requested_at_ns").value_or(std::nullopt).value_or(0);
  if (auto it = o.find("adopt"); it != o.end() && it->value().is_bool()) {
    r.adopt = it->value().as_bool();
  }
  r.workspace_image = GetOptString(o, "workspace_image").value_or("");
  if (auto it = o.find("secrets"); it != o.end()) {
    auto secrets = SecretsFromJson(it->value());
    if (!secrets) return tl::unexpected(secrets.error());
    r.secrets = std::move(*secrets);
  }
  return r;
}

Result<SandboxMeta> StartSupervisor(const std::string& deepbox_binary,
                                    const SupervisorRequest& request,
                                    std::chrono::milliseconds timeout) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return MakeSyscallError("socketpair", errno);
  }
  UniqueFd mine(sv[0]), theirs(sv[1]);
  if (theirs.get() <= 3) {  // dup2(x, 3) with x == 3 would keep CLOEXEC
    UniqueFd high(fcntl(theirs.get(), F_DUPFD_CLOEXEC, 10));
    if (!high) return MakeSyscallError("fcntl(F_DUPFD_CLOEXEC)", errno);
    theirs = std::move(high);
  }
  std::string request_json = ToJson(request.ToJson());
  std::vector<std::string> args = {deepbox_binary, "__supervise", "--ready-fd", "3",
                                   "--request",    request_json};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, theirs.get(), 3);
  posix_spawn_file_actions_addclosefrom_np(&fa, 4);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  sigdelset(&all, SIGKILL);
  sigdelset(&all, SIGSTOP);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  // A minimal environment: the creator's (API keys, tokens...) stays with it.
  std::vector<char*> envp;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv = *e;
    for (std::string_view keep :
         {"PATH=", "TZ=", "LANG=", "DEEPBOX_", "ASAN_", "UBSAN_", "LSAN_"}) {
      if (kv.substr(0, keep.size()) == keep) {
        envp.push_back(*e);
        break;
      }
    }
  }
  envp.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, deepbox_binary.c_str(), &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return MakeSyscallError("posix_spawn", rc, deepbox_binary);
  theirs.reset();
  // The secrets' values: over the socket, never in argv (any local user can
  // read a command line).
  if (!request.secrets.empty()) {
    std::string line =
        ToJson(json::object{{"secrets", SecretsToJson(request.secrets, /*with_values=*/true)}}) +
        "\n";
    if (auto st = WriteAll(mine.get(), line, "the secrets, to the supervisor"); !st) {
      return tl::unexpected(st.error());
    }
  }
  // The first process forks the real supervisor and exits at once.
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }

  std::string line;
  const int64_t deadline = MonotonicNs() + timeout.count() * 1000000LL;
  for (;;) {
    int64_t left_ms = (deadline - MonotonicNs()) / 1000000;
    if (left_ms <= 0) {
      return MakeError(ErrorCode::kTimeout,
                       fmt::format("sandbox {} was not ready within {} ms (it keeps starting; "
                                   "see `deepbox sandbox ls`)",
                                   request.id, timeout.count()));
    }
    struct pollfd pfd = {mine.get(), POLLIN, 0};
    int prc = poll(&pfd, 1, static_cast<int>(left_ms));
    if (prc < 0 && errno == EINTR) continue;
    if (prc < 0) return MakeSyscallError("poll", errno, "supervisor pipe");
    if (prc == 0) continue;
    char buf[8192];
    ssize_t n = read(mine.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeSyscallError("read", errno, "supervisor pipe");
    if (n == 0) break;
    line.append(buf, static_cast<size_t>(n));
    if (line.find('\n') != std::string::npos) break;
  }
  if (line.empty()) {
    return MakeError(ErrorCode::kInternal,
                     fmt::format("the supervisor of sandbox {} exited during setup ({} {}); "
                                 "is {} a deepbox binary?",
                                 request.id, deepbox_binary,
                                 WIFEXITED(status) ? fmt::format("exited {}", WEXITSTATUS(status))
                                                   : "was killed",
                                 deepbox_binary));
  }
  auto msg = ParseJsonObject(line.substr(0, line.find('\n')));
  if (!msg) return tl::unexpected(msg.error());
  auto ok = msg->find("ok");
  if (ok == msg->end() || !ok->value().is_bool() || !ok->value().as_bool()) {
    auto err = msg->find("error");
    if (err != msg->end() && err->value().is_object()) {
      const auto& e = err->value().as_object();
      std::string reason = GetOptString(e, "reason").value_or("");
      if (!ValidErrorReason(reason)) reason.clear();
      return MakeError(ErrorCodeFromName(GetOptString(e, "code").value_or("INTERNAL")),
                       GetOptString(e, "message").value_or("sandbox setup failed"), reason);
    }
    return MakeError(ErrorCode::kInternal, "sandbox setup failed: " + line);
  }
  auto meta = msg->find("meta");
  if (meta == msg->end() || !meta->value().is_object()) {
    return MakeError(ErrorCode::kInternal, "malformed supervisor answer: " + line);
  }
  return SandboxMeta::FromJson(meta->value().as_object());
}

namespace {
// The creator's line with the secrets' values (StartSupervisor), matched to
// the request's secrets by name and placeholder.
Status ReadSecretValues(int fd, SupervisorRequest& req) {
  std::string line;
  char c;
  const int64_t deadline = MonotonicNs() + 10'000'000'000LL;
  while (line.size() < (8u << 20)) {
    pollfd p{fd, POLLIN, 0};
    int64_t left_ms = (deadline - MonotonicNs()) / 1000000;
    if (left_ms <= 0) return MakeError(ErrorCode::kTimeout, "the secrets did not arrive");
    int rc = poll(&p, 1, static_cast<int>(left_ms));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return MakeSyscallError("poll", errno, "the secrets");
    if (rc == 0) continue;
    ssize_t n = read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return MakeError(ErrorCode::kInvalidArgument, "the secrets did not arrive");
    if (c == '\n') break;
    line += c;
  }
  auto obj = ParseJsonObject(line);
  if (!obj) return MakeError(ErrorCode::kInvalidArgument, "malformed secrets line");
  const auto* v = obj->if_contains("secrets");
  if (v == nullptr) return MakeError(ErrorCode::kInvalidArgument, "malformed secrets line");
  auto got = SecretsFromJson(*v);
  if (!got || got->size() != req.secrets.size()) {
    return MakeError(ErrorCode::kInvalidArgument, "malformed secrets line");
  }
  for (size_t i = 0; i < got->size(); ++i) {
    if ((*got)[i].name != req.secrets[i].name ||
        (*got)[i].placeholder != req.secrets[i].placeholder) {
      return MakeError(ErrorCode::kInvalidArgument, "the secrets do not match the request");
    }
    if (auto st = ValidateSecretValue((*got)[i].value); !st) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("secret {}: {}", req.secrets[i].name, st.error().message));
    }
    req.secrets[i].value = std::move((*got)[i].value);
  }
  return {};
}
}  // namespace

int SuperviseMain(int argc, char** argv) {
  int ready_fd = -1;
  std::string request_json;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string_view flag = argv[i];
    if (flag == "--ready-fd") {
      ready_fd = std::atoi(argv[i + 1]);
    } else if (flag == "--request") {
      request_json = argv[i + 1];
    }
  }
  auto obj = ParseJsonObject(request_json);
  if (!obj) {
    std::fprintf(stderr, "deepbox __supervise: bad --request: %s\n", obj.error().message.c_str());
    return 2;
  }
  auto req = SupervisorRequest::FromJson(*obj);
  if (!req) {
    std::fprintf(stderr, "deepbox __supervise: %s\n", req.error().message.c_str());
    return 2;
  }
  if (!req->secrets.empty() && !req->adopt) {
    auto values = ReadSecretValues(ready_fd, *req);
    if (!values) {
      if (ready_fd >= 0) SendAll(ready_fd, ErrorLine(values.error()));
      return 1;
    }
  }
  // Second fork: the supervisor is not the creator's child (nobody must reap it,
  // and the creator's death means nothing to it).
  pid_t pid = fork();
  if (pid < 0) {
    if (ready_fd >= 0) SendAll(ready_fd, ErrorLine(SyscallError("fork", errno)));
    return 1;
  }
  if (pid > 0) _exit(0);
  UniqueFd ready(ready_fd);
  if (ready) (void)fcntl(ready.get(), F_SETFD, FD_CLOEXEC);
  umask(077);
  Supervisor sup(std::move(*req), std::move(ready));
  return sup.Run();
}

}  // namespace deepbox::local::lifecycle
