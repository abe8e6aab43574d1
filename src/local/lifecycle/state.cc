#include "local/lifecycle/state.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <limits.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <set>
#include <sstream>
#include <thread>

#include "common/io.h"
#include "common/trusted_path.h"
#include "common/unique_fd.h"
#include "local/cgroups.h"
#include "local/netns.h"
#include "local/network.h"

namespace deepbox::local::lifecycle {
namespace {

using namespace std::chrono_literals;

Result<std::string> ReadWholeFile(const fs::path& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return MakeSyscallError("open", errno, path.string());
  return ReadAll(fd.get(), path.string());
}

// The rule for everything deepbox trusts in the state dir (state.h, "Trust"):
// owned by the effective uid, not writable by group or others.
Status CheckOurs(int fd, const fs::path& path, std::string_view what, bool want_dir) {
  return CheckOwnedByUs(fd, path,
                        TrustedPath{what, "DEEPBOX_STATE_DIR",
                                    "decides which processes deepbox kills and which daemon it "
                                    "talks to"},
                        want_dir);
}

// Opens `name` beneath `parent_fd` (creating it 0700 first if `create`) as a
// directory, never through a symlink, and checks it (CheckOurs).
Result<UniqueFd> OpenOurDir(int parent_fd, const std::string& name, const fs::path& path,
                            std::string_view what, bool create) {
  if (create && mkdirat(parent_fd, name.c_str(), 0700) != 0 && errno != EEXIST) {
    return MakeSyscallError("mkdir", errno, path.string());
  }
  UniqueFd fd(openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    int e = errno;
    struct stat st {};
    if ((e == ELOOP || e == ENOTDIR) &&
        fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
      return MakeError(ErrorCode::kPermissionDenied,
                       fmt::format("refusing to use {} {}: it is a symbolic link, which deepbox "
                                   "does not follow there (it could be re-pointed at any time); "
                                   "use the directory itself",
                                   what, path.string()));
    }
    return MakeSyscallError("open(O_DIRECTORY|O_NOFOLLOW)", e, path.string());
  }
  if (auto st = CheckOurs(fd.get(), path, what, true); !st) return tl::unexpected(st.error());
  return fd;
}

// A sandbox's record, read beneath its checked dir (`dir` is
// sandboxes/<id> or its trash name), from a checked meta.json.
Result<std::string> ReadRecordText(const fs::path& dir) {
  auto dfd = OpenOurDir(AT_FDCWD, dir.string(), dir, "the sandbox directory", false);
  if (!dfd) return tl::unexpected(dfd.error());
  fs::path path = dir / "meta.json";
  UniqueFd fd(openat(dfd->get(), "meta.json", O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd && errno == ELOOP) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("refusing to read {}: it is a symbolic link", path.string()));
  }
  if (!fd) return MakeSyscallError("open", errno, path.string());
  if (auto st = CheckOurs(fd.get(), path, "the sandbox record", false); !st) {
    return tl::unexpected(st.error());
  }
  return ReadAll(fd.get(), path.string());
}

Result<SandboxMeta> ParseRecord(const std::string& id, const std::string& text,
                                const fs::path& path) {
  auto obj = ParseJsonObject(text);
  if (!obj) return tl::unexpected(obj.error());
  auto meta = SandboxMeta::FromJson(*obj);
  if (!meta) return meta;
  if (meta->id != id) {
    return MakeError(ErrorCode::kInternal, fmt::format("{} is the record of '{}', not of '{}'",
                                                       path.string(), meta->id, id));
  }
  return meta;
}

}  // namespace

Status WriteFileAtomic(const fs::path& path, std::string_view data) {
  uint64_t r = 0;
  (void)getrandom(&r, sizeof(r), 0);
  fs::path tmp = path.parent_path() / fmt::format(".{}.{:x}.tmp", path.filename().string(), r);
  UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd) return MakeSyscallError("open", errno, tmp.string());
  if (auto st = WriteAll(fd.get(), data, tmp.string()); !st) {
    unlink(tmp.c_str());
    return st;
  }
  fd.reset();
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    unlink(tmp.c_str());
    return MakeSyscallError("rename", e, fmt::format("{} -> {}", tmp.string(), path.string()));
  }
  return {};
}

namespace {

Status WriteSmallFile(const std::string& path, std::string_view content) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return MakeSyscallError("open", errno, path);
  if (write(fd.get(), content.data(), content.size()) < 0) {
    return MakeSyscallError("write", errno, path);
  }
  return {};
}

std::vector<pid_t> CgroupPids(const std::string& dir) {
  std::vector<pid_t> pids;
  auto text = ReadWholeFile(dir + "/cgroup.procs");
  if (!text) return pids;
  std::istringstream in(*text);
  long v;
  while (in >> v) pids.push_back(static_cast<pid_t>(v));
  return pids;
}

// An integer field of meta.json within [min, max]; anything else (wrong kind,
// out of range, a wrapped uint64) reads as `dflt`.
int64_t IntOr(const json::object& o, std::string_view key, int64_t dflt, int64_t min = INT64_MIN,
              int64_t max = INT64_MAX) {
  auto it = o.find(key);
  if (it == o.end() || !it->value().is_int64()) return dflt;
  int64_t v = it->value().as_int64();
  return v >= min && v <= max ? v : dflt;
}

json::object RefToJson(const ProcessRef& r) {
  json::object o;
  o["pid"] = r.pid;
  o["start_time"] = r.start_time;
  return o;
}

ProcessRef RefFromJson(const json::object& o, std::string_view key) {
  ProcessRef r;
  auto it = o.find(key);
  if (it == o.end() || !it->value().is_object()) return r;
  const auto& obj = it->value().as_object();
  r.pid = static_cast<pid_t>(IntOr(obj, "pid", 0, 0, INT32_MAX));
  r.start_time = static_cast<uint64_t>(IntOr(obj, "start_time", 0, 0));
  return r;
}

// SIGKILLs a sandbox's init: that very process (pid + start time, race-free
// through a pidfd), and only if it lives in one of `cgroups`, the sandbox's
// own (already checked). Without a cgroup nothing is sent: the init died with
// its supervisor anyway (PR_SET_PDEATHSIG), and a pid alone proves nothing.
void KillInit(const ProcessRef& ref, const std::vector<std::string>& cgroups) {
  if (!ref.valid() || cgroups.empty()) return;
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, ref.pid, 0)));
  if (!pidfd) return;
  auto dirs = ProcessCgroupDirs(ref.pid);
  if (!dirs) return;
  bool inside = std::any_of(dirs->begin(), dirs->end(), [&](const std::string& d) {
    return std::any_of(cgroups.begin(), cgroups.end(),
                       [&](const std::string& c) { return d == c || d.rfind(c + "/", 0) == 0; });
  });
  if (!inside) return;
  // Checked after the pidfd and the cgroup read: both were about this process.
  if (!ProcessAlive(ref)) return;
  (void)syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
}

// The dirs of `dirs` that are sandbox `id`'s cgroups (CheckSandboxCgroupDir);
// missing ones are skipped, the first refusal goes to *refused.
std::vector<std::string> OwnCgroups(const std::string& id, const std::vector<std::string>& dirs,
                                    Status* refused) {
  std::vector<std::string> out;
  if (dirs.empty()) return out;
  auto host = DetectCgroups();
  if (!host) {
    if (*refused) *refused = tl::unexpected(host.error());
    return out;
  }
  for (const auto& d : dirs) {
    struct stat sb {};
    if (lstat(d.c_str(), &sb) != 0 && errno == ENOENT) continue;  // gone: nothing to do
    auto st = CheckSandboxCgroupDir(*host, id, d);
    if (st) {
      out.push_back(d);
    } else if (st.error().code != ErrorCode::kNotFound && *refused) {
      *refused = MakeError(st.error().code,
                           fmt::format("sandbox {}: not touching cgroup {} named in its record: {}",
                                       id, d, st.error().message));
    }
  }
  return out;
}

// Detaches any mount left beneath `dir` in our mount namespace (defensive: the
// sandbox's own mounts live in its namespace and vanish with it).
void UnmountBeneath(const fs::path& dir) {
  auto text = ReadWholeFile("/proc/self/mountinfo");
  if (!text) return;
  std::string prefix = dir.string() + "/";
  std::vector<std::string> targets;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, mountpoint;
    fields >> id >> parent >> dev >> root >> mountpoint;
    if (mountpoint == dir.string() || mountpoint.rfind(prefix, 0) == 0) {
      targets.push_back(mountpoint);
    }
  }
  std::sort(targets.rbegin(), targets.rend());  // deepest first
  for (const auto& t : targets) (void)umount2(t.c_str(), MNT_DETACH);
}

}  // namespace

Result<fs::path> DefaultStateDir() {
  if (const char* env = std::getenv("DEEPBOX_STATE_DIR"); env != nullptr && *env != '\0') {
    fs::path p(env);
    if (!p.is_absolute()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("DEEPBOX_STATE_DIR must be an absolute path, not '{}'", env));
    }
    return p;
  }
  if (geteuid() == 0) return fs::path("/run/deepbox");
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg == '/') {
    return fs::path(xdg) / "deepbox";
  }
  return MakeError(ErrorCode::kUnavailable,
                   "no state directory: set DEEPBOX_STATE_DIR (or XDG_RUNTIME_DIR) to a directory "
                   "only you can write");
}

Result<uint64_t> ProcessStartTime(pid_t pid) {
  auto text = ReadWholeFile(fmt::format("/proc/{}/stat", pid));
  if (!text) return tl::unexpected(text.error());
  size_t paren = text->rfind(')');
  if (paren == std::string::npos) {
    return MakeError(ErrorCode::kInternal, fmt::format("malformed /proc/{}/stat", pid));
  }
  std::istringstream in(text->substr(paren + 1));
  std::string field;
  // Fields after the command: 3 = state ... 22 = starttime.
  std::string state;
  in >> state;
  if (state == "Z" || state == "X") {
    return MakeError(ErrorCode::kNotFound, fmt::format("process {} is a zombie", pid));
  }
  for (int i = 4; i < 22; ++i) in >> field;
  uint64_t start = 0;
  if (!(in >> start)) {
    return MakeError(ErrorCode::kInternal, fmt::format("malformed /proc/{}/stat", pid));
  }
  return start;
}

Result<ProcessRef> SelfRef() {
  ProcessRef r;
  r.pid = getpid();
  auto st = ProcessStartTime(r.pid);
  if (!st) return tl::unexpected(st.error());
  r.start_time = *st;
  return r;
}

bool ProcessAlive(const ProcessRef& ref) {
  if (!ref.valid()) return false;
  auto st = ProcessStartTime(ref.pid);
  return st && *st == ref.start_time;
}

bool IsSupervisorOf(const ProcessRef& ref, std::string_view id) {
  if (!ref.valid() || !Store::ValidId(id)) return false;
  auto cmdline = ReadWholeFile(fmt::format("/proc/{}/cmdline", ref.pid));
  auto status = ReadWholeFile(fmt::format("/proc/{}/status", ref.pid));
  if (!cmdline || !status) return false;
  // After the reads: what they said was about this very process (an older
  // start time cannot come back under a reused pid).
  if (!ProcessAlive(ref)) return false;
  // "Uid:\treal\teffective\tsaved\tfs"
  size_t at = status->find("\nUid:");
  if (at == std::string::npos) return false;
  std::istringstream uids(status->substr(at + 5, status->find('\n', at + 1) - at - 5));
  long real = -1, effective = -1;
  if (!(uids >> real >> effective) || real != static_cast<long>(geteuid()) ||
      effective != static_cast<long>(geteuid())) {
    return false;
  }
  std::vector<std::string_view> args;
  std::string_view rest = *cmdline;
  while (!rest.empty()) {
    size_t end = rest.find('\0');
    args.push_back(rest.substr(0, end));
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  // supervisor.cc: DEEPBOX __supervise --ready-fd N --request JSON
  if (args.size() < 2 || args[1] != "__supervise") return false;
  for (size_t i = 2; i + 1 < args.size(); ++i) {
    if (args[i] != "--request") continue;
    auto req = ParseJsonObject(args[i + 1]);
    if (!req) return false;
    auto named = GetString(*req, "id");
    return named && *named == id;
  }
  return false;
}

json::object SandboxMeta::ToJson() const {
  json::object o;
  o["id"] = id;
  json::object l;
  for (const auto& [k, v] : labels) l[k] = v;
  o["labels"] = std::move(l);
  o["created_at"] = FormatRfc3339Ms(created_at_ms);
  if (expires_at_ms) {
    o["expires_at"] = FormatRfc3339Ms(*expires_at_ms);
  } else {
    o["expires_at"] = nullptr;
  }
  o["state"] = state;
  o["pool"] = pool;
  o["network_requested"] = network_requested;
  o["network"] = network;
  if (!network_note.empty()) o["network_note"] = network_note;
  if (network_live) o["network_live"] = true;
  if (!network_applied.empty()) o["network_applied"] = network_applied;
  if (!secrets.empty()) {
    json::array a;
    for (const auto& [name, hosts] : secrets) {
      json::array h;
      for (const auto& host : hosts) h.emplace_back(JsonString(host));
      a.emplace_back(json::object{{"name", name}, {"hosts", std::move(h)}});
    }
    o["secrets"] = std::move(a);
  }
  if (net_slot) o["net_slot"] = *net_slot;
  o["rootfs"] = rootfs;
  if (!image.empty()) o["image"] = image.ToJson();
  o["limits"] = limits.ToJson();
  if (!limits_note.empty()) o["limits_note"] = JsonString(limits_note);
  o["ready"] = ready;
  if (restarts > 0) o["restarts"] = restarts;
  if (!broken.empty()) o["broken"] = JsonString(broken);
  o["supervisor"] = RefToJson(supervisor);
  o["init"] = RefToJson(init);
  json::array cg;
  for (const auto& c : cgroups) cg.emplace_back(JsonString(c));
  o["cgroups"] = std::move(cg);
  o["socket"] = JsonString(socket);
  o["timings_us"] = timings;
  if (claimed_at_ms) o["claimed_at"] = FormatRfc3339Ms(*claimed_at_ms);
  if (requested_mode != "running") o["requested_mode"] = requested_mode;
  if (mode != "running") o["mode"] = mode;
  if (mode_since_ms) o["mode_since"] = FormatRfc3339Ms(*mode_since_ms);
  if (!mode_error.empty()) o["mode_error"] = JsonString(mode_error);
  if (idle_suspend_seconds > 0) o["idle_suspend_seconds"] = idle_suspend_seconds;
  if (hold.valid()) o["hold"] = RefToJson(hold);
  if (!name.empty()) o["name"] = JsonString(name);
  return o;
}

bool ValidMode(std::string_view mode) {
  return mode == "running" || mode == "paused" || mode == "suspended";
}

Result<SandboxMeta> SandboxMeta::FromJson(const json::object& o) {
  SandboxMeta m;
  auto id = GetString(o, "id");
  if (!id) return tl::unexpected(id.error());
  if (!Store::ValidId(*id)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("bad sandbox id '{}' in a record", *id));
  }
  m.id = *id;
  if (auto it = o.find("labels"); it != o.end() && it->value().is_object()) {
    for (const auto& [k, v] : it->value().as_object()) {
      if (v.is_string()) m.labels[std::string(k)] = std::string(v.as_string());
    }
  }
  auto created = ParseRfc3339Ms(GetOptString(o, "created_at").value_or(""));
  if (!created) return tl::unexpected(created.error());
  m.created_at_ms = *created;
  if (auto e = GetOptString(o, "expires_at")) {
    auto t = ParseRfc3339Ms(*e);
    if (!t) return tl::unexpected(t.error());
    m.expires_at_ms = *t;
  }
  if (auto c = GetOptString(o, "claimed_at")) {
    auto t = ParseRfc3339Ms(*c);
    if (t) m.claimed_at_ms = *t;
  }
  m.state = GetOptString(o, "state").value_or("claimed");
  // An unknown mode reads as running: the supervisor then acts on nothing.
  m.requested_mode = GetOptString(o, "requested_mode").value_or("running");
  if (!ValidMode(m.requested_mode)) m.requested_mode = "running";
  m.mode = GetOptString(o, "mode").value_or("running");
  if (!ValidMode(m.mode)) m.mode = "running";
  if (auto since = GetOptString(o, "mode_since")) {
    if (auto t = ParseRfc3339Ms(*since)) m.mode_since_ms = *t;
  }
  m.mode_error = GetOptString(o, "mode_error").value_or("");
  m.idle_suspend_seconds = IntOr(o, "idle_suspend_seconds", 0, 0, INT32_MAX);
  if (o.contains("hold")) m.hold = RefFromJson(o, "hold");
  if (auto n = GetOptString(o, "name"); n && Store::ValidName(*n)) m.name = *n;
  m.pool = GetOptString(o, "pool").value_or("");
  m.network_requested = GetOptString(o, "network_requested").value_or("");
  m.network = GetOptString(o, "network").value_or("none");
  m.network_note = GetOptString(o, "network_note").value_or("");
  if (auto it = o.find("network_live"); it != o.end() && it->value().is_bool()) {
    m.network_live = it->value().as_bool();
  }
  m.network_applied = GetOptString(o, "network_applied").value_or("");
  if (auto it = o.find("secrets"); it != o.end() && it->value().is_array()) {
    for (const auto& e : it->value().as_array()) {
      if (!e.is_object()) continue;
      std::vector<std::string> hosts;
      if (const auto* h = e.as_object().if_contains("hosts"); h && h->is_array()) {
        for (const auto& x : h->as_array()) {
          if (x.is_string()) hosts.emplace_back(x.as_string());
        }
      }
      m.secrets.emplace_back(GetOptString(e.as_object(), "name").value_or(""), std::move(hosts));
    }
  }
  if (auto slot = IntOr(o, "net_slot", -1, 0, UINT32_MAX); slot >= 0) {
    m.net_slot = static_cast<uint32_t>(slot);
  }
  m.rootfs = GetOptString(o, "rootfs").value_or("");
  if (auto it = o.find("image"); it != o.end() && it->value().is_object()) {
    auto image = SandboxImage::FromJson(it->value().as_object());
    if (!image) return tl::unexpected(image.error());
    m.image = std::move(*image);
  }
  if (auto it = o.find("limits"); it != o.end() && it->value().is_object()) {
    m.limits = SandboxLimits::FromJson(it->value().as_object());
  }
  m.limits_note = GetOptString(o, "limits_note").value_or("");
  if (auto it = o.find("ready"); it != o.end() && it->value().is_bool()) {
    m.ready = it->value().as_bool();
  }
  m.restarts = static_cast<int>(IntOr(o, "restarts", 0, 0, INT32_MAX));
  m.broken = GetOptString(o, "broken").value_or("");
  m.supervisor = RefFromJson(o, "supervisor");
  m.init = RefFromJson(o, "init");
  if (auto it = o.find("cgroups"); it != o.end() && it->value().is_array()) {
    for (const auto& c : it->value().as_array()) {
      if (c.is_string()) m.cgroups.emplace_back(c.as_string());
    }
  }
  m.socket = GetOptString(o, "socket").value_or("");
  if (auto it = o.find("timings_us"); it != o.end() && it->value().is_object()) {
    m.timings = it->value().as_object();
  }
  return m;
}

Status Store::Init() const {
  fs::path root = root_.lexically_normal();
  if (!root.has_filename()) root = root.parent_path();  // "/x/" -> "/x"
  if (!root.is_absolute() || !root.has_filename()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("the state directory must be an absolute path below /, not '{}'",
                                 root_.string()));
  }
  // Missing parents are made 0700 too (they are ours then).
  fs::path cur;
  for (const auto& part : root.parent_path()) {
    cur /= part;
    if (mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) {
      return MakeSyscallError("mkdir", errno, cur.string());
    }
  }
  if (auto st = CheckAncestorsCannotSwap(
          root.parent_path(), root_,
          TrustedPath{"the state directory", "DEEPBOX_STATE_DIR",
                      "decides which processes deepbox kills and which daemon it talks to"});
      !st) {
    return st;
  }
  UniqueFd parent(open(root.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent) return MakeSyscallError("open", errno, root.parent_path().string());
  auto top = OpenOurDir(parent.get(), root.filename().string(), root_, "the state directory", true);
  if (!top) return tl::unexpected(top.error());
  for (const char* sub : {"sandboxes", "trash", "tombstones", "pools", "net", "disk-templates"}) {
    auto fd = OpenOurDir(top->get(), sub, root_ / sub, "the state directory's subdirectory", true);
    if (!fd) return tl::unexpected(fd.error());
  }
  return {};
}

SandboxPaths Store::Paths(const std::string& id) const {
  SandboxPaths p;
  p.dir = root_ / "sandboxes" / id;
  p.meta = p.dir / "meta.json";
  p.lock = p.dir / "lock";
  p.warm = p.dir / "warm";
  p.claimed = p.dir / "claimed";
  p.log = p.dir / "supervisor.log";
  p.runtime = p.dir / "rt";
  p.workspace = p.dir / "workspace";
  p.socket = p.runtime / "run" / "sandboxd.sock";
  return p;
}

std::string Store::NewId() {
  unsigned char b[6];
  size_t got = 0;
  while (got < sizeof(b)) {
    ssize_t n = getrandom(b + got, sizeof(b) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return fmt::format("sb-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}", b[0], b[1], b[2], b[3], b[4], b[5]);
}

bool Store::ValidId(std::string_view id) {
  if (id.size() != 15 || id.substr(0, 3) != "sb-") return false;
  return std::all_of(id.begin() + 3, id.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
  });
}

bool Store::ValidName(std::string_view name) {
  if (name.empty() || name.size() > 63 || ValidId(name)) return false;
  if (!std::isalnum(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

std::optional<std::string> Store::IdOfName(const std::string& name) const {
  if (!ValidName(name)) return std::nullopt;
  char target[64];
  ssize_t n = readlink((names_dir() / name).c_str(), target, sizeof(target) - 1);
  if (n <= 0) return std::nullopt;
  std::string id(target, static_cast<size_t>(n));
  if (!ValidId(id)) return std::nullopt;
  auto meta = Read(id);  // the link may outlive its sandbox (a crash): stale then
  if (!meta || meta->name != name) return std::nullopt;
  return id;
}

void Store::ReleaseName(const std::string& name, const std::string& id) const {
  if (!ValidName(name)) return;
  fs::path link = names_dir() / name;
  char target[64];
  ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
  if (n > 0 && std::string_view(target, static_cast<size_t>(n)) == id) (void)unlink(link.c_str());
}

Result<SandboxMeta> Store::Read(const std::string& id) const {
  if (!ValidId(id)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("'{}' is not a sandbox id (they look like sb-0123456789ab)", id));
  }
  SandboxPaths paths = Paths(id);
  auto text = ReadRecordText(paths.dir);
  if (!text) return tl::unexpected(text.error());
  return ParseRecord(id, *text, paths.meta);
}

Status Store::Write(const SandboxMeta& meta) const {
  return WriteFileAtomic(Paths(meta.id).meta, ToJson(meta.ToJson()));
}

Result<SandboxMeta> Store::Update(const std::string& id,
                                  const std::function<Status(SandboxMeta&)>& change) const {
  if (!ValidId(id)) return MakeError(ErrorCode::kInvalidArgument, "bad sandbox id " + id);
  auto paths = Paths(id);
  auto dir = OpenOurDir(AT_FDCWD, paths.dir.string(), paths.dir, "the sandbox directory", false);
  if (!dir) return tl::unexpected(dir.error());
  UniqueFd lock(openat(dir->get(), "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!lock) return MakeSyscallError("open", errno, paths.lock.string());
  while (flock(lock.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return MakeSyscallError("flock", errno, paths.lock.string());
  }
  auto meta = Read(id);
  if (!meta) return meta;
  if (auto st = change(*meta); !st) return tl::unexpected(st.error());
  if (auto st = Write(*meta); !st) return tl::unexpected(st.error());
  return meta;
}

Result<std::vector<std::string>> Store::Ids() const {
  std::vector<std::string> ids;
  fs::path dir = sandboxes_dir();
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return ids;
    return MakeSyscallError("opendir", errno, dir.string());
  }
  while (dirent* ent = readdir(d)) {
    if (ValidId(ent->d_name)) ids.emplace_back(ent->d_name);
  }
  closedir(d);
  std::sort(ids.begin(), ids.end());
  return ids;
}

Status Store::WriteTombstone(const Tombstone& t) const {
  json::object o;
  o["id"] = t.id;
  o["reason"] = t.reason;
  o["detail"] = JsonString(t.detail);
  o["at"] = FormatRfc3339Ms(t.at_ms);
  return WriteFileAtomic(root_ / "tombstones" / t.id, ToJson(o));
}

std::optional<Tombstone> Store::ReadTombstone(const std::string& id) const {
  if (!ValidId(id)) return std::nullopt;
  auto text = ReadWholeFile(root_ / "tombstones" / id);
  if (!text) return std::nullopt;
  auto obj = ParseJsonObject(*text);
  if (!obj) return std::nullopt;
  Tombstone t;
  t.id = id;
  t.reason = GetOptString(*obj, "reason").value_or("");
  t.detail = GetOptString(*obj, "detail").value_or("");
  t.at_ms = ParseRfc3339Ms(GetOptString(*obj, "at").value_or("")).value_or(0);
  return t;
}

void Store::PruneTombstones(std::chrono::seconds max_age) const {
  fs::path dir = root_ / "tombstones";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  time_t cutoff = time(nullptr) - static_cast<time_t>(max_age.count());
  while (dirent* ent = readdir(d)) {
    if (ent->d_name[0] == '.') continue;
    struct stat st;
    if (fstatat(dirfd(d), ent->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_mtime < cutoff) {
      (void)unlinkat(dirfd(d), ent->d_name, 0);
    }
  }
  closedir(d);
}

Result<uint32_t> Store::ReserveNetSlot(const std::string& id) const {
  for (uint32_t slot = 0; slot < kMaxPublicSlots; ++slot) {
    fs::path p = root_ / "net" / fmt::format("slot-{}", slot);
    UniqueFd fd(open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (fd) {
      (void)WriteAll(fd.get(), id, p.string());
      return slot;
    }
    if (errno != EEXIST) return MakeSyscallError("open", errno, p.string());
    // A reservation whose sandbox no longer exists is stale (its supervisor died early).
    auto owner = ReadWholeFile(p);
    struct stat st;
    if (owner && ValidId(*owner) && !fs::exists(Paths(*owner).dir) && stat(p.c_str(), &st) == 0 &&
        st.st_mtime < time(nullptr) - 60) {
      unlink(p.c_str());
      --slot;  // retry this one
    }
  }
  return MakeError(ErrorCode::kResourceExhausted, "every public-network slot is in use");
}

void Store::ReleaseNetSlot(uint32_t slot) const {
  (void)unlink((root_ / "net" / fmt::format("slot-{}", slot)).c_str());
}

std::string Store::NetSlotOwner(uint32_t slot) const {
  if (slot >= kMaxPublicSlots) return "";
  fs::path p = root_ / "net" / fmt::format("slot-{}", slot);
  UniqueFd fd(open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd || !CheckOurs(fd.get(), p, "the net slot reservation", false)) return "";
  auto text = ReadAll(fd.get(), p.string());
  return text && ValidId(*text) ? *text : "";
}

void Store::NotifyPool(const std::string& pool) const {
  fs::path p = pool_dir(pool) / "wake";
  UniqueFd fd(open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
}

Result<bool> Store::Reap(const std::string& id, const std::optional<SandboxMeta>& given) const {
  if (!ValidId(id)) return MakeError(ErrorCode::kInvalidArgument, "bad sandbox id " + id);
  uint64_t r = 0;
  (void)getrandom(&r, sizeof(r), 0);
  fs::path src = Paths(id).dir;
  fs::path dst = root_ / "trash" / fmt::format("{}-{:x}", id, r);
  if (rename(src.c_str(), dst.c_str()) != 0) {
    if (errno == ENOENT) return false;
    return MakeSyscallError("rename", errno, fmt::format("{} -> {}", src.string(), dst.string()));
  }
  std::optional<SandboxMeta> meta = given;
  if (!meta) {
    if (auto text = ReadRecordText(dst)) {
      if (auto m = ParseRecord(id, *text, dst / "meta.json")) meta = *m;
    }
  }
  if (meta && meta->id != id) meta.reset();  // not this sandbox's record: act on nothing in it
  Status result;
  if (meta) {
    ReleaseName(meta->name, id);
    std::vector<std::string> cgroups = OwnCgroups(id, meta->cgroups, &result);
    KillInit(meta->init, cgroups);  // SIGKILL to a PID namespace's init kills all of it
    if (auto st = KillAndRemoveCgroups(id, cgroups); !st && result) result = st;
    if (meta->net_slot && NetSlotOwner(*meta->net_slot) == id) {
      RemoveSlotNetwork(*meta->net_slot);
      ReleaseNetSlot(*meta->net_slot);
    }
  }
  UnmountBeneath(dst);
  if (auto st = RemoveTree(dst); !st && result) result = st;
  if (!result) return tl::unexpected(result.error());
  return true;
}

void RemoveSlotNetwork(uint32_t slot) {
  PublicNetworkConfig cfg;
  (void)RunInNetns(-1, {cfg.nft_path, "delete", "table", "inet", fmt::format("deepbox_s{}", slot)});
  (void)RunInNetns(-1, {cfg.ip_path, "link", "del", AddressesForSlot(slot).host_if});
}

Status KillAndRemoveCgroups(const std::string& id, const std::vector<std::string>& dirs) {
  Status result;
  std::vector<std::string> present = OwnCgroups(id, dirs, &result);
  if (present.empty()) return result;
  for (const auto& d : present) {
    struct stat st;
    if (stat((d + "/cgroup.kill").c_str(), &st) == 0) (void)WriteSmallFile(d + "/cgroup.kill", "1");
  }
  std::string freezer;
  if (auto host = DetectCgroups(); host && host->v1_mounts.count("freezer")) {
    for (const auto& d : present) {
      if (d.rfind(host->v1_mounts.at("freezer") + "/", 0) == 0) freezer = d;
    }
  }
  auto deadline = std::chrono::steady_clock::now() + 5s;
  for (;;) {
    bool any = false;
    if (!freezer.empty()) (void)WriteSmallFile(freezer + "/freezer.state", "FROZEN");
    for (const auto& d : present) {
      for (pid_t p : CgroupPids(d)) {
        any = true;
        kill(p, SIGKILL);
      }
    }
    if (!freezer.empty()) (void)WriteSmallFile(freezer + "/freezer.state", "THAWED");
    if (!any) break;
    if (std::chrono::steady_clock::now() > deadline) {
      result = MakeError(ErrorCode::kTimeout,
                         fmt::format("processes remain in cgroup {} after SIGKILL", present[0]));
      break;
    }
    std::this_thread::sleep_for(1ms);
  }
  for (const auto& d : present) {
    auto deadline2 = std::chrono::steady_clock::now() + 2s;
    while (rmdir(d.c_str()) != 0) {
      if (errno == ENOENT) break;
      if (errno != EBUSY || std::chrono::steady_clock::now() > deadline2) {
        if (result) result = MakeSyscallError("rmdir", errno, d);
        break;
      }
      std::this_thread::sleep_for(1ms);
    }
    // The shared "deepbox" parent goes when empty (a concurrent launch re-creates it).
    (void)rmdir(fs::path(d).parent_path().c_str());
  }
  return result;
}

}  // namespace deepbox::local::lifecycle
