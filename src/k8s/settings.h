// The k8s provider's settings, read in one place for every consumer (`deepbox
// run`, `deepbox sandbox ...`, `deepbox mcp`): each is a flag and, where it
// has one, an AGENT_SANDBOX_* environment variable (the names of the upstream
// Python example), and one function turns them into K8sProviderOptions.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"
#include "k8s/provider.h"
#include "sandbox/registry.h"

namespace deepbox::k8s {

struct K8sSettings {
  std::string namespace_name;  // "" = the kubeconfig context's
  std::string context;         // "" = the kubeconfig's current-context
  std::string kubeconfig;      // "" = $KUBECONFIG, in-cluster, ~/.kube/config
  std::string warm_pool = "deepagents-warmpool";
  std::string template_name;  // "" = the warm pool's (or the one --image selects)
  std::string router_url;     // "" = in a pod the pod IP, else a kubectl port-forward
  std::string router_token;   // the router's bearer token ("" = none)
  // The Go router's --authz-scoped-token-secret-file: deepbox mints each
  // sandbox's own scoped token (router_token.h). "" = none.
  std::string router_token_secret_file;
  std::chrono::milliseconds ready_timeout{180000};
};

// Setting names (the flags without "--").
inline constexpr std::string_view kNamespaceSetting = "namespace";
inline constexpr std::string_view kContextSetting = "context";
inline constexpr std::string_view kKubeconfigSetting = "kubeconfig";
inline constexpr std::string_view kWarmPoolSetting = "warm-pool";
inline constexpr std::string_view kTemplateSetting = "template";
inline constexpr std::string_view kRouterUrlSetting = "router-url";
inline constexpr std::string_view kRouterTokenSetting = "router-token";
inline constexpr std::string_view kRouterTokenSecretFileSetting = "router-token-secret-file";
inline constexpr std::string_view kReadyTimeoutSetting = "ready-timeout";

// "NAMESPACE/CLAIM": two Kubernetes object names around one slash.
bool IsK8sSandboxId(std::string_view id);

// Seconds (a decimal number from 0 exclusive to 86400); INVALID_ARGUMENT
// naming `what` ("--ready-timeout", "AGENT_SANDBOX_READY_TIMEOUT") otherwise.
Result<std::chrono::milliseconds> ParseReadyTimeout(std::string_view text, std::string_view what);

// The settings of `request` (a value given, else its environment variable,
// else the default); INVALID_ARGUMENT for a bad value, naming the flag or
// the variable it came from.
Result<K8sSettings> K8sSettingsFrom(const ProviderRequest& request);

// The provider options for `settings`: the kubeconfig loaded (UNAVAILABLE
// when there is none: a failed command, not a missing sandbox), the way to
// the daemons chosen (router URL, else in-cluster, else a kubectl
// port-forward with the same --kubeconfig and --context), created_by,
// on_warning, and for a one-shot command a small retry budget.
struct K8sProviderContext {
  std::string created_by = "deepbox";
  std::function<void(const std::string& warning)> on_warning;
  bool one_shot = false;  // a CLI command: report an unreachable API server at once
};
Result<K8sProviderOptions> K8sProviderOptionsFor(const K8sSettings& settings,
                                                 const K8sProviderContext& context);

// K8sSettingsFrom + K8sProviderOptionsFor + K8sSandboxProvider::Create.
// With request.confined the provider refuses ids outside its namespace.
Result<std::unique_ptr<K8sSandboxProvider>> MakeK8sProvider(const ProviderRequest& request);

// The k8s provider's entry in the registry (registry.h).
ProviderRegistration K8sProviderRegistration();

}  // namespace deepbox::k8s
