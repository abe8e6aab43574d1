// Snapshots, restores and forks of local sandboxes: copies of a sandbox's
// workspace (local/tree_copy.h), which is all the state a local sandbox
// keeps besides its processes (the root file system is read-only: the
// host's directories or an unpacked image). Memory is not captured.
//
//   <snapshot store>/NAME/snapshot.json   what it is (SnapshotInfo)
//   <snapshot store>/NAME/files/          the workspace's files
//
// The store (sandbox/snapshot_store.h) is shared with the other providers:
// it names, records, counts against the quota and lists; a snapshot is
// copied into its pending directory and renamed into place when complete,
// so a snapshot that exists is whole and a failed one (disk full, quota)
// leaves nothing. The sandbox is paused for the copy when it runs and the
// host has a cgroup freezer, and held (SandboxMeta::hold) so that a use
// waits for the copy instead of resuming it mid-way.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "local/lifecycle/provider.h"
#include "local/lifecycle/sandbox_limits.h"
#include "local/tree_copy.h"
#include "local/workspace_disk.h"

namespace deepbox::local::lifecycle {
namespace {

constexpr int kMaxFork = 32;
constexpr const char* kPayload = "files";

std::string RandomSuffix() {
  uint32_t r = 0;
  (void)getrandom(&r, sizeof(r), 0);
  return fmt::format("{:08x}", r);
}

}  // namespace

Result<SnapshotStore> LocalSandboxProvider::Snapshots() const {
  SnapshotStoreOptions o;
  o.dir = options_.snapshot_dir;
  o.quota_bytes = options_.snapshot_quota_bytes;
  // Create() fills in the default state dir: only one that was chosen
  // (given, or $DEEPBOX_STATE_DIR) keeps the snapshots beside it; the
  // default one is a runtime dir (a tmpfs).
  const char* env = std::getenv("DEEPBOX_STATE_DIR");
  auto runtime_default = DefaultStateDir();
  bool chosen = (env != nullptr && *env != '\0') || !runtime_default ||
                fs::path(options_.state_dir) != *runtime_default;
  if (chosen) o.state_dir = options_.state_dir;
  return SnapshotStore::Open(o);
}

Result<std::string> LocalSandboxProvider::WithWorkspaceStill(
    const std::string& from_ref, const std::function<Status(const SandboxMeta&)>& copy) {
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
  Status result = copy(*meta);
  release_hold();
  if (paused_here) {
    if (auto st = Resume(from); !st && result) result = tl::unexpected(st.error());
  }
  if (!result) return tl::unexpected(result.error());
  return note;
}

Result<std::string> LocalSandboxProvider::CopyWorkspace(const std::string& from,
                                                        const std::vector<std::string>& to,
                                                        uint64_t max_bytes) {
  return WithWorkspaceStill(from, [&](const SandboxMeta& meta) -> Status {
    fs::path source = store_.Paths(meta.id).workspace;
    for (const auto& dst : to) {
      TreeCopyOptions o;
      o.max_bytes = max_bytes;
      o.ignore_top_level = {"lost+found"};  // an ext4 workspace image's own
      auto copied = CopyTree(source.string(), dst, o);
      if (!copied) return tl::unexpected(copied.error());
    }
    return {};
  });
}

Result<SnapshotInfo> LocalSandboxProvider::Snapshot(const std::string& ref,
                                                    const SnapshotOptions& options) {
  const std::string id = Canonical(ref);
  std::string name = options.name.empty() ? fmt::format("{}-{}", id, RandomSuffix()) : options.name;
  auto store = Snapshots();
  if (!store) return tl::unexpected(store.error());
  auto pending = store->Begin(name);
  if (!pending) return tl::unexpected(pending.error());
  const fs::path files = (*pending)->dir() / kPayload;
  if (mkdir(files.c_str(), 0700) != 0) return MakeSyscallError("mkdir", errno, files.string());
  auto note = CopyWorkspace(id, {files.string()}, (*pending)->budget());
  if (!note) {
    Error e = note.error();
    if (e.code == ErrorCode::kResourceExhausted) {
      e.message = fmt::format(
          "snapshot of sandbox '{}' not taken (nothing was kept, the sandbox "
          "is as it was): {}",
          id, e.message);
    }
    return tl::unexpected(e);  // the pending directory goes with `pending`
  }
  SnapshotInfo s;
  s.provider = "local";
  s.source_id = id;
  s.size_bytes = static_cast<int64_t>(TreeDiskUsage(files.string()));
  s.note = *note;
  // The apparent size, for the restore's check against a workspace disk.
  uint64_t apparent = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(files, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) apparent += it->file_size(ec);
  }
  s.file_bytes = static_cast<int64_t>(apparent);
  return (*pending)->Commit(s);
}

Result<std::vector<SnapshotInfo>> LocalSandboxProvider::ListSnapshots() {
  auto store = Snapshots();
  if (!store) return tl::unexpected(store.error());
  return store->List();
}

Status LocalSandboxProvider::DeleteSnapshot(const std::string& name) {
  auto store = Snapshots();
  if (!store) return tl::unexpected(store.error());
  return store->Delete(name);
}

Result<SandboxInfo> LocalSandboxProvider::CreateFromSnapshot(const std::string& snapshot,
                                                             const ClaimOptions& options) {
  auto store = Snapshots();
  if (!store) return tl::unexpected(store.error());
  auto record = store->GetFor(snapshot, name());
  if (!record) return tl::unexpected(record.error());
  const fs::path dir = store->PathOf(snapshot);
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
  auto copied =
      CopyTree((dir / kPayload).string(), store_.Paths(meta->id).workspace.string(), copy);
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
  auto source = Get(id);
  if (!source) return tl::unexpected(source.error());
  // Unless told otherwise, a fork gets its source's network: a sandbox kept
  // off the network must not have forks on it.
  ClaimOptions o = options;
  if (o.network.empty()) o.network = source->network_requested;
  // A /workspace disk of the size a new sandbox gets: its image is cloned.
  std::error_code ec;
  if (source->state != "warm" && source->limits.workspace_bytes &&
      source->limits.workspace_bytes == options_.limits.workspace_bytes &&
      fs::exists(store_.Paths(id).runtime / "workspace.img", ec)) {
    return ForkByImage(*source, count, o);
  }
  // The new sandboxes first (the source keeps running meanwhile), then one
  // pause of the source for all the copies.
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

// The clones go to forks/ in the state dir (the file system the new
// sandboxes' runtime dirs are on: the supervisor renames one into place); a
// clone left by a fork that died is removed by the next fork an hour later.
Result<std::vector<SandboxInfo>> LocalSandboxProvider::ForkByImage(const SandboxMeta& source,
                                                                   int count,
                                                                   const ClaimOptions& options) {
  const std::string& id = source.id;
  fs::path dir = store_.root() / "forks";
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return MakeSyscallError("mkdir", errno, dir.string());
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    auto age = fs::file_time_type::clock::now() - e.last_write_time(ec);
    if (!ec && age > std::chrono::hours(1)) fs::remove(e.path(), ec);
  }
  std::vector<fs::path> images;
  auto remove_images = [&] {
    for (const auto& p : images) (void)unlink(p.c_str());
  };
  const SandboxPaths paths = store_.Paths(id);
  // One pause of the source for all the clones; the sandboxes start after.
  auto cloned = WithWorkspaceStill(id, [&](const SandboxMeta&) -> Status {
    for (int i = 0; i < count; ++i) {
      fs::path image = dir / fmt::format("{}-{}.img", id, RandomSuffix());
      if (auto st =
              WorkspaceDisk::CloneImage(paths.runtime / "workspace.img", paths.workspace, image);
          !st) {
        return st;
      }
      images.push_back(image);
    }
    return {};
  });
  if (!cloned) {
    remove_images();
    Error e = cloned.error();
    e.message = fmt::format("fork of sandbox '{}' (no sandbox was kept): {}", id, e.message);
    return tl::unexpected(e);
  }
  ClaimOptions o = options;
  o.labels["deepbox.dev/forked-from"] = id;
  o.allow_warm = false;
  o.name.clear();
  std::vector<SandboxMeta> made;
  for (size_t i = 0; i < images.size(); ++i) {
    auto m = CreateCold(o, "", images[i].string());
    if (!m) {
      for (const auto& done : made) (void)Delete(done.id);
      remove_images();  // those not taken yet
      Error e = m.error();
      e.message = fmt::format("fork of sandbox '{}' (no sandbox was kept): {}", id, e.message);
      return tl::unexpected(e);
    }
    made.push_back(*m);
  }
  std::vector<SandboxInfo> out;
  for (const auto& m : made) out.push_back(InfoOf(m));
  return out;
}

}  // namespace deepbox::local::lifecycle
