// Per-process rlimits, the fallback and complement of cgroups.
//
// Caveats (reported by LimitSupport, never hidden):
// * RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_NOFILE apply to EACH process:
//   a sandbox of N processes may use N times the limit.
// * RLIMIT_NPROC counts processes per (user namespace, uid) since Linux 5.14
//   (ucounts). Each sandbox has its own user namespace, so it bounds the
//   sandbox's process count; on older kernels it counts per host uid, shared by
//   every sandbox mapped to the same host id.
// * RLIMIT_CORE is always 0: a core dump could leak workload memory to the host.
// * Limits can only be lowered here (CAP_SYS_RESOURCE is not assumed).
#pragma once

#include <sys/resource.h>

#include <array>
#include <cstddef>

#include "local/limits.h"

namespace deepbox::local {

struct RlimitPlan {
  struct Entry {
    int resource;
    struct rlimit value;
  };
  std::array<Entry, 8> entries{};
  size_t count = 0;
};

// Lower-only: a requested value above the current hard limit is clamped to it.
RlimitPlan PlanRlimits(const Limits& limits);

// Async-signal-safe. Returns 0 or errno; *failed_resource names the resource.
int ApplyRlimitsRaw(const RlimitPlan& plan, int* failed_resource);

}  // namespace deepbox::local
