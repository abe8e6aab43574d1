// Kubernetes sandboxes (SandboxClaims) from the shell: what `deepbox sandbox
// exec` and `cp` need to work on a NAMESPACE/CLAIM id as on a local one. The
// implementation is in sandbox_k8s_command.cc; this header does not depend
// on src/k8s.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "sandbox/sandboxd_client.h"

namespace deepbox::cli {

// "NAMESPACE/CLAIM" (what `sandbox create --provider k8s` and `deepbox run`
// print): two Kubernetes object names around one slash. Local ids have none.
bool IsK8sSandboxId(std::string_view id);

// A claim's daemon, reached the way `deepbox run` reaches it (KUBECONFIG,
// AGENT_SANDBOX_ROUTER_URL / _TOKEN, else a kubectl port-forward to the
// router), for one command.
struct ShellSandbox {
  std::unique_ptr<SandboxdClient> client;
  // After a failed call: NOT_FOUND if the claim is gone, another error if
  // that cannot be told, nullopt if it is still there.
  std::function<std::optional<Error>()> why_gone;
  // A failed call's error with the router's answers named as the router's.
  std::function<Error(const Error&)> explain;
  std::shared_ptr<void> keep;  // the connection behind `client` (a port-forward)
};
// NOT_FOUND: no such claim; UNAVAILABLE: it is not Ready; INVALID_ARGUMENT: a
// bad id.
Result<ShellSandbox> ConnectK8sSandbox(const std::string& id);

// `deepbox doctor --provider k8s`: whether a NetworkPolicy isolates the
// sandbox pods of the warm pool (AGENT_SANDBOX_WARMPOOL, else
// deepagents-warmpool) in the namespace of `flags`. isolated: one does;
// text: what was found (the provider's warning when none does, or why it
// cannot be told).
struct K8sPolicyCheck {
  bool checked = false;
  bool isolated = false;
  std::string text;
};
struct ClusterFlags;
K8sPolicyCheck CheckK8sNetworkPolicy(const ClusterFlags& flags);

}  // namespace deepbox::cli
