// On-disk state of local sandboxes: the record every command reads, and the
// only thing shared between the CLI, the pool daemon and the supervisors.
//
// <state>/                      0700; $DEEPBOX_STATE_DIR, /run/deepbox (root),
//                               or $XDG_RUNTIME_DIR/deepbox
//   sandboxes/<id>/             one per sandbox (id "sb-" + 12 hex digits)
//     meta.json                 SandboxMeta; replaced atomically (temp + rename)
//     lock                      flock'ed around read-modify-write of meta.json
//     warm                      present while a pool sandbox waits for a claim;
//                               claiming is rename(warm, claimed): one winner
//     claimed
//     supervisor.log            the supervisor's own messages
//     rt/                       the launcher's runtime dir (rt/run/sandboxd.sock)
//     workspace/                bound at /workspace
//   trash/                      sandbox dirs being removed (rename = ownership)
//   tombstones/<id>             why a sandbox went away by itself (TTL, crash)
//   pools/<name>/               a pool's wake-up file (claims touch it)
//   net/slot-<n>                public-network slot reservations
//   disk-templates/             formatted empty /workspace disk images, one per
//                               size and owner, copied for each new sandbox,
//                               and up to two spare copies each, made ahead
//                               (local/workspace_disk.h)
//
// Trust. Whoever can write the state dir decides what deepbox kills, removes
// and connects to, so (Store::Init) the state dir and each of the subdirs
// above are opened O_DIRECTORY|O_NOFOLLOW and fstat'ed: owned by the effective
// uid and not writable by group or others (deepbox makes them 0700), and each
// directory above the state dir may be changed only by root or that uid (or is
// sticky, like /tmp), so none can be renamed away and replaced later. Each
// sandboxes/<id> and its meta.json are checked the same way before a record is
// read. Independently, a record is never believed about what to act on:
//   - the daemon socket is Paths(id).socket (`socket` in meta.json is
//     informational);
//   - a cgroup is touched only if it is <a cgroup hierarchy>/.../deepbox/<id>
//     for the record's own id, on cgroupfs and ours (local/cgroups.h);
//   - the sandbox's init is signalled only if that pid (and start time) lives
//     in such a cgroup; the supervisor only if it is `deepbox __supervise` for
//     that id, running as our uid (IsSupervisorOf);
//   - a net slot's nft table and veth are deleted only if net/slot-<n> names
//     the sandbox.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/remove_tree.h"
#include "common/time.h"
#include "local/lifecycle/sandbox_image.h"
#include "local/lifecycle/sandbox_limits.h"
#include "local/lifecycle/selector.h"

namespace deepbox::local::lifecycle {

namespace fs = std::filesystem;

// The label a pool puts on its warm sandboxes (removed when claimed).
inline constexpr const char* kPoolLabel = "deepbox.dev/pool";

// $DEEPBOX_STATE_DIR, else /run/deepbox as root, else $XDG_RUNTIME_DIR/deepbox.
Result<fs::path> DefaultStateDir();

// A process identified by pid AND start time (so a reused pid is not mistaken).
struct ProcessRef {
  pid_t pid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22 (clock ticks since boot)
  bool valid() const { return pid > 0; }
};
Result<uint64_t> ProcessStartTime(pid_t pid);
Result<ProcessRef> SelfRef();
// True if that very process still exists (zombies count as gone).
bool ProcessAlive(const ProcessRef& ref);
// True if that very process is alive and is the supervisor of sandbox `id`:
// `deepbox __supervise` (supervisor.h) whose --request names `id`, running as
// this process's effective uid. What a record names as its supervisor is
// signalled (and its sandbox counted alive) only if this holds.
bool IsSupervisorOf(const ProcessRef& ref, std::string_view id);

// Beside meta.json: the egress log (egress_log.h) and the secrets' values.
inline constexpr const char* kEgressLogFile = "network.jsonl";
inline constexpr const char* kSecretsFile = "secrets.json";

// Writes `data` to a 0600 temp file beside `path`, then renames it over `path`.
Status WriteFileAtomic(const fs::path& path, std::string_view data);

struct SandboxMeta {
  std::string id;
  Labels labels;
  int64_t created_at_ms = 0;
  std::optional<int64_t> expires_at_ms;  // nullopt: no TTL
  std::string state = "claimed";         // "warm" | "claimed"
  std::string pool;                      // the pool that made it ("" = created cold)
  std::string network_requested;         // "" (host default) | "none" | "public"
  std::string network;                   // effective: "none" | "public"
  std::string network_note;              // why public fell back to none
  // Whether `network` may change while the sandbox runs (`deepbox sandbox
  // network`): it has an egress proxy and no uplink (created with allow=).
  // The CLI writes a new `network` and signals the supervisor (SIGHUP), which
  // applies it and then sets network_applied to it.
  bool network_live = false;
  std::string network_applied;
  // Names and hosts of the sandbox's secrets (sandbox/secrets.h; the values
  // are in secrets.json beside this record, 0600, for a supervisor that
  // adopts the sandbox).
  std::vector<std::pair<std::string, std::vector<std::string>>> secrets;
  std::optional<uint32_t> net_slot;  // public mode
  std::string rootfs;                // "" = host system dirs
  SandboxImage image;                // --image (sandbox_image.h); empty = none
  SandboxLimits limits;              // as requested (a claim must match them exactly)
  std::string limits_note;           // requested limits this host did not enforce
  bool ready = false;                // the daemon answered its health check
  // Daemon restarts by the supervisor (supervisor.h); broken: why it stopped
  // restarting it (the sandbox and its files stay until its TTL or rm).
  int restarts = 0;
  std::string broken;
  ProcessRef supervisor;
  ProcessRef init;                   // the sandbox's init (deepbox-sandboxd), host pid
  std::vector<std::string> cgroups;  // host cgroup dirs of the sandbox
  std::string socket;  // host path of the daemon's socket (informational: Paths(id).socket is used)
  json::object timings;  // setup steps in microseconds
  std::optional<int64_t> claimed_at_ms;
  // Operating mode (issue 22): what pause, suspend or resume asked for
  // (requested_mode) and what the supervisor has made of it (mode):
  // "running"; "paused" (its processes frozen: memory kept, no CPU);
  // "suspended" (no process left: memory and CPU freed, files kept).
  std::string requested_mode = "running";
  std::string mode = "running";
  std::optional<int64_t> mode_since_ms;  // when `mode` was reached (not running)
  // Why the supervisor could not reach requested_mode (it then set
  // requested_mode back to mode); "" once a request succeeds.
  std::string mode_error;
  int64_t idle_suspend_seconds = 0;  // suspend after this long unused (0 = never)
  // Set while a snapshot or fork copies the files of this (paused) sandbox:
  // a use waits for it instead of resuming the sandbox mid-copy. The copying
  // process (a hold whose process is gone is void).
  ProcessRef hold;
  std::string name;  // ClaimOptions::name: names/NAME links to the id ("" = none)

  json::object ToJson() const;
  static Result<SandboxMeta> FromJson(const json::object& o);
  bool expired(int64_t now_ms) const { return expires_at_ms && now_ms >= *expires_at_ms; }
};

// Whether `mode` is one of the operating modes above.
bool ValidMode(std::string_view mode);

struct Tombstone {
  std::string id;
  std::string reason;  // "expired" | "daemon-exited" | "supervisor-died" | "state-removed"
  std::string detail;
  int64_t at_ms = 0;
};

// Paths of one sandbox.
struct SandboxPaths {
  fs::path dir, meta, lock, warm, claimed, log, runtime, workspace, socket;
};

class Store {
 public:
  explicit Store(fs::path root) : root_(std::move(root)) {}
  // Creates the directory tree (0700) and checks it (see "Trust" above):
  // PERMISSION_DENIED, naming the directory, its owner and mode and what to
  // do, if any part of it is not deepbox's alone. Call it before anything else.
  Status Init() const;

  const fs::path& root() const { return root_; }
  fs::path sandboxes_dir() const { return root_ / "sandboxes"; }
  fs::path disk_templates_dir() const { return root_ / "disk-templates"; }
  SandboxPaths Paths(const std::string& id) const;

  static std::string NewId();
  static bool ValidId(std::string_view id);
  // A sandbox name: [A-Za-z0-9][A-Za-z0-9_.-]{0,62}, and not an id.
  static bool ValidName(std::string_view name);
  // names/NAME: a symlink whose target is the named sandbox's id.
  fs::path names_dir() const { return root_ / "names"; }
  // The id that `name` names, if its sandbox exists and carries that name.
  std::optional<std::string> IdOfName(const std::string& name) const;
  // Removes names/NAME if it names `id` (a deleted sandbox's name is free).
  void ReleaseName(const std::string& name, const std::string& id) const;

  // NOT_FOUND if there is no record, PERMISSION_DENIED if its dir or file is
  // not ours alone (a symlink, another owner, group/world-writable), an error
  // too if the record names another id.
  Result<SandboxMeta> Read(const std::string& id) const;
  // Atomic replace of meta.json (the sandbox dir must exist).
  Status Write(const SandboxMeta& meta) const;
  // Read-modify-write under the sandbox's lock.
  Result<SandboxMeta> Update(const std::string& id,
                             const std::function<Status(SandboxMeta&)>& change) const;
  // Ids of the sandbox dirs present (with or without meta.json).
  Result<std::vector<std::string>> Ids() const;

  Status WriteTombstone(const Tombstone& t) const;
  std::optional<Tombstone> ReadTombstone(const std::string& id) const;
  void PruneTombstones(std::chrono::seconds max_age) const;

  // Public-network slots: O_EXCL files, so two sandboxes never share one.
  Result<uint32_t> ReserveNetSlot(const std::string& id) const;
  void ReleaseNetSlot(uint32_t slot) const;
  // The id a slot's reservation names ("" if none, or not a file of ours).
  std::string NetSlotOwner(uint32_t slot) const;

  fs::path pool_dir(const std::string& pool) const { return root_ / "pools" / pool; }
  fs::path snapshots_dir() const { return root_ / "snapshots"; }
  // Wakes a pool daemon (it watches its dir with inotify).
  void NotifyPool(const std::string& pool) const;

  // Removes a sandbox whose supervisor is gone: kills whatever is left of it
  // (its cgroups, its init), removes its network, cgroup and state dirs. The
  // dir is first renamed into trash/, so concurrent reapers never collide.
  // Returns false if somebody else got there first. What the record (`meta`,
  // else the one on disk) names is checked first (see "Trust" above): a
  // record of another id is ignored, cgroups that are not this sandbox's are
  // refused (an error after the dir is removed), anything else is skipped.
  Result<bool> Reap(const std::string& id, const std::optional<SandboxMeta>& meta) const;

 private:
  fs::path root_;
};

// RemoveTree: common/remove_tree.h.

// Kills every process in the given cgroup dirs of sandbox `id` (cgroup.kill,
// freezer or a SIGKILL loop) and removes the dirs. A dir that is not one of
// that sandbox's (local::CheckSandboxCgroupDir) is refused and left alone;
// missing ones are skipped. Best effort; the first error is returned.
Status KillAndRemoveCgroups(const std::string& id, const std::vector<std::string>& dirs);
// Removes what a public-network sandbox on veth slot `slot` leaves on the
// host (its nft table and host-side link), if anything; idempotent.
void RemoveSlotNetwork(uint32_t slot);

}  // namespace deepbox::local::lifecycle
