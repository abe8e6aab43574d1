// The two real SandboxBackends of `deepbox mcp`: local sandboxes (the local
// lifecycle provider: supervisor, TTL, warm pool) and SandboxClaims on
// Kubernetes (only in builds with src/k8s).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/error.h"
#include "local/lifecycle/provider.h"
#include "mcp/sandboxes.h"

namespace deepbox::mcp {

Result<std::unique_ptr<SandboxBackend>> MakeLocalBackend(
    local::lifecycle::LocalProviderOptions options);

struct K8sBackendOptions {
  std::string namespace_name;  // "" = $AGENT_SANDBOX_NAMESPACE, else the context's
  std::string context;
  std::string kubeconfig;
  std::string warm_pool = "deepagents-warmpool";
  std::string router_url;    // direct connection through the sandbox router
  std::string router_token;  // its bearer token
  std::chrono::seconds ready_timeout{180};
};

// UNIMPLEMENTED in builds without src/k8s; the kubeconfig is loaded at once.
Result<std::unique_ptr<SandboxBackend>> MakeK8sBackend(const K8sBackendOptions& options);

}  // namespace deepbox::mcp
