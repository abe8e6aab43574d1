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
//      sandbox's init dying (deletes, leaves a tombstone saying why).
// Deleting kills every process of the sandbox, lets the launcher remove its
// cgroups, network and runtime dirs, and removes the workspace and the state dir.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "common/error.h"
#include "local/lifecycle/selector.h"
#include "local/lifecycle/state.h"

namespace deepbox::local::lifecycle {

struct SupervisorRequest {
  std::string state_dir;
  std::string id;
  Labels labels;
  int64_t ttl_seconds = 0;      // 0 = no expiry
  std::string network;          // "" (host default) | "none" | "public"
  std::string rootfs;           // "" = host system dirs
  std::string pool;             // non-empty: a warm sandbox of that pool
  std::string sandboxd_binary;  // absolute path
  SandboxLimits limits;         // nullopt fields: no limit
  int64_t requested_at_ns = 0;  // CLOCK_MONOTONIC at the creator (spawn timing)

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
