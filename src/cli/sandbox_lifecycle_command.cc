// `deepbox sandbox pause|suspend|resume`: the durable-workspace verbs of the
// provider interface (sandbox/provider.h), for any provider: each id goes to
// the provider whose id form it has (the registry), which says plainly when
// it cannot do the verb.
#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <memory>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/terminal_text.h"
#include "sandbox/registry.h"

namespace deepbox::cli {
namespace {

// Settings of a provider from the cluster flags (only the ones given; the
// rest come from the provider's environment variables and defaults).
ProviderRequest RequestFor(const ProviderRegistration& provider, const ClusterFlags& flags) {
  ProviderRequest request;
  request.one_shot = true;
  auto offer = [&](const char* setting, const std::string& value) {
    if (value.empty()) return;
    for (const auto& s : provider.settings) {
      if (s.name == setting) request.settings[setting] = value;
    }
  };
  offer("namespace", flags.namespace_name);
  offer("context", flags.context);
  offer("kubeconfig", flags.kubeconfig);
  return request;
}

}  // namespace

int RunSandboxMode(const SandboxModeArgs& args) {
  const char* verb = args.verb == SandboxModeVerb::kPause     ? "paused"
                     : args.verb == SandboxModeVerb::kSuspend ? "suspended"
                                                              : "resumed";
  if (args.ids.empty()) {
    return ReportError(Error(ErrorCode::kInvalidArgument, "give one or more sandbox ids"));
  }
  // One provider object per kind, made on first use.
  std::map<std::string, std::unique_ptr<SandboxProvider>> providers;
  int code = kExitOk;
  for (const auto& id : args.ids) {
    const ProviderRegistration* owner = ProviderRegistry::Global().ForId(id);
    if (owner == nullptr) {
      code = ReportError(Error(ErrorCode::kInvalidArgument,
                               fmt::format("'{}' is no sandbox id (local: sb-..., Kubernetes: "
                                           "NAMESPACE/CLAIM; see `deepbox sandbox ls`)",
                                           SanitizeLineForTerminal(id))));
      continue;
    }
    if (args.cluster.k8s() && owner->name != "k8s") {
      code = ReportError(Error(ErrorCode::kInvalidArgument,
                               fmt::format("--provider k8s: '{}' is a {} sandbox id (Kubernetes "
                                           "ids are NAMESPACE/CLAIM)",
                                           SanitizeLineForTerminal(id), owner->name)));
      continue;
    }
    auto& provider = providers[owner->name];
    if (!provider) {
      auto made = ProviderRegistry::Global().Make(owner->name, RequestFor(*owner, args.cluster));
      if (!made) {
        code = ReportError(made.error());
        continue;
      }
      provider = std::move(*made);
    }
    Status st = args.verb == SandboxModeVerb::kPause ? provider->Pause(id)
                : args.verb == SandboxModeVerb::kSuspend
                    ? provider->Suspend(id, SuspendOptions{args.force})
                    : provider->Resume(id);
    if (!st) {
      code = ReportError(st.error());
      continue;
    }
    std::printf("%s %s\n", verb, id.c_str());
  }
  return code;
}

}  // namespace deepbox::cli
