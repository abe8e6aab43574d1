#include "cli/providers.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "k8s/settings.h"
#include "local/lifecycle/registration.h"
#include "sandbox/registry.h"

namespace deepbox::cli {

void RegisterBuiltinProviders() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& registry = ProviderRegistry::Global();
    std::vector<ProviderRegistration> builtins;
    builtins.push_back(local::lifecycle::LocalProviderRegistration());
    builtins.push_back(k8s::K8sProviderRegistration());
    for (auto& r : builtins) {
      if (auto st = registry.Register(std::move(r)); !st) {
        std::fprintf(stderr, "deepbox: %s\n", st.error().message.c_str());  // a build error
        std::abort();
      }
    }
  });
}

Result<std::unique_ptr<SandboxProvider>> ProviderOfSandbox(std::string_view id) {
  RegisterBuiltinProviders();
  const ProviderRegistration* owner = ProviderRegistry::Global().ForId(id);
  ProviderRequest request;
  request.one_shot = true;
  return ProviderRegistry::Global().Make(owner != nullptr ? owner->name : "local", request);
}

}  // namespace deepbox::cli
