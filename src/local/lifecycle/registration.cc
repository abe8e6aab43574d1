#include "local/lifecycle/registration.h"

#include <string>

#include "local/lifecycle/state.h"

namespace deepbox::local::lifecycle {
namespace {

const std::string* Given(const ProviderRequest& request, const char* name) {
  auto it = request.settings.find(name);
  return it == request.settings.end() ? nullptr : &it->second;
}

}  // namespace

Result<SandboxLimits> LimitsFrom(const ProviderRequest& request) {
  SandboxLimits l = DefaultSandboxLimits();
  if (const auto* v = Given(request, "memory")) {
    auto parsed = ParseMemoryLimit(*v, "--memory");
    if (!parsed) return tl::unexpected(parsed.error());
    l.memory_bytes = *parsed;
  }
  if (const auto* v = Given(request, "max-processes")) {
    auto parsed = ParseProcessLimit(*v, "--max-processes");
    if (!parsed) return tl::unexpected(parsed.error());
    l.max_processes = *parsed;
  }
  if (const auto* v = Given(request, "cpus")) {
    auto parsed = ParseCpuLimit(*v, "--cpus");
    if (!parsed) return tl::unexpected(parsed.error());
    l.cpu_cores = *parsed;
  }
  if (const auto* v = Given(request, "disk")) {
    auto parsed = ParseDiskLimit(*v, "--disk");
    if (!parsed) return tl::unexpected(parsed.error());
    l.workspace_bytes = *parsed;
  }
  return l;
}

Result<std::unique_ptr<LocalSandboxProvider>> MakeLocalProvider(const ProviderRequest& request) {
  LocalProviderOptions o;
  const std::string* pool = Given(request, "pool");
  if (pool != nullptr) o.pool = *pool;
  auto limits = LimitsFrom(request);
  if (!limits) return tl::unexpected(limits.error());
  o.limits = *limits;
  auto provider = LocalSandboxProvider::Create(std::move(o));
  // A pool named on the command line must exist; the default one is made on
  // first use by `pool serve`, and claims fall back to a cold create.
  if (provider && pool != nullptr && !pool->empty()) {
    if (auto st = CheckPoolExists(**provider, *pool); !st) return tl::unexpected(st.error());
  }
  return provider;
}

ProviderRegistration LocalProviderRegistration() {
  ProviderRegistration r;
  r.name = "local";
  r.summary = "sandboxes on this machine (Linux namespaces, seccomp, cgroups)";
  r.settings = {
      {"pool", "", "local: warm pool to take sandboxes from (`deepbox pool serve --name`)"},
      {"memory", "", "local: memory limit of the whole sandbox (64M, 2G; 0 = none)"},
      {"max-processes", "", "local: processes and threads in the sandbox (0 = no limit)"},
      {"cpus", "", "local: CPU cores (fractions allowed; 0 = no limit)"},
      {"disk", "", "local: size of /workspace (0 = no limit)"},
  };
  r.owns_id = [](std::string_view id) { return Store::ValidId(id); };
  r.make = [](const ProviderRequest& request) -> Result<std::unique_ptr<SandboxProvider>> {
    auto p = MakeLocalProvider(request);
    if (!p) return tl::unexpected(p.error());
    return std::unique_ptr<SandboxProvider>(std::move(*p));
  };
  return r;
}

}  // namespace deepbox::local::lifecycle
