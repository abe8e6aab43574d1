// Namespaces for a sandbox: clone3 into new user, PID, mount, IPC, UTS, net and
// cgroup namespaces, and the uid/gid maps of the new user namespace.
//
// Id mapping policy (one id mapped, nothing else):
//   sandbox uid/gid 1000  ->  host id H.
// * Launcher runs as root: H defaults to kDefaultRootHostId (1001000), an id no
//   host account or /etc/subuid block normally uses, so that a process that
//   escaped the mount namespace owns nothing on the host, and files the sandbox
//   writes into its workspace belong to an unprivileged host id. Configurable.
//   Host root (uid 0) is NOT mapped: inside, root-owned files show as nobody.
//   A sandbox on an image (image_root.h) also maps its root, 0 -> host
//   kImageRootHostId, the owner of root's extracted image layers
//   (oci/image_store.h): the image's files then appear owned by root, and
//   overlayfs can copy them up (it gives a copy the owner of the original,
//   which must be mapped). No sandbox process ever runs as uid 0: the
//   sandbox starts as 1000 and drops every capability before exec.
// * Launcher runs unprivileged: H is the caller's own uid/gid (the only id an
//   unprivileged process may map); setgroups must then be denied, so the
//   caller's supplementary groups remain (they are the caller's own anyway).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "common/error.h"
#include "common/unique_fd.h"

namespace deepbox::local {

inline constexpr uint32_t kSandboxId = 1000;
inline constexpr uint32_t kDefaultRootHostId = 1001000;
inline constexpr uint32_t kImageRootHostId = 1000000;  // = oci::kRootCacheLayerOwner

struct NamespaceOptions {
  bool user = true;
  bool pid = true;
  bool mount = true;
  bool ipc = true;
  bool uts = true;
  bool net = true;
  bool cgroup = true;
};
uint64_t CloneFlags(const NamespaceOptions& options);

struct IdMapPlan {
  uint32_t sandbox_uid = kSandboxId;
  uint32_t sandbox_gid = kSandboxId;
  uint32_t host_uid = 0;
  uint32_t host_gid = 0;
  bool deny_setgroups = false;  // true when unprivileged (required by the kernel)
  bool clear_groups = true;     // the child calls setgroups(0, NULL)
  std::string uid_map;          // "1000 1001000 1\n"
  std::string gid_map;
};
// host_id: the host uid/gid to map to when running as root (nullopt = default).
// map_image_root: also map 0 -> kImageRootHostId (as root only, see above).
IdMapPlan PlanIdMap(std::optional<uint32_t> host_id = std::nullopt, bool map_image_root = false);

// Parent side: writes setgroups (if denied), gid_map and uid_map of `pid`.
Status WriteIdMaps(pid_t pid, const IdMapPlan& plan);

struct CloneResult {
  pid_t pid = -1;  // 0 in the child
  UniqueFd pidfd;  // parent only
};
// fork()-like: the child continues on a copy of the stack with pid 0 returned.
// The child may then run ONLY async-signal-safe code. `cgroup_fd` >= 0 adds
// CLONE_INTO_CGROUP (cgroup v2). Falls back to clone() when clone3 is missing.
Result<CloneResult> CloneWithFlags(uint64_t flags, int cgroup_fd = -1);

// Async-signal-safe: returns 0 or errno.
int SetHostnameRaw(const char* name);

// True if this kernel lets this process create a user namespace (probes with a child).
bool UserNamespacesAvailable();

}  // namespace deepbox::local
