// The supervisor: the owner of one local sandbox's lifetime.
//
// The creator (CLI, agent, pool daemon) starts it with StartSupervisor(): the
// `deepbox` binary is re-executed as the hidden command `deepbox __supervise`
// in a new session, and forks once more, so it is nobody's child and
// survives its creator being killed (even with SIGKILL). The supervisor:
//   1. writes meta.json (its own pid + start time first, so a lister can
//      always tell a live sandbox from an orphaned one),
//   2. calls local::Launch with deepbox-sandboxd as init,
//   3. waits until the daemon answers GET /deepbox/v1/health,
//   4. reports readiness (or the error) to the creator over a pipe,
//   5. then waits for: the TTL (expires_at; deletes), SIGHUP (re-reads
//      meta.json: a claim changed labels/TTL), SIGTERM/SIGINT (deletes), the
//      removal of its state dir or of its record in it (deletes: nothing
//      could list, reach or delete the sandbox any more; checked every 2 s),
//      and the sandbox's init dying (restarts it, see below).
// Deleting kills every process of the sandbox, lets the launcher remove its
// cgroups, network and runtime dirs, and removes the workspace and the state dir.
// Only the TTL, a delete (rm, a lease's release) or the removal of the state
// dir delete the files in /workspace.
//
// A suspended sandbox outlives its supervisor: its processes are gone
// already, so when the supervisor dies (SIGKILL, the OOM killer, a host
// restart with a state dir on disk) the sandbox stays, suspended, with its
// files; the next resume starts a new supervisor that adopts it
// (SupervisorRequest::adopt). Its TTL still counts: a lister deletes it once
// expired. Any other sandbox whose supervisor died is cleaned up.
//
// The daemon is the PID 1 of the sandbox's PID namespace: when it dies, every
// process of the sandbox dies with it, and its namespaces go. A restart is
// therefore a relaunch of the whole sandbox over the same /workspace (the
// plain dir, or the disk image, which stays mounted on the host meanwhile:
// SandboxProcess::TakeWorkspaceDisk), with the same id, socket path, network
// (mode, allowlist and veth slot) and limits; its record shows `ready: false`
// while it restarts, then a new init and `restarts` + 1; each restart is a
// line in supervisor.log. A request in flight loses its connection (the
// client says the daemon restarted, see SandboxdClientOptions). After
// kMaxDaemonRestarts restarts within kDaemonRestartWindow the next death is
// not restarted: the sandbox stays, broken (`broken` in its record says why),
// with no process left and its files kept, until its TTL or rm. An unclaimed
// warm sandbox whose daemon dies is deleted instead (it holds nobody's files).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "common/error.h"
#include "local/lifecycle/sandbox_image.h"
#include "local/lifecycle/selector.h"
#include "local/lifecycle/state.h"
#include "sandbox/secrets.h"

namespace deepbox::local::lifecycle {

inline constexpr int kMaxDaemonRestarts = 5;
inline constexpr std::chrono::seconds kDaemonRestartWindow{60};
// The lifetime of a warm sandbox nobody claims (its pool replaces it); a
// claim gives it the claimer's TTL instead.
inline constexpr std::chrono::minutes kWarmLifetime{30};

struct SupervisorRequest {
  std::string state_dir;
  std::string id;
  Labels labels;
  int64_t ttl_seconds = 0;           // 0 = no expiry
  int64_t idle_suspend_seconds = 0;  // suspend after this long unused (0 = never)
  std::string network;               // "" (host default) | "none" | "public"
  std::string rootfs;                // "" = host system dirs
  SandboxImage image;                // --image, pinned by the creator (sandbox_image.h)
  std::string pool;                  // non-empty: a warm sandbox of that pool
  std::string sandboxd_binary;       // absolute path
  SandboxLimits limits;              // nullopt fields: no limit
  int64_t requested_at_ns = 0;       // CLOCK_MONOTONIC at the creator (spawn timing)
  // Take over sandbox `id`, suspended, whose supervisor died (killed, or the
  // host restarted): its record, state dir and /workspace (the disk image
  // as the dead supervisor left it mounted, or mounted again) are kept as
  // they are, and it runs again once its record asks for it (a resume).
  // Only state_dir, id and sandboxd_binary are read from the request; the
  // rest comes from the record.
  bool adopt = false;
  // A new sandbox's /workspace disk: this image (a fork's clone of another
  // sandbox's, WorkspaceDisk::CloneImage, in the state dir's file system) is
  // moved into the sandbox's runtime dir and mounted instead of a new one.
  std::string workspace_image;
  // Secrets (sandbox/secrets.h). ToJson carries names, hosts and
  // placeholders only: the values travel over the ready socket (one line
  // after the spawn, never argv) and the supervisor keeps them in memory and
  // in <sandbox dir>/secrets.json (0600) for an adopting supervisor.
  std::vector<SecretGrant> secrets;

  json::object ToJson() const;
  static Result<SupervisorRequest> FromJson(const json::object& o);
};

// Creator side: spawns the supervisor and waits until the sandbox's daemon is
// healthy (or setup failed). Returns the sandbox's meta.json as then written.
Result<SandboxMeta> StartSupervisor(const std::string& deepbox_binary,
                                    const SupervisorRequest& request,
                                    std::chrono::milliseconds timeout);

// `deepbox __supervise --ready-fd N --request JSON`. Returns the exit code.
int SuperviseMain(int argc, char** argv);

}  // namespace deepbox::local::lifecycle
