// Snapshots, restores and forks of local sandboxes: copies of a sandbox's
// workspace (local/tree_copy.h), which is all the state a local sandbox
// keeps besides its processes (the root file system is read-only: the
// host's directories or an unpacked image). Memory is not captured.
//
//   <state>/snapshots/NAME/snapshot.json   what it is (SnapshotInfo)
//   <state>/snapshots/NAME/files/          the workspace's files
//
// A snapshot is copied into snapshots/.tmp-NAME-RANDOM/ and renamed into
// place when complete, so a snapshot that exists is whole; a failed one
// (disk full, quota) leaves nothing. The sandbox is paused for the copy when
// it runs and the host has a cgroup freezer, and held (SandboxMeta::hold)
// so that a use waits for the copy instead of resuming it mid-way.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "common/json.h"
#include "local/lifecycle/provider.h"
#include "local/lifecycle/sandbox_limits.h"
#include "local/tree_copy.h"

namespace deepbox::local::lifecycle {
namespace {

constexpr uint64_t kDefaultSnapshotQuota = 20ULL << 30;
constexpr int kMaxFork = 32;

// [A-Za-z0-9][A-Za-z0-9_.-]{0,62}: a file name, never "." or "..".
bool ValidSnapshotName(std::string_view name) {
  if (name.empty() || name.size() > 63 || !std::isalnum(static_cast<unsigned char>(name[0]))) {
    return false;
  }
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') {
      return false;
    }
  }
  return true;
}

std::string RandomSuffix() {
  uint32_t r = 0;
  (void)getrandom(&r, sizeof(r), 0);
  return fmt::format("{:08x}", r);
}

Result<SnapshotInfo> ReadRecord(const fs::path& dir, const std::string& name) {
  std::ifstream in(dir / "snapshot.json");
  if (!in) {
    return MakeError(ErrorCode::kNotFound,
                     fmt::format("no snapshot '{}' (see: deepbox sandbox snapshot ls)", name));
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto o = ParseJsonObject(text);
  if (!o) return MakeError(ErrorCode::kInternal, fmt::format("snapshot '{}': bad record", name));
  SnapshotInfo s;
  s.name = name;  // the directory's name, whatever the record says
  s.provider = "local";
  auto str = [&](const char* key) {
    auto it = o->find(key);
    return it != o->end() && it->value().is_string() ? std::string(it->value().as_string())
                                                     : std::string();
  };
  auto num = [&](const char* key) -> int64_t {
    auto it = o->find(key);
    return it != o->end() && it->value().is_int64() ? it->value().as_int64() : -1;
  };
  s.source_id = str("source_id");
  s.created_at = str("created_at");
  s.size_bytes = num("size_bytes");
  s.file_bytes = num("file_bytes");
  s.note = str("note");
  return s;
}

Status WriteRecord(const fs::path& dir, const SnapshotInfo& s) {
  fs::path tmp = dir / "snapshot.json.tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << SnapshotInfoJson(s) << "\n";
    out.flush();
    if (!out) return MakeError(ErrorCode::kInternal, "writing " + tmp.string() + " failed");
  }
  if (rename(tmp.c_str(), (dir / "snapshot.json").c_str()) != 0) {
    return MakeSyscallError("rename", errno, tmp.string());
  }
  return {};
}

uint64_t QuotaFrom(const LocalProviderOptions& options) {
  if (options.snapshot_quota_bytes > 0) return options.snapshot_quota_bytes;
  if (const char* env = std::getenv("DEEPBOX_SNAPSHOT_QUOTA"); env != nullptr && *env != '\0') {
    if (auto v = ParseByteSize(env, "DEEPBOX_SNAPSHOT_QUOTA"); v && *v > 0) return *v;
  }
  return kDefaultSnapshotQuota;
}

}  // namespace

Result<std::string> LocalSandboxProvider::CopyWorkspace(const std::string& from_ref,
                                                        const std::vector<std::string>& to,
                                                        uint64_t max_bytes) {
  const std::string from = Canonical(from_ref);
  auto meta = Get(from);
  if (!meta) return tl::unexpected(meta.error());
  if (meta->state == "warm") {
    return MakeError(ErrorCode::kConflict,
                     fmt::format("sandbox '{}' is a warm pool's, not claimed", from));
  }
  // Held first, so that a use (which would resume it) waits for the copy;
  // then paused if it runs (and left paused if it was); a suspended one has
  // no process to write meanwhile.
  auto self = SelfRef();
  if (!self) return tl::unexpected(self.error());
  (void)store_.Update(from, [&](SandboxMeta& m) {
    m.hold = *self;
    return Status{};
  });
  auto release_hold = [&] {
    (void)store_.Update(from, [](SandboxMeta& m) {
      m.hold = {};
      return Status{};
    });
  };
  std::string note;
  bool paused_here = false;
  if (meta->mode == "running" && meta->requested_mode == "running") {
    if (auto st = Pause(from); st) {
      paused_here = true;
    } else if (st.error().code == ErrorCode::kUnimplemented) {
      note =
          "copied while it ran (no cgroup freezer here): a file a process was writing then "
          "may be incomplete";
    } else {
      release_hold();
      return tl::unexpected(st.error());
    }
  }
  Status result;
  fs::path source = store_.Paths(from).workspace;
  for (const auto& dst : to) {
    TreeCopyOptions o;
    o.max_bytes = max_bytes;
    o.ignore_top_level = {"lost+found"};  // an ext4 workspace image's own
    auto copied = CopyTree(source.string(), dst, o);
    if (!copied) {
      result = tl::unexpected(copied.error());
      break;
    }
  }
  release_hold();
  if (paused_here) {
    if (auto st = Resume(from); !st && result) result = tl::unexpected(st.error());
  }
  if (!result) return tl::unexpected(result.error());
  return note;
}

Result<SnapshotInfo> LocalSandboxProvider::Snapshot(const std::string& ref,
                                                    const SnapshotOptions& options) {
  const std::string id = Canonical(ref);
  std::string name = options.name.empty() ? fmt::format("{}-{}", id, RandomSuffix()) : options.name;
  if (!ValidSnapshotName(name)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("snapshot name '{}': use 1-63 letters, digits, '_', '.' and '-', "
                                 "starting with a letter or digit",
                                 name));
  }
  fs::path dir = store_.snapshots_dir();
  std::error_code ec;
  fs::create_directories(dir, ec);
  (void)chmod(dir.c_str(), 0700);
  if (fs::exists(dir / name, ec)) {
    return MakeError(ErrorCode::kConflict, fmt::format("snapshot '{}' exists already", name));
  }
  // The quota: what the snapshots there use now, and the rest for this one.
  auto existing = ListSnapshots();
  if (!existing) return tl::unexpected(existing.error());
  uint64_t used = 0;
  for (const auto& s : *existing)
    used += s.size_bytes > 0 ? static_cast<uint64_t>(s.size_bytes) : 0;
  const uint64_t quota = QuotaFrom(options_);
  if (used >= quota) {
    return MakeError(ErrorCode::kResourceExhausted,
                     fmt::format("the snapshot quota of {} is used up ({} in {} snapshots; remove "
                                 "some with `deepbox sandbox snapshot rm NAME`)",
                                 FormatBytes(quota), FormatBytes(used), existing->size()));
  }
  fs::path tmp = dir / fmt::format(".tmp-{}-{}", name, RandomSuffix());
  if (mkdir(tmp.c_str(), 0700) != 0 || mkdir((tmp / "files").c_str(), 0700) != 0) {
    int err = errno;
    (void)RemoveTree(tmp);
    return MakeSyscallError("mkdir", err, tmp.string());
  }
  auto note = CopyWorkspace(id, {(tmp / "files").string()}, quota - used);
  if (!note) {
    (void)RemoveTree(tmp);
    Error e = note.error();
    if (e.code == ErrorCode::kResourceExhausted) {
      e.message = fmt::format(
          "snapshot of sandbox '{}' not taken (nothing was kept, the sandbox "
          "is as it was): {}",
          id, e.message);
    }
    return tl::unexpected(e);
  }
  SnapshotInfo s;
  s.name = name;
  s.provider = "local";
  s.source_id = id;
  s.created_at = FormatTime(NowMs());
  s.size_bytes = static_cast<int64_t>(TreeDiskUsage((tmp / "files").string()));
  s.note = *note;
  // The apparent size, for the restore's check against a workspace disk.
  uint64_t apparent = 0;
  for (auto it = fs::recursive_directory_iterator(tmp / "files", ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) apparent += it->file_size(ec);
  }
  s.file_bytes = static_cast<int64_t>(apparent);
  if (auto st = WriteRecord(tmp, s); !st) {
    (void)RemoveTree(tmp);
    return tl::unexpected(st.error());
  }
  if (rename(tmp.c_str(), (dir / name).c_str()) != 0) {
    int err = errno;
    (void)RemoveTree(tmp);
    if (err == EEXIST || err == ENOTEMPTY) {
      return MakeError(ErrorCode::kConflict, fmt::format("snapshot '{}' exists already", name));
    }
    return MakeSyscallError("rename", err, (dir / name).string());
  }
  return s;
}

Result<std::vector<SnapshotInfo>> LocalSandboxProvider::ListSnapshots() {
  std::vector<SnapshotInfo> out;
  std::error_code ec;
  fs::path dir = store_.snapshots_dir();
  if (!fs::is_directory(dir, ec)) return out;
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    // What a snapshot or removal that died half-way left (an hour is far
    // longer than any copy takes).
    if (name.starts_with(".tmp-") && !e.is_symlink(ec)) {
      auto age = fs::file_time_type::clock::now() - e.last_write_time(ec);
      if (!ec && age > std::chrono::hours(1)) stale.push_back(e.path());
      continue;
    }
    if (!ValidSnapshotName(name) || !e.is_directory(ec) || e.is_symlink(ec)) continue;
    if (auto s = ReadRecord(e.path(), name)) out.push_back(std::move(*s));
  }
  for (const auto& p : stale) (void)RemoveTree(p);
  std::sort(out.begin(), out.end(), [](const SnapshotInfo& a, const SnapshotInfo& b) {
    return a.created_at != b.created_at ? a.created_at < b.created_at : a.name < b.name;
  });
  return out;
}

Status LocalSandboxProvider::DeleteSnapshot(const std::string& name) {
  if (!ValidSnapshotName(name)) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("bad snapshot name '{}'", name));
  }
  fs::path dir = store_.snapshots_dir() / name;
  if (auto s = ReadRecord(dir, name); !s) return tl::unexpected(s.error());
  // Out of sight first (a lister never sees half of it), then removed.
  fs::path trash = store_.snapshots_dir() / fmt::format(".tmp-rm-{}-{}", name, RandomSuffix());
  if (rename(dir.c_str(), trash.c_str()) != 0)
    return MakeSyscallError("rename", errno, dir.string());
  return RemoveTree(trash);
}

Result<SandboxInfo> LocalSandboxProvider::CreateFromSnapshot(const std::string& snapshot,
                                                             const ClaimOptions& options) {
  if (!ValidSnapshotName(snapshot)) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("bad snapshot name '{}'", snapshot));
  }
  fs::path dir = store_.snapshots_dir() / snapshot;
  auto record = ReadRecord(dir, snapshot);
  if (!record) return tl::unexpected(record.error());
  if (options_.limits.workspace_bytes && record->file_bytes > 0 &&
      static_cast<uint64_t>(record->file_bytes) > *options_.limits.workspace_bytes) {
    return MakeError(ErrorCode::kResourceExhausted,
                     fmt::format("snapshot '{}' holds {} of files, more than the /workspace disk "
                                 "of a new sandbox ({}; --disk sets it)",
                                 snapshot, FormatBytes(static_cast<uint64_t>(record->file_bytes)),
                                 FormatBytes(*options_.limits.workspace_bytes)));
  }
  ClaimOptions o = options;
  o.labels["deepbox.dev/snapshot"] = snapshot;
  o.allow_warm = false;  // its workspace is filled before anyone can use it
  auto meta = CreateSandbox(o, false);
  if (!meta) return tl::unexpected(meta.error());
  TreeCopyOptions copy;
  copy.ignore_top_level = {"lost+found"};
  auto copied = CopyTree((dir / "files").string(), store_.Paths(meta->id).workspace.string(), copy);
  if (!copied) {
    (void)Delete(meta->id);
    Error e = copied.error();
    e.message = fmt::format("restoring snapshot '{}' (the new sandbox was deleted): {}", snapshot,
                            e.message);
    return tl::unexpected(e);
  }
  return InfoOf(*meta);
}

Result<std::vector<SandboxInfo>> LocalSandboxProvider::Fork(const std::string& ref, int count,
                                                            const ClaimOptions& options) {
  const std::string id = Canonical(ref);
  if (count < 1 || count > kMaxFork) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        fmt::format("fork: from 1 to {} sandboxes at a time (not {})", kMaxFork, count));
  }
  if (auto source = Get(id); !source) return tl::unexpected(source.error());
  // The new sandboxes first (the source keeps running meanwhile), then one
  // pause of the source for all the copies.
  ClaimOptions o = options;
  o.labels["deepbox.dev/forked-from"] = id;
  o.allow_warm = false;
  o.name.clear();  // a name is one sandbox's: forks have none
  std::vector<SandboxMeta> made;
  auto undo = [&] {
    for (const auto& m : made) (void)Delete(m.id);
  };
  for (int i = 0; i < count; ++i) {
    auto m = CreateSandbox(o, false);
    if (!m) {
      undo();
      return tl::unexpected(m.error());
    }
    made.push_back(*m);
  }
  std::vector<std::string> workspaces;
  for (const auto& m : made) workspaces.push_back(store_.Paths(m.id).workspace.string());
  auto copied = CopyWorkspace(id, workspaces, 0);
  if (!copied) {
    undo();
    Error e = copied.error();
    e.message = fmt::format("fork of sandbox '{}' (no sandbox was kept): {}", id, e.message);
    return tl::unexpected(e);
  }
  std::vector<SandboxInfo> out;
  for (const auto& m : made) out.push_back(InfoOf(m));
  return out;
}

}  // namespace deepbox::local::lifecycle
