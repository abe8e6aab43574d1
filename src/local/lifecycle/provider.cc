#include "local/lifecycle/provider.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "common/time.h"
#include "common/unique_fd.h"
#include "local/cgroups.h"
#include "local/egress_log.h"
#include "local/lifecycle/sandbox_image.h"
#include "local/lifecycle/supervisor.h"
#include "local/network.h"
#include "net/http_client.h"
#include "oci/image_store.h"
#include "oci/reference.h"

namespace deepbox::local::lifecycle {
namespace {

using namespace std::chrono_literals;

bool IsExecutable(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

std::string SelfExe() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  return std::string(buf, static_cast<size_t>(n));
}

// Age of a path's mtime in seconds (large if it cannot be read).
int64_t AgeSeconds(const fs::path& p) {
  struct stat st;
  if (lstat(p.c_str(), &st) != 0) return INT64_MAX / 2;
  return static_cast<int64_t>(time(nullptr) - st.st_mtime);
}

// Sends `sig` to the supervisor of sandbox `id` that `ref` names (pid + start
// time, and only if it is that supervisor: IsSupervisorOf); returns its pidfd
// (to wait on) or an invalid fd if it is gone or is not one.
UniqueFd SignalSupervisor(const ProcessRef& ref, const std::string& id, int sig) {
  if (!ref.valid()) return UniqueFd();
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, ref.pid, 0)));
  if (!pidfd) return UniqueFd();
  if (!IsSupervisorOf(ref, id)) return UniqueFd();  // checked after the pidfd pins the process
  if (syscall(SYS_pidfd_send_signal, pidfd.get(), sig, nullptr, 0) != 0) return UniqueFd();
  return pidfd;
}

void WaitExit(int pidfd, std::chrono::milliseconds timeout) {
  struct pollfd pfd = {pidfd, POLLIN, 0};
  int64_t deadline = MonotonicNs() + timeout.count() * 1000000LL;
  for (;;) {
    int left = static_cast<int>((deadline - MonotonicNs()) / 1000000);
    if (left <= 0) return;
    int rc = poll(&pfd, 1, left);
    if (rc < 0 && errno == EINTR) continue;
    return;
  }
}

class LocalLease : public SandboxLease {
 public:
  LocalLease(std::unique_ptr<LocalSandboxProvider> provider, SandboxMeta meta,
             std::unique_ptr<SandboxdClient> client)
      : provider_(std::move(provider)), meta_(std::move(meta)), client_(std::move(client)) {}
  ~LocalLease() override {
    if (!kept_) (void)Release();
  }

  Sandbox& sandbox() override { return *client_; }
  Status Release() override {
    if (released_) return {};
    released_ = true;
    auto st = provider_->Delete(meta_.id);
    if (!st && st.error().code == ErrorCode::kNotFound) return {};
    return st;
  }
  void Keep() override { kept_ = true; }
  std::string Describe() const override {
    std::string env;
    if (provider_->store().root() != "/run/deepbox") {
      env = fmt::format("DEEPBOX_STATE_DIR={} ", provider_->store().root().string());
    }
    return fmt::format(
        "local sandbox {}{}\n  run a command: {}deepbox sandbox exec {} -- COMMAND\n"
        "  delete it:     {}deepbox sandbox rm {}",
        meta_.id,
        meta_.expires_at_ms
            ? " (deleted automatically at " + FormatRfc3339Ms(*meta_.expires_at_ms) + ")"
            : "",
        env, meta_.id, env, meta_.id);
  }

 private:
  std::unique_ptr<LocalSandboxProvider> provider_;
  SandboxMeta meta_;
  std::unique_ptr<SandboxdClient> client_;
  bool kept_ = false;
  bool released_ = false;
};

// Why the connection to sandbox `id`'s daemon broke under a request: its
// init died (the daemon is PID 1: the PID namespace with it), and the
// supervisor restarts it, or gave up (broken), or the sandbox was deleted.
// `seen`: the restarts this client knew of. "" if the daemon did not die.
std::string WhyConnectionLost(const Store& store, const std::string& id, std::atomic<int>& seen) {
  auto meta = store.Read(id);
  if (!meta) return "the sandbox was deleted";
  auto said = [&](const SandboxMeta& m) -> std::string {
    if (!m.broken.empty()) {
      return "its daemon (deepbox-sandboxd) died and was not restarted (the sandbox is broken; "
             "its files are kept)";
    }
    if (m.restarts > seen.load()) {
      seen.store(m.restarts);
      return "its daemon (deepbox-sandboxd) restarted (its files are kept)";
    }
    return "";
  };
  if (std::string s = said(*meta); !s.empty()) return s;
  // The connection breaks as the daemon exits; the kernel then ends the rest
  // of its PID namespace before init is gone: wait for that, briefly.
  const ProcessRef init = meta->init;
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, init.pid, 0)));
  if (pidfd && ProcessAlive(init)) {
    struct pollfd p = {pidfd.get(), POLLIN, 0};
    while (poll(&p, 1, 2000) < 0 && errno == EINTR) {
    }
    if (ProcessAlive(init)) return "";  // it lives: the connection broke otherwise
  }
  // It died: the supervisor restarts it (or gives up); its record says which.
  for (int i = 0; i < 500; ++i) {
    auto m = store.Read(id);
    if (!m) return "the sandbox was deleted";
    if (std::string s = said(*m); !s.empty()) return s;
    usleep(10000);
  }
  return "its daemon (deepbox-sandboxd) died";
}

// The files holding a sandbox's OOM-kill count: memory.events (cgroup v2) or
// memory.oom_control (v1) of its cgroup dirs (only ours: <...>/deepbox/<id>).
std::vector<std::string> OomKillFiles(const SandboxMeta& meta) {
  std::vector<std::string> out;
  for (const auto& dir : meta.cgroups) {
    if (dir.rfind("/sys/fs/cgroup/", 0) != 0 || !dir.ends_with("/deepbox/" + meta.id) ||
        dir.find("/../") != std::string::npos) {
      continue;
    }
    for (const char* name : {"/memory.events", "/memory.oom_control"}) {
      if (access((dir + name).c_str(), R_OK) == 0) out.push_back(dir + name);
    }
  }
  return out;
}

// The "oom_kill N" lines summed; nullopt if no file can be read (no memory controller).
std::optional<uint64_t> ReadOomKills(const std::vector<std::string>& files) {
  std::optional<uint64_t> total;
  for (const auto& f : files) {
    UniqueFd fd(open(f.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) continue;
    char buf[4096];
    ssize_t n = read(fd.get(), buf, sizeof(buf) - 1);
    if (n <= 0) continue;
    std::string_view text(buf, static_cast<size_t>(n));
    for (size_t at = 0; at < text.size();) {
      size_t nl = text.find('\n', at);
      std::string_view line = text.substr(at, nl == std::string_view::npos ? nl : nl - at);
      at = nl == std::string_view::npos ? text.size() : nl + 1;
      if (line.rfind("oom_kill ", 0) != 0) continue;
      uint64_t v = 0;
      auto digits = line.substr(9);
      auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
      if (ec == std::errc()) total = total.value_or(0) + v;
    }
  }
  return total;
}

// SandboxdClientOptions::before_request of a local sandbox: a client kept
// while its sandbox was paused or suspended (by `sandbox pause`, the idle
// timer, another process) wakes it before its next request. The record is
// re-read only when its file changed (a stat per request otherwise).
std::function<Status()> WakeOnUse(const LocalProviderOptions& options, const Store& store,
                                  const SandboxMeta& meta) {
  struct Seen {
    std::mutex mu;
    struct timespec mtime {};
    ino_t ino = 0;
  };
  auto seen = std::make_shared<Seen>();
  fs::path record = store.Paths(meta.id).meta;
  struct stat st;
  if (stat(record.c_str(), &st) == 0) {
    seen->mtime = st.st_mtim;
    seen->ino = st.st_ino;
  }
  return [options, store, id = meta.id, record, seen]() -> Status {
    struct stat now;
    if (stat(record.c_str(), &now) != 0) return {};  // gone: the request says so
    std::lock_guard<std::mutex> lock(seen->mu);
    if (now.st_ino == seen->ino && now.st_mtim.tv_sec == seen->mtime.tv_sec &&
        now.st_mtim.tv_nsec == seen->mtime.tv_nsec) {
      return {};
    }
    auto m = store.Read(id);
    // A snapshot or fork is copying its files: wait for it (bounded).
    for (int i = 0; i < 60000 && m && m->hold.valid() && ProcessAlive(m->hold); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      m = store.Read(id);
    }
    if (m && (m->mode != "running" || m->requested_mode != "running")) {
      auto provider = LocalSandboxProvider::Create(options);
      if (!provider) return tl::unexpected(provider.error());
      if (auto woke = (*provider)->Resume(id); !woke) return woke;
    }
    if (stat(record.c_str(), &now) == 0) {
      seen->mtime = now.st_mtim;
      seen->ino = now.st_ino;
    }
    return {};
  };
}

}  // namespace

Result<std::string> ResolveRootfs(const std::string& rootfs) {
  if (rootfs.empty()) return std::string();
  // A bad --rootfs is a usage error (not "no such sandbox"): INVALID_ARGUMENT.
  char buf[PATH_MAX];
  if (realpath(rootfs.c_str(), buf) == nullptr) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("rootfs {}: {} (give the directory of an unpacked image)", rootfs,
                                 SyscallError("realpath", errno).message));
  }
  struct stat st;
  if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("rootfs {} is not a directory (an unpacked image is)", rootfs));
  }
  return std::string(buf);
}

Result<std::string> LocateDeepbox() {
  if (const char* env = std::getenv("DEEPBOX_BINARY"); env != nullptr && *env != '\0') {
    if (!IsExecutable(env)) {
      return MakeError(ErrorCode::kNotFound,
                       fmt::format("DEEPBOX_BINARY={} is not an executable file", env));
    }
    return std::string(env);
  }
  std::string self = SelfExe();
  if (!self.empty()) {
    fs::path p(self);
    if (p.filename() == "deepbox") return self;
    std::string sibling = (p.parent_path() / "deepbox").string();
    if (IsExecutable(sibling)) return sibling;
  }
  return MakeError(ErrorCode::kNotFound,
                   "cannot find the `deepbox` binary (it supervises local sandboxes): put it next "
                   "to this program or set DEEPBOX_BINARY");
}

Result<std::string> LocateSandboxd(const std::string& deepbox_binary) {
  if (const char* env = std::getenv("DEEPBOX_SANDBOXD"); env != nullptr && *env != '\0') {
    if (!IsExecutable(env)) {
      return MakeError(ErrorCode::kNotFound,
                       fmt::format("DEEPBOX_SANDBOXD={} is not an executable file", env));
    }
    return std::string(env);
  }
  std::string p = (fs::path(deepbox_binary).parent_path() / "deepbox-sandboxd").string();
  if (!IsExecutable(p)) {
    return MakeError(ErrorCode::kNotFound,
                     fmt::format("cannot find deepbox-sandboxd: expected it at {} (next to the "
                                 "deepbox binary) or set DEEPBOX_SANDBOXD",
                                 p));
  }
  return p;
}

Result<std::unique_ptr<LocalSandboxProvider>> LocalSandboxProvider::Create(
    LocalProviderOptions options) {
  if (options.state_dir.empty()) {
    auto dir = DefaultStateDir();
    if (!dir) return tl::unexpected(dir.error());
    options.state_dir = dir->string();
  }
  if (options.deepbox_binary.empty()) {
    auto bin = LocateDeepbox();
    if (!bin) return tl::unexpected(bin.error());
    options.deepbox_binary = *bin;
  }
  if (options.sandboxd_binary.empty()) {
    auto bin = LocateSandboxd(options.deepbox_binary);
    if (!bin) return tl::unexpected(bin.error());
    options.sandboxd_binary = *bin;
  }
  Store store{fs::path(options.state_dir)};
  if (auto st = store.Init(); !st) return tl::unexpected(st.error());
  return std::unique_ptr<LocalSandboxProvider>(
      new LocalSandboxProvider(std::move(options), std::move(store)));
}

Status LocalSandboxProvider::ValidateClaim(const ClaimOptions& options, std::string* rootfs) const {
  for (const auto& [k, v] : options.labels) {
    if (auto st = ValidateLabelKey(k); !st) return st;
    if (auto st = ValidateLabelValue(k, v); !st) return st;
  }
  if (!options.network.empty()) {
    if (auto policy = ParseNetworkPolicy(options.network); !policy) {
      return tl::unexpected(policy.error());
    }
  }
  if (options.ttl.count() < 0) return MakeError(ErrorCode::kInvalidArgument, "TTL must be >= 0");
  if (options.idle_suspend.count() < 0) {
    return MakeError(ErrorCode::kInvalidArgument, "the idle-suspend time must be >= 0");
  }
  if (auto st = ValidateSandboxLimits(options_.limits); !st) return st;
  if (!options.image.empty() && !options.rootfs.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "--image and --rootfs cannot be used together: a sandbox's root is an image "
                     "or a directory");
  }
  auto root = ResolveRootfs(options.rootfs);
  if (!root) return tl::unexpected(root.error());
  *rootfs = *root;
  return {};
}

Result<SandboxMeta> LocalSandboxProvider::CreateCold(const ClaimOptions& options,
                                                     const std::string& pool,
                                                     const std::string& workspace_image) {
  std::string rootfs;
  if (auto st = ValidateClaim(options, &rootfs); !st) return tl::unexpected(st.error());
  // An image: pulled on first use, and held (no `image rm`/`prune` runs)
  // until the sandbox has pinned it.
  oci::StoreLock image_hold;
  SandboxImage image;
  if (!options.image.empty()) {
    auto prepared = PrepareSandboxImage(options_.image_dir, options.image, &image_hold);
    if (!prepared) return tl::unexpected(prepared.error());
    image = std::move(*prepared);
  }
  SupervisorRequest req;
  req.image = image;
  req.requested_at_ns = MonotonicNs();
  req.state_dir = store_.root().string();
  req.id = Store::NewId();
  req.labels = options.labels;
  req.ttl_seconds = options.ttl.count();
  req.idle_suspend_seconds = options.idle_suspend.count();
  req.network = options.network;
  req.rootfs = rootfs;
  req.pool = pool;
  req.sandboxd_binary = options_.sandboxd_binary;
  req.limits = options_.limits;
  req.workspace_image = workspace_image;
  req.secrets = options.secrets;
  auto meta = StartSupervisor(options_.deepbox_binary, req, options_.create_timeout);
  if (!meta) {
    // A daemon SIGKILLed while starting under a memory limit ran out of memory.
    const std::string& msg = meta.error().message;
    if (options_.limits.memory_bytes && meta.error().reason == kReasonKilled) {
      return MakeError(meta.error().code,
                       fmt::format("{} (the memory limit of {} is probably too small for the "
                                   "sandbox's own daemon: raise --memory)",
                                   msg, FormatBytes(*options_.limits.memory_bytes)));
    }
    return meta;
  }
  if (!image.empty()) {
    if (auto st = PinSandboxImage(image, meta->id, store_.Paths(meta->id).dir); !st) {
      (void)Delete(meta->id);
      return tl::unexpected(st.error());
    }
  }
  // An explicit `public` that the host cannot provide fails (the launcher fell
  // back to `none`); only the default ("") may fall back, with a note.
  if (options.network == "public" && meta->network != "public") {
    std::string why = meta->network_note.empty() ? "the host cannot route it" : meta->network_note;
    if (size_t at = why.find("using 'none': "); at != std::string::npos) {
      why = why.substr(at + 14);  // the reason only
    }
    (void)Delete(meta->id);
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("network 'public' was requested but is not available on this "
                                 "host: {}. Use --network none, or omit --network to fall back "
                                 "to none automatically (see `deepbox doctor`)",
                                 why));
  }
  return meta;
}

Result<SandboxMeta> LocalSandboxProvider::CreateWarm(const std::string& pool,
                                                     const std::string& network,
                                                     const std::string& rootfs,
                                                     const std::string& image) {
  ClaimOptions o;
  o.labels[kPoolLabel] = pool;
  o.network = network;
  o.rootfs = rootfs;
  o.image = image;
  return CreateCold(o, pool);
}

Result<std::optional<SandboxMeta>> LocalSandboxProvider::ClaimWarm(const std::string& pool,
                                                                   const ClaimOptions& options) {
  std::string rootfs;
  if (auto st = ValidateClaim(options, &rootfs); !st) return tl::unexpected(st.error());
  auto ids = store_.Ids();
  if (!ids) return tl::unexpected(ids.error());
  if (ids->empty()) return std::optional<SandboxMeta>();
  // An image claim matches a warm sandbox by digest: what the cache has for
  // the name now (a pool that started on an older pull of a tag serves
  // what it pulled; a cold create then uses the same cached image). Not
  // pulled here: an image never pulled has no warm sandbox.
  std::string image_digest;
  if (!options.image.empty()) {
    auto ref = oci::ParseImageReference(options.image);
    if (!ref) return tl::unexpected(ref.error());
    auto store = oci::ImageStore::Open(options_.image_dir);
    if (!store) return tl::unexpected(store.error());
    auto found = (*store)->FindImage(ref->ToString());
    if (!found) return tl::unexpected(found.error());
    if (!*found) return std::optional<SandboxMeta>();
    image_digest = (*found)->manifest_digest;
  }
  // Start at a random place so concurrent claimers rarely contend for the same one.
  uint32_t r = 0;
  (void)getrandom(&r, sizeof(r), 0);
  size_t start = r % ids->size();
  for (size_t i = 0; i < ids->size(); ++i) {
    const std::string& id = (*ids)[(start + i) % ids->size()];
    SandboxPaths paths = store_.Paths(id);
    if (access(paths.warm.c_str(), F_OK) != 0) continue;
    auto meta = store_.Read(id);
    if (!meta || meta->pool != pool || meta->state != "warm" || !meta->ready) continue;
    if (!options.network.empty() && meta->network != options.network) continue;
    if (meta->rootfs != rootfs) continue;
    if (meta->image.digest != image_digest) continue;
    if (meta->limits != options_.limits) continue;  // never weaker (nor stricter) limits
    if (!IsSupervisorOf(meta->supervisor, id)) continue;
    // The claim itself: exactly one rename(2) of the marker can succeed.
    if (rename(paths.warm.c_str(), paths.claimed.c_str()) != 0) continue;
    int64_t now = NowMs();
    auto updated = store_.Update(id, [&](SandboxMeta& m) -> Status {
      // The pool daemon takes back a claim abandoned half-way (pool.h); under
      // this lock exactly one of us turns the sandbox from warm to claimed.
      if (m.state != "warm") {
        return MakeError(ErrorCode::kConflict, "taken back by its pool (claim too slow)");
      }
      m.state = "claimed";
      m.labels = options.labels;
      m.claimed_at_ms = now;
      m.idle_suspend_seconds = options.idle_suspend.count();
      if (options.ttl.count() > 0) {
        m.expires_at_ms = now + options.ttl.count() * 1000;
      } else {
        m.expires_at_ms.reset();
      }
      return Status{};
    });
    if (!updated) continue;                                   // deleted or taken back under us
    (void)SignalSupervisor(updated->supervisor, id, SIGHUP);  // re-read labels + TTL
    store_.NotifyPool(pool);
    return std::optional<SandboxMeta>(*updated);
  }
  return std::optional<SandboxMeta>();
}

std::string LocalSandboxProvider::Canonical(const std::string& id_or_name) const {
  if (Store::ValidId(id_or_name) || !Store::ValidName(id_or_name)) return id_or_name;
  return store_.IdOfName(id_or_name).value_or(id_or_name);
}

Status LocalSandboxProvider::Name(SandboxMeta& meta, const std::string& name) {
  std::error_code ec;
  fs::create_directories(store_.names_dir(), ec);
  fs::path link = store_.names_dir() / name;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (symlink(meta.id.c_str(), link.c_str()) == 0) break;
    if (errno != EEXIST) return MakeSyscallError("symlink", errno, link.string());
    // Taken, unless by a sandbox that is gone (a crash left its link).
    if (store_.IdOfName(name)) {
      return MakeError(
          ErrorCode::kConflict,
          fmt::format("a sandbox named '{}' exists already (see: deepbox sandbox ls)", name));
    }
    (void)unlink(link.c_str());
    if (attempt == 1) return MakeSyscallError("symlink", EEXIST, link.string());
  }
  auto named = store_.Update(meta.id, [&](SandboxMeta& m) {
    m.name = name;
    return Status{};
  });
  if (!named) {
    store_.ReleaseName(name, meta.id);
    return tl::unexpected(named.error());
  }
  meta = *named;
  return {};
}

Result<SandboxMeta> LocalSandboxProvider::CreateSandbox(const ClaimOptions& options,
                                                        bool allow_warm) {
  if (!options.name.empty()) {
    if (!Store::ValidName(options.name)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("sandbox name '{}': use 1-63 letters, digits, '_', '.' and '-', "
                                   "starting with a letter or digit (and not an sb-... id)",
                                   options.name));
    }
    if (store_.IdOfName(options.name)) {
      return MakeError(ErrorCode::kConflict,
                       fmt::format("a sandbox named '{}' exists already (see: deepbox sandbox ls)",
                                   options.name));
    }
    ClaimOptions unnamed = options;
    unnamed.name.clear();
    auto meta = CreateSandbox(unnamed, allow_warm);
    if (!meta) return meta;
    if (auto st = Name(*meta, options.name); !st) {
      (void)Delete(meta->id);
      return tl::unexpected(st.error());
    }
    return meta;
  }
  // A warm sandbox was started without the secrets' CA and proxy.
  if (allow_warm && !options_.pool.empty() && options.secrets.empty()) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      auto warm = ClaimWarm(options_.pool, options);
      if (!warm) return tl::unexpected(warm.error());
      if (!*warm) break;
      if (IsSupervisorOf((*warm)->supervisor, (*warm)->id)) return **warm;
      (void)Delete((*warm)->id);  // its supervisor died right after the claim
    }
  }
  return CreateCold(options, "");
}

Result<std::unique_ptr<SandboxLease>> LocalSandboxProvider::Claim(const ClaimOptions& options) {
  auto meta = CreateSandbox(options);
  if (!meta) return tl::unexpected(meta.error());
  auto client = Connect(*meta);
  if (!client) {
    (void)Delete(meta->id);
    return tl::unexpected(client.error());
  }
  // The lease owns its own provider handle (it may outlive this one).
  auto self = Create(options_);
  if (!self) {
    (void)Delete(meta->id);
    return tl::unexpected(self.error());
  }
  return std::unique_ptr<SandboxLease>(
      new LocalLease(std::move(*self), std::move(*meta), std::move(*client)));
}

void LocalSandboxProvider::CleanTrash() const {
  fs::path dir = store_.root() / "trash";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> names;
  while (dirent* ent = readdir(d)) {
    if (ent->d_name[0] != '.') names.emplace_back(ent->d_name);
  }
  closedir(d);
  for (const auto& n : names) {
    fs::path p = dir / n;
    if (AgeSeconds(p) < 10) continue;  // somebody is removing it right now
    (void)RemoveTree(p);
  }
}

Error LocalSandboxProvider::GoneError(const std::string& id) const {
  if (auto t = store_.ReadTombstone(id)) {
    if (t->reason == "expired") {
      return Error(ErrorCode::kNotFound,
                   fmt::format("sandbox '{}' expired: {}; it was deleted", id, t->detail));
    }
    return Error(ErrorCode::kNotFound, fmt::format("sandbox '{}' is gone: {} (at {})", id,
                                                   t->detail, FormatRfc3339Ms(t->at_ms)));
  }
  return Error(ErrorCode::kNotFound, fmt::format("no sandbox '{}' (see: deepbox sandbox ls)", id));
}

bool LocalSandboxProvider::KeepOrReapOrphan(const SandboxMeta& meta) {
  const bool suspended = meta.state == "claimed" && meta.mode == "suspended" && meta.broken.empty();
  if (suspended && !meta.expired(NowMs())) return true;
  // An adopter (which takes only unexpired suspended ones) may have taken
  // it over since `meta` was read.
  if (auto now = store_.Read(meta.id); now && IsSupervisorOf(now->supervisor, meta.id)) return true;
  (void)store_.WriteTombstone(
      suspended ? Tombstone{meta.id, "expired",
                            "its TTL ran out at " + FormatRfc3339Ms(*meta.expires_at_ms) +
                                " while it was suspended",
                            NowMs()}
                : Tombstone{meta.id, "supervisor-died",
                            "its supervisor process died; it was cleaned up", NowMs()});
  (void)store_.Reap(meta.id, meta);
  return false;
}

Result<std::vector<SandboxMeta>> LocalSandboxProvider::ListMeta(const Selector& selector) {
  CleanTrash();
  store_.PruneTombstones(24h);
  auto ids = store_.Ids();
  if (!ids) return tl::unexpected(ids.error());
  std::vector<SandboxMeta> out;
  for (const auto& id : *ids) {
    auto meta = store_.Read(id);
    if (!meta) {
      // Not ours alone (state.h, "Trust"): left as it is, for its owner to see.
      if (meta.error().code == ErrorCode::kPermissionDenied) continue;
      // No (valid) record: a supervisor that died before writing one, or one
      // that is writing it right now.
      if (AgeSeconds(store_.Paths(id).dir) > 60) (void)store_.Reap(id, std::nullopt);
      continue;
    }
    if (!IsSupervisorOf(meta->supervisor, id) && !KeepOrReapOrphan(*meta)) continue;
    if (selector.Matches(meta->labels)) out.push_back(std::move(*meta));
  }
  std::sort(out.begin(), out.end(), [](const SandboxMeta& a, const SandboxMeta& b) {
    return a.created_at_ms != b.created_at_ms ? a.created_at_ms < b.created_at_ms : a.id < b.id;
  });
  return out;
}

Result<SandboxMeta> LocalSandboxProvider::Get(const std::string& id_or_name) {
  const std::string id = Canonical(id_or_name);
  if (!Store::ValidId(id)) {
    return MakeError(
        Store::ValidName(id) ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument,
        Store::ValidName(id)
            ? fmt::format(
                  "no sandbox named '{}' (ids look like sb-0123456789ab; see: deepbox sandbox ls)",
                  id)
            : fmt::format("'{}' is not a sandbox id or name (ids look like "
                          "sb-0123456789ab)",
                          id));
  }
  auto meta = store_.Read(id);
  if (!meta) {
    if (meta.error().code == ErrorCode::kNotFound) return tl::unexpected(GoneError(id));
    return meta;
  }
  if (!IsSupervisorOf(meta->supervisor, id) && !KeepOrReapOrphan(*meta)) {
    return tl::unexpected(GoneError(id));
  }
  if (meta->expired(NowMs())) {
    return MakeError(
        ErrorCode::kNotFound,
        fmt::format("sandbox '{}' expired at {} (its TTL ran out); it is being deleted", id,
                    FormatRfc3339Ms(*meta->expires_at_ms)));
  }
  if (!meta->broken.empty()) {
    return MakeError(
        ErrorCode::kUnavailable,
        fmt::format("sandbox '{}' is broken: {}; its daemon is not restarted again. "
                    "Its files are kept in {} until its TTL or `deepbox sandbox rm {}`",
                    id, meta->broken, store_.Paths(id).workspace.string(), id));
  }
  // Paused or suspended (or on its way): there, and woken by Connect.
  if (meta->mode != "running" || meta->requested_mode != "running") return meta;
  if (!meta->ready) {
    if (meta->restarts > 0) {
      return MakeError(ErrorCode::kUnavailable,
                       fmt::format("sandbox '{}': its daemon (deepbox-sandboxd) is restarting "
                                   "(its files are kept); try again in a moment",
                                   id),
                       std::string(kReasonDaemonRestarting));
    }
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("sandbox '{}' is still starting; try again in a moment", id));
  }
  return meta;
}

Result<fs::path> LocalSandboxProvider::DaemonSocket(const SandboxMeta& meta) const {
  if (!Store::ValidId(meta.id)) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("bad sandbox id '{}'", meta.id));
  }
  // The socket where this sandbox's supervisor had it bound, never a path
  // from the record (state.h, "Trust"), and as DaemonSocket made it: a socket
  // of ours in a directory of ours closed to everyone else. (Missing: the
  // client's first request says so, as for a daemon that just went away.)
  fs::path socket = store_.Paths(meta.id).socket;
  fs::path dir = socket.parent_path();
  UniqueFd dfd(open(dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  int open_errno = dfd ? 0 : errno, stat_errno = 0;
  struct stat dst {
  }, sst{};
  if (dfd && fstatat(dfd.get(), socket.filename().c_str(), &sst, AT_SYMLINK_NOFOLLOW) != 0) {
    stat_errno = errno;
  }
  bool missing = open_errno == ENOENT || stat_errno == ENOENT;
  bool ours = dfd && stat_errno == 0 && fstat(dfd.get(), &dst) == 0 && dst.st_uid == geteuid() &&
              (dst.st_mode & 077) == 0 && S_ISSOCK(sst.st_mode) && sst.st_uid == geteuid();
  if (!missing && !ours) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("sandbox '{}': not connecting to {}: it must be a socket of uid "
                                 "{} in a directory only that uid can use",
                                 meta.id, socket.string(), geteuid()));
  }
  return socket;
}

Result<int64_t> LocalSandboxProvider::IdleMs(const SandboxMeta& meta) {
  if (meta.mode != "running" || meta.requested_mode != "running") {
    if (!meta.mode_since_ms || meta.mode == "running") {
      return MakeError(ErrorCode::kUnavailable, "changing mode");
    }
    return std::max<int64_t>(0, NowMs() - *meta.mode_since_ms);
  }
  auto socket = DaemonSocket(meta);
  if (!socket) return tl::unexpected(socket.error());
  net::ClientOptions options;
  options.connect_timeout = 500ms;
  options.max_idle_connections = 0;
  auto http = net::HttpClient::Create("unix:" + socket->string(), std::move(options));
  if (!http) return tl::unexpected(http.error());
  net::ClientRequest req;
  req.target = "/deepbox/v1/activity";
  req.timeout = 1000ms;
  auto r = (*http)->Send(req);
  if (!r) return tl::unexpected(r.error());
  if (r->status != 200) return tl::unexpected(SandboxdClient::AnswerError(*r, "activity"));
  // The daemon's answer is not trusted: numbers in range, or nothing.
  auto o = ParseJsonObject(r->body);
  if (!o) return MakeError(ErrorCode::kInternal, "activity: not a JSON object");
  auto number = [&](const char* key) -> int64_t {
    auto it = o->find(key);
    return it != o->end() && it->value().is_int64() ? it->value().as_int64() : -1;
  };
  const int64_t idle = number("idle_ms");
  if (idle < 0) return MakeError(ErrorCode::kInternal, "activity: no idle_ms");
  return number("requests_in_flight") > 0 || number("processes_running") > 0 ? 0 : idle;
}

Result<std::unique_ptr<SandboxdClient>> LocalSandboxProvider::Connect(const SandboxMeta& meta) {
  auto socket = DaemonSocket(meta);
  if (!socket) return tl::unexpected(socket.error());
  SandboxdClientOptions o;
  o.id = meta.id;
  o.connect_timeout = 5000ms;
  o.lost_connection_reason = [store = store_, id = meta.id,
                              seen = std::make_shared<std::atomic<int>>(meta.restarts)] {
    return WhyConnectionLost(store, id, *seen);
  };
  o.before_request = WakeOnUse(options_, store_, meta);
  if (meta.limits.memory_bytes) {
    o.memory_limit_bytes = *meta.limits.memory_bytes;
    o.oom_kill_count = [files = OomKillFiles(meta)]() { return ReadOomKills(files); };
  }
  auto client = SandboxdClient::Connect("unix:" + socket->string(), o);
  if (!client) {
    Error e = client.error();  // reason and errno kept: DaemonSocketDead reads them
    e.message = fmt::format("sandbox '{}': {}", meta.id, e.message);
    return tl::unexpected(e);
  }
  return client;
}

Result<std::unique_ptr<SandboxdClient>> LocalSandboxProvider::Connect(const std::string& id) {
  auto meta = Get(id);
  if (!meta) return tl::unexpected(meta.error());
  // Use wakes a paused or suspended sandbox (the caller waits for it).
  if (meta->mode != "running" || meta->requested_mode != "running") {
    if (auto st = Resume(id); !st) return tl::unexpected(st.error());
    meta = Get(id);
    if (!meta) return tl::unexpected(meta.error());
  }
  return Connect(*meta);
}

Status LocalSandboxProvider::Delete(const std::string& id_or_name) {
  const std::string id = Canonical(id_or_name);
  if (Store::ValidName(id)) {
    return MakeError(
        ErrorCode::kNotFound,
        fmt::format(
            "no sandbox named '{}' (ids look like sb-0123456789ab; see: deepbox sandbox ls)", id));
  }
  auto meta = store_.Read(id);
  if (!meta) {
    if (meta.error().code != ErrorCode::kNotFound) return tl::unexpected(meta.error());
    // A dir without a record yet: its supervisor is writing it; wait briefly.
    SandboxPaths paths = store_.Paths(id);
    for (int i = 0; i < 100 && !meta && fs::exists(paths.dir); ++i) {
      usleep(10000);
      meta = store_.Read(id);
    }
    if (!meta) {
      if (fs::exists(paths.dir)) {
        auto reaped = store_.Reap(id, std::nullopt);
        if (!reaped) return tl::unexpected(reaped.error());
        return {};
      }
      return tl::unexpected(GoneError(id));
    }
  }
  SandboxPaths paths = store_.Paths(id);
  (void)rename(paths.warm.c_str(), paths.claimed.c_str());  // no claimer may take it now
  UniqueFd pidfd = SignalSupervisor(meta->supervisor, id, SIGTERM);
  if (pidfd) WaitExit(pidfd.get(), 30s);
  if (fs::exists(paths.dir)) {
    auto reaped = store_.Reap(id, *meta);
    if (!reaped) return tl::unexpected(reaped.error());
  }
  return {};
}

Result<std::vector<std::string>> LocalSandboxProvider::DeleteMatching(const Selector& selector) {
  if (selector.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "refusing to delete every sandbox: give a non-empty selector");
  }
  auto list = ListMeta(selector);
  if (!list) return tl::unexpected(list.error());
  // Signal every supervisor first, then wait: they clean up in parallel.
  std::vector<UniqueFd> pidfds;
  for (const auto& m : *list) {
    (void)rename(store_.Paths(m.id).warm.c_str(), store_.Paths(m.id).claimed.c_str());
    pidfds.push_back(SignalSupervisor(m.supervisor, m.id, SIGTERM));
  }
  std::vector<std::string> ids;
  Status result;
  for (size_t i = 0; i < list->size(); ++i) {
    const auto& m = (*list)[i];
    if (pidfds[i]) WaitExit(pidfds[i].get(), 30s);
    if (fs::exists(store_.Paths(m.id).dir)) {
      auto reaped = store_.Reap(m.id, m);
      if (!reaped && result) result = tl::unexpected(reaped.error());
    }
    ids.push_back(m.id);
  }
  if (!result) return tl::unexpected(result.error());
  return ids;
}

SandboxInfo InfoOf(const SandboxMeta& meta) {
  SandboxInfo info;
  info.id = meta.id;
  info.provider = "local";
  info.labels = meta.labels;
  info.created_at = FormatRfc3339Ms(meta.created_at_ms);
  if (meta.expires_at_ms) info.expires_at = FormatRfc3339Ms(*meta.expires_at_ms);
  info.network = meta.network;
  // Paused or suspended say so; else claimed (or warm).
  info.state = meta.mode != "running" ? meta.mode : meta.state;
  info.limits = meta.limits.Describe();
  info.limits_note = meta.limits_note;
  info.name = meta.name;
  for (const auto& [name, hosts] : meta.secrets) {
    std::string joined;
    for (const auto& h : hosts) joined += (joined.empty() ? "" : ",") + h;
    info.secrets.push_back(name + "@" + joined);
  }
  return info;
}

Status CheckPoolExists(const LocalSandboxProvider& provider, const std::string& pool) {
  std::error_code ec;
  if (fs::is_directory(provider.store().pool_dir(pool), ec)) return {};
  std::vector<std::string> known;
  for (const auto& e : fs::directory_iterator(provider.store().root() / "pools", ec)) {
    if (e.is_directory(ec)) known.push_back(e.path().filename().string());
  }
  std::sort(known.begin(), known.end());
  std::string list;
  for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
  return MakeError(ErrorCode::kInvalidArgument,
                   fmt::format("--pool {}: no such warm pool here ({}; a pool is started with "
                               "`deepbox pool serve --name NAME`)",
                               pool, list.empty() ? "none has been served" : "known: " + list));
}

Result<SandboxInfo> LocalSandboxProvider::Create(const ClaimOptions& options) {
  auto meta = CreateSandbox(options, options.allow_warm);
  if (!meta) return tl::unexpected(meta.error());
  return InfoOf(*meta);
}

Result<std::unique_ptr<SandboxLease>> LocalSandboxProvider::Attach(const std::string& id) {
  auto client = Connect(id);
  if (!client) return tl::unexpected(client.error());
  return std::unique_ptr<SandboxLease>(new BorrowedLease(
      std::move(*client),
      fmt::format("{} (left running; run commands in it with: deepbox sandbox exec {} -- CMD; "
                  "delete it with: deepbox sandbox rm {})",
                  id, id, id)));
}

Result<SandboxInfo> LocalSandboxProvider::Inspect(const std::string& id) {
  auto meta = Get(id);
  if (!meta) return tl::unexpected(meta.error());
  return InfoOf(*meta);
}

Result<std::vector<SandboxInfo>> LocalSandboxProvider::List(const std::string& selector) {
  auto parsed = Selector::Parse(selector);
  if (!parsed) return tl::unexpected(parsed.error());
  auto metas = ListMeta(*parsed);
  if (!metas) return tl::unexpected(metas.error());
  std::vector<SandboxInfo> out;
  for (const auto& m : *metas) {
    if (m.state == "warm") continue;  // the pool's stock, not anybody's yet
    out.push_back(InfoOf(m));
  }
  return out;
}

Result<std::vector<std::string>> LocalSandboxProvider::DeleteMatching(const std::string& selector) {
  auto parsed = Selector::Parse(selector);
  if (!parsed) return tl::unexpected(parsed.error());
  return DeleteMatching(*parsed);
}

namespace {

// Whether a daemon call failed because the daemon's socket is dead: refused
// or gone while its supervisor has not yet recorded why (or is relaunching
// the daemon: the provider's own word), or reset under the call (a daemon
// killed between accepting the connection and answering). A live daemon's
// reset is told apart by WaitUntilGone, which connects again.
bool DaemonSocketDead(const Error& e) {
  if (e.reason == kReasonDaemonRestarting) return true;
  if (e.code == ErrorCode::kUnavailable && e.sys_errno == ECONNRESET) return true;
  return e.reason == kReasonConnectFailed && (e.sys_errno == ECONNREFUSED || e.sys_errno == ENOENT);
}

// After the daemon's socket went dead: the supervisor deletes the sandbox
// (and records why) within moments, or restarts its daemon. The "is gone"
// error once that is known, or nullopt if the daemon answers again (or
// nothing was decided within a bound).
std::optional<Error> WaitUntilGone(LocalSandboxProvider& provider, const std::string& id) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (std::chrono::steady_clock::now() < deadline) {
    auto meta = provider.Get(id);
    if (!meta && meta.error().code == ErrorCode::kNotFound) return meta.error();
    if (meta) {
      auto client = provider.Connect(*meta);
      if (client) return std::nullopt;
      if (!DaemonSocketDead(client.error())) return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return std::nullopt;
}

}  // namespace

Result<DaemonAccess> LocalSandboxProvider::ConnectDaemon(const std::string& id) {
  auto client = Connect(id);
  if (!client && DaemonSocketDead(client.error())) {
    if (auto gone = WaitUntilGone(*this, id)) return tl::unexpected(*gone);
    client = Connect(id);  // up again (its supervisor restarted it)
  }
  if (!client) return tl::unexpected(client.error());
  DaemonAccess access;
  access.client = std::move(*client);
  access.why_gone = [this, id](const Error& error) -> std::optional<Error> {
    auto meta = Get(id);
    // A daemon restarting or broken: the call's own error says so.
    if (!meta && meta.error().code != ErrorCode::kUnavailable) return meta.error();
    // The daemon died under the call (its supervisor has not said so yet).
    if (DaemonSocketDead(error)) return WaitUntilGone(*this, id);
    return std::nullopt;
  };
  access.explain = [](const Error& error) { return error; };
  return access;
}

std::optional<Error> LocalSandboxProvider::WhyGone(const std::string& id) {
  auto meta = Get(id);
  if (!meta && meta.error().code == ErrorCode::kNotFound) return meta.error();
  return std::nullopt;
}

Status LocalSandboxProvider::Pause(const std::string& id) { return RequestMode(id, "paused"); }
// The files always survive a local suspend (options.force changes nothing).
Status LocalSandboxProvider::Suspend(const std::string& id, const SuspendOptions&) {
  return RequestMode(id, "suspended");
}
Status LocalSandboxProvider::Resume(const std::string& id) { return RequestMode(id, "running"); }

Status LocalSandboxProvider::RequestMode(const std::string& id_or_name, const std::string& mode) {
  const std::string id = Canonical(id_or_name);
  if (!Store::ValidId(id)) {
    if (Store::ValidName(id)) {
      return MakeError(
          ErrorCode::kNotFound,
          fmt::format(
              "no sandbox named '{}' (ids look like sb-0123456789ab; see: deepbox sandbox ls)",
              id));
    }
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("bad sandbox id '{}'", id));
  }
  const char* verb = mode == "paused" ? "pause" : mode == "suspended" ? "suspend" : "resume";
  auto meta = store_.Read(id);
  if (!meta) {
    if (meta.error().code == ErrorCode::kNotFound) return tl::unexpected(GoneError(id));
    return tl::unexpected(meta.error());
  }
  if (!IsSupervisorOf(meta->supervisor, id)) {
    // Only a suspended sandbox outlives its supervisor (supervisor.h).
    if (!KeepOrReapOrphan(*meta)) return tl::unexpected(GoneError(id));
    if (mode == "suspended") return {};
    if (mode == "paused") {
      return MakeError(
          ErrorCode::kConflict,
          fmt::format("cannot pause sandbox '{}': it is suspended (resume it first)", id));
    }
    if (auto st = AdoptSuspended(*meta); !st) return st;
  }
  if (meta->state == "warm") {
    return MakeError(
        ErrorCode::kConflict,
        fmt::format("cannot {} sandbox '{}': it is a warm pool's, not claimed", verb, id));
  }
  if (!meta->broken.empty()) {
    return MakeError(
        ErrorCode::kUnavailable,
        fmt::format("cannot {} sandbox '{}': it is broken ({})", verb, id, meta->broken));
  }
  if (meta->mode == mode && meta->requested_mode == mode) return {};  // already so
  auto asked = store_.Update(id, [&](SandboxMeta& m) -> Status {
    // Pausing keeps memory a suspended sandbox no longer has.
    if (mode == "paused" && (m.mode == "suspended" || m.requested_mode == "suspended")) {
      return MakeError(
          ErrorCode::kConflict,
          fmt::format("cannot pause sandbox '{}': it is suspended (resume it first)", id));
    }
    m.requested_mode = mode;
    m.mode_error.clear();
    return Status{};
  });
  if (!asked) {
    if (asked.error().code == ErrorCode::kNotFound) return tl::unexpected(GoneError(id));
    return tl::unexpected(asked.error());
  }
  UniqueFd pidfd = SignalSupervisor(asked->supervisor, id, SIGHUP);
  if (!pidfd) return tl::unexpected(GoneError(id));
  // The supervisor records the outcome; resuming a suspended sandbox takes
  // a launch (as a create does), the rest milliseconds.
  const auto timeout = mode == "running" ? options_.create_timeout + 5s : 30s;
  const int64_t deadline = MonotonicNs() + std::chrono::nanoseconds(timeout).count();
  for (;;) {
    auto now = store_.Read(id);
    if (!now) {
      if (now.error().code == ErrorCode::kNotFound) return tl::unexpected(GoneError(id));
      return tl::unexpected(now.error());
    }
    if (now->mode == mode && (mode != "running" || now->ready)) return {};
    if (now->requested_mode != mode) {
      if (!now->mode_error.empty()) {
        return MakeError(ErrorCode::kUnavailable,
                         fmt::format("could not {} sandbox '{}': {}", verb, id, now->mode_error));
      }
      // Somebody asked for something else meanwhile: theirs is the last word.
      return MakeError(ErrorCode::kConflict,
                       fmt::format("sandbox '{}': another request (to make it {}) came first; it "
                                   "is {} now",
                                   id, now->requested_mode, now->mode));
    }
    if (!now->broken.empty()) {
      return MakeError(
          ErrorCode::kUnavailable,
          fmt::format("could not {} sandbox '{}': it broke ({})", verb, id, now->broken));
    }
    if (!IsSupervisorOf(now->supervisor, id)) return tl::unexpected(GoneError(id));
    if (MonotonicNs() > deadline) {
      return MakeError(
          ErrorCode::kTimeout,
          fmt::format("sandbox '{}' was not {} within {} s (it is {}; its log: {})", id, mode,
                      std::chrono::duration_cast<std::chrono::seconds>(timeout).count(), now->mode,
                      store_.Paths(id).log.string()));
    }
    std::this_thread::sleep_for(1ms);
  }
}

Result<std::string> LocalSandboxProvider::SetNetwork(const std::string& id_or_name,
                                                     const std::string& policy_text) {
  const std::string id = Canonical(id_or_name);
  if (!Store::ValidId(id)) {
    return MakeError(Store::ValidName(id) ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument,
                     fmt::format("no sandbox '{}' (see: deepbox sandbox ls)", id));
  }
  auto policy = ParseNetworkPolicy(policy_text);
  if (!policy) return tl::unexpected(policy.error());
  const std::string want = policy->ToString();
  auto meta = store_.Read(id);
  if (!meta) {
    if (meta.error().code == ErrorCode::kNotFound) return tl::unexpected(GoneError(id));
    return tl::unexpected(meta.error());
  }
  if (!meta->network_live || policy->mode == NetworkMode::kPublic) {
    return MakeError(
        ErrorCode::kConflict,
        fmt::format("sandbox '{}' has network '{}', which cannot change to '{}' while it runs: "
                    "only a sandbox created with --network allow=... switches live, between "
                    "allowlists and none (its traffic goes through its own proxy). Create one "
                    "with the network you want (deepbox sandbox fork {} --network ...)",
                    id, meta->network, want, id));
  }
  if (meta->network == want && meta->network_applied == want) return want;
  auto asked = store_.Update(id, [&](SandboxMeta& m) {
    m.network = want;
    m.network_note.clear();
    // No supervisor (suspended): the next launch applies it.
    if (!IsSupervisorOf(m.supervisor, id)) m.network_applied = want;
    return Status{};
  });
  if (!asked) return tl::unexpected(asked.error());
  if (asked->network_applied == want) return want;
  UniqueFd pidfd = SignalSupervisor(asked->supervisor, id, SIGHUP);
  if (!pidfd) return tl::unexpected(GoneError(id));
  const int64_t deadline = MonotonicNs() + 10'000'000'000LL;
  for (;;) {
    auto now = store_.Read(id);
    if (!now) return tl::unexpected(now.error());
    if (now->network_applied == want) return want;
    if (!now->network_note.empty() && now->network != want) {
      return MakeError(ErrorCode::kConflict, now->network_note);
    }
    if (now->network != want) {
      return MakeError(
          ErrorCode::kConflict,
          fmt::format("sandbox '{}': another change (to '{}') came first", id, now->network));
    }
    if (!IsSupervisorOf(now->supervisor, id)) return tl::unexpected(GoneError(id));
    if (MonotonicNs() > deadline) {
      return MakeError(ErrorCode::kTimeout,
                       fmt::format("sandbox '{}' did not apply the network change within 10 s "
                                   "(its log: {})",
                                   id, store_.Paths(id).log.string()));
    }
    std::this_thread::sleep_for(2ms);
  }
}

Result<std::vector<EgressLogLine>> LocalSandboxProvider::NetworkLog(const std::string& id_or_name,
                                                                    size_t limit) {
  const std::string id = Canonical(id_or_name);
  if (!Store::ValidId(id)) {
    return MakeError(Store::ValidName(id) ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument,
                     fmt::format("no sandbox '{}' (see: deepbox sandbox ls)", id));
  }
  auto meta = store_.Read(id);
  if (!meta) {
    if (meta.error().code == ErrorCode::kNotFound) return tl::unexpected(GoneError(id));
    return tl::unexpected(meta.error());
  }
  auto events = ReadEgressLog(store_.Paths(id).dir / kEgressLogFile, limit);
  if (!events) return tl::unexpected(events.error());
  std::vector<EgressLogLine> lines;
  for (const auto& e : *events) lines.push_back(ToJson(e.ToJson()));
  return lines;
}

Status LocalSandboxProvider::AdoptSuspended(const SandboxMeta& meta) {
  const std::string& id = meta.id;
  // Asked for first: the adopter starts it as soon as it holds the record.
  auto asked = store_.Update(id, [&](SandboxMeta& m) {
    m.requested_mode = "running";
    m.mode_error.clear();
    return Status{};
  });
  if (!asked) {
    if (asked.error().code == ErrorCode::kNotFound) return tl::unexpected(GoneError(id));
    return tl::unexpected(asked.error());
  }
  SupervisorRequest req;
  req.requested_at_ns = MonotonicNs();
  req.state_dir = store_.root().string();
  req.id = id;
  req.sandboxd_binary = options_.sandboxd_binary;
  req.adopt = true;
  auto adopted = StartSupervisor(options_.deepbox_binary, req, options_.create_timeout);
  if (adopted) return {};
  // Another resume's adopter got there first: its outcome is ours.
  if (auto now = store_.Read(id); now && IsSupervisorOf(now->supervisor, id)) return {};
  Error e = adopted.error();
  e.message = fmt::format(
      "could not resume sandbox '{}' (its supervisor had died while it was suspended; it stays "
      "suspended with its files): {}",
      id, e.message);
  return tl::unexpected(e);
}

}  // namespace deepbox::local::lifecycle
