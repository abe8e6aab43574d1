#include "mcp/providers.h"

#include <fmt/format.h>

#include <cstdlib>
#include <map>
#include <mutex>

#ifdef DEEPBOX_HAVE_K8S
#include "k8s/claim.h"
#include "k8s/connection.h"
#include "k8s/kubeconfig.h"
#include "k8s/provider.h"
#include "k8s/util.h"
#endif

namespace deepbox::mcp {
namespace {

using local::lifecycle::SandboxMeta;

SandboxInfo FromMeta(const SandboxMeta& m) {
  SandboxInfo i;
  i.id = m.id;
  i.provider = "local";
  i.labels = m.labels;
  i.created_at = local::lifecycle::FormatTime(m.created_at_ms);
  if (m.expires_at_ms) i.expires_at = local::lifecycle::FormatTime(*m.expires_at_ms);
  i.network = m.network;
  i.state = m.state;
  return i;
}

class LocalBackend : public SandboxBackend {
 public:
  explicit LocalBackend(std::unique_ptr<local::lifecycle::LocalSandboxProvider> p)
      : provider_(std::move(p)) {}
  std::string name() const override { return "local"; }
  bool Owns(const std::string& id) const override { return local::lifecycle::Store::ValidId(id); }
  Result<SandboxInfo> Create(const ClaimOptions& options) override {
    auto meta = provider_->CreateSandbox(options, /*allow_warm=*/true);
    if (!meta) return tl::unexpected(meta.error());
    return FromMeta(*meta);
  }
  Result<std::vector<SandboxInfo>> List(const std::string& selector) override {
    auto sel = local::lifecycle::Selector::Parse(selector);
    if (!sel) return tl::unexpected(sel.error());
    auto metas = provider_->List(*sel);
    if (!metas) return tl::unexpected(metas.error());
    std::vector<SandboxInfo> out;
    for (const auto& m : *metas) {
      if (m.state == "warm") continue;  // the pool's, not anybody's yet
      out.push_back(FromMeta(m));
    }
    return out;
  }
  Status Delete(const std::string& id) override { return provider_->Delete(id); }
  Result<std::shared_ptr<Sandbox>> Connect(const std::string& id) override {
    auto c = provider_->Connect(id);
    if (!c) return tl::unexpected(c.error());
    return std::shared_ptr<Sandbox>(std::move(*c));
  }

 private:
  std::unique_ptr<local::lifecycle::LocalSandboxProvider> provider_;
};

#ifdef DEEPBOX_HAVE_K8S

// A sandbox plus what keeps its connection open (a port-forward, a lease).
struct K8sHandle {
  std::unique_ptr<k8s::SandboxConnection> conn;
  std::unique_ptr<SandboxLease> lease;
  std::unique_ptr<Sandbox> sandbox;
  ~K8sHandle() {
    sandbox.reset();
    if (conn) conn->Close();
  }
};

class K8sBackend : public SandboxBackend {
 public:
  explicit K8sBackend(std::unique_ptr<k8s::K8sSandboxProvider> provider)
      : provider_(std::move(provider)) {}
  std::string name() const override { return "k8s"; }
  bool Owns(const std::string& id) const override {
    size_t slash = id.find('/');
    return slash != std::string::npos && k8s::IsObjectName(id.substr(0, slash)) &&
           k8s::IsObjectName(id.substr(slash + 1));
  }
  Result<SandboxInfo> Create(const ClaimOptions& options) override {
    auto lease = provider_->Claim(options);
    if (!lease) return tl::unexpected(lease.error());
    (*lease)->Keep();  // it lives until sandbox_delete or its TTL
    SandboxInfo info;
    info.id = (*lease)->sandbox().id();
    info.provider = "k8s";
    info.labels = options.labels;
    info.state = "Ready";
    auto h = std::make_shared<K8sHandle>();
    h->lease = std::move(*lease);
    std::lock_guard<std::mutex> lock(mu_);
    handles_[info.id] = std::move(h);
    return info;
  }
  Result<std::vector<SandboxInfo>> List(const std::string& selector) override {
    k8s::ListOptions lo;
    lo.label_selector = selector;
    auto list = provider_->api().ListClaims(provider_->namespace_name(), lo);
    if (!list) return tl::unexpected(list.error());
    std::vector<SandboxInfo> out;
    for (const auto& item : list->items) {
      SandboxInfo i;
      i.id = provider_->namespace_name() + "/" + k8s::FindString(item, {"metadata", "name"});
      i.provider = "k8s";
      if (const auto* l = k8s::Find(item, {"metadata", "labels"}); l && l->is_object()) {
        for (const auto& kv : l->get_object()) {
          if (kv.value().is_string()) i.labels[kv.key()] = std::string(kv.value().get_string());
        }
      }
      i.created_at = k8s::FindString(item, {"metadata", "creationTimestamp"});
      i.expires_at = k8s::FindString(item, {"spec", "lifecycle", "shutdownTime"});
      i.state = "NotReady";
      if (const auto* conds = k8s::Find(item, {"status", "conditions"});
          conds && conds->is_array()) {
        for (const auto& c : conds->get_array()) {
          if (k8s::FindString(c, {"type"}) == "Ready" && k8s::FindString(c, {"status"}) == "True") {
            i.state = "Ready";
          }
        }
      }
      out.push_back(std::move(i));
    }
    return out;
  }
  Status Delete(const std::string& id) override {
    if (auto st = InNamespace(id); !st) return st;
    size_t slash = id.find('/');
    std::shared_ptr<K8sHandle> h;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = handles_.find(id);
      if (it != handles_.end()) {
        h = std::move(it->second);
        handles_.erase(it);
      }
    }
    return provider_->api().DeleteClaim(id.substr(0, slash), id.substr(slash + 1));
  }
  Result<std::shared_ptr<Sandbox>> Connect(const std::string& id) override {
    if (auto st = InNamespace(id); !st) return tl::unexpected(st.error());
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = handles_.find(id);
      if (it != handles_.end() && it->second->lease) {
        auto h = it->second;
        return std::shared_ptr<Sandbox>(h, &h->lease->sandbox());
      }
    }
    auto connected = provider_->Connect(id);
    if (!connected) return tl::unexpected(connected.error());
    auto h = std::make_shared<K8sHandle>();
    h->conn = std::move(connected->connection);
    h->sandbox = std::move(connected->client);
    return std::shared_ptr<Sandbox>(h, h->sandbox.get());
  }

  bool has_network() const override { return false; }

 private:
  // Claims of other namespaces are out of bounds, whatever the kubeconfig's
  // rights there: the server acts for its clients only in its own.
  Status InNamespace(const std::string& id) const {
    const std::string& ns = provider_->namespace_name();
    if (id.compare(0, id.find('/'), ns) == 0 && id.find('/') == ns.size()) return {};
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("sandbox '{}' is outside namespace '{}', the only one this "
                                 "server uses",
                                 id, ns));
  }

  std::unique_ptr<k8s::K8sSandboxProvider> provider_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<K8sHandle>> handles_;
};

#endif

}  // namespace

Result<std::unique_ptr<SandboxBackend>> MakeLocalBackend(
    local::lifecycle::LocalProviderOptions options) {
  auto p = local::lifecycle::LocalSandboxProvider::Create(std::move(options));
  if (!p) return tl::unexpected(p.error());
  return std::unique_ptr<SandboxBackend>(new LocalBackend(std::move(*p)));
}

Result<std::unique_ptr<SandboxBackend>> MakeK8sBackend(const K8sBackendOptions& options) {
#ifdef DEEPBOX_HAVE_K8S
  k8s::KubeconfigOptions ko;
  if (!options.kubeconfig.empty()) ko.kubeconfig = options.kubeconfig;
  ko.context = options.context;
  std::string ns = options.namespace_name;
  if (ns.empty()) {
    if (const char* env = std::getenv("AGENT_SANDBOX_NAMESPACE"); env != nullptr) ns = env;
  }
  ko.namespace_override = ns;
  auto rest = k8s::LoadDefaultConfig(ko);
  if (!rest) return tl::unexpected(rest.error());
  k8s::K8sProviderOptions po;
  po.rest = *rest;
  po.namespace_name = ns;
  po.warm_pool = options.warm_pool;
  po.ready_timeout = options.ready_timeout;
  po.created_by = "deepbox-mcp";
  po.connection.router_token = options.router_token;
  if (!options.router_url.empty()) {
    po.connection.mode = k8s::ConnectionMode::kDirect;
    po.connection.direct_url = options.router_url;
  } else if (k8s::InClusterAvailable()) {
    po.connection.mode = k8s::ConnectionMode::kInCluster;
  } else {
    po.connection.mode = k8s::ConnectionMode::kPortForward;
    if (!options.kubeconfig.empty()) {
      po.connection.port_forward.kubectl_args.push_back("--kubeconfig=" + options.kubeconfig);
    }
    if (!rest->context.empty()) {
      po.connection.port_forward.kubectl_args.push_back("--context=" + rest->context);
    }
  }
  auto provider = k8s::K8sSandboxProvider::Create(std::move(po));
  if (!provider) return tl::unexpected(provider.error());
  return std::unique_ptr<SandboxBackend>(new K8sBackend(std::move(*provider)));
#else
  (void)options;
  return MakeError(ErrorCode::kUnimplemented,
                   "this deepbox was built without the Kubernetes provider (src/k8s)");
#endif
}

}  // namespace deepbox::mcp
