// The resource limits a local sandbox is created with (what `sandbox create`,
// `pool serve` and `run` ask for), their safe defaults, the parsing of
// `--memory 64M`-style values, and the check of what this host really enforced.
//
// Every local sandbox records the limits it was created with (meta.json
// "limits"), and a warm sandbox is only claimed by a caller that asks for
// exactly the same limits (see provider.h for why they are not applied after
// the fact).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/byte_size.h"
#include "common/error.h"
#include "common/json.h"
#include "local/limits.h"

namespace deepbox::local::lifecycle {

// nullopt = no limit.
struct SandboxLimits {
  std::optional<uint64_t> memory_bytes;     // whole sandbox (cgroup memory, + memsw)
  std::optional<uint64_t> max_processes;    // whole sandbox, threads included (cgroup pids)
  std::optional<double> cpu_cores;          // CPU bandwidth (cgroup cfs quota)
  std::optional<uint64_t> workspace_bytes;  // /workspace disk (ext4 image on a loop device)

  bool operator==(const SandboxLimits&) const = default;

  // "memory 2 GiB, 512 processes, 2 CPUs, /workspace disk 10 GiB"; "no limits".
  std::string Describe() const;
  json::object ToJson() const;
  // Lenient: a missing or malformed field means "no limit" (old records have none).
  static SandboxLimits FromJson(const json::object& o);
  // As the launcher takes them.
  Limits ToLaunchLimits() const;
};

// The defaults of `deepbox sandbox create`, `pool serve` and `run`, and of a
// LocalSandboxProvider: generous for an agent's work, finite for a runaway one.
inline constexpr uint64_t kDefaultMemoryBytes = 2ULL << 30;      // 2 GiB
inline constexpr uint64_t kDefaultMaxProcesses = 512;            //
inline constexpr double kDefaultCpuCores = 2.0;                  //
inline constexpr uint64_t kDefaultWorkspaceBytes = 10ULL << 30;  // 10 GiB, sparse
SandboxLimits DefaultSandboxLimits();

// Below these a sandbox cannot even start its own daemon (it is killed by the
// OOM killer, or cannot create its threads), which looks like a crash.
inline constexpr uint64_t kMinMemoryBytes = 16ULL << 20;     // 16 MiB
inline constexpr uint64_t kMinMaxProcesses = 8;              // the daemon's threads count
inline constexpr double kMinCpuCores = 0.01;                 // cfs quota >= 1 ms per 100 ms
inline constexpr double kMaxCpuCores = 4096;                 //
inline constexpr uint64_t kMinWorkspaceBytes = 16ULL << 20;  // 16 MiB (ext4 metadata)

// INVALID_ARGUMENT naming the limit when one is out of range.
Status ValidateSandboxLimits(const SandboxLimits& limits);

// ParseByteSize ("64M") and FormatBytes ("2 GiB"), as they were here before
// they moved to common/.
using ::deepbox::FormatBytes;
using ::deepbox::ParseByteSize;

// The values of --memory/--disk, --max-processes and --cpus (and their config
// keys): "0", "none" or "unlimited" mean no limit (nullopt); anything else is
// parsed and range-checked.
Result<std::optional<uint64_t>> ParseMemoryLimit(std::string_view text, std::string_view what);
Result<std::optional<uint64_t>> ParseDiskLimit(std::string_view text, std::string_view what);
Result<std::optional<uint64_t>> ParseProcessLimit(std::string_view text, std::string_view what);
Result<std::optional<double>> ParseCpuLimit(std::string_view text, std::string_view what);

// The requested limits this sandbox did NOT get enforced, and why ("" = all
// of them are): "memory limit not enforced (no usable memory cgroup ...)".
std::string UnenforcedLimitsNote(const SandboxLimits& requested, const LimitSupport& got);

}  // namespace deepbox::local::lifecycle
