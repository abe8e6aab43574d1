#include "local/lifecycle/sandbox_limits.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <vector>

#include "common/parse_number.h"
#include "common/strings.h"

namespace deepbox::local::lifecycle {
namespace {

bool MeansUnlimited(std::string_view text) {
  std::string t = AsciiLower(text);
  return t == "0" || t == "none" || t == "unlimited";
}

std::optional<uint64_t> JsonU64(const json::object& o, std::string_view key) {
  auto it = o.find(key);
  if (it == o.end()) return std::nullopt;
  auto v = JsonToInt64(it->value());
  if (!v || *v <= 0) return std::nullopt;
  return static_cast<uint64_t>(*v);
}

}  // namespace

SandboxLimits DefaultSandboxLimits() {
  SandboxLimits l;
  l.memory_bytes = kDefaultMemoryBytes;
  l.max_processes = kDefaultMaxProcesses;
  l.cpu_cores = kDefaultCpuCores;
  l.workspace_bytes = kDefaultWorkspaceBytes;
  return l;
}

std::string SandboxLimits::Describe() const {
  return fmt::format(
      "memory {}, processes {}, CPUs {}, /workspace disk {}",
      memory_bytes ? FormatBytes(*memory_bytes) : "unlimited",
      max_processes ? std::to_string(*max_processes) : "unlimited",
      cpu_cores ? fmt::format("{}", *cpu_cores) : "unlimited",
      workspace_bytes ? FormatBytes(*workspace_bytes) : "unlimited (the host's disk)");
}

json::object SandboxLimits::ToJson() const {
  json::object o;
  if (memory_bytes) o["memory_bytes"] = *memory_bytes;
  if (max_processes) o["max_processes"] = *max_processes;
  if (cpu_cores) o["cpu_cores"] = *cpu_cores;
  if (workspace_bytes) o["workspace_bytes"] = *workspace_bytes;
  return o;
}

SandboxLimits SandboxLimits::FromJson(const json::object& o) {
  SandboxLimits l;
  l.memory_bytes = JsonU64(o, "memory_bytes");
  l.max_processes = JsonU64(o, "max_processes");
  l.workspace_bytes = JsonU64(o, "workspace_bytes");
  if (auto it = o.find("cpu_cores"); it != o.end() && it->value().is_number()) {
    std::error_code ec;
    double v = it->value().to_number<double>(ec);
    if (!ec && std::isfinite(v) && v > 0) l.cpu_cores = v;
  }
  return l;
}

Limits SandboxLimits::ToLaunchLimits() const {
  Limits l;
  l.memory_bytes = memory_bytes;
  l.max_processes = max_processes;
  l.cpu_cores = cpu_cores;
  l.workspace_bytes = workspace_bytes;
  return l;
}

Status ValidateSandboxLimits(const SandboxLimits& l) {
  auto bad = [](std::string msg) -> Status {
    return MakeError(ErrorCode::kInvalidArgument, std::move(msg));
  };
  if (l.memory_bytes && *l.memory_bytes < kMinMemoryBytes) {
    return bad(fmt::format(
        "memory limit {} is too small: a sandbox needs at least {} (its own daemon runs in it "
        "and would be killed by the OOM killer); sizes take units, e.g. 512M or 2G",
        FormatBytes(*l.memory_bytes), FormatBytes(kMinMemoryBytes)));
  }
  if (l.max_processes && *l.max_processes < kMinMaxProcesses) {
    return bad(fmt::format(
        "process limit {} is too small: a sandbox needs at least {} (threads count, and its "
        "own daemon uses some)",
        *l.max_processes, kMinMaxProcesses));
  }
  if (l.cpu_cores && (!std::isfinite(*l.cpu_cores) || *l.cpu_cores < kMinCpuCores ||
                      *l.cpu_cores > kMaxCpuCores)) {
    return bad(fmt::format("CPU limit {} is out of range: use {} to {} cores (0 = no limit)",
                           *l.cpu_cores, kMinCpuCores, kMaxCpuCores));
  }
  if (l.workspace_bytes && *l.workspace_bytes < kMinWorkspaceBytes) {
    return bad(fmt::format("/workspace disk limit {} is too small: use at least {}",
                           FormatBytes(*l.workspace_bytes), FormatBytes(kMinWorkspaceBytes)));
  }
  return {};
}

Result<std::optional<uint64_t>> ParseMemoryLimit(std::string_view text, std::string_view what) {
  if (MeansUnlimited(text)) return std::optional<uint64_t>();
  auto n = ParseByteSize(text, what);
  if (!n) return tl::unexpected(n.error());
  SandboxLimits l;
  l.memory_bytes = *n;
  if (auto st = ValidateSandboxLimits(l); !st) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{} {}: {}", what, text, st.error().message));
  }
  return std::optional<uint64_t>(*n);
}

Result<std::optional<uint64_t>> ParseDiskLimit(std::string_view text, std::string_view what) {
  if (MeansUnlimited(text)) return std::optional<uint64_t>();
  auto n = ParseByteSize(text, what);
  if (!n) return tl::unexpected(n.error());
  SandboxLimits l;
  l.workspace_bytes = *n;
  if (auto st = ValidateSandboxLimits(l); !st) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{} {}: {}", what, text, st.error().message));
  }
  return std::optional<uint64_t>(*n);
}

Result<std::optional<uint64_t>> ParseProcessLimit(std::string_view text, std::string_view what) {
  if (MeansUnlimited(text)) return std::optional<uint64_t>();
  auto n = ParseU64(text);
  if (!n) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        fmt::format("{} '{}': expected a whole number of processes (0 = no limit)", what, text));
  }
  SandboxLimits l;
  l.max_processes = *n;
  if (auto st = ValidateSandboxLimits(l); !st) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{} {}: {}", what, text, st.error().message));
  }
  return std::optional<uint64_t>(*n);
}

Result<std::optional<double>> ParseCpuLimit(std::string_view text, std::string_view what) {
  if (MeansUnlimited(text)) return std::optional<double>();
  auto d = ParseDouble(text);
  if (!d) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{} '{}': expected a number of CPU cores such as 0.5 or 2 (0 = no "
                                 "limit)",
                                 what, text));
  }
  if (*d == 0) return std::optional<double>();
  SandboxLimits l;
  l.cpu_cores = *d;
  if (auto st = ValidateSandboxLimits(l); !st) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{} {}: {}", what, text, st.error().message));
  }
  return std::optional<double>(*d);
}

std::string UnenforcedLimitsNote(const SandboxLimits& requested, const LimitSupport& got) {
  std::vector<std::string> missing;
  auto check = [&](bool asked, const LimitEnforcement& e, std::string_view name) {
    if (!asked || e.enforced) return;
    missing.push_back(e.detail.empty() ? std::string(name)
                                       : fmt::format("{} ({})", name, e.detail));
  };
  check(requested.memory_bytes.has_value(), got.memory, "memory");
  check(requested.max_processes.has_value(), got.processes, "processes");
  check(requested.cpu_cores.has_value(), got.cpu_rate, "CPUs");
  check(requested.workspace_bytes.has_value(), got.workspace_disk, "/workspace disk");
  if (missing.empty()) return {};
  std::string list;
  for (const auto& m : missing) list += (list.empty() ? "" : "; ") + m;
  return fmt::format("limits NOT enforced on this host: {} (see `deepbox doctor`)", list);
}

}  // namespace deepbox::local::lifecycle
