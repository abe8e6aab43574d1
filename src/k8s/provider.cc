#include "k8s/provider.h"

#include <fmt/format.h>

#include <thread>

#include "sandbox/sandboxd_client.h"

namespace deepbox::k8s {

namespace {

// Delegates to the daemon client, refusing (clearly) once the tunnel is gone.
class GuardedSandbox : public Sandbox {
 public:
  GuardedSandbox(std::unique_ptr<Sandbox> inner, SandboxConnection* conn, std::string id)
      : inner_(std::move(inner)), conn_(conn), id_(std::move(id)) {}

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
    auto r = f();
    if (!r && r.error().code == ErrorCode::kUnavailable) {
      if (auto h = conn_->Health(); !h) return tl::unexpected(h.error());
    }
    if (!r) return tl::unexpected(NameRouterError(r.error(), conn_->endpoint()));
    return r;
  }

  std::unique_ptr<Sandbox> inner_;
  SandboxConnection* conn_;
  std::string id_;
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
  ClaimRequest req;
  req.warm_pool = options_.warm_pool;
  req.namespace_name = namespace_;
  req.labels = options_.labels;
  for (const auto& [k, v] : options.labels) req.labels[k] = v;
  req.pod_labels = options_.pod_labels;
  req.pod_annotations = options_.pod_annotations;
  req.shutdown_after = options.ttl;
  req.ready_timeout = options_.ready_timeout;
  req.created_by = options_.created_by;
  req.observer = options_.observer;
  auto claimed = claimer_->Claim(req);
  if (!claimed) return tl::unexpected(claimed.error());

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
                 fmt::format("{}{} is Ready (Sandbox {}), but its daemon cannot be reached: {}; "
                             "the claim was deleted",
                             kClaimedButUnreachable, id, claimed->sandbox_name, e.message));
  };
  auto conn = SandboxConnection::Open(options_.connection, *claimed);
  if (!conn) return fail(unreachable(conn.error()));
  // The pod is Ready, but the router may need a moment for a fresh pod IP.
  Result<std::unique_ptr<Sandbox>> sandbox = MakeError(ErrorCode::kInternal, "not attempted");
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100 * attempt));
    sandbox = options_.sandbox_factory ? options_.sandbox_factory((*conn)->endpoint(), id)
                                       : ConnectSandboxd((*conn)->endpoint(), id, check_daemon);
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
  auto guarded = std::make_unique<GuardedSandbox>(std::move(*sandbox), conn_ptr, id);
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

Result<ConnectedClaim> K8sSandboxProvider::Connect(std::string_view id) {
  auto split = SplitClaimId(id, namespace_);
  if (!split) return tl::unexpected(split.error());
  const auto& [ns, name] = *split;
  auto claim = api_->GetClaim(ns, name);
  if (!claim) {
    Error e = claim.error();
    if (e.code == ErrorCode::kNotFound) {
      e.message = fmt::format("no SandboxClaim {} in namespace {}", name, ns);
    }
    return tl::unexpected(e);
  }
  ConnectedClaim out;
  out.claimed.namespace_name = ns;
  out.claimed.claim_name = name;
  out.claimed.sandbox_name = FindString(*claim, {"status", "sandbox", "name"});
  if (!FindString(*claim, {"metadata", "deletionTimestamp"}).empty()) {
    return MakeError(ErrorCode::kNotFound,
                     fmt::format("SandboxClaim {}/{} is being deleted", ns, name));
  }
  if (!ClaimReady(*claim) || !IsObjectName(out.claimed.sandbox_name)) {
    return MakeError(
        ErrorCode::kUnavailable,
        fmt::format("SandboxClaim {}/{} is not Ready (no sandbox to run in)", ns, name));
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
  auto conn = SandboxConnection::Open(options_.connection, out.claimed);
  if (!conn) return tl::unexpected(conn.error());
  SandboxdClientOptions opts;
  opts.id = fmt::format("{}/{}", ns, name);
  opts.default_headers = (*conn)->endpoint().headers;
  auto client = SandboxdClient::Connect((*conn)->endpoint().base_url, opts);
  if (!client) {
    Error e = NameRouterError(client.error(), (*conn)->endpoint());
    (*conn)->Close();
    return tl::unexpected(e);
  }
  out.connection = std::move(*conn);
  out.client = std::move(*client);
  return out;
}

std::optional<Error> K8sSandboxProvider::WhyGone(std::string_view id) {
  auto split = SplitClaimId(id, namespace_);
  if (!split) return std::nullopt;
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
  auto split = SplitClaimId(id, namespace_);
  if (!split) return tl::unexpected(split.error());
  return ClaimWatch::Start(*api_, std::move(split->first), std::move(split->second),
                           std::move(on_gone));
}

Result<std::vector<std::string>> K8sSandboxProvider::RemoveBySelector(
    std::string_view label_selector, std::string_view ns) {
  return claimer_->DeleteBySelector(ns.empty() ? namespace_ : ns, label_selector);
}

}  // namespace deepbox::k8s
