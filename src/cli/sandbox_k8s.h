// Kubernetes sandboxes (SandboxClaims) from the shell: `sandbox create|ls|rm
// --provider k8s` and `doctor --provider k8s`. (exec and cp reach a claim
// through the provider interface: SandboxProvider::ConnectDaemon.) The
// implementation is in sandbox_k8s_command.cc; this header does not depend
// on src/k8s.
#pragma once

#include <string>

namespace deepbox::cli {

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
