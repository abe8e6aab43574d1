#include "cli/run_sandbox.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>

#include "cli/provider_util.h"
#include "common/terminal_text.h"
#include "local/lifecycle/provider.h"
#ifdef DEEPBOX_HAVE_K8S
#include "k8s/claim.h"
#include "k8s/connection.h"
#include "k8s/kubeconfig.h"
#include "k8s/provider.h"
#include "k8s/util.h"
#endif

namespace deepbox::run {

namespace {

// An existing sandbox the run only borrows: releasing it leaves it running.
class AttachedLease : public SandboxLease {
 public:
  // `on_close` ends what the connection needs (a k8s port-forward).
  AttachedLease(std::unique_ptr<Sandbox> sandbox, std::string describe,
                std::function<void()> on_close = nullptr)
      : sandbox_(std::move(sandbox)),
        describe_(std::move(describe)),
        on_close_(std::move(on_close)) {}
  ~AttachedLease() override { (void)Release(); }
  Sandbox& sandbox() override { return *sandbox_; }
  Status Release() override {
    if (on_close_) std::exchange(on_close_, nullptr)();
    return {};
  }
  void Keep() override {}
  std::string Describe() const override { return describe_; }

 private:
  std::unique_ptr<Sandbox> sandbox_;
  std::string describe_;
  std::function<void()> on_close_;
};

Result<RunProvider> MakeLocal(const RunConfig& config) {
  local::lifecycle::LocalProviderOptions o;
  o.pool = config.pool;
  o.limits = config.limits;
  auto provider = local::lifecycle::LocalSandboxProvider::Create(o);
  if (!provider) return tl::unexpected(provider.error());
  if (config.pool_explicit) {
    if (auto st = cli::CheckPoolExists(**provider, config.pool); !st)
      return tl::unexpected(st.error());
  }
  // A second handle for the signal thread and the probe: independent of the
  // lease's (a provider is cheap: the state directory and two paths).
  auto side = local::lifecycle::LocalSandboxProvider::Create(o);
  if (!side) return tl::unexpected(side.error());
  std::shared_ptr<local::lifecycle::LocalSandboxProvider> other(std::move(*side));
  RunProvider rp;
  rp.description = "local sandbox";
  rp.provider = std::move(*provider);
  rp.limits_line = [other, limits = config.limits](const std::string& id) {
    std::string line = "limits: " + limits.Describe();
    if (auto meta = other->Get(id); meta && !meta->limits_note.empty()) {
      line += "; WARNING: " + meta->limits_note;
    }
    return line;
  };
  rp.attach = [other](const std::string& id) -> Result<std::unique_ptr<SandboxLease>> {
    auto client = other->Connect(id);
    if (!client) return tl::unexpected(client.error());
    std::unique_ptr<Sandbox> sandbox = std::move(*client);
    return std::unique_ptr<SandboxLease>(new AttachedLease(
        std::move(sandbox),
        fmt::format("{} (left running; run commands in it with: deepbox sandbox exec {} -- CMD; "
                    "delete it with: deepbox sandbox rm {})",
                    id, id, id)));
  };
  rp.force_delete = [other](const std::string& id) -> Status {
    auto st = other->Delete(id);
    if (!st && st.error().code == ErrorCode::kNotFound) return {};
    return st;
  };
  rp.probe = [other](const std::string& id, Sandbox& sandbox) -> std::optional<Error> {
    if (auto meta = other->Get(id); !meta && meta.error().code == ErrorCode::kNotFound) {
      return meta.error();
    }
    auto st = sandbox.Stat(sandbox.root());
    if (st || st.error().code == ErrorCode::kNotFound ||
        st.error().code == ErrorCode::kPermissionDenied) {
      return std::nullopt;
    }
    // It stopped answering: say why once the provider knows (a deletion in
    // progress shows up as gone within moments).
    for (int i = 0; i < 30; ++i) {
      auto meta = other->Get(id);
      if (!meta && meta.error().code == ErrorCode::kNotFound) return meta.error();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return Error(ErrorCode::kUnavailable,
                 fmt::format("sandbox '{}' stopped answering: {}", id, st.error().message));
  };
  return rp;
}

#ifdef DEEPBOX_HAVE_K8S
Result<RunProvider> MakeK8s(const RunConfig& config, const std::string& run_id) {
  k8s::KubeconfigOptions ko;
  if (!config.kubeconfig.empty()) ko.kubeconfig = config.kubeconfig;
  ko.context = config.context;
  ko.namespace_override = config.namespace_name;
  auto rest = k8s::LoadDefaultConfig(ko);
  if (!rest) return tl::unexpected(rest.error());
  k8s::K8sProviderOptions po;
  po.rest = *rest;
  po.namespace_name = config.namespace_name;
  po.warm_pool = config.warm_pool;
  po.ready_timeout = std::chrono::seconds(config.ready_timeout_seconds);
  po.connection.router_token = config.router_token;
  if (!config.router_url.empty()) {
    po.connection.mode = k8s::ConnectionMode::kDirect;
    po.connection.direct_url = config.router_url;
  } else if (k8s::InClusterAvailable()) {
    po.connection.mode = k8s::ConnectionMode::kInCluster;
  } else {
    po.connection.mode = k8s::ConnectionMode::kPortForward;
    if (!config.kubeconfig.empty()) {
      po.connection.port_forward.kubectl_args.push_back("--kubeconfig=" + config.kubeconfig);
    }
    if (!rest->context.empty()) {
      po.connection.port_forward.kubectl_args.push_back("--context=" + rest->context);
    }
  }
  po.on_warning = [](const std::string& w) {
    std::fprintf(stderr, "deepbox: warning: %s\n", SanitizeLineForTerminal(w).c_str());
  };
  auto provider = k8s::K8sSandboxProvider::Create(po);
  if (!provider) return tl::unexpected(provider.error());
  // The signal thread deletes the claim through its own client.
  auto side = k8s::K8sSandboxProvider::Create(po);
  if (!side) return tl::unexpected(side.error());
  std::shared_ptr<k8s::K8sSandboxProvider> other(std::move(*side));
  RunProvider rp;
  rp.description = fmt::format("k8s sandbox from warm pool {}/{}", (*provider)->namespace_name(),
                               config.warm_pool);
  rp.provider = std::move(*provider);
  std::string selector = fmt::format("{}={}", kRunIdLabel, run_id);
  rp.force_delete = [other, selector](const std::string&) -> Status {
    auto deleted = other->RemoveBySelector(selector);
    if (!deleted) return tl::unexpected(deleted.error());
    return {};
  };
  // NAMESPACE/CLAIM: a Ready claim (one kept with --keep-sandbox), reached the
  // way a new claim would be; the claim is left as it is.
  rp.attach = [other](const std::string& id) -> Result<std::unique_ptr<SandboxLease>> {
    size_t slash = id.find('/');
    std::string ns = slash == std::string::npos ? other->namespace_name() : id.substr(0, slash);
    std::string name = slash == std::string::npos ? id : id.substr(slash + 1);
    if (!k8s::IsObjectName(ns) || !k8s::IsObjectName(name)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("'{}' is not NAMESPACE/CLAIM (as `deepbox sandbox ls "
                                   "--provider k8s` shows)",
                                   id));
    }
    // The same reading of the claim as `deepbox sandbox exec/cp` (Ready,
    // not being deleted, pod IPs from the claim or its Sandbox).
    std::string sandbox_id = fmt::format("{}/{}", ns, name);
    auto connected = other->Connect(sandbox_id);
    if (!connected) return tl::unexpected(connected.error());
    std::shared_ptr<k8s::SandboxConnection> shared_conn(std::move(connected->connection));
    return std::unique_ptr<SandboxLease>(new AttachedLease(
        std::move(connected->client),
        fmt::format("{} (left as it was; delete it with: kubectl delete sandboxclaim -n {} {})",
                    sandbox_id, ns, name),
        [shared_conn] { shared_conn->Close(); }));
  };
  // The claim's own watch (issue 12 item 5): a claim deleted from outside
  // ends the run at once instead of when the daemon stops answering.
  rp.watch = [other](const std::string& id,
                     std::function<void(const Error&)> on_gone) -> std::function<void()> {
    auto w = other->WatchClaim(id, std::move(on_gone));
    if (!w) return [] {};  // e.g. no watch permission: failed calls still probe
    std::shared_ptr<k8s::ClaimWatch> shared(std::move(*w));
    return [shared] { shared->Stop(); };
  };
  rp.probe = [](const std::string& id, Sandbox& sandbox) -> std::optional<Error> {
    auto st = sandbox.Stat(sandbox.root());
    if (st || st.error().code == ErrorCode::kNotFound ||
        st.error().code == ErrorCode::kPermissionDenied) {
      return std::nullopt;
    }
    return Error(ErrorCode::kUnavailable,
                 fmt::format("sandbox {} stopped answering: {}", id, st.error().message));
  };
  return rp;
}
#endif

}  // namespace

Result<RunProvider> MakeRunProvider(const RunConfig& config, const std::string& run_id) {
  if (config.sandbox == "k8s") {
#ifdef DEEPBOX_HAVE_K8S
    return MakeK8s(config, run_id);
#else
    (void)run_id;
    return MakeError(ErrorCode::kUnimplemented,
                     "this deepbox was built without the Kubernetes provider (src/k8s)");
#endif
  }
  (void)run_id;
  return MakeLocal(config);
}

LeaseGuard::~LeaseGuard() { (void)Release(); }

Status LeaseGuard::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return {};
  done_ = true;
  return lease_->Release();
}

void LeaseGuard::Keep() {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return;
  done_ = true;
  lease_->Keep();
}

std::optional<Error> WatchedSandbox::fatal() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fatal_;
}

void WatchedSandbox::MarkGone(const Error& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fatal_) fatal_ = why;
  }
  if (cancel_ != nullptr) cancel_->store(true);
}

void WatchedSandbox::OnError(const Error& e) {
  switch (e.code) {
    case ErrorCode::kUnavailable:
    case ErrorCode::kTimeout:
    case ErrorCode::kInternal:
      break;
    default:
      return;  // an ordinary tool failure (no such file, ...)
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fatal_) return;
  }
  std::optional<Error> gone = probe_ ? probe_() : std::nullopt;
  if (!gone) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fatal_) fatal_ = std::move(gone);
  }
  if (cancel_ != nullptr) cancel_->store(true);
}

}  // namespace deepbox::run
