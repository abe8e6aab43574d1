#include "local/rlimits.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace deepbox::local {
namespace {
void Add(RlimitPlan* plan, int resource, rlim_t want) {
  struct rlimit cur;
  if (getrlimit(resource, &cur) == 0 && cur.rlim_max != RLIM_INFINITY) {
    want = std::min(want, cur.rlim_max);
  }
  plan->entries[plan->count++] = {resource, {want, want}};
}
}  // namespace

RlimitPlan PlanRlimits(const Limits& limits) {
  RlimitPlan plan;
  Add(&plan, RLIMIT_CORE, 0);
  if (limits.address_space_bytes) Add(&plan, RLIMIT_AS, *limits.address_space_bytes);
  if (limits.cpu_time_seconds) Add(&plan, RLIMIT_CPU, *limits.cpu_time_seconds);
  if (limits.file_size_bytes) Add(&plan, RLIMIT_FSIZE, *limits.file_size_bytes);
  if (limits.open_files) Add(&plan, RLIMIT_NOFILE, *limits.open_files);
  if (limits.max_processes) Add(&plan, RLIMIT_NPROC, *limits.max_processes);
  return plan;
}

int ApplyRlimitsRaw(const RlimitPlan& plan, int* failed_resource) {
  for (size_t i = 0; i < plan.count; ++i) {
    const auto& e = plan.entries[i];
    if (syscall(SYS_prlimit64, 0, e.resource, &e.value, nullptr) != 0) {
      *failed_resource = e.resource;
      return errno;
    }
  }
  return 0;
}

}  // namespace deepbox::local
