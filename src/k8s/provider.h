// K8sSandboxProvider: sandboxes claimed from an agent-sandbox SandboxWarmPool.
// Claim() = SandboxClaim (claim.h) + a way to the pod's daemon (connection.h)
// + a SandboxdClient; the lease's Release() deletes the claim and stops the
// port-forward. The Sandbox it hands out is "<namespace>/<claim>" and checks
// the tunnel's health before each call, so a dead port-forward is a clear
// error rather than a connection refused. The rest of the lifecycle
// (sandbox/provider.h) works on claims: Create keeps one, Attach reaches an
// existing one, Inspect/List read them, Delete/DeleteMatching delete them.
// Suspend/Resume set the claim's Sandbox's spec.operatingMode and wait for
// the controller (operating_mode.h); Attach/Connect wake a suspended one.
// Snapshots, restores and forks copy the daemon's files as a tar stream
// through the shared snapshot store (provider_snapshots.cc).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "k8s/claim.h"
#include "k8s/connection.h"
#include "k8s/kubeconfig.h"
#include "k8s/rest_client.h"
#include "k8s/sandbox_api.h"
#include "sandbox/provider.h"
#include "sandbox/sandbox.h"
#include "sandbox/sandboxd_client.h"
#include "sandbox/snapshot_store.h"

namespace deepbox::k8s {

// Makes the Sandbox for a daemon endpoint (default: SandboxdClient::Connect).
using SandboxFactory = std::function<Result<std::unique_ptr<Sandbox>>(
    const DaemonEndpoint& endpoint, const std::string& id)>;

struct K8sProviderOptions {
  RestConfig rest;             // from LoadDefaultConfig / LoadKubeconfig / LoadInClusterConfig
  ClientOptions client;        // rate limit, retries
  std::string namespace_name;  // "" = the kubeconfig context's namespace
  std::string warm_pool = "deepagents-warmpool";
  // --template: claims come from a warm pool of this SandboxTemplate (and
  // ClaimOptions::image, when given, must be its image; template_image.h).
  // "" = the warm pool's, or the one ClaimOptions::image selects.
  std::string template_name;
  std::chrono::milliseconds ready_timeout{180000};
  std::map<std::string, std::string> labels;  // on every claim (ClaimOptions.labels added)
  std::map<std::string, std::string> pod_labels;
  std::map<std::string, std::string> pod_annotations;
  std::string created_by = "deepbox";
  ConnectionOptions connection;
  SandboxFactory sandbox_factory;  // null = SandboxdClient
  ClaimObserver observer;          // optional: each claim's milestones
  // Claim() returns once the daemon answered (GET /deepbox/v1/info through
  // the router): a router or token problem fails the claim, which is deleted
  // (what `deepbox run` wants before it spends a model call). false: Claim()
  // returns at the claim's Ready event and the first call is the check (the
  // pod's readiness probe already saw the daemon answer), one round trip
  // through the router less before a first command's result. (With the
  // default sandbox_factory; ClaimAndKeep always checks.)
  bool check_daemon = true;
  // The user's claim key (claim_token.h): "" = DefaultClaimKeyPath().
  std::string claim_key_file;
  // How long a call may wait for the claim's token verifier to reach a pod
  // that already is Ready (the daemon then says "no owner yet"): the
  // controller writes the annotation, kubelet refreshes the downward API
  // volume, usually within a second or two.
  std::chrono::milliseconds owner_wait{60000};
  // Called once, before the first claim, with the warning of
  // NetworkPolicyWarning() (no NetworkPolicy isolates the sandbox pods);
  // not called when one does or when that cannot be told (e.g. no RBAC to
  // read policies). Null: no check.
  std::function<void(const std::string& warning)> on_warning;
  // Every verb that takes an id (or a namespace) refuses one outside the
  // provider's namespace with PERMISSION_DENIED, before any API request: a
  // server acting for others (`deepbox mcp`) must not reach the other
  // namespaces its kubeconfig may have rights in.
  bool confine_to_namespace = false;
  // The snapshot store (sandbox/snapshot_store.h, shared with the local
  // provider): "" = its default directory; 0 = its default quota.
  std::string snapshot_dir;
  uint64_t snapshot_quota_bytes = 0;
};

// A claim made to outlive this process (`deepbox sandbox create --provider
// k8s`): what a client needs to reach its daemon later.
struct KeptClaim {
  ClaimedSandbox claimed;
  DaemonEndpoint endpoint;      // router headers without Authorization
  bool endpoint_lasts = false;  // false: a port-forward that ended with the call
};

// What `deepbox sandbox inspect --provider k8s` shows of a claim (Describe):
// read from the API server, nothing opened.
struct ClaimRecord {
  SandboxInfo info;           // id, labels, created/expires, state
  ClaimedSandbox claimed;     // names and pod IPs (no token)
  std::string reason;         // the Ready condition's reason when not Ready
  std::string warm_pool;      // spec.warmPoolRef (v1alpha1: spec.warmpool)
  std::string template_name;  // the claim's, else its pool's ("" = unknown)
  std::string image;          // the template's main image ("" = unknown)
  json::object resources;     // the main container's resources, as the template says
  // Whether the claim's token verifier is this user's (the claim was made
  // with this user's key): only then `endpoint` carries X-Sandboxd-Token and
  // `daemon_token` is set.
  bool owner = false;
  bool has_verifier = false;  // the claim carries a verifier at all
  std::string daemon_token;
  // The way to the daemon as a new claim's client would go (router headers
  // without Authorization); base_url "" through a port-forward (no lasting
  // URL: `router` says what is forwarded to). Empty headers when the claim
  // has no sandbox yet.
  DaemonEndpoint endpoint;
  bool endpoint_lasts = false;
};

// An existing claim reached from this process (exec, cp, --sandbox-id).
struct ConnectedClaim {
  ClaimedSandbox claimed;
  std::unique_ptr<SandboxConnection> connection;  // keep while `client` is used
  std::unique_ptr<SandboxdClient> client;
};

class K8sSandboxProvider : public SandboxProvider {
 public:
  static Result<std::unique_ptr<K8sSandboxProvider>> Create(K8sProviderOptions options);
  ~K8sSandboxProvider() override;

  std::string name() const override { return "k8s"; }
  // "k8s sandbox from warm pool NS/POOL".
  std::string description() const override;
  // NAMESPACE/CLAIM (IsK8sSandboxId).
  bool OwnsId(std::string_view id) const override;
  Result<std::unique_ptr<SandboxLease>> Claim(const ClaimOptions& options) override;

  // The lifecycle (sandbox/provider.h). Ids are NAMESPACE/CLAIM, or CLAIM in
  // the provider's namespace; INVALID_ARGUMENT for anything else, and with
  // confine_to_namespace PERMISSION_DENIED for another namespace.
  // Create: ClaimAndKeep, as a SandboxInfo (state Ready).
  Result<SandboxInfo> Create(const ClaimOptions& options) override;
  // Connect, as a lease that leaves the claim as it is (Release() closes the
  // connection).
  Result<std::unique_ptr<SandboxLease>> Attach(const std::string& id) override;
  // Connect, with the claim's WhyGone and the router's errors named as its.
  Result<DaemonAccess> ConnectDaemon(const std::string& id) override;
  Result<SandboxInfo> Inspect(const std::string& id) override;  // NOT_FOUND: no such claim
  // The claims in the provider's namespace matching `selector` ("" = all).
  Result<std::vector<SandboxInfo>> List(const std::string& selector) override;
  Status Delete(const std::string& id) override;  // NOT_FOUND: no such claim
  // RemoveBySelector in the provider's namespace; NAMESPACE/CLAIM ids.
  Result<std::vector<std::string>> DeleteMatching(const std::string& selector) override;
  // NOT_FOUND (the claim is gone or expiring) or nullopt, for a call that
  // failed on a sandbox of Connect. A bad id: nullopt; when confined, an id
  // of another namespace: PERMISSION_DENIED, without asking the API.
  std::optional<Error> WhyGone(const std::string& id) override;
  // WatchClaim as a SandboxWatch.
  Result<std::unique_ptr<SandboxWatch>> Watch(const std::string& id,
                                              std::function<void(const Error&)> on_gone) override;
  // UNIMPLEMENTED: Kubernetes cannot freeze a pod.
  Status Pause(const std::string& id) override;
  // Sets spec.operatingMode Suspended on the claim's Sandbox and waits (up to
  // ready_timeout) until the controller reports Suspended=True PodTerminated:
  // the pod is gone, files on a PersistentVolumeClaim stay. CONFLICT, before
  // any change, when /workspace is not on one (an emptyDir would be lost),
  // unless options.force. NOT_FOUND: no such claim; UNAVAILABLE: it has no
  // Sandbox; TIMEOUT: the controller did not finish in time (the mode stays
  // set). Needs get, patch and watch on sandboxes (agents.x-k8s.io).
  Status Suspend(const std::string& id, const SuspendOptions& options) override;
  // Sets spec.operatingMode Running and waits until the Sandbox is Ready
  // again and its claim shows the new pod's IPs (a fresh pod: processes
  // start anew; files on a volume are back).
  Status Resume(const std::string& id) override;

  // Snapshots (provider_snapshots.cc), in the store the local provider uses
  // too: the daemon streams its root as a tar (POST /deepbox/v1/fs/tar/
  // download) into NAME/workspace.tar, cut off at the quota's rest; a
  // restore replays it into a new claim's daemon (PUT /deepbox/v1/fs/tar/
  // upload), which extracts it confined to its root. The host never reads
  // the archive. Taken while the pod runs (Kubernetes cannot freeze one); a
  // suspended claim is resumed for the copy and suspended again.
  Result<SnapshotInfo> Snapshot(const std::string& id, const SnapshotOptions& options) override;
  Result<std::vector<SnapshotInfo>> ListSnapshots() override;  // every provider's
  Status DeleteSnapshot(const std::string& name) override;     // any provider's
  // RestoreAndKeep, as a SandboxInfo.
  Result<SandboxInfo> CreateFromSnapshot(const std::string& snapshot,
                                         const ClaimOptions& options) override;
  // One snapshot of `id` (never listed, removed after), restored into
  // `count` (1-32) new claims labelled deepbox.dev/forked-from=NS.CLAIM;
  // all or none.
  Result<std::vector<SandboxInfo>> Fork(const std::string& id, int count,
                                        const ClaimOptions& options) override;
  // ClaimAndKeep (label deepbox.dev/snapshot), then the snapshot's files
  // uploaded into it; on failure the new claim is deleted. INVALID_ARGUMENT
  // for a snapshot of another provider's sandbox.
  Result<KeptClaim> RestoreAndKeep(const std::string& snapshot, const ClaimOptions& options);

  // Claims a sandbox, checks that its daemon answers, and leaves the claim in
  // place (its TTL, or `sandbox rm`, ends it).
  Result<KeptClaim> ClaimAndKeep(const ClaimOptions& options);
  // NAMESPACE/CLAIM (or CLAIM in the provider's namespace): a Ready claim,
  // reached the way a new claim would be; a suspended one is resumed first.
  // NOT_FOUND when there is no such claim, UNAVAILABLE when it is not Ready,
  // INVALID_ARGUMENT for a bad id. A pod that does not answer is looked at
  // again (it may have gone since the claim showed it Ready): see ConnectOnce.
  Result<ConnectedClaim> Connect(std::string_view id);

  // NAMESPACE/CLAIM (or CLAIM in the provider's namespace), as ClaimRecord
  // says. NOT_FOUND when there is no such claim; INVALID_ARGUMENT for a bad
  // id. The template and its image are best effort (no right to read them:
  // left empty).
  Result<ClaimRecord> Describe(std::string_view id);

  // The warm pool a claim with `image` ("" = any) comes from: the
  // configured one, or the one template_name / image select
  // (template_image.h: ChooseTemplate over the namespace's templates and
  // pools).
  Result<std::string> WarmPoolFor(const std::string& image);

  // Watches the claim `id` (NAMESPACE/CLAIM, or CLAIM in the provider's
  // namespace) while it is in use: on_gone as soon as it is deleted or expires.
  Result<std::unique_ptr<ClaimWatch>> WatchClaim(std::string_view id, ClaimWatch::OnGone on_gone);

  // "" when a NetworkPolicy in the namespace selects the warm pool's pods for
  // ingress (their template's pod labels plus the controller's
  // sandbox-template-ref-hash label); else a warning that says what that
  // means and what to do. An error when it cannot be told (the pool or its
  // template missing, no permission to read them or the policies).
  Result<std::string> NetworkPolicyWarning();

  // Deletes the claims matching `label_selector` in `ns` ("" = the provider's
  // namespace) and nothing else; returns their names.
  Result<std::vector<std::string>> RemoveBySelector(std::string_view label_selector,
                                                    std::string_view ns = "");

  const std::string& namespace_name() const { return namespace_; }
  const std::string& warm_pool() const { return options_.warm_pool; }
  KubeClient& client() { return *client_; }
  SandboxApi& api() { return *api_; }

 private:
  K8sSandboxProvider() = default;
  Result<std::unique_ptr<SandboxLease>> ClaimWith(const ClaimOptions& options, bool check_daemon);
  // The namespace and claim name of `id` (SplitClaimId), refused outside the
  // namespace when confined; no API request.
  Result<std::pair<std::string, std::string>> Resolve(std::string_view id) const;
  Status CheckNamespace(std::string_view id, std::string_view ns) const;
  // The claim ns/name; NOT_FOUND says "no SandboxClaim NAME in namespace NS".
  Result<json::object> GetClaimNamed(const std::string& ns, const std::string& name);
  static Error NoSuchClaim(std::string_view ns, std::string_view name);
  // Whether a claim that is not Ready has a Sandbox that is running or on
  // its way to it (Connect waits for it then).
  bool SandboxComingUp(const std::string& ns, const json::object& claim);
  // One attempt of Connect: reads the claim (waiting, as a resume does, for
  // one that is suspended or coming up) and connects to its pod.
  // *pod_unreachable: the claim was Ready but its pod did not answer.
  Result<ConnectedClaim> ConnectOnce(const std::string& ns, const std::string& name,
                                     bool* pod_unreachable);
  // Suspend (true) or Resume (false) of claim ns/name.
  Status SetOperatingMode(const std::string& ns, const std::string& name, bool suspend, bool force);
  // What Create returns for a kept claim made with `options`.
  SandboxInfo InfoOfKept(const KeptClaim& kept, const ClaimOptions& options) const;
  Result<SnapshotStore> Snapshots() const;
  // Claim `id`'s files as a tar into `pending` (its budget the cap); the
  // snapshot's note.
  Result<std::string> TakeArchive(const std::string& id, PendingSnapshot& pending);
  // A kept claim (ClaimAndKeep of `options`) holding the archive in `tar_fd`
  // (`size` bytes); `what` ("restoring snapshot 'x'") heads its errors.
  Result<KeptClaim> KeepWithArchive(int tar_fd, uint64_t size, const ClaimOptions& options,
                                    std::string_view what);
  K8sProviderOptions options_;
  std::string namespace_;
  std::unique_ptr<KubeClient> client_;
  std::unique_ptr<SandboxApi> api_;
  std::unique_ptr<Claimer> claimer_;
  std::mutex key_mu_;
  std::string claim_key_;  // loaded on first use
  std::once_flag policy_checked_;

 public:
  // The daemon token of claim ns/name (claim_token.h).
  Result<std::string> DaemonToken(std::string_view ns, std::string_view name);
};

// What a SandboxClaim object of namespace `ns` says as a SandboxInfo: id
// NS/NAME, its labels, created_at = creationTimestamp, expires_at =
// spec.lifecycle.shutdownTime, state Ready, Suspended (Ready=False with the
// reason SandboxSuspended, forwarded from its Sandbox) or NotReady.
SandboxInfo InfoOfClaim(std::string_view ns, const json::object& claim);

// Whether a Kubernetes label selector (a NetworkPolicy's podSelector:
// matchLabels and matchExpressions In / NotIn / Exists / DoesNotExist)
// selects an object with `labels`; an empty selector selects everything, an
// unknown operator nothing.
bool SelectorMatches(const json::value& selector, const std::map<std::string, std::string>& labels);

// Whether a daemon refused a call only because its claim's token verifier has
// not reached it yet (deepbox-sandboxd's "no owner yet"): nothing ran, the
// call may be repeated.
bool AwaitingOwner(const Error& error);

// The default SandboxFactory: a SandboxdClient on the endpoint; with
// `check`, once the daemon answered.
Result<std::unique_ptr<Sandbox>> ConnectSandboxd(const DaemonEndpoint& endpoint,
                                                 const std::string& id, bool check = true);

}  // namespace deepbox::k8s
