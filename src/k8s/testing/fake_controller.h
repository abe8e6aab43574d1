// Test-only: a fake agent-sandbox controller acting on the fake API server's
// store with the semantics of the real one (reference §2): warm pools keep
// `replicas` Ready member Sandboxes; a claim adopts a Ready warm member (the
// Sandbox keeps its own name) or, without one, a Sandbox named after the claim
// is cold-created; status.sandbox.{name,podIPs} and the forwarded Ready
// condition are written in one status update; terminal reasons for a missing
// pool or template and bad pod metadata; expiry at lifecycle.shutdownTime
// (Delete: the claim goes; Retain: the Sandbox goes, Ready=False ClaimExpired);
// deleting a claim garbage-collects its Sandbox. Sandboxes follow
// spec.operatingMode as upstream's v1.0 controller (k8s/operating_mode.h):
// Suspended deletes the pod (Suspended=False PodTerminating while it ends,
// then True PodTerminated; Ready=False SandboxSuspended), Running makes a new
// one (new pod IP; Ready=True DependenciesReady). spec.volumeClaimTemplates
// become PersistentVolumeClaims "<template>-<sandbox>" owned by the Sandbox,
// kept while it is suspended and collected with it, and (real_pods) the
// pod's volumes of those names. Conditions carry the generation they answer.
// As agent-sandbox v1.x: Events (SandboxPodCreated, SandboxPodCreateFailed,
// SandboxReady, SandboxExpired) on the Sandbox; a pod or Service the API
// server refuses for good (a container without an image; spec.service with a
// name over 63 characters) is Ready=False InvalidConfiguration with the
// server's message, which the claim forwards; warm pool members not Ready
// within spec.readinessGracePeriodSeconds are replaced.
// One daemon stands in for every pod of the fake cluster, so its files
// "survive" a suspend whatever backs them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "k8s/testing/object_store.h"
#include "k8s/util.h"

namespace deepbox::k8s::testing {

struct FakeControllerOptions {
  // Time from first seeing a claim to binding it (0 = at once).
  std::chrono::milliseconds adoption_delay{0};
  // Time from creating a Sandbox's pod (at its creation, or a resume) to the
  // pod being Ready.
  std::chrono::milliseconds pod_start_delay{0};
  // Time from deleting a pod (a suspend) to its end; the pass that deletes
  // it always reports it terminating (Suspended=False PodTerminating).
  std::chrono::milliseconds pod_stop_delay{0};
  // false: pods never become Ready (claims stay Ready=False SandboxNotReady).
  bool pods_become_ready = true;
  // Pod IPs are handed out as <prefix><n>, n = 10, 11, ...
  std::string pod_ip_prefix = "10.244.0.";
  // Also report an IPv6 address (listed first) to exercise IPv4 preference.
  bool dual_stack = false;
  // The controller's wall clock (expiry); tests move it forward.
  std::function<SystemTime()> clock;
  // On a real API server (the k8s-real tests): a Sandbox gets a real Pod
  // (bound to `node_name`, owned by the Sandbox) and is Ready when the pod
  // is, with its IPs; deletions are left to the garbage collector.
  bool real_pods = false;
  std::string node_name = "deepbox-node";
  // How often a pass runs with no store event (delays, expiry). Store events
  // wake the controller at once. Every pass reads the whole store: over a
  // real API server (RemoteStore) a short tick costs CPU the pods share.
  std::chrono::milliseconds tick{10};
  // Unbound claims are reconciled by this many worker threads, each claim by
  // one at a time, as the upstream controller does (its claim controller
  // runs 50 concurrent reconciles): claims arriving together are adopted
  // together. 0: inline in the pass, which Kick() then completes (the unit
  // tests' in-memory store, where a pass takes microseconds).
  int claim_workers = 0;
};

class FakeController {
 public:
  FakeController(std::shared_ptr<StoreApi> store, FakeControllerOptions options = {});
  ~FakeController();

  void Start();
  void Stop();
  // Runs a reconcile pass now (e.g. after moving the clock).
  void Kick();

  // Every claim not yet bound gets Ready=False with this reason (e.g.
  // "EnvVarsInjectionRejected"); "" clears it.
  void FailClaimsWith(std::string reason, std::string message = "injected");
  // Marks a Sandbox expired (Ready=False SandboxExpired, pod gone); the claim
  // forwards it.
  void ExpireSandbox(const std::string& ns, const std::string& name);
  void SetPodsBecomeReady(bool ready);
  // From now on every pod creation fails with this API error message (e.g. a
  // ResourceQuota's "exceeded quota"): the Sandbox gets the Warning Event
  // SandboxPodCreateFailed and Ready=False ReconcilerError (retried, as
  // upstream does for errors other than Invalid). "" ends it.
  void FailPodCreationWith(std::string message);
  // From now on (benchmarks: the same cluster with and without it).
  void SetAdoptionDelay(std::chrono::milliseconds delay);

  // Sandbox ns/name's pod goes (as an eviction ends it) and the next pass
  // makes a new one, with a new IP (fake pods only).
  void RestartPod(const std::string& ns, const std::string& name);

  // Whether Sandbox ns/name has a pod (maybe terminating): in the store with
  // real_pods, else the controller's own record of it.
  bool HasPod(const std::string& ns, const std::string& name) const;

  int adoptions() const;
  int cold_starts() const;

 private:
  void Loop();
  void ReconcileAll();
  void ReconcilePools(const std::string& ns);
  void ReconcileSandboxes(const std::string& ns);
  void ReconcileClaims(const std::string& ns);
  // Pool and template checks, then adoption of a warm member or a cold start.
  void ReconcileUnboundClaim(const std::string& ns, const json::object& claim,
                             std::chrono::steady_clock::time_point seen);
  // claim_workers > 0: queues "ns/name" unless it is queued or being worked on.
  void EnqueueClaim(const std::string& ns, const std::string& name);
  void ClaimWorker();
  // real_pods: the Sandbox's pod, created when missing or deleted with
  // `stop` (expiry, a suspend); whether it is Ready, its IPs, and whether a
  // pod (maybe terminating) exists.
  bool SyncPod(const std::string& ns, const json::object& sandbox, bool stop, json::array& ips,
               bool* exists, std::optional<Error>* create_error);
  // The PersistentVolumeClaims of the Sandbox's volumeClaimTemplates, made when missing.
  void SyncVolumeClaims(const std::string& ns, const json::object& sandbox);
  std::string NextPodIp();
  // A core/v1 Event about `object` (kind Sandbox or SandboxClaim), as
  // agent-sandbox v1.0.4+ records them; each (object, reason, message) once.
  void RecordEvent(const std::string& ns, std::string_view kind, const json::object& object,
                   std::string_view type, std::string_view reason, const std::string& message);

  std::shared_ptr<StoreApi> store_;
  FakeControllerOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool dirty_ = true;
  std::thread thread_;
  std::vector<std::thread> claim_workers_;
  std::condition_variable claim_cv_;
  std::deque<std::string> claim_queue_;   // "ns/name"
  std::set<std::string> claims_pending_;  // queued or being worked on
  std::set<std::string> reserved_;        // "ns/name" of Sandboxes being adopted
  int next_ip_ = 10;
  int adoptions_ = 0;
  int cold_starts_ = 0;
  std::string pod_create_failure_;
  std::set<std::string> events_recorded_;  // "uid/reason/message"
  std::string fail_reason_;
  std::string fail_message_;
  std::map<std::string, std::chrono::steady_clock::time_point> first_seen_;  // claim uid
  // Without real_pods: the pod of each Sandbox (by uid) as far as it exists.
  struct FakePod {
    std::string ns;
    std::chrono::steady_clock::time_point created;
    std::optional<std::chrono::steady_clock::time_point> deleting_since;
  };
  std::map<std::string, FakePod> fake_pods_;
  std::map<std::string, bool> expired_;  // "ns/name" of expired sandboxes
};

}  // namespace deepbox::k8s::testing
