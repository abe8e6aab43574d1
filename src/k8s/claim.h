// Claiming a sandbox from a SandboxWarmPool the way the upstream Python SDK
// does (reference §5): a SandboxClaim named sandbox-claim-<8 hex>, the
// caller's labels plus agents.x-k8s.io/created-by, the request time in the
// agents.x-k8s.io/client-first-requested-at annotation, spec.warmPoolRef
// (v1beta1) or spec.sandboxTemplateRef + spec.warmpool (v1alpha1), an optional
// lifecycle (shutdownTime = now + TTL, shutdownPolicy Delete) and pod
// metadata. Then ONE watch on the claim until status.sandbox.name is set and
// Ready=True, bounded by the ready timeout; terminal reasons fail at once; the
// claim is deleted on every failure. Next to that watch, one on the
// namespace's Events about the claim's name (the cold Sandbox has it too): a
// failure Event ends the wait at once with the controller's message
// (best effort: without RBAC for Events the claim's conditions still do).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/unique_fd.h"
#include "k8s/sandbox_api.h"
#include "k8s/util.h"

namespace deepbox::k8s {

inline constexpr std::string_view kCreatedByLabel = "agents.x-k8s.io/created-by";
inline constexpr std::string_view kRequestTimeAnnotation =
    "agents.x-k8s.io/client-first-requested-at";
inline constexpr std::string_view kClaimNamePrefix = "sandbox-claim-";

// Ready=False reasons the controller will not recover from: the SDK's, plus
// the Sandbox reasons a claim forwards that agent-sandbox v1.x made final
// (InvalidConfiguration: the API server refused the pod or Service for good;
// PodFailed/PodSucceeded: the pod has ended and is not restarted).
bool IsTerminalClaimReason(std::string_view reason);
// Warning Events on a claim or its Sandbox that end the wait for readiness at
// once (agent-sandbox v1.0.4+: SandboxPodCreateFailed, PodFailed).
bool IsFailureEventReason(std::string_view reason);

// Milestones of one claim, for an observer (benchmarks, diagnostics). Called
// on the thread that claims, as each happens.
enum class ClaimStep {
  kCreated,    // the API server answered the create
  kReady,      // the watch delivered the claim's Ready event
  kConnected,  // the lease is ready: its daemon answered (K8sSandboxProvider::Claim; at
               // once with check_daemon = false)
};
using ClaimObserver = std::function<void(ClaimStep step, const std::string& claim_name)>;

struct ClaimRequest {
  std::string warm_pool;  // SandboxWarmPool name (required)
  // The claim's name; "" = sandbox-claim-<8 hex>. (The provider chooses it
  // first: the name is part of the claim's daemon token, claim_token.h.)
  std::string name;
  // `name` is one the user chose (ClaimOptions::name), not a random one: if
  // it is taken, that claim is somebody's sandbox and is never removed.
  bool users_name = false;
  std::string namespace_name = "default";
  std::map<std::string, std::string> labels;           // on the claim
  std::map<std::string, std::string> pod_labels;       // spec.additionalPodMetadata
  std::map<std::string, std::string> pod_annotations;  // spec.additionalPodMetadata
  std::chrono::seconds shutdown_after{0};              // 0 = no lifecycle
  std::chrono::milliseconds ready_timeout{180000};
  // The SDKs identify themselves ("python-client", "go-client"); the
  // controller counts other values as "unknown" in its metrics.
  std::string created_by = "deepbox";
  ClaimObserver observer;  // optional
};

struct ClaimedSandbox {
  std::string namespace_name;
  std::string claim_name;
  std::string sandbox_name;  // differs from the claim name after warm adoption
  std::vector<std::string> pod_ips;
  std::string pod_ip;                      // IPv4 preferred; "" if unknown
  std::string warm_pool;                   // the SandboxWarmPool it was claimed from
  std::string api_version;                 // of the claim
  std::string requested_at;                // the annotation's value
  std::chrono::milliseconds wait_time{0};  // create -> Ready
  // Sent in X-Sandboxd-Token to the claim's daemon (claim_token.h); "" = none.
  std::string daemon_token;
};

// The claim object (pure; for tests). `v1alpha1_template` is the pool's
// template, used only when api_version ends in v1alpha1.
json::object BuildClaimObject(const ClaimRequest& request, const std::string& name,
                              const std::string& api_version, const std::string& v1alpha1_template,
                              SystemTime now);

class Claimer {
 public:
  explicit Claimer(SandboxApi& api) : api_(api) {}

  Result<ClaimedSandbox> Claim(const ClaimRequest& request);
  // Deletes the claim; an already deleted claim counts as success.
  Status Release(std::string_view ns, std::string_view claim_name);
  // Deletes only the claims in `ns` matching the (non-empty) label selector;
  // returns their names.
  Result<std::vector<std::string>> DeleteBySelector(std::string_view ns,
                                                    std::string_view label_selector);

  // For tests: a fixed clock for the timestamps.
  void set_clock(std::function<SystemTime()> clock) { clock_ = std::move(clock); }

 private:
  // `created`: the claim as the create answered it (version, uid, time).
  Result<ClaimedSandbox> Wait(const ClaimRequest& request, const std::string& name,
                              const json::object& created);
  SandboxApi& api_;
  std::function<SystemTime()> clock_;
};

// Watches one claim for as long as a sandbox is in use (issue 12 item 5): a
// claim deleted from outside (kubectl delete, another deepbox, its TTL) is
// reported at once rather than when the daemon stops answering. on_gone is
// called at most once, from the watch thread, when the claim is deleted,
// marked for deletion, or reports Ready=False with an expiry reason.
class ClaimWatch {
 public:
  using OnGone = std::function<void(const Error&)>;
  // Reads the claim first (a claim already gone is reported before Start
  // returns, through on_gone), then watches from its resourceVersion.
  static Result<std::unique_ptr<ClaimWatch>> Start(SandboxApi& api, std::string ns,
                                                   std::string name, OnGone on_gone);
  ~ClaimWatch();  // Stop()
  // Ends the watch and joins its thread; on_gone is not called afterwards.
  void Stop();
  // Whether the watch ended by itself with an error (e.g. RBAC without
  // watch); the error, for diagnostics. Empty while it runs.
  std::optional<Error> failure() const;

 private:
  ClaimWatch() = default;
  void Loop(std::string resource_version, json::object claim);
  bool Inspect(const json::object& claim);  // false: gone (on_gone called)
  void Gone(Error e);

  SandboxApi* api_ = nullptr;
  std::string ns_;
  std::string name_;
  OnGone on_gone_;
  UniqueFd stop_fd_;  // eventfd: wakes the watch
  std::atomic<bool> stopped_{false};
  std::atomic<bool> fired_{false};
  mutable std::mutex mu_;
  std::optional<Error> failure_;
  std::thread thread_;
};

}  // namespace deepbox::k8s
