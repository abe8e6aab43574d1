// K8sSandboxProvider: sandboxes claimed from an agent-sandbox SandboxWarmPool.
// Claim() = SandboxClaim (claim.h) + a way to the pod's daemon (connection.h)
// + a SandboxdClient; the lease's Release() deletes the claim and stops the
// port-forward. The Sandbox it hands out is "<namespace>/<claim>" and checks
// the tunnel's health before each call, so a dead port-forward is a clear
// error rather than a connection refused.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "k8s/claim.h"
#include "k8s/client.h"
#include "k8s/connection.h"
#include "k8s/kubeconfig.h"
#include "sandbox/sandbox.h"

namespace deepbox::k8s {

// Makes the Sandbox for a daemon endpoint (default: SandboxdClient::Connect).
using SandboxFactory = std::function<Result<std::unique_ptr<Sandbox>>(
    const DaemonEndpoint& endpoint, const std::string& id)>;

struct K8sProviderOptions {
  RestConfig rest;             // from LoadDefaultConfig / LoadKubeconfig / LoadInClusterConfig
  ClientOptions client;        // rate limit, retries
  std::string namespace_name;  // "" = the kubeconfig context's namespace
  std::string warm_pool = "deepagents-warmpool";
  std::chrono::milliseconds ready_timeout{180000};
  std::map<std::string, std::string> labels;  // on every claim (ClaimOptions.labels added)
  std::map<std::string, std::string> pod_labels;
  std::map<std::string, std::string> pod_annotations;
  std::string created_by = "deepbox";
  ConnectionOptions connection;
  SandboxFactory sandbox_factory;  // null = SandboxdClient
};

class K8sSandboxProvider : public SandboxProvider {
 public:
  static Result<std::unique_ptr<K8sSandboxProvider>> Create(K8sProviderOptions options);
  ~K8sSandboxProvider() override;

  std::string name() const override { return "k8s"; }
  Result<std::unique_ptr<SandboxLease>> Claim(const ClaimOptions& options) override;

  // Deletes the claims matching `label_selector` in `ns` ("" = the provider's
  // namespace) and nothing else; returns their names.
  Result<std::vector<std::string>> RemoveBySelector(std::string_view label_selector,
                                                    std::string_view ns = "");

  const std::string& namespace_name() const { return namespace_; }
  KubeClient& client() { return *client_; }
  SandboxApi& api() { return *api_; }

 private:
  K8sSandboxProvider() = default;
  K8sProviderOptions options_;
  std::string namespace_;
  std::unique_ptr<KubeClient> client_;
  std::unique_ptr<SandboxApi> api_;
  std::unique_ptr<Claimer> claimer_;
};

// The default SandboxFactory: a SandboxdClient on the endpoint.
Result<std::unique_ptr<Sandbox>> ConnectSandboxd(const DaemonEndpoint& endpoint,
                                                 const std::string& id);

}  // namespace deepbox::k8s
