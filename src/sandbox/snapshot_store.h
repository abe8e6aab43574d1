// Where snapshots (provider.h: SnapshotInfo) are kept, for every provider:
// one directory on persistent disk, one quota, one listing.
//
//   <dir>/NAME/snapshot.json   the record (SnapshotInfoJson), `provider` included
//   <dir>/NAME/...             the provider's payload (local: files/, k8s: workspace.tar)
//   <dir>/.tmp-NAME-RANDOM/    a snapshot being written, renamed to NAME when
//                              whole: a snapshot that exists is complete, a
//                              failed one leaves nothing (an hour-old .tmp-
//                              is what a writer that died left: removed)
//
// <dir> is $DEEPBOX_SNAPSHOT_DIR, else $DEEPBOX_STATE_DIR/snapshots when a
// state dir was chosen, else $XDG_STATE_HOME/deepbox/snapshots, else
// ~/.local/state/deepbox/snapshots (root without a home:
// /var/lib/deepbox/snapshots): not the runtime state dir, a tmpfs on most
// machines, where snapshots would use memory and vanish at reboot.
//
// Trust: whoever can write <dir> chooses the files a restore puts into a
// sandbox and reads every snapshot, so Open() refuses a directory that is a
// symlink, not owned by the effective uid or writable by group or others, or
// inside a directory someone else could rename it out of.
#pragma once

#include <cstdint>
#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "sandbox/provider.h"

namespace deepbox {

inline constexpr uint64_t kDefaultSnapshotQuotaBytes = 20ULL << 30;  // 20 GiB

// [A-Za-z0-9][A-Za-z0-9_.-]{0,62}: a file name, never "." or "..".
bool ValidSnapshotName(std::string_view name);

using EnvLookupFn = std::function<const char*(const char*)>;

// The default directory (above). `state_dir`: a state directory the caller
// was given explicitly ("" = none; $DEEPBOX_STATE_DIR counts as one).
// INVALID_ARGUMENT for a relative $DEEPBOX_SNAPSHOT_DIR; UNAVAILABLE with no
// home to put it in.
Result<std::filesystem::path> DefaultSnapshotDir(const std::string& state_dir = "",
                                                 const EnvLookupFn& env = nullptr);

struct SnapshotStoreOptions {
  std::string dir;           // "" = DefaultSnapshotDir(state_dir)
  std::string state_dir;     // see DefaultSnapshotDir
  uint64_t quota_bytes = 0;  // 0 = $DEEPBOX_SNAPSHOT_QUOTA (20G, 512M, bytes), else 20 GiB
};

class SnapshotStore;

// A snapshot being written (SnapshotStore::Begin): the payload goes into
// dir(); Commit() makes it a snapshot. Destroyed uncommitted, it is removed.
class PendingSnapshot {
 public:
  ~PendingSnapshot();
  PendingSnapshot(const PendingSnapshot&) = delete;
  PendingSnapshot& operator=(const PendingSnapshot&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  const std::string& name() const { return name_; }
  // What the payload may take on disk: the quota's rest when it began.
  uint64_t budget() const { return budget_; }
  // Marks it as still being written (its mtime), at most once a minute, so
  // that a lister does not take a long write for a dead one.
  void KeepAlive();
  // Writes the record (name and, when empty, created_at filled in) and
  // renames the directory into place; CONFLICT if the name was taken
  // meanwhile. A scratch one (SnapshotStore::Scratch) cannot be committed.
  Result<SnapshotInfo> Commit(SnapshotInfo info);

 private:
  friend class SnapshotStore;
  PendingSnapshot(std::filesystem::path store, std::filesystem::path dir, std::string name,
                  uint64_t budget)
      : store_(std::move(store)), dir_(std::move(dir)), name_(std::move(name)), budget_(budget) {}
  std::filesystem::path store_;
  std::filesystem::path dir_;
  std::string name_;  // "" = scratch
  uint64_t budget_;
  bool committed_ = false;
  std::time_t touched_ = 0;
};

class SnapshotStore {
 public:
  // Creates the directory (0700, missing parents too) and checks it (see
  // "Trust"): PERMISSION_DENIED naming it, its owner and mode, and what to do.
  static Result<SnapshotStore> Open(const SnapshotStoreOptions& options = {});

  const std::filesystem::path& dir() const { return dir_; }
  uint64_t quota_bytes() const { return quota_; }
  // A snapshot's directory (its payload is beneath it).
  std::filesystem::path PathOf(const std::string& name) const { return dir_ / name; }

  // Starts snapshot `name`: INVALID_ARGUMENT for a bad name, CONFLICT for
  // one taken, RESOURCE_EXHAUSTED when the quota is used up.
  Result<std::unique_ptr<PendingSnapshot>> Begin(const std::string& name) const;
  // A payload that is never listed (what a fork copies through), removed
  // with the object; its budget is the quota's rest, as Begin's.
  Result<std::unique_ptr<PendingSnapshot>> Scratch() const;

  // Every snapshot, oldest first; removes what dead writers left.
  Result<std::vector<SnapshotInfo>> List() const;
  // NOT_FOUND (naming `deepbox sandbox snapshot ls`) when there is none.
  Result<SnapshotInfo> Get(const std::string& name) const;
  // Get, and INVALID_ARGUMENT when it was taken of another provider's
  // sandbox: its payload means nothing to `provider`.
  Result<SnapshotInfo> GetFor(const std::string& name, std::string_view provider) const;
  // Out of sight first (a lister never sees half of it), then removed.
  Status Delete(const std::string& name) const;

 private:
  SnapshotStore(std::filesystem::path dir, uint64_t quota) : dir_(std::move(dir)), quota_(quota) {}
  Result<uint64_t> Budget(std::string_view what) const;
  std::filesystem::path dir_;
  uint64_t quota_;
};

}  // namespace deepbox
