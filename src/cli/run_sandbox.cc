#include "cli/run_sandbox.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "local/lifecycle/provider.h"
#ifdef DEEPBOX_HAVE_K8S
#include "k8s/kubeconfig.h"
#include "k8s/provider.h"
#endif

namespace deepbox::run {

namespace {

Result<RunProvider> MakeLocal(const RunConfig& config) {
  local::lifecycle::LocalProviderOptions o;
  o.pool = config.pool;
  o.limits = config.limits;
  auto provider = local::lifecycle::LocalSandboxProvider::Create(o);
  if (!provider) return tl::unexpected(provider.error());
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
