// Suspending and resuming a Sandbox as agent-sandbox v1beta1 does it
// (api/v1beta1/sandbox_types.go, v1.0.x): spec.operatingMode says Running (the
// default) or Suspended. On Suspended the controller deletes the pod and
// reports Suspended=False PodTerminating while it terminates, then
// Suspended=True PodTerminated; Ready is False with reason SandboxSuspended
// all along. On Running it creates the pod again and Ready turns True
// (DependenciesReady). Suspended stays as a condition afterwards, False with
// NotSuspended. Files survive only on a PersistentVolumeClaim: one of
// spec.volumeClaimTemplates (a PVC per Sandbox, "<template>-<sandbox>", kept
// while suspended, deleted with the Sandbox) or a pod volume naming an
// existing claim; an emptyDir ends with the pod.
//
// These are the only spellings of those strings: the provider, the test
// controller and the tests use them (schema_test.cc pins them to upstream's).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"

namespace deepbox::k8s {

// spec.operatingMode: enum Running|Suspended, default Running.
inline constexpr std::string_view kOperatingModeRunning = "Running";
inline constexpr std::string_view kOperatingModeSuspended = "Suspended";

// Condition types of a Sandbox (a claim forwards Ready).
inline constexpr std::string_view kConditionReady = "Ready";
inline constexpr std::string_view kConditionSuspended = "Suspended";

// Reasons of the Suspended condition.
inline constexpr std::string_view kReasonPodTerminated = "PodTerminated";    // True: pod gone
inline constexpr std::string_view kReasonPodTerminating = "PodTerminating";  // False: not yet
// The older name of PodTerminating (deprecated upstream, still accepted).
inline constexpr std::string_view kReasonPodNotTerminated = "PodNotTerminated";
inline constexpr std::string_view kReasonNotSuspended = "NotSuspended";  // False: Running

// Reasons of the Ready condition.
inline constexpr std::string_view kReasonSandboxSuspended = "SandboxSuspended";
inline constexpr std::string_view kReasonDependenciesReady = "DependenciesReady";

// The directory whose files a suspend must keep (the template's daemon runs
// with --root-dir=/workspace).
inline constexpr std::string_view kWorkspacePath = "/workspace";

struct Condition {
  std::string status;  // "True" | "False" | "Unknown"
  std::string reason;
  std::string message;
  int64_t observed_generation = -1;  // -1: not given
};

// The condition of `type` in status.conditions; nullopt when there is none.
std::optional<Condition> FindCondition(const json::object& object, std::string_view type);

// spec.operatingMode, with "" (absent) read as Running.
std::string OperatingMode(const json::object& sandbox);

// Whether `c` describes the object's current spec: its observedGeneration is
// at least metadata.generation (either missing counts as current).
bool ConditionCurrent(const json::object& object, const Condition& c);

// A suspend has finished: mode Suspended and Suspended=True PodTerminated,
// for the current generation.
bool SuspendSettled(const json::object& sandbox);
// A resume has finished: mode Running and Ready=True, for the current generation.
bool RunningAndReady(const json::object& sandbox);
// Whether the Ready condition of a Sandbox, or of a claim (which forwards
// its Sandbox's), says it is suspended (reason SandboxSuspended).
bool ReadySaysSuspended(const json::object& object);

// The PersistentVolumeClaim upstream makes for volumeClaimTemplates entry
// `template_name` of Sandbox `sandbox_name`.
std::string VolumeClaimName(std::string_view template_name, std::string_view sandbox_name);

// What holds `path` in the pods of a Sandbox or a SandboxTemplate (both keep
// spec.podTemplate.spec and spec.volumeClaimTemplates): the volume mounted
// there, or at the closest directory above it, in the first container that
// mounts one.
struct WorkspaceBacking {
  bool survives_suspend = false;  // a PersistentVolumeClaim
  std::string volume;             // the volume's name; "" = nothing is mounted there
  // "an emptyDir", "a PersistentVolumeClaim from volumeClaimTemplates", ...
  std::string description;
};
WorkspaceBacking DescribeWorkspace(const json::object& blueprint,
                                   std::string_view path = kWorkspacePath);

}  // namespace deepbox::k8s
