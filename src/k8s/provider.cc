#include "k8s/provider.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "k8s/claim_token.h"
#include "k8s/operating_mode.h"
#include "k8s/settings.h"
#include "k8s/template_image.h"
#include "net/token_digest.h"
#include "sandbox/sandboxd_client.h"

namespace deepbox::k8s {

namespace {

// How long Connect retries a Ready claim's pod that does not answer while
// the claim still shows that pod (bounded by ready_timeout): a kubelet takes
// seconds to report a restarting pod not Ready.
constexpr std::chrono::milliseconds kUnreachablePodGrace{10000};

// f() again while the daemon says its owner's token verifier has not
// arrived (AwaitingOwner), until `deadline`; then the error says what to check.
template <typename F>
auto RetryWhileAwaitingOwner(F&& f, std::chrono::steady_clock::time_point deadline)
    -> decltype(f()) {
  auto pause = std::chrono::milliseconds(20);
  for (;;) {
    auto r = f();
    if (r || !AwaitingOwner(r.error())) return r;
    if (std::chrono::steady_clock::now() + pause > deadline) {
      Error e = r.error();
      e.message +=
          " -- the claim's token verifier (annotation deepbox.dev/sandboxd-token-sha256) did "
          "not reach the pod in time: check that the controller propagates "
          "spec.additionalPodMetadata.annotations to the pod and that the SandboxTemplate "
          "mounts it for --token-sha256-file (deploy/k8s/sandbox-template.yaml)";
      return tl::unexpected(e);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::milliseconds>(pause * 2, std::chrono::milliseconds(500));
  }
}

// Delegates to the daemon client, refusing (clearly) once the tunnel is gone.
class GuardedSandbox : public Sandbox {
 public:
  GuardedSandbox(std::unique_ptr<Sandbox> inner, SandboxConnection* conn, std::string id,
                 std::chrono::steady_clock::time_point owner_deadline)
      : inner_(std::move(inner)),
        conn_(conn),
        id_(std::move(id)),
        owner_deadline_(owner_deadline) {}

  std::string id() const override { return id_; }
  std::string root() const override { return inner_->root(); }

  Result<ExecResult> Exec(const ExecRequest& r) override {
    return Guard([&] { return inner_->Exec(r); });
  }
  Result<ExecResult> ExecStream(const ExecRequest& r, const OutputCallback& cb) override {
    return Guard([&] { return inner_->ExecStream(r, cb); });
  }
  Result<FileInfo> Stat(const std::string& p) override {
    return Guard([&] { return inner_->Stat(p); });
  }
  Result<std::vector<FileInfo>> List(const std::string& p) override {
    return Guard([&] { return inner_->List(p); });
  }
  Result<std::vector<FileInfo>> ListNames(const std::string& p) override {
    return Guard([&] { return inner_->ListNames(p); });
  }
  Result<ReadResult> Read(const std::string& p, const ReadOptions& o) override {
    return Guard([&] { return inner_->Read(p, o); });
  }
  Status Write(const std::string& p, std::string_view c, uint32_t mode) override {
    return Guard([&] { return inner_->Write(p, c, mode); });
  }
  Result<EditResult> Edit(const std::string& p, const std::string& o, const std::string& n,
                          bool all) override {
    return Guard([&] { return inner_->Edit(p, o, n, all); });
  }
  Status Mkdir(const std::string& p, bool parents) override {
    return Guard([&] { return inner_->Mkdir(p, parents); });
  }
  Status Move(const std::string& f, const std::string& t, bool overwrite) override {
    return Guard([&] { return inner_->Move(f, t, overwrite); });
  }
  Status Delete(const std::string& p, bool recursive) override {
    return Guard([&] { return inner_->Delete(p, recursive); });
  }
  Result<GlobResult> Glob(const std::string& pattern, const std::string& p, size_t max) override {
    return Guard([&] { return inner_->Glob(pattern, p, max); });
  }
  Result<GrepResult> Grep(const GrepRequest& r) override {
    return Guard([&] { return inner_->Grep(r); });
  }
  Result<TreeResult> Tree(const TreeRequest& r) override {
    return Guard([&] { return inner_->Tree(r); });
  }
  Result<std::string> Download(const std::string& p) override {
    return Guard([&] { return inner_->Download(p); });
  }
  Status Upload(const std::string& p, std::string_view c, uint32_t mode) override {
    return Guard([&] { return inner_->Upload(p, c, mode); });
  }

 private:
  template <typename F>
  auto Guard(F&& f) -> decltype(f()) {
    if (auto h = conn_->Health(); !h) return tl::unexpected(h.error());
    // A claim whose daemon was not checked (check_daemon = false) may be
    // used before its token verifier reached the pod.
    auto r = RetryWhileAwaitingOwner(f, owner_deadline_);
    if (!r && r.error().code == ErrorCode::kUnavailable) {
      if (auto h = conn_->Health(); !h) return tl::unexpected(h.error());
    }
    if (!r) return tl::unexpected(NameRouterError(r.error(), conn_->endpoint()));
    return r;
  }

  std::unique_ptr<Sandbox> inner_;
  SandboxConnection* conn_;
  std::string id_;
  std::chrono::steady_clock::time_point owner_deadline_;
};

class K8sLease : public SandboxLease {
 public:
  K8sLease(Claimer& claimer, ClaimedSandbox claimed, std::unique_ptr<SandboxConnection> conn,
           std::unique_ptr<Sandbox> sandbox)
      : claimer_(claimer),
        claimed_(std::move(claimed)),
        conn_(std::move(conn)),
        sandbox_(std::move(sandbox)) {}

  ~K8sLease() override {
    if (kept_) {
      sandbox_.reset();
      conn_->Close();  // our tunnel is local; the claim stays
    } else {
      (void)Release();
    }
  }

  Sandbox& sandbox() override { return *sandbox_; }

  Status Release() override {
    if (released_) return {};
    released_ = true;
    sandbox_.reset();
    conn_->Close();
    auto s = claimer_.Release(claimed_.namespace_name, claimed_.claim_name);
    if (!s) {
      released_ = false;
      Error e = s.error();
      e.message = fmt::format("deleting SandboxClaim {}/{}: {}", claimed_.namespace_name,
                              claimed_.claim_name, e.message);
      return tl::unexpected(e);
    }
    return {};
  }

  void Keep() override { kept_ = true; }
  const ClaimedSandbox& claimed() const { return claimed_; }
  const DaemonEndpoint& endpoint() const { return conn_->endpoint(); }

  std::string Describe() const override {
    std::string where = claimed_.pod_ip.empty() ? "" : ", pod IP " + claimed_.pod_ip;
    return fmt::format(
        "Kubernetes sandbox {ns}/{claim} (SandboxClaim {claim} bound to Sandbox {sb}{where}). "
        "Reach it through the sandbox router with X-Sandbox-ID: {sb}, X-Sandbox-Namespace: {ns}. "
        "Delete it with: kubectl delete sandboxclaim {claim} -n {ns}",
        fmt::arg("ns", claimed_.namespace_name), fmt::arg("claim", claimed_.claim_name),
        fmt::arg("sb", claimed_.sandbox_name), fmt::arg("where", where));
  }

 private:
  Claimer& claimer_;
  ClaimedSandbox claimed_;
  std::unique_ptr<SandboxConnection> conn_;
  std::unique_ptr<Sandbox> sandbox_;
  bool kept_ = false;
  bool released_ = false;
};

}  // namespace

Result<std::unique_ptr<Sandbox>> ConnectSandboxd(const DaemonEndpoint& endpoint,
                                                 const std::string& id, bool check) {
  SandboxdClientOptions opts;
  opts.id = id;
  opts.default_headers = endpoint.headers;
  opts.read_info_on_connect = check;
  auto c = SandboxdClient::Connect(endpoint.base_url, opts);
  if (!c) return tl::unexpected(NameRouterError(c.error(), endpoint));
  return std::unique_ptr<Sandbox>(std::move(*c));
}

Result<std::unique_ptr<K8sSandboxProvider>> K8sSandboxProvider::Create(K8sProviderOptions options) {
  std::unique_ptr<K8sSandboxProvider> p(new K8sSandboxProvider());
  p->namespace_ =
      options.namespace_name.empty() ? options.rest.namespace_name : options.namespace_name;
  if (p->namespace_.empty()) p->namespace_ = "default";
  auto client = KubeClient::Create(options.rest, options.client);
  if (!client) return tl::unexpected(client.error());
  p->client_ = std::move(*client);
  p->api_ = std::make_unique<SandboxApi>(*p->client_);
  p->claimer_ = std::make_unique<Claimer>(*p->api_);
  // kubectl must talk to the same cluster as we do (KUBECONFIG is inherited).
  auto& kubectl_args = options.connection.port_forward.kubectl_args;
  if (kubectl_args.empty()) {
    if (!options.rest.kubeconfig_path.empty()) {
      kubectl_args.insert(kubectl_args.end(), {"--kubeconfig", options.rest.kubeconfig_path});
    }
    if (!options.rest.context.empty()) {
      kubectl_args.insert(kubectl_args.end(), {"--context", options.rest.context});
    }
  }
  p->options_ = std::move(options);
  return p;
}

K8sSandboxProvider::~K8sSandboxProvider() = default;

Result<std::unique_ptr<SandboxLease>> K8sSandboxProvider::Claim(const ClaimOptions& options) {
  return ClaimWith(options, options_.check_daemon);
}

bool SelectorMatches(const json::value& selector,
                     const std::map<std::string, std::string>& labels) {
  if (selector.is_null()) return true;
  if (!selector.is_object()) return false;
  if (const auto* ml = Find(selector, {"matchLabels"}); ml != nullptr && !ml->is_null()) {
    if (!ml->is_object()) return false;
    for (const auto& kv : ml->get_object()) {
      auto it = labels.find(std::string(kv.key()));
      if (!kv.value().is_string() || it == labels.end() ||
          it->second != std::string_view(kv.value().get_string())) {
        return false;
      }
    }
  }
  if (const auto* me = Find(selector, {"matchExpressions"}); me != nullptr && !me->is_null()) {
    if (!me->is_array()) return false;
    for (const auto& e : me->get_array()) {
      std::string key = FindString(e, {"key"});
      std::string op = FindString(e, {"operator"});
      auto it = labels.find(key);
      bool in_values = false;
      if (const auto* vs = Find(e, {"values"}); vs != nullptr && vs->is_array()) {
        for (const auto& v : vs->get_array()) {
          in_values = in_values || (it != labels.end() && v.is_string() &&
                                    std::string_view(v.get_string()) == it->second);
        }
      }
      bool ok = op == "In"             ? in_values
                : op == "NotIn"        ? !in_values
                : op == "Exists"       ? it != labels.end()
                : op == "DoesNotExist" ? it == labels.end()
                                       : false;
      if (!ok) return false;
    }
  }
  return true;
}

Result<std::string> K8sSandboxProvider::NetworkPolicyWarning() {
  auto pool = api_->GetWarmPool(namespace_, options_.warm_pool);
  if (!pool) return tl::unexpected(pool.error());
  std::string tmpl_name = FindString(*pool, {"spec", "sandboxTemplateRef", "name"});
  if (tmpl_name.empty()) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        fmt::format("SandboxWarmPool {}/{} names no template", namespace_, options_.warm_pool));
  }
  Result<json::object> tmpl = MakeError(ErrorCode::kInternal, "not attempted");
  for (const char* version : {"v1beta1", "v1alpha1"}) {
    tmpl = client_->Get(
        {std::string(kExtensionsGroup), version, "sandboxtemplates", "SandboxTemplate"}, namespace_,
        tmpl_name);
    if (tmpl || tmpl.error().code != ErrorCode::kNotFound) break;
  }
  if (!tmpl) return tl::unexpected(tmpl.error());
  // The pods' labels: the template's, and the one the controller adds (its
  // managed NetworkPolicy selects on it).
  std::map<std::string, std::string> labels;
  if (const auto* l = Find(*tmpl, {"spec", "podTemplate", "metadata", "labels"});
      l != nullptr && l->is_object()) {
    for (const auto& kv : l->get_object()) {
      if (kv.value().is_string())
        labels[std::string(kv.key())] = std::string(kv.value().get_string());
    }
  }
  labels["agents.x-k8s.io/sandbox-template-ref-hash"] = NameHash(tmpl_name);
  auto policies =
      client_->List({"networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"}, namespace_);
  if (!policies) return tl::unexpected(policies.error());
  for (const auto& np : policies->items) {
    const json::value* selector = Find(np, {"spec", "podSelector"});
    if (selector == nullptr || !SelectorMatches(*selector, labels)) continue;
    // policyTypes absent: Ingress (plus Egress with egress rules).
    const json::value* types = Find(np, {"spec", "policyTypes"});
    bool ingress = types == nullptr || !types->is_array();
    if (!ingress) {
      for (const auto& t : types->get_array()) {
        ingress = ingress || (t.is_string() && std::string_view(t.get_string()) == "Ingress");
      }
    }
    if (ingress) return std::string();
  }
  std::string shown;
  for (const auto& [k, v] : labels) shown += (shown.empty() ? "" : ",") + k + "=" + v;
  return fmt::format(
      "no NetworkPolicy in namespace {} selects the sandbox pods (SandboxTemplate {}, labels "
      "{}) for ingress: any pod in the cluster can connect to their daemons (which refuse "
      "requests without their claim's token, but still answer health checks) and nothing "
      "limits their egress. Keep the template's networkPolicyManagement Managed (the "
      "controller's secure default), or add a NetworkPolicy selecting these pods, and use a "
      "CNI that enforces NetworkPolicy",
      namespace_, tmpl_name, shown);
}

Result<std::unique_ptr<SandboxLease>> K8sSandboxProvider::ClaimWith(const ClaimOptions& options,
                                                                    bool check_daemon) {
  if (!options.rootfs.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "a root filesystem cannot be chosen on Kubernetes: the image comes from "
                     "the SandboxTemplate");
  }
  if (options.network == "none") {
    return MakeError(ErrorCode::kUnimplemented,
                     "network 'none' is not available per claim on Kubernetes: the "
                     "SandboxTemplate's networkPolicy decides (its secure default allows public "
                     "egress only)");
  }
  if (!options.allow_warm) {
    return MakeError(ErrorCode::kUnimplemented,
                     "a cold create is not available on Kubernetes: a claim takes whatever its "
                     "warm pool has");
  }
  if (options_.on_warning) {
    std::call_once(policy_checked_, [&] {
      auto warning = NetworkPolicyWarning();
      if (warning && !warning->empty()) options_.on_warning(*warning);
    });
  }
  auto warm_pool = WarmPoolFor(options.image);
  if (!warm_pool) return tl::unexpected(warm_pool.error());
  ClaimRequest req;
  req.warm_pool = *warm_pool;
  req.namespace_name = namespace_;
  // A name (ClaimOptions::name) is the claim's own: NAMESPACE/NAME is then
  // the id, and NAME alone finds it in this namespace.
  req.name = options.name.empty() ? std::string(kClaimNamePrefix) + RandomHex(8) : options.name;
  req.users_name = !options.name.empty();
  // Only the claimer may drive the daemon: the claim carries its token's
  // verifier for the pod, the token stays here (claim_token.h).
  auto token = DaemonToken(namespace_, req.name);
  if (!token) return tl::unexpected(token.error());
  req.labels = options_.labels;
  for (const auto& [k, v] : options.labels) req.labels[k] = v;
  req.pod_labels = options_.pod_labels;
  req.pod_annotations = options_.pod_annotations;
  req.pod_annotations[std::string(kTokenVerifierAnnotation)] = net::TokenVerifier(*token);
  req.shutdown_after = options.ttl;
  req.ready_timeout = options_.ready_timeout;
  req.created_by = options_.created_by;
  req.observer = options_.observer;
  auto claimed = claimer_->Claim(req);
  if (!claimed) {
    if (!options.name.empty() && claimed.error().code == ErrorCode::kConflict) {
      return MakeError(ErrorCode::kConflict,
                       fmt::format("a sandbox named '{}' exists already in namespace '{}' (see: "
                                   "deepbox sandbox ls --provider k8s)",
                                   options.name, namespace_));
    }
    return tl::unexpected(claimed.error());
  }
  claimed->daemon_token = *token;
  claimed->warm_pool = req.warm_pool;

  auto fail = [&](Error e) -> Result<std::unique_ptr<SandboxLease>> {
    if (auto s = claimer_->Release(claimed->namespace_name, claimed->claim_name); !s) {
      e.message += fmt::format(" (and deleting SandboxClaim {} failed: {})", claimed->claim_name,
                               s.error().message);
    }
    return tl::unexpected(e);
  };
  std::string id = fmt::format("{}/{}", claimed->namespace_name, claimed->claim_name);
  // The claim itself succeeded: what fails from here is the way to its
  // daemon, and the message says so (not "cannot claim", issue 12 item 4).
  auto unreachable = [&](const Error& e) {
    return Error(e.code,
                 fmt::format("claimed sandbox {} is Ready (Sandbox {}), but its daemon cannot be "
                             "reached: {}; the claim was deleted",
                             id, claimed->sandbox_name, e.message),
                 std::string(kReasonClaimedButUnreachable));
  };
  auto conn = SandboxConnection::Open(options_.connection, *claimed);
  if (!conn) return fail(unreachable(conn.error()));
  // The pod is Ready, but the router may need a moment for a fresh pod IP.
  Result<std::unique_ptr<Sandbox>> sandbox = MakeError(ErrorCode::kInternal, "not attempted");
  auto owner_deadline = std::chrono::steady_clock::now() + options_.owner_wait;
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100 * attempt));
    sandbox = RetryWhileAwaitingOwner(
        [&] {
          return options_.sandbox_factory ? options_.sandbox_factory((*conn)->endpoint(), id)
                                          : ConnectSandboxd((*conn)->endpoint(), id, check_daemon);
        },
        owner_deadline);
    if (sandbox || sandbox.error().code != ErrorCode::kUnavailable) break;
  }
  if (!sandbox) {
    Error e = sandbox.error();
    e.message = fmt::format("no answer through {}: {}", (*conn)->endpoint().base_url, e.message);
    (*conn)->Close();
    return fail(unreachable(e));
  }
  if (options_.observer) options_.observer(ClaimStep::kConnected, claimed->claim_name);
  auto* conn_ptr = conn->get();
  auto guarded =
      std::make_unique<GuardedSandbox>(std::move(*sandbox), conn_ptr, id, owner_deadline);
  return std::unique_ptr<SandboxLease>(
      new K8sLease(*claimer_, std::move(*claimed), std::move(*conn), std::move(guarded)));
}

namespace {

// "NAMESPACE/CLAIM" or "CLAIM" (in `default_ns`), both object names.
Result<std::pair<std::string, std::string>> SplitClaimId(std::string_view id,
                                                         const std::string& default_ns) {
  size_t slash = id.find('/');
  std::string ns(slash == std::string_view::npos ? std::string_view(default_ns)
                                                 : id.substr(0, slash));
  std::string name(slash == std::string_view::npos ? id : id.substr(slash + 1));
  if (!IsObjectName(ns) || !IsObjectName(name)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("'{}' is not a Kubernetes sandbox id NAMESPACE/CLAIM (as `deepbox "
                                 "sandbox ls --provider k8s -q` prints)",
                                 id.substr(0, 300)));
  }
  return std::make_pair(std::move(ns), std::move(name));
}

bool ClaimReady(const json::object& claim) {
  if (const auto* conds = Find(claim, {"status", "conditions"});
      conds != nullptr && conds->is_array()) {
    for (const auto& c : conds->get_array()) {
      if (FindString(c, {"type"}) == "Ready" && FindString(c, {"status"}) == "True") return true;
    }
  }
  return false;
}

// "Suspended=True PodTerminated (Pod has been terminated...); Ready=..." for
// messages (the server's words, cut short).
std::string DescribeConditions(const json::object& object) {
  std::string out;
  for (std::string_view type : {kConditionSuspended, kConditionReady}) {
    auto c = FindCondition(object, type);
    if (!c) continue;
    out += fmt::format("{}{}={} {}", out.empty() ? "" : "; ", type, c->status.substr(0, 16),
                       c->reason.substr(0, 128));
    if (!c->message.empty()) out += fmt::format(" ({})", c->message.substr(0, 300));
  }
  return out.empty() ? "no conditions yet" : out;
}

}  // namespace

Result<KeptClaim> K8sSandboxProvider::ClaimAndKeep(const ClaimOptions& options) {
  auto lease = ClaimWith(options, /*check_daemon=*/true);
  if (!lease) return tl::unexpected(lease.error());
  auto* k8s_lease = dynamic_cast<K8sLease*>(lease->get());
  if (k8s_lease == nullptr) return MakeError(ErrorCode::kInternal, "not a Kubernetes lease");
  KeptClaim kept{k8s_lease->claimed(), k8s_lease->endpoint(),
                 options_.connection.mode != ConnectionMode::kPortForward};
  // The record is printed: the router token stays with whoever configured it.
  kept.endpoint.headers.Remove("Authorization");
  (*lease)->Keep();
  return kept;
}

Error K8sSandboxProvider::NoSuchClaim(std::string_view ns, std::string_view name) {
  return Error(ErrorCode::kNotFound, fmt::format("no SandboxClaim {} in namespace {}", name, ns));
}

Result<json::object> K8sSandboxProvider::GetClaimNamed(const std::string& ns,
                                                       const std::string& name) {
  auto claim = api_->GetClaim(ns, name);
  if (!claim && claim.error().code == ErrorCode::kNotFound) {
    return tl::unexpected(NoSuchClaim(ns, name));
  }
  return claim;
}

bool K8sSandboxProvider::SandboxComingUp(const std::string& ns, const json::object& claim) {
  if (!FindString(claim, {"metadata", "deletionTimestamp"}).empty()) return false;
  const std::string sb_name = FindString(claim, {"status", "sandbox", "name"});
  if (!IsObjectName(sb_name)) return false;
  auto sb = api_->GetSandbox(ns, sb_name);
  if (!sb || !FindString(*sb, {"metadata", "deletionTimestamp"}).empty()) return false;
  if (OperatingMode(*sb) != kOperatingModeRunning) return false;
  if (RunningAndReady(*sb)) return true;  // the claim has not caught up yet
  // Its pod on the way (or the condition still from before a resume); not
  // one that failed, expired or cannot be made.
  auto ready = FindCondition(*sb, kConditionReady);
  return ready &&
         (ready->reason == "DependenciesNotReady" || ready->reason == kReasonSandboxSuspended);
}

Result<ConnectedClaim> K8sSandboxProvider::Connect(std::string_view id) {
  auto split = Resolve(id);
  if (!split) return tl::unexpected(split.error());
  const auto& [ns, name] = *split;
  // A pod can go between the claim's status and the connection: restarted,
  // evicted, or replaced right after a resume while the controller's view of
  // it lagged (seen in a k8s-real run: Ready on a pod that was already gone).
  // Each attempt reads the claim again, so a claim that now shows its pod
  // coming up is waited for as a resume waits; one that still shows the same
  // pod is retried for a few seconds (its status catching up), then the
  // error is the pod's.
  const auto give_up =
      std::chrono::steady_clock::now() +
      std::min<std::chrono::milliseconds>(kUnreachablePodGrace, options_.ready_timeout);
  auto pause = std::chrono::milliseconds(100);
  for (;;) {
    bool pod_unreachable = false;
    auto connected = ConnectOnce(ns, name, &pod_unreachable);
    if (connected || !pod_unreachable || std::chrono::steady_clock::now() + pause > give_up) {
      return connected;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::milliseconds>(pause * 2, std::chrono::seconds(2));
  }
}

Result<ConnectedClaim> K8sSandboxProvider::ConnectOnce(const std::string& ns,
                                                       const std::string& name,
                                                       bool* pod_unreachable) {
  auto claim = GetClaimNamed(ns, name);
  if (!claim) return tl::unexpected(claim.error());
  if (!FindString(*claim, {"metadata", "deletionTimestamp"}).empty()) {
    return MakeError(ErrorCode::kNotFound,
                     fmt::format("SandboxClaim {}/{} is being deleted", ns, name));
  }
  const bool suspended = !ClaimReady(*claim) && ReadySaysSuspended(*claim);
  if (suspended || (!ClaimReady(*claim) && SandboxComingUp(ns, *claim))) {
    // The next use of a suspended sandbox resumes it (sandbox/provider.h);
    // one whose pod is starting (a resume by another client), or whose claim
    // has not yet shown its Sandbox Ready, is waited for as a resume waits.
    if (auto st = SetOperatingMode(ns, name, /*suspend=*/false, /*force=*/false); !st) {
      Error e = st.error();
      e.message = fmt::format(
          "SandboxClaim {}/{} is {}: {}", ns, name,
          suspended ? "suspended, and resuming it failed" : "starting, and waiting for it failed",
          e.message);
      return tl::unexpected(e);
    }
    claim = api_->GetClaim(ns, name);
    if (!claim) return tl::unexpected(claim.error());
  }
  ConnectedClaim out;
  out.claimed.namespace_name = ns;
  out.claimed.claim_name = name;
  out.claimed.sandbox_name = FindString(*claim, {"status", "sandbox", "name"});
  if (!ClaimReady(*claim) || !IsObjectName(out.claimed.sandbox_name)) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("SandboxClaim {}/{} is not Ready (no sandbox to run in): {}", ns,
                                 name, DescribeConditions(*claim)));
  }
  if (const auto* ips = Find(*claim, {"status", "sandbox", "podIPs"});
      ips != nullptr && ips->is_array()) {
    for (const auto& ip : ips->get_array()) {
      if (ip.is_string()) out.claimed.pod_ips.emplace_back(ip.get_string());
    }
  }
  if (out.claimed.pod_ips.empty()) {
    if (auto sb = api_->GetSandbox(ns, out.claimed.sandbox_name); sb) {
      if (const auto* ips = Find(*sb, {"status", "podIPs"}); ips != nullptr && ips->is_array()) {
        for (const auto& ip : ips->get_array()) {
          if (ip.is_string()) out.claimed.pod_ips.emplace_back(ip.get_string());
        }
      }
    }
  }
  out.claimed.pod_ip = SelectPodIp(out.claimed.pod_ips);
  auto token = DaemonToken(ns, name);
  if (!token) return tl::unexpected(token.error());
  out.claimed.daemon_token = *token;
  auto conn = SandboxConnection::Open(options_.connection, out.claimed);
  if (!conn) {
    *pod_unreachable = conn.error().code == ErrorCode::kUnavailable;  // a port-forward's
    return tl::unexpected(conn.error());
  }
  SandboxdClientOptions opts;
  opts.id = fmt::format("{}/{}", ns, name);
  opts.default_headers = (*conn)->endpoint().headers;
  auto client = RetryWhileAwaitingOwner(
      [&] { return SandboxdClient::Connect((*conn)->endpoint().base_url, opts); },
      std::chrono::steady_clock::now() + options_.owner_wait);
  if (!client) {
    *pod_unreachable = PodDidNotAnswer(client.error()) && !AwaitingOwner(client.error());
    Error e = NameRouterError(client.error(), (*conn)->endpoint());
    (*conn)->Close();
    return tl::unexpected(e);
  }
  out.connection = std::move(*conn);
  out.client = std::move(*client);
  return out;
}

Result<std::string> K8sSandboxProvider::WarmPoolFor(const std::string& image) {
  if (image.empty() && options_.template_name.empty()) return options_.warm_pool;
  // On Kubernetes the image is the template's: find the template that runs
  // it, and a pool that makes sandboxes from that template.
  auto templates = api_->ListTemplates(namespace_);
  if (!templates) {
    Error e = templates.error();
    e.message = fmt::format(
        "listing the SandboxTemplates of namespace {} (to find {}): {}", namespace_,
        image.empty() ? "template " + options_.template_name : "image " + image, e.message);
    return tl::unexpected(e);
  }
  auto pools = api_->ListWarmPools(namespace_);
  if (!pools) {
    Error e = pools.error();
    e.message =
        fmt::format("listing the SandboxWarmPools of namespace {}: {}", namespace_, e.message);
    return tl::unexpected(e);
  }
  TemplateSelection selection{image, options_.template_name, options_.warm_pool, namespace_};
  auto choice = ChooseTemplate(selection, templates->items, pools->items);
  if (!choice) return tl::unexpected(choice.error());
  return choice->warm_pool;
}

Result<ClaimRecord> K8sSandboxProvider::Describe(std::string_view id) {
  auto split = Resolve(id);
  if (!split) return tl::unexpected(split.error());
  const auto& [ns, name] = *split;
  auto claim = GetClaimNamed(ns, name);
  if (!claim) return tl::unexpected(claim.error());
  ClaimRecord r;
  r.info = InfoOfClaim(ns, *claim);
  r.info.id = fmt::format("{}/{}", ns, name);  // not the object's word for its own name
  if (!FindString(*claim, {"metadata", "deletionTimestamp"}).empty()) r.info.state = "Deleting";
  if (const auto* conds = Find(*claim, {"status", "conditions"});
      conds != nullptr && conds->is_array()) {
    for (const auto& c : conds->get_array()) {
      if (FindString(c, {"type"}) == "Ready" && FindString(c, {"status"}) != "True") {
        r.reason = FindString(c, {"reason"});
      }
    }
  }
  r.claimed.namespace_name = ns;
  r.claimed.claim_name = name;
  r.claimed.api_version = FindString(*claim, {"apiVersion"});
  r.claimed.requested_at =
      FindString(*claim, {"metadata", "annotations", std::string_view(kRequestTimeAnnotation)});
  std::string sandbox = FindString(*claim, {"status", "sandbox", "name"});
  if (IsObjectName(sandbox)) r.claimed.sandbox_name = sandbox;
  if (const auto* ips = Find(*claim, {"status", "sandbox", "podIPs"});
      ips != nullptr && ips->is_array()) {
    for (const auto& ip : ips->get_array()) {
      if (ip.is_string()) r.claimed.pod_ips.emplace_back(ip.get_string());
    }
  }
  r.claimed.pod_ip = SelectPodIp(r.claimed.pod_ips);
  r.warm_pool = FindString(*claim, {"spec", "warmPoolRef", "name"});
  if (r.warm_pool.empty()) r.warm_pool = FindString(*claim, {"spec", "warmpool"});
  r.template_name = FindString(*claim, {"spec", "sandboxTemplateRef", "name"});
  if (r.template_name.empty() && IsObjectName(r.warm_pool)) {
    if (auto pool = api_->GetWarmPool(ns, r.warm_pool); pool) {
      r.template_name = FindString(*pool, {"spec", "sandboxTemplateRef", "name"});
    }
  }
  if (IsObjectName(r.template_name)) {
    if (auto tmpl = api_->GetTemplate(ns, r.template_name); tmpl) {
      r.image = TemplateMainImage(*tmpl);
      const json::value* containers = Find(*tmpl, {"spec", "podTemplate", "spec", "containers"});
      if (containers != nullptr && containers->is_array() && !containers->get_array().empty()) {
        if (const auto* res = Find(containers->get_array().front(), {"resources"});
            res != nullptr && res->is_object()) {
          r.resources = res->get_object();
        }
      }
    }
  }
  // The owner is whoever's key the claim's verifier was made with
  // (claim_token.h): that user derives the same token again; anyone else
  // gets a token the daemon refuses, which is not printed.
  std::string verifier = FindString(
      *claim, {"spec", "additionalPodMetadata", "annotations", kTokenVerifierAnnotation});
  r.has_verifier = !verifier.empty();
  if (r.has_verifier) {
    auto token = DaemonToken(ns, name);
    if (!token) return tl::unexpected(token.error());
    if (net::TokenVerifier(*token) == verifier) {
      r.owner = true;
      r.daemon_token = *token;
    }
  }
  if (!r.claimed.sandbox_name.empty()) {
    ClaimedSandbox target = r.claimed;
    target.daemon_token = r.daemon_token;
    auto endpoint = PlanEndpoint(options_.connection, target);
    if (!endpoint) return tl::unexpected(endpoint.error());
    r.endpoint = std::move(*endpoint);
    // Printed: the router token stays with whoever configured it.
    r.endpoint.headers.Remove("Authorization");
    r.endpoint_lasts = options_.connection.mode != ConnectionMode::kPortForward;
  }
  return r;
}

Result<std::string> K8sSandboxProvider::DaemonToken(std::string_view ns, std::string_view name) {
  std::lock_guard lock(key_mu_);
  if (claim_key_.empty()) {
    std::string path =
        options_.claim_key_file.empty() ? DefaultClaimKeyPath() : options_.claim_key_file;
    auto key = LoadOrCreateClaimKey(path);
    if (!key) {
      Error e = key.error();
      e.message = fmt::format(
          "the key for the claims' daemon tokens: {} (set DEEPBOX_K8S_CLAIM_KEY_FILE to use "
          "another file)",
          e.message);
      return tl::unexpected(e);
    }
    claim_key_ = std::move(*key);
  }
  return DeriveClaimToken(claim_key_, ns, name);
}

bool AwaitingOwner(const Error& error) {
  return error.code == ErrorCode::kUnauthenticated &&
         error.message.find("has no owner yet") != std::string::npos;
}

std::optional<Error> K8sSandboxProvider::WhyGone(const std::string& id) {
  auto split = SplitClaimId(id, namespace_);
  if (!split) return std::nullopt;
  // Outside the namespace of a confined provider: refused, not looked up.
  if (auto st = CheckNamespace(id, split->first); !st) return st.error();
  auto claim = api_->GetClaim(split->first, split->second);
  if (!claim) {
    if (claim.error().code == ErrorCode::kNotFound) {
      return Error(ErrorCode::kNotFound,
                   fmt::format("SandboxClaim {}/{} is gone (deleted, or its TTL expired)",
                               split->first, split->second));
    }
    return std::nullopt;
  }
  if (!FindString(*claim, {"metadata", "deletionTimestamp"}).empty()) {
    return Error(ErrorCode::kNotFound,
                 fmt::format("SandboxClaim {}/{} is being deleted", split->first, split->second));
  }
  return std::nullopt;
}

Result<std::unique_ptr<ClaimWatch>> K8sSandboxProvider::WatchClaim(std::string_view id,
                                                                   ClaimWatch::OnGone on_gone) {
  auto split = Resolve(id);
  if (!split) return tl::unexpected(split.error());
  return ClaimWatch::Start(*api_, std::move(split->first), std::move(split->second),
                           std::move(on_gone));
}

Result<std::vector<std::string>> K8sSandboxProvider::RemoveBySelector(
    std::string_view label_selector, std::string_view ns) {
  if (!ns.empty() && ns != namespace_ && options_.confine_to_namespace) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("namespace '{}' is out of reach: '{}' is the only one this "
                                 "server uses",
                                 ns.substr(0, 300), namespace_));
  }
  return claimer_->DeleteBySelector(ns.empty() ? namespace_ : ns, label_selector);
}

Result<std::pair<std::string, std::string>> K8sSandboxProvider::Resolve(std::string_view id) const {
  auto split = SplitClaimId(id, namespace_);
  if (!split) return tl::unexpected(split.error());
  if (auto st = CheckNamespace(id, split->first); !st) return tl::unexpected(st.error());
  return split;
}

Status K8sSandboxProvider::CheckNamespace(std::string_view id, std::string_view ns) const {
  // The whole namespace is compared: "team-a-other" is not "team-a".
  if (!options_.confine_to_namespace || ns == namespace_) return {};
  return MakeError(ErrorCode::kPermissionDenied,
                   fmt::format("sandbox '{}' is outside namespace '{}', the only one this server "
                               "uses",
                               id.substr(0, 300), namespace_));
}

std::string K8sSandboxProvider::description() const {
  return fmt::format("k8s sandbox from warm pool {}/{}", namespace_, options_.warm_pool);
}

bool K8sSandboxProvider::OwnsId(std::string_view id) const { return IsK8sSandboxId(id); }

SandboxInfo InfoOfClaim(std::string_view ns, const json::object& claim) {
  SandboxInfo i;
  i.id = fmt::format("{}/{}", ns, FindString(claim, {"metadata", "name"}));
  i.provider = "k8s";
  if (const auto* l = Find(claim, {"metadata", "labels"}); l != nullptr && l->is_object()) {
    for (const auto& kv : l->get_object()) {
      if (kv.value().is_string()) {
        i.labels[std::string(kv.key())] = std::string(kv.value().get_string());
      }
    }
  }
  i.created_at = FindString(claim, {"metadata", "creationTimestamp"});
  i.expires_at = FindString(claim, {"spec", "lifecycle", "shutdownTime"});
  i.state = ClaimReady(claim) ? "Ready" : ReadySaysSuspended(claim) ? "Suspended" : "NotReady";
  return i;
}

Result<SandboxInfo> K8sSandboxProvider::Create(const ClaimOptions& options) {
  auto kept = ClaimAndKeep(options);
  if (!kept) return tl::unexpected(kept.error());
  return InfoOfKept(*kept, options);
}

SandboxInfo K8sSandboxProvider::InfoOfKept(const KeptClaim& kept,
                                           const ClaimOptions& options) const {
  const ClaimedSandbox& c = kept.claimed;
  SandboxInfo info;
  info.id = fmt::format("{}/{}", c.namespace_name, c.claim_name);
  info.provider = "k8s";
  // The claim's labels, as List and Inspect show them.
  info.labels = options_.labels;
  for (const auto& [k, v] : options.labels) info.labels[k] = v;
  info.labels[std::string(kCreatedByLabel)] = options_.created_by;
  info.state = "Ready";
  // The claim's times were computed from the request time (claim.cc): the
  // same shutdownTime, without reading the claim back.
  if (auto requested = ParseRfc3339(c.requested_at); requested) {
    info.created_at = FormatRfc3339(std::chrono::floor<std::chrono::seconds>(*requested));
    if (options.ttl.count() > 0) {
      info.expires_at =
          FormatRfc3339(std::chrono::ceil<std::chrono::seconds>(*requested + options.ttl));
    }
  }
  return info;
}

Result<std::unique_ptr<SandboxLease>> K8sSandboxProvider::Attach(const std::string& id) {
  auto parts = Resolve(id);
  if (!parts) return tl::unexpected(parts.error());
  const auto& [ns, name] = *parts;
  std::string sandbox_id = fmt::format("{}/{}", ns, name);
  // The same reading of the claim as `deepbox sandbox exec/cp` (Ready, not
  // being deleted, pod IPs from the claim or its Sandbox; a suspended one
  // resumed first).
  auto connected = Connect(sandbox_id);
  if (!connected) return tl::unexpected(connected.error());
  std::shared_ptr<SandboxConnection> conn(std::move(connected->connection));
  return std::unique_ptr<SandboxLease>(new BorrowedLease(
      std::move(connected->client),
      fmt::format("{} (left as it was; delete it with: kubectl delete sandboxclaim -n {} {})",
                  sandbox_id, ns, name),
      [conn] { conn->Close(); }));
}

Result<DaemonAccess> K8sSandboxProvider::ConnectDaemon(const std::string& id) {
  auto parts = Resolve(id);
  if (!parts) return tl::unexpected(parts.error());
  std::string sandbox_id = fmt::format("{}/{}", parts->first, parts->second);
  auto connected = Connect(sandbox_id);
  if (!connected) return tl::unexpected(connected.error());
  DaemonAccess access;
  access.client = std::move(connected->client);
  DaemonEndpoint endpoint = connected->connection->endpoint();
  access.keep = std::shared_ptr<SandboxConnection>(std::move(connected->connection));
  access.why_gone = [this, sandbox_id](const Error&) { return WhyGone(sandbox_id); };
  access.explain = [endpoint](const Error& e) { return NameRouterError(e, endpoint); };
  return access;
}

Result<SandboxInfo> K8sSandboxProvider::Inspect(const std::string& id) {
  auto split = Resolve(id);
  if (!split) return tl::unexpected(split.error());
  const auto& [ns, name] = *split;
  auto claim = GetClaimNamed(ns, name);
  if (!claim) return tl::unexpected(claim.error());
  return InfoOfClaim(ns, *claim);
}

Result<std::vector<SandboxInfo>> K8sSandboxProvider::List(const std::string& selector) {
  ListOptions lo;
  lo.label_selector = selector;
  auto list = api_->ListClaims(namespace_, lo);
  if (!list) return tl::unexpected(list.error());
  std::vector<SandboxInfo> out;
  out.reserve(list->items.size());
  for (const auto& item : list->items) out.push_back(InfoOfClaim(namespace_, item));
  return out;
}

Status K8sSandboxProvider::Delete(const std::string& id) {
  auto split = Resolve(id);
  if (!split) return tl::unexpected(split.error());
  const auto& [ns, name] = *split;
  auto st = api_->DeleteClaim(ns, name);
  if (!st && st.error().code == ErrorCode::kNotFound) return tl::unexpected(NoSuchClaim(ns, name));
  return st;
}

Result<std::vector<std::string>> K8sSandboxProvider::DeleteMatching(const std::string& selector) {
  if (selector.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "a label selector is required (refusing to delete every claim)");
  }
  auto names = RemoveBySelector(selector);
  if (!names) return tl::unexpected(names.error());
  std::vector<std::string> ids;
  ids.reserve(names->size());
  for (const auto& name : *names) ids.push_back(fmt::format("{}/{}", namespace_, name));
  return ids;
}

namespace {

class K8sWatch : public SandboxWatch {
 public:
  explicit K8sWatch(std::unique_ptr<ClaimWatch> watch) : watch_(std::move(watch)) {}
  void Stop() override { watch_->Stop(); }

 private:
  std::unique_ptr<ClaimWatch> watch_;  // its destructor stops it
};

}  // namespace

Result<std::unique_ptr<SandboxWatch>> K8sSandboxProvider::Watch(
    const std::string& id, std::function<void(const Error&)> on_gone) {
  auto w = WatchClaim(id, std::move(on_gone));
  if (!w) return tl::unexpected(w.error());
  return std::unique_ptr<SandboxWatch>(new K8sWatch(std::move(*w)));
}

// ------------------------------------------------------------------ suspend / resume

namespace {

std::vector<std::string> Strings(const json::object& o,
                                 std::initializer_list<std::string_view> path) {
  std::vector<std::string> out;
  if (const auto* a = Find(o, path); a != nullptr && a->is_array()) {
    for (const auto& v : a->get_array()) {
      if (v.is_string()) out.emplace_back(v.get_string());
    }
  }
  return out;
}

using WatchFn = std::function<Result<WatchStats>(const WatchOptions&,
                                                 const std::function<bool(const WatchEvent&)>&)>;

// Watches one object (`what`, named `name`, as last read: `current`) until
// done(object), its deletion (NOT_FOUND) or the deadline (TIMEOUT, saying
// `late` and the conditions last seen); the object as it then was.
Result<json::object> Await(const WatchFn& watch, std::string_view what, std::string_view late,
                           const std::string& name, json::object current,
                           const std::function<bool(const json::object&)>& done,
                           std::chrono::steady_clock::time_point deadline) {
  if (done(current)) return current;
  WatchOptions wo;
  wo.field_selector = "metadata.name=" + name;
  wo.resource_version = FindString(current, {"metadata", "resourceVersion"});
  wo.known_objects = {current};  // a re-list that lacks it reports its deletion
  wo.deadline = deadline;
  std::optional<Error> failure;
  bool finished = false;
  auto r = watch(wo, [&](const WatchEvent& ev) {
    if (ev.type == WatchEventType::kBookmark) return true;
    if (FindString(ev.object, {"metadata", "name"}) != name) return true;
    if (ev.type == WatchEventType::kDeleted) {
      failure = Error(ErrorCode::kNotFound, fmt::format("{} was deleted meanwhile", what));
      return false;
    }
    current = ev.object;
    finished = done(current);
    return !finished;
  });
  if (failure) return tl::unexpected(*failure);
  if (finished) return current;
  if (!r && r.error().code != ErrorCode::kTimeout) return tl::unexpected(r.error());
  return MakeError(ErrorCode::kTimeout, fmt::format("{}: {}", late, DescribeConditions(current)));
}

}  // namespace

Status K8sSandboxProvider::Pause(const std::string&) {
  return tl::unexpected(Unimplemented(
      "pause", "Kubernetes has no pause: use suspend (the pod ends, files on a volume stay)"));
}

Status K8sSandboxProvider::Suspend(const std::string& id, const SuspendOptions& options) {
  auto split = Resolve(id);
  if (!split) return tl::unexpected(split.error());
  return SetOperatingMode(split->first, split->second, /*suspend=*/true, options.force);
}

Status K8sSandboxProvider::Resume(const std::string& id) {
  auto split = Resolve(id);
  if (!split) return tl::unexpected(split.error());
  return SetOperatingMode(split->first, split->second, /*suspend=*/false, /*force=*/false);
}

Status K8sSandboxProvider::SetOperatingMode(const std::string& ns, const std::string& name,
                                            bool suspend, bool force) {
  auto deadline = std::chrono::steady_clock::now() + options_.ready_timeout;
  const std::string id = fmt::format("{}/{}", ns, name);
  const std::string_view verb = suspend ? "suspend" : "resume";
  auto claim = GetClaimNamed(ns, name);
  if (!claim) return tl::unexpected(claim.error());
  if (!FindString(*claim, {"metadata", "deletionTimestamp"}).empty()) {
    return MakeError(ErrorCode::kNotFound, fmt::format("SandboxClaim {} is being deleted", id));
  }
  // The claim's Sandbox, as the claim controller finds it (reference §2).
  std::string sb_name = FindString(*claim, {"status", "sandbox", "name"});
  if (sb_name.empty()) {
    sb_name = FindString(*claim, {"metadata", "annotations", "agents.x-k8s.io/sandbox-name"});
  }
  if (sb_name.empty()) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("SandboxClaim {} has no Sandbox yet: nothing to {}", id, verb));
  }
  if (!IsObjectName(sb_name)) {
    return MakeError(ErrorCode::kInternal,
                     fmt::format("SandboxClaim {} is bound to a Sandbox with an invalid name '{}'",
                                 id, sb_name.substr(0, 300)));
  }
  auto type = api_->SandboxType();
  if (!type) return tl::unexpected(type.error());
  if (type->version != "v1beta1") {
    return tl::unexpected(Unimplemented(
        verb, fmt::format("spec.operatingMode needs agents.x-k8s.io/v1beta1 (agent-sandbox "
                          "v1.0 or later); this cluster serves Sandbox {}",
                          type->version)));
  }
  const std::string what = fmt::format("Sandbox {} of SandboxClaim {}", sb_name, id);
  auto sandbox = api_->GetSandbox(ns, sb_name);
  if (!sandbox) {
    Error e = sandbox.error();
    if (e.code == ErrorCode::kNotFound) {
      return MakeError(ErrorCode::kUnavailable, fmt::format("{} is missing", what));
    }
    return tl::unexpected(e);
  }
  // Never another claim's Sandbox, whatever the claim's status says.
  if (const auto* refs = Find(*sandbox, {"metadata", "ownerReferences"});
      refs != nullptr && refs->is_array()) {
    std::string claim_uid = FindString(*claim, {"metadata", "uid"});
    for (const auto& r : refs->get_array()) {
      const json::value* controller = Find(r, {"controller"});
      if (controller == nullptr || !controller->is_bool() || !controller->get_bool()) continue;
      if (FindString(r, {"uid"}) != claim_uid) {
        return MakeError(ErrorCode::kConflict,
                         fmt::format("{} is controlled by another object, not by the claim: "
                                     "not changing it",
                                     what));
      }
    }
  }
  const std::string_view want = suspend ? kOperatingModeSuspended : kOperatingModeRunning;
  if (OperatingMode(*sandbox) != want) {
    if (suspend && !force) {
      // Refused before anything changes: the pod's end would take the files.
      auto backing = DescribeWorkspace(*sandbox);
      if (!backing.survives_suspend) {
        return MakeError(
            ErrorCode::kConflict,
            fmt::format("suspending sandbox {} would lose its files: {} is {}, not a persistent "
                        "volume (deploy/k8s/sandbox-template-pvc.yaml keeps them on a "
                        "PersistentVolumeClaim from volumeClaimTemplates); --force suspends "
                        "anyway",
                        id, kWorkspacePath, backing.description));
      }
    }
    json::object spec;
    spec["operatingMode"] = want;
    json::object patch;
    patch["spec"] = std::move(spec);
    auto patched = api_->PatchSandbox(ns, sb_name, patch);
    if (!patched) {
      Error e = patched.error();
      e.message = fmt::format("setting spec.operatingMode {} on {}: {}", want, what, e.message);
      return tl::unexpected(e);
    }
    sandbox = std::move(*patched);
  }
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(options_.ready_timeout).count();
  WatchFn sandboxes = [&](const WatchOptions& o, const std::function<bool(const WatchEvent&)>& f) {
    return api_->WatchSandboxes(ns, o, f);
  };
  auto reached = Await(
      sandboxes, what,
      suspend ? fmt::format("{} did not finish suspending within {} s (spec.operatingMode stays "
                            "Suspended)",
                            what, seconds)
              : fmt::format("{} did not become Ready again within {} s", what, seconds),
      sb_name, std::move(*sandbox), suspend ? SuspendSettled : RunningAndReady, deadline);
  if (!reached) return tl::unexpected(reached.error());
  if (suspend) return {};
  // Connect reads the claim: wait until it is Ready with the new pod's IPs
  // (the claim controller copies them from the Sandbox).
  auto ips = Strings(*reached, {"status", "podIPs"});
  WatchFn claims = [&](const WatchOptions& o, const std::function<bool(const WatchEvent&)>& f) {
    return api_->WatchClaims(ns, o, f);
  };
  auto bound = Await(
      claims, fmt::format("SandboxClaim {}", id),
      fmt::format("SandboxClaim {} did not show its resumed Sandbox Ready within {} s", id,
                  seconds),
      name, std::move(*claim),
      [&](const json::object& c) {
        return ClaimReady(c) &&
               (ips.empty() || Find(c, {"status", "sandbox", "podIPs"}) == nullptr ||
                Strings(c, {"status", "sandbox", "podIPs"}) == ips);
      },
      deadline);
  if (!bound) return tl::unexpected(bound.error());
  return {};
}

}  // namespace deepbox::k8s
