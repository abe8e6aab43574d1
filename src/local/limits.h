// Resource limits a sandbox may ask for, and the report of how this host enforces them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace deepbox::local {

// Every field is optional: unset means "no limit requested".
struct Limits {
  std::optional<uint64_t> memory_bytes;         // whole sandbox (cgroup)
  std::optional<uint64_t> max_processes;        // whole sandbox (cgroup pids, or RLIMIT_NPROC)
  std::optional<double> cpu_cores;              // CPU bandwidth, e.g. 0.5 = half a core (cgroup)
  std::optional<uint64_t> cpu_time_seconds;     // per process (RLIMIT_CPU)
  std::optional<uint64_t> file_size_bytes;      // per file written (RLIMIT_FSIZE)
  std::optional<uint64_t> open_files;           // per process (RLIMIT_NOFILE)
  std::optional<uint64_t> address_space_bytes;  // per process (RLIMIT_AS)
  std::optional<uint64_t> workspace_bytes;      // disk space of /workspace (loop image)
  std::optional<uint64_t> tmp_bytes;            // size of the private /tmp tmpfs
};

// How one limit is enforced. `enforced` is true only when the kernel really enforces it.
enum class Mechanism {
  kNone,
  kCgroupV2,
  kCgroupV1,
  kRlimitPerProcess,  // an rlimit: applies to each process, not the sandbox as a whole
  kRlimitPerUserNs,   // RLIMIT_NPROC: counted per (user namespace, uid), i.e. per sandbox
  kTmpfsSize,
  kLoopImage,
};
std::string_view MechanismName(Mechanism m);

struct LimitEnforcement {
  bool enforced = false;
  Mechanism mechanism = Mechanism::kNone;
  std::string detail;  // e.g. "memory.limit_in_bytes + memory.memsw.limit_in_bytes"
};

enum class CgroupLayout { kUnified, kHybrid, kLegacy, kNone };
std::string_view CgroupLayoutName(CgroupLayout layout);

// What this host can enforce (for `deepbox doctor`) or what one sandbox got.
struct LimitSupport {
  CgroupLayout layout = CgroupLayout::kNone;
  LimitEnforcement memory;
  LimitEnforcement processes;
  LimitEnforcement cpu_rate;
  LimitEnforcement cpu_time;
  LimitEnforcement file_size;
  LimitEnforcement open_files;
  LimitEnforcement address_space;
  LimitEnforcement workspace_disk;
  LimitEnforcement tmp_size;
  LimitEnforcement kill_all;  // how every process of a sandbox is killed
  // Multi-line, one limit per line: "memory: enforced by cgroup v1 (memory.limit_in_bytes)".
  std::string Describe() const;
};

}  // namespace deepbox::local
