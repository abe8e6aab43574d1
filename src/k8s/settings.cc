#include "k8s/settings.h"

#include <fcntl.h>
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <utility>

#include "common/io.h"
#include "common/unique_fd.h"
#include "k8s/kubeconfig.h"
#include "k8s/util.h"

namespace deepbox::k8s {

namespace {

constexpr double kMaxReadyTimeoutSeconds = 86400;

const ProviderRegistration& Registration() {
  static const ProviderRegistration* registration =
      new ProviderRegistration(K8sProviderRegistration());  // never destroyed: used at exit
  return *registration;
}

// An object name (namespace, warm pool) goes into URL paths: checked here
// rather than left to the API server.
Status CheckObjectName(const std::string& value, std::string_view what, std::string_view kind) {
  if (value.empty() || IsObjectName(value)) return {};
  return MakeError(ErrorCode::kInvalidArgument,
                   fmt::format("{}: '{}' is not a Kubernetes {} name (lowercase letters, digits, "
                               "'-' and '.')",
                               what, std::string_view(value).substr(0, 300), kind));
}

}  // namespace

bool IsK8sSandboxId(std::string_view id) {
  size_t slash = id.find('/');
  if (slash == std::string_view::npos || id.find('/', slash + 1) != std::string_view::npos) {
    return false;
  }
  // Object names, so never "." or ".." (an id that could be a path).
  return IsObjectName(id.substr(0, slash)) && IsObjectName(id.substr(slash + 1));
}

Result<std::chrono::milliseconds> ParseReadyTimeout(std::string_view text, std::string_view what) {
  double seconds = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  // !(seconds > 0) also refuses NaN.
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !(seconds > 0)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{} must be seconds above 0, at most 86400 (not '{}')", what,
                                 text.substr(0, 100)));
  }
  if (seconds > kMaxReadyTimeoutSeconds) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        fmt::format("{}: at most 86400 seconds (not '{}')", what, text.substr(0, 100)));
  }
  // Rounded up: a tiny timeout is still a timeout, not none.
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
}

Result<K8sSettings> K8sSettingsFrom(const ProviderRequest& request) {
  const ProviderRegistration& registration = Registration();
  auto lookup = [&](std::string_view setting) {
    return LookupSetting(request, registration, setting);
  };
  K8sSettings s;
  if (auto v = lookup(kNamespaceSetting)) {
    if (auto st = CheckObjectName(v->value, v->source, "namespace"); !st) {
      return tl::unexpected(st.error());
    }
    s.namespace_name = v->value;
  }
  if (auto v = lookup(kContextSetting)) s.context = v->value;
  if (auto v = lookup(kKubeconfigSetting)) s.kubeconfig = v->value;
  // An empty value given is the default, as an empty variable is.
  if (auto v = lookup(kWarmPoolSetting); v && !v->value.empty()) {
    if (auto st = CheckObjectName(v->value, v->source, "warm pool"); !st) {
      return tl::unexpected(st.error());
    }
    s.warm_pool = v->value;
  }
  if (auto v = lookup(kTemplateSetting); v && !v->value.empty()) {
    if (auto st = CheckObjectName(v->value, v->source, "SandboxTemplate"); !st) {
      return tl::unexpected(st.error());
    }
    s.template_name = v->value;
  }
  if (auto v = lookup(kRouterUrlSetting)) s.router_url = v->value;
  if (auto v = lookup(kRouterTokenSetting)) s.router_token = v->value;
  if (auto v = lookup(kRouterTokenSecretFileSetting)) s.router_token_secret_file = v->value;
  if (auto v = lookup(kReadyTimeoutSetting); v && !v->value.empty()) {
    auto t = ParseReadyTimeout(v->value, v->source);
    if (!t) return tl::unexpected(t.error());
    s.ready_timeout = *t;
  }
  return s;
}

namespace {

Result<std::string> ReadRouterSecretFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return MakeSyscallError("open", errno);
  return ReadAll(fd.get(), path, 64 * 1024);
}

}  // namespace

Result<K8sProviderOptions> K8sProviderOptionsFor(const K8sSettings& settings,
                                                 const K8sProviderContext& context) {
  KubeconfigOptions ko;
  if (!settings.kubeconfig.empty()) ko.kubeconfig = settings.kubeconfig;
  ko.context = settings.context;
  ko.namespace_override = settings.namespace_name;
  auto rest = LoadDefaultConfig(ko);
  if (!rest) {
    // A missing kubeconfig is a failed command, not "no such sandbox".
    Error e = rest.error();
    if (e.code == ErrorCode::kNotFound) e.code = ErrorCode::kUnavailable;
    return tl::unexpected(e);
  }
  K8sProviderOptions po;
  po.rest = *rest;
  po.namespace_name = settings.namespace_name;
  po.warm_pool = settings.warm_pool;
  po.template_name = settings.template_name;
  po.ready_timeout = settings.ready_timeout;
  po.created_by = context.created_by;
  po.on_warning = context.on_warning;
  // A one-shot command: an unreachable API server is reported within a
  // second, not after the long retry budget a running agent's claim gets.
  if (context.one_shot) po.client.max_retries = 2;
  po.connection.router_token = settings.router_token;
  if (!settings.router_token_secret_file.empty()) {
    auto secret = ReadRouterSecretFile(settings.router_token_secret_file);
    if (!secret) {
      Error e = secret.error();
      e.message = fmt::format("reading the router's scoped-token secret ({}): {}",
                              settings.router_token_secret_file, e.message);
      return tl::unexpected(e);
    }
    po.connection.router_token_secret = std::move(*secret);
  }
  if (!settings.router_url.empty()) {
    po.connection.mode = ConnectionMode::kDirect;
    po.connection.direct_url = settings.router_url;
  } else if (InClusterAvailable()) {
    po.connection.mode = ConnectionMode::kInCluster;
  } else {
    po.connection.mode = ConnectionMode::kPortForward;
    // kubectl must talk to the same cluster as we do (KUBECONFIG is inherited).
    auto& args = po.connection.port_forward.kubectl_args;
    if (!settings.kubeconfig.empty()) args.push_back("--kubeconfig=" + settings.kubeconfig);
    if (!rest->context.empty()) args.push_back("--context=" + rest->context);
  }
  return po;
}

Result<std::unique_ptr<K8sSandboxProvider>> MakeK8sProvider(const ProviderRequest& request) {
  auto settings = K8sSettingsFrom(request);
  if (!settings) return tl::unexpected(settings.error());
  K8sProviderContext context;
  context.created_by = request.created_by;
  context.on_warning = request.on_warning;
  context.one_shot = request.one_shot;
  auto options = K8sProviderOptionsFor(*settings, context);
  if (!options) return tl::unexpected(options.error());
  options->confine_to_namespace = request.confined;
  return K8sSandboxProvider::Create(std::move(*options));
}

ProviderRegistration K8sProviderRegistration() {
  ProviderRegistration r;
  r.name = "k8s";
  r.summary =
      "a SandboxClaim from an agent-sandbox SandboxWarmPool on Kubernetes (ids "
      "NAMESPACE/CLAIM)";
  // Declared once for `deepbox run`, `sandbox ...`, `mcp` and run's config
  // file (registry.h).
  r.settings = {
      {std::string(kNamespaceSetting), "AGENT_SANDBOX_NAMESPACE",
       "k8s: namespace of the warm pool and claims. Env AGENT_SANDBOX_NAMESPACE;\n"
       "default: the kubeconfig context's namespace, else default",
       'n'},
      {std::string(kContextSetting), "", "k8s: kubeconfig context. Default: the current context"},
      // KUBECONFIG is read by the kubeconfig loader, not as this setting's
      // variable (it may list several files); set, it wins over a config file.
      {std::string(kKubeconfigSetting), "",
       "k8s: kubeconfig file. Default: $KUBECONFIG, the in-cluster config in a\n"
       "pod, else ~/.kube/config",
       0, false, "KUBECONFIG"},
      {std::string(kWarmPoolSetting), "AGENT_SANDBOX_WARMPOOL",
       "k8s: the SandboxWarmPool to claim from. Env AGENT_SANDBOX_WARMPOOL;\n"
       "default deepagents-warmpool",
       0, /*creation_only=*/true},
      {std::string(kTemplateSetting), "AGENT_SANDBOX_TEMPLATE",
       "k8s: claim from a warm pool of this SandboxTemplate (the configured pool\n"
       "if it uses it, else the first by name that does). With --image, the\n"
       "template's first container must run that image. Env AGENT_SANDBOX_TEMPLATE;\n"
       "default: the warm pool's template",
       0, /*creation_only=*/true},
      {std::string(kRouterUrlSetting), "AGENT_SANDBOX_ROUTER_URL",
       "k8s: URL of the sandbox router (or a Gateway in front of it). Env\n"
       "AGENT_SANDBOX_ROUTER_URL; default: kubectl port-forward to\n"
       "svc/sandbox-router-svc in agent-sandbox-system (in a pod: the pod IP)"},
      {std::string(kRouterTokenSetting), "AGENT_SANDBOX_ROUTER_TOKEN",
       "k8s: bearer token for a sandbox router started with ROUTER_AUTH_TOKEN.\n"
       "Env AGENT_SANDBOX_ROUTER_TOKEN (better: other users can read a command line);\n"
       "default: none"},
      {std::string(kRouterTokenSecretFileSetting), "AGENT_SANDBOX_ROUTER_TOKEN_SECRET_FILE",
       "k8s: the Go sandbox router's --authz-scoped-token-secret-file: deepbox\n"
       "signs each sandbox's own scoped token with it (and sends no pod IP,\n"
       "which such a router refuses). Env AGENT_SANDBOX_ROUTER_TOKEN_SECRET_FILE;\n"
       "default: none"},
      {std::string(kReadyTimeoutSetting), "AGENT_SANDBOX_READY_TIMEOUT",
       "k8s: seconds a claim may take to become Ready (a cold start pulls the\n"
       "image); then the claim is deleted. Env AGENT_SANDBOX_READY_TIMEOUT;\n"
       "default 180",
       0, /*creation_only=*/true},
  };
  r.owns_id = [](std::string_view id) { return IsK8sSandboxId(id); };
  r.check = [](const ProviderRequest& request) -> Status {
    auto settings = K8sSettingsFrom(request);
    if (!settings) return tl::unexpected(settings.error());
    return {};
  };
  r.make = [](const ProviderRequest& request) -> Result<std::unique_ptr<SandboxProvider>> {
    auto p = MakeK8sProvider(request);
    if (!p) return tl::unexpected(p.error());
    return std::unique_ptr<SandboxProvider>(std::move(*p));
  };
  return r;
}

}  // namespace deepbox::k8s
