// The local sandbox provider: sandboxes on this machine, each owned by its
// supervisor process (supervisor.h), recorded under the state dir (state.h).
//
//   Claim   a warm sandbox from the pool if one matches (rename of its `warm`
//           marker: two claimers never win the same one; then its state set
//           to claimed under its lock, unless the pool took back a claim
//           abandoned between the two, see pool.h), else a cold create.
//           Labels and TTL are set either way; the lease's Release deletes.
//           "Matches" means the same rootfs, image (by manifest digest),
//           network and exactly the same limits (SandboxLimits): a claim
//           never gets weaker limits than it
//           asked for, nor surprising stricter ones. Limits are not applied to
//           a warm sandbox after the fact because not all of them can be: the
//           /workspace disk is mounted inside the sandbox's mount namespace at
//           launch, RLIMIT_NPROC is inherited at fork (only prlimit(2) on each
//           process could lower it, racing with forks), and v1 cgroups would
//           have to be created and every task migrated while the daemon runs.
//           A pool therefore serves one set of limits (`pool serve --memory
//           ...`), with the same defaults as `sandbox create` and `run`.
//   List    with a label selector; every call also reaps the sandboxes whose
//           supervisor is gone (pid + start time), so state survives restarts
//           and crashes of anything but the kernel.
//   Delete  SIGTERM to the supervisor, which cleans up and exits; if it is
//           gone, the caller reaps.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "local/lifecycle/selector.h"
#include "local/lifecycle/state.h"
#include "sandbox/provider.h"
#include "sandbox/sandboxd_client.h"
#include "sandbox/snapshot_store.h"

namespace deepbox::local::lifecycle {

struct LocalProviderOptions {
  std::string state_dir;         // "" = DefaultStateDir()
  std::string deepbox_binary;    // "" = $DEEPBOX_BINARY, else `deepbox` next to this program
  std::string sandboxd_binary;   // "" = $DEEPBOX_SANDBOXD, else next to the deepbox binary
  std::string pool = "default";  // warm pool to claim from ("" = always create cold)
  std::chrono::milliseconds create_timeout{30000};
  // Limits of every sandbox this provider creates, and the only limits a warm
  // sandbox it claims may have. Safe by default; a field set to nullopt is no limit.
  SandboxLimits limits = DefaultSandboxLimits();
  // Where snapshots are kept (sandbox/snapshot_store.h, shared with the other
  // providers): "" = $DEEPBOX_SNAPSHOT_DIR, else <state_dir>/snapshots when
  // a state dir was chosen (state_dir or $DEEPBOX_STATE_DIR), else
  // ~/.local/state/deepbox/snapshots (persistent, unlike the runtime state dir).
  std::string snapshot_dir;
  // What all snapshots together may hold on disk; 0 = $DEEPBOX_SNAPSHOT_QUOTA
  // (bytes, or 20G, 512M), else 20 GiB.
  uint64_t snapshot_quota_bytes = 0;
  // The image cache for --image (shared with `deepbox image`): "" =
  // oci::DefaultImageDir() ($DEEPBOX_IMAGE_DIR, else $DEEPBOX_STATE_DIR/images, ...).
  std::string image_dir;
};

// The absolute path of a --rootfs directory ("" stays ""); INVALID_ARGUMENT if
// it does not exist or is not a directory.
Result<std::string> ResolveRootfs(const std::string& rootfs);
// Where `deepbox-sandboxd` is found: $DEEPBOX_SANDBOXD, else next to `deepbox_binary`.
Result<std::string> LocateSandboxd(const std::string& deepbox_binary);
// $DEEPBOX_BINARY, else this program if it is `deepbox`, else `deepbox` next to it.
Result<std::string> LocateDeepbox();

// What the lifecycle interface says about a sandbox.
SandboxInfo InfoOf(const SandboxMeta& meta);

// A warm pool named by the user (--pool NAME, not the default) must exist: a
// `deepbox pool serve --name NAME` has run in this state directory (its
// pools/NAME/). INVALID_ARGUMENT (a usage error) naming the known ones; a
// misspelt pool would otherwise silently create a cold sandbox.
class LocalSandboxProvider;
Status CheckPoolExists(const LocalSandboxProvider& provider, const std::string& pool);

class LocalSandboxProvider : public SandboxProvider {
 public:
  static Result<std::unique_ptr<LocalSandboxProvider>> Create(LocalProviderOptions options = {});

  // The lifecycle interface (sandbox/provider.h). List and DeleteMatching
  // take a label selector's text; List leaves out the pool's warm sandboxes
  // (nobody's yet: ListMeta shows them).
  std::string name() const override { return "local"; }
  std::string description() const override { return "local sandbox"; }
  bool OwnsId(std::string_view id) const override { return Store::ValidId(id); }
  bool enforces_network() const override { return true; }
  Result<std::unique_ptr<SandboxLease>> Claim(const ClaimOptions& options) override;
  Result<SandboxInfo> Create(const ClaimOptions& options) override;
  Result<std::unique_ptr<SandboxLease>> Attach(const std::string& id) override;
  // A daemon that just died is waited for (up to 15 s) until its supervisor
  // has restarted it or recorded why the sandbox is gone.
  Result<DaemonAccess> ConnectDaemon(const std::string& id) override;
  Result<SandboxInfo> Inspect(const std::string& id) override;
  Result<std::vector<SandboxInfo>> List(const std::string& selector) override;
  Status Delete(const std::string& id) override;
  Result<std::vector<std::string>> DeleteMatching(const std::string& selector) override;
  std::optional<Error> WhyGone(const std::string& id) override;
  // Pause, Suspend, Resume: asked of the sandbox's supervisor (its record's
  // requested_mode, then SIGHUP), which does them; these wait until it has.
  Status Pause(const std::string& id) override;
  Status Suspend(const std::string& id, const SuspendOptions& options) override;
  Status Resume(const std::string& id) override;
  // Snapshots: copies of the workspace (files/) in the snapshot store
  // (snapshots.cc), within its quota. ListSnapshots and DeleteSnapshot see
  // every provider's; CreateFromSnapshot restores local ones only.
  Result<SnapshotInfo> Snapshot(const std::string& id, const SnapshotOptions& options) override;
  Result<std::vector<SnapshotInfo>> ListSnapshots() override;
  Status DeleteSnapshot(const std::string& name) override;
  Result<SandboxInfo> CreateFromSnapshot(const std::string& snapshot,
                                         const ClaimOptions& options) override;
  Result<std::vector<SandboxInfo>> Fork(const std::string& id, int count,
                                        const ClaimOptions& options) override;
  // A sandbox created with --network allow=... switches between allowlists
  // and none (its proxy's policy); the supervisor applies it (SIGHUP) and
  // logs it in the egress log (network.jsonl in its state dir).
  Result<std::string> SetNetwork(const std::string& id, const std::string& policy) override;
  Result<std::vector<EgressLogLine>> NetworkLog(const std::string& id, size_t limit) override;

  // Creates (or takes from the pool) without a lease: the sandbox lives until
  // deleted or its TTL. `allow_warm` false forces a cold create.
  Result<SandboxMeta> CreateSandbox(const ClaimOptions& options, bool allow_warm = true);
  // A cold create of a warm sandbox for `pool` (what the pool daemon does).
  Result<SandboxMeta> CreateWarm(const std::string& pool, const std::string& network,
                                 const std::string& rootfs, const std::string& image = "");
  // Takes a warm sandbox of `pool` matching network/rootfs/image digest/limits,
  // applying labels + TTL.
  Result<std::optional<SandboxMeta>> ClaimWarm(const std::string& pool,
                                               const ClaimOptions& options);

  // Sandboxes matching `selector` (warm ones too), sorted by creation time.
  // Reaps dead ones.
  Result<std::vector<SandboxMeta>> ListMeta(const Selector& selector = {});
  // One sandbox, by id or name, with clear errors: unknown, expired, gone,
  // still starting.
  Result<SandboxMeta> Get(const std::string& id);
  // A client connected to the sandbox's daemon.
  Result<std::unique_ptr<SandboxdClient>> Connect(const std::string& id);
  Result<std::unique_ptr<SandboxdClient>> Connect(const SandboxMeta& meta);
  // How long sandbox `meta` has been unused, in ms: a running one as its
  // daemon says (GET /deepbox/v1/activity; 0 while a request or a command
  // runs), a paused or suspended one since it became so. Does not wake it.
  Result<int64_t> IdleMs(const SandboxMeta& meta);
  // Deletes every sandbox matching (an empty selector is refused), warm ones
  // too. Returns their ids. (Delete waits until nothing is left of it.)
  Result<std::vector<std::string>> DeleteMatching(const Selector& selector);

  const Store& store() const { return store_; }
  const LocalProviderOptions& options() const { return options_; }

 private:
  explicit LocalSandboxProvider(LocalProviderOptions options, Store store)
      : options_(std::move(options)), store_(std::move(store)) {}
  // `workspace_image`: SupervisorRequest::workspace_image ("" = a new disk).
  Result<SandboxMeta> CreateCold(const ClaimOptions& options, const std::string& pool,
                                 const std::string& workspace_image = "");
  Status ValidateClaim(const ClaimOptions& options, std::string* rootfs) const;
  Error GoneError(const std::string& id) const;
  // The daemon socket of sandbox `meta`, checked to be ours (never a path
  // from the record).
  Result<fs::path> DaemonSocket(const SandboxMeta& meta) const;
  Status RequestMode(const std::string& id, const std::string& mode);
  // A record whose supervisor is gone: kept if it is a suspended sandbox
  // (supervisor.h) whose TTL has not run out (true), else cleaned up with a
  // tombstone saying why (false).
  bool KeepOrReapOrphan(const SandboxMeta& meta);
  // Resumes suspended sandbox `meta` whose supervisor is gone: a new
  // supervisor adopts it (SupervisorRequest::adopt) and starts it.
  Status AdoptSuspended(const SandboxMeta& meta);
  // A sandbox's id from its id or its name (ClaimOptions::name); unknown
  // names come back as they are (the caller's lookup says NOT_FOUND).
  std::string Canonical(const std::string& id_or_name) const;
  // Gives sandbox `meta` the name `name` (names/NAME, then its record):
  // CONFLICT when another sandbox has it.
  Status Name(SandboxMeta& meta, const std::string& name);
  // Copies sandbox `from`'s workspace into each of `to` (new, unused
  // sandboxes), `from` paused meanwhile where it can be; the note says how
  // consistent the copy is.
  Result<std::string> CopyWorkspace(const std::string& from, const std::vector<std::string>& to,
                                    uint64_t max_bytes);
  // Runs `copy` on sandbox `from` held still: held (a use waits), paused if
  // it runs and the host can; returns the note of CopyWorkspace.
  Result<std::string> WithWorkspaceStill(const std::string& from,
                                         const std::function<Status(const SandboxMeta&)>& copy);
  // Fork of sandbox `meta` by cloning its /workspace disk image (snapshots.cc).
  Result<std::vector<SandboxInfo>> ForkByImage(const SandboxMeta& meta, int count,
                                               const ClaimOptions& options);
  void CleanTrash() const;
  // The snapshot store of LocalProviderOptions::snapshot_dir / _quota_bytes.
  Result<SnapshotStore> Snapshots() const;

  LocalProviderOptions options_;
  Store store_;
};

}  // namespace deepbox::local::lifecycle
