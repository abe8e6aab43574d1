#include "local/limits.h"

#include <fmt/format.h>

namespace deepbox::local {

std::string_view MechanismName(Mechanism m) {
  switch (m) {
    case Mechanism::kNone:
      return "none";
    case Mechanism::kCgroupV2:
      return "cgroup v2";
    case Mechanism::kCgroupV1:
      return "cgroup v1";
    case Mechanism::kRlimitPerProcess:
      return "rlimit (per process)";
    case Mechanism::kRlimitPerUserNs:
      return "rlimit (per user namespace)";
    case Mechanism::kTmpfsSize:
      return "tmpfs size";
    case Mechanism::kLoopImage:
      return "ext4 image on a loop device";
  }
  return "unknown";
}

std::string_view CgroupLayoutName(CgroupLayout layout) {
  switch (layout) {
    case CgroupLayout::kUnified:
      return "cgroup v2 (unified)";
    case CgroupLayout::kHybrid:
      return "hybrid (cgroup v1 controllers + cgroup2)";
    case CgroupLayout::kLegacy:
      return "cgroup v1 (legacy)";
    case CgroupLayout::kNone:
      return "no cgroups";
  }
  return "unknown";
}

std::string LimitSupport::Describe() const {
  std::string out = fmt::format("cgroup layout: {}\n", CgroupLayoutName(layout));
  auto line = [&](std::string_view name, const LimitEnforcement& e) {
    if (e.mechanism == Mechanism::kNone) {
      out +=
          fmt::format("{}: NOT enforced{}\n", name, e.detail.empty() ? "" : " (" + e.detail + ")");
      return;
    }
    out += fmt::format("{}: {} by {}{}\n", name, e.enforced ? "enforced" : "available, not set",
                       MechanismName(e.mechanism), e.detail.empty() ? "" : " (" + e.detail + ")");
  };
  line("memory", memory);
  line("processes", processes);
  line("cpu rate", cpu_rate);
  line("cpu time", cpu_time);
  line("file size", file_size);
  line("open files", open_files);
  line("address space", address_space);
  line("workspace disk", workspace_disk);
  line("/tmp size", tmp_size);
  line("kill all", kill_all);
  return out;
}

}  // namespace deepbox::local
