#include "local/lifecycle/sandbox_limits.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <vector>

#include "common/parse_number.h"

namespace deepbox::local::lifecycle {
namespace {

constexpr uint64_t kKiB = 1ULL << 10;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool MeansUnlimited(std::string_view text) {
  std::string t = Lower(text);
  return t == "0" || t == "none" || t == "unlimited";
}

Error BadSize(std::string_view what, std::string_view text) {
  return Error(ErrorCode::kInvalidArgument,
               fmt::format("{} '{}': expected a size such as 512M, 2G or 1073741824 (bytes; "
                           "units k, m, g, t are powers of 1024)",
                           what, text));
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

Result<uint64_t> ParseByteSize(std::string_view text, std::string_view what) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  std::string_view number = text.substr(0, i);
  std::string unit = Lower(text.substr(i));
  int shift = -1;
  static constexpr std::array<std::pair<std::string_view, int>, 17> kUnits = {{
      {"", 0},
      {"b", 0},
      {"k", 10},
      {"kb", 10},
      {"kib", 10},
      {"m", 20},
      {"mb", 20},
      {"mib", 20},
      {"g", 30},
      {"gb", 30},
      {"gib", 30},
      {"t", 40},
      {"tb", 40},
      {"tib", 40},
      {"p", 50},
      {"pb", 50},
      {"pib", 50},
  }};
  for (const auto& [name, s] : kUnits) {
    if (unit == name) shift = s;
  }
  if (number.empty() || shift < 0) return tl::unexpected(BadSize(what, text));
  if (number.find('.') == std::string_view::npos) {
    auto n = ParseU64(number);
    if (!n || (shift > 0 && *n > (std::numeric_limits<uint64_t>::max() >> shift))) {
      return tl::unexpected(BadSize(what, text));
    }
    return *n << shift;
  }
  // A fraction ("1.5G"): whole bytes, rounded down, as docker does.
  auto d = ParseDouble(number);
  if (!d || *d < 0) return tl::unexpected(BadSize(what, text));
  double bytes = std::ldexp(*d, shift);
  if (!std::isfinite(bytes) || bytes >= 9.2e18) return tl::unexpected(BadSize(what, text));
  return static_cast<uint64_t>(bytes);
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr std::array<std::string_view, 5> kNames = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t u = 0;
  uint64_t unit = 1;
  while (u + 1 < kNames.size() && bytes >= unit * kKiB) {
    unit *= kKiB;
    ++u;
  }
  if (bytes % unit == 0) return fmt::format("{} {}", bytes / unit, kNames[u]);
  std::string n = fmt::format("{:.2f}", static_cast<double>(bytes) / static_cast<double>(unit));
  while (n.back() == '0') n.pop_back();
  if (n.back() == '.') n.pop_back();
  return fmt::format("{} {}", n, kNames[u]);
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
