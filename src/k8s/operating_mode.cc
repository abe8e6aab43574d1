#include "k8s/operating_mode.h"

#include <fmt/format.h>

#include "k8s/util.h"

namespace deepbox::k8s {

namespace {

// "/a/b/" -> "/a/b"; "" stays "" (no mount path at all).
std::string_view TrimSlashes(std::string_view p) {
  while (p.size() > 1 && p.back() == '/') p.remove_suffix(1);
  return p;
}

// Whether mount path `mount` covers `path` (is it, or a directory above it).
bool Covers(std::string_view mount, std::string_view path) {
  mount = TrimSlashes(mount);
  if (mount.empty() || mount.front() != '/') return false;
  if (mount == "/") return true;
  return path == mount || (path.starts_with(mount) && path[mount.size()] == '/');
}

}  // namespace

std::optional<Condition> FindCondition(const json::object& object, std::string_view type) {
  const json::value* conds = Find(object, {"status", "conditions"});
  if (conds == nullptr || !conds->is_array()) return std::nullopt;
  for (const auto& c : conds->get_array()) {
    if (!c.is_object() || FindString(c, {"type"}) != type) continue;
    Condition out;
    out.status = FindString(c, {"status"});
    out.reason = FindString(c, {"reason"});
    out.message = FindString(c, {"message"});
    if (const auto* g = Find(c, {"observedGeneration"}); g != nullptr && g->is_int64()) {
      out.observed_generation = g->as_int64();
    }
    return out;
  }
  return std::nullopt;
}

std::string OperatingMode(const json::object& sandbox) {
  std::string mode = FindString(sandbox, {"spec", "operatingMode"});
  return mode.empty() ? std::string(kOperatingModeRunning) : mode;
}

bool ConditionCurrent(const json::object& object, const Condition& c) {
  const json::value* g = Find(object, {"metadata", "generation"});
  if (c.observed_generation < 0 || g == nullptr || !g->is_int64()) return true;
  return c.observed_generation >= g->as_int64();
}

bool SuspendSettled(const json::object& sandbox) {
  if (OperatingMode(sandbox) != kOperatingModeSuspended) return false;
  auto c = FindCondition(sandbox, kConditionSuspended);
  return c && c->status == "True" && c->reason == kReasonPodTerminated &&
         ConditionCurrent(sandbox, *c);
}

bool RunningAndReady(const json::object& sandbox) {
  if (OperatingMode(sandbox) != kOperatingModeRunning) return false;
  auto c = FindCondition(sandbox, kConditionReady);
  return c && c->status == "True" && ConditionCurrent(sandbox, *c);
}

bool ReadySaysSuspended(const json::object& object) {
  auto c = FindCondition(object, kConditionReady);
  return c && c->status != "True" && c->reason == kReasonSandboxSuspended;
}

std::string VolumeClaimName(std::string_view template_name, std::string_view sandbox_name) {
  return fmt::format("{}-{}", template_name, sandbox_name);
}

WorkspaceBacking DescribeWorkspace(const json::object& blueprint, std::string_view path) {
  WorkspaceBacking out;
  const json::value* containers = Find(blueprint, {"spec", "podTemplate", "spec", "containers"});
  if (containers != nullptr && containers->is_array()) {
    for (const auto& c : containers->get_array()) {
      const json::value* mounts = Find(c, {"volumeMounts"});
      if (mounts == nullptr || !mounts->is_array()) continue;
      size_t best = 0;
      for (const auto& m : mounts->get_array()) {
        std::string mount_path = FindString(m, {"mountPath"});
        std::string name = FindString(m, {"name"});
        size_t len = TrimSlashes(mount_path).size();
        if (!name.empty() && Covers(mount_path, path) && len > best) {
          best = len;
          out.volume = name;
        }
      }
      if (!out.volume.empty()) break;
    }
  }
  if (out.volume.empty()) {
    out.description = "not a volume (it is in the container's own filesystem)";
    return out;
  }
  // A volumeClaimTemplates entry replaces a pod volume of the same name
  // (upstream's MergeVolumeClaimVolumes).
  if (const auto* vcts = Find(blueprint, {"spec", "volumeClaimTemplates"});
      vcts != nullptr && vcts->is_array()) {
    for (const auto& t : vcts->get_array()) {
      if (FindString(t, {"metadata", "name"}) == out.volume) {
        out.survives_suspend = true;
        out.description = "a PersistentVolumeClaim from volumeClaimTemplates";
        return out;
      }
    }
  }
  const json::value* volumes = Find(blueprint, {"spec", "podTemplate", "spec", "volumes"});
  if (volumes != nullptr && volumes->is_array()) {
    for (const auto& v : volumes->get_array()) {
      if (!v.is_object() || FindString(v, {"name"}) != out.volume) continue;
      for (const auto& kv : v.get_object()) {
        std::string_view kind = kv.key();
        if (kind == "name") continue;
        if (kind == "persistentVolumeClaim") {
          out.survives_suspend = true;
          std::string claim = FindString(kv.value(), {"claimName"});
          out.description = IsObjectName(claim) ? fmt::format("the PersistentVolumeClaim {}", claim)
                                                : "a PersistentVolumeClaim";
        } else if (kind == "emptyDir") {
          out.description = "an emptyDir";
        } else if (kind == "ephemeral") {
          out.description = "a generic ephemeral volume (its claim goes with the pod)";
        } else {
          // The key is the server's: shown only when it is a plain field name.
          bool plain = !kind.empty() && kind.size() <= 64 &&
                       kind.find_first_not_of(
                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                           "0123456789") == std::string_view::npos;
          out.description = plain ? fmt::format("a {} volume", kind) : "a volume of another kind";
        }
        return out;
      }
    }
  }
  out.description = "a volume the pod template does not define";
  return out;
}

}  // namespace deepbox::k8s
