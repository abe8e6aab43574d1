#include "local/lifecycle/registration.h"

#include <optional>
#include <string>

#include "local/lifecycle/state.h"

namespace deepbox::local::lifecycle {
namespace {

const ProviderRegistration& Registration() {
  static const ProviderRegistration* registration =
      new ProviderRegistration(LocalProviderRegistration());  // never destroyed: used at exit
  return *registration;
}

std::optional<SettingLookup> Given(const ProviderRequest& request, const char* name) {
  return LookupSetting(request, Registration(), name);
}

}  // namespace

Result<SandboxLimits> LimitsFrom(const ProviderRequest& request) {
  SandboxLimits l = DefaultSandboxLimits();
  if (auto v = Given(request, "memory")) {
    auto parsed = ParseMemoryLimit(v->value, v->source);
    if (!parsed) return tl::unexpected(parsed.error());
    l.memory_bytes = *parsed;
  }
  if (auto v = Given(request, "max-processes")) {
    auto parsed = ParseProcessLimit(v->value, v->source);
    if (!parsed) return tl::unexpected(parsed.error());
    l.max_processes = *parsed;
  }
  if (auto v = Given(request, "cpus")) {
    auto parsed = ParseCpuLimit(v->value, v->source);
    if (!parsed) return tl::unexpected(parsed.error());
    l.cpu_cores = *parsed;
  }
  if (auto v = Given(request, "disk")) {
    auto parsed = ParseDiskLimit(v->value, v->source);
    if (!parsed) return tl::unexpected(parsed.error());
    l.workspace_bytes = *parsed;
  }
  return l;
}

Result<std::unique_ptr<LocalSandboxProvider>> MakeLocalProvider(const ProviderRequest& request) {
  LocalProviderOptions o;
  std::optional<SettingLookup> pool = Given(request, "pool");
  if (pool) o.pool = pool->value;
  auto limits = LimitsFrom(request);
  if (!limits) return tl::unexpected(limits.error());
  o.limits = *limits;
  auto provider = LocalSandboxProvider::Create(std::move(o));
  // A pool named on the command line or in a config file must exist; the
  // default one is made on first use by `pool serve`, and claims fall back to
  // a cold create.
  if (provider && pool && !pool->value.empty()) {
    if (auto st = CheckPoolExists(**provider, pool->value); !st) return tl::unexpected(st.error());
  }
  return provider;
}

ProviderRegistration LocalProviderRegistration() {
  ProviderRegistration r;
  r.name = "local";
  r.summary = "sandboxes on this machine (Linux namespaces, seccomp, cgroups)";
  // Declared once for `deepbox run`, `sandbox create`, `mcp` and run's
  // config file (registry.h); the defaults are DefaultSandboxLimits().
  // What this host enforces: `deepbox doctor`.
  r.settings = {
      {"pool", "",
       "local: warm pool to take a ready sandbox from when one matches (`deepbox\n"
       "pool serve`); without one, the sandbox is created cold. A pool named here\n"
       "must have been served in this state directory (else exit 2). Default: default",
       0, /*creation_only=*/true},
      {"memory", "",
       "local: memory limit of the whole sandbox: bytes or with a unit (k, m, g:\n"
       "powers of 1024, e.g. 512M, 2G); at least 16M; 0 = none. Default 2G (cgroup)",
       0, /*creation_only=*/true},
      {"max-processes", "",
       "local: process limit of the whole sandbox, threads included; at least 8;\n"
       "0 = none. Default 512 (cgroup pids, else RLIMIT_NPROC)",
       0, /*creation_only=*/true},
      {"cpus", "", "local: CPU bandwidth limit in cores, e.g. 0.5; 0 = none. Default 2 (cgroup)", 0,
       /*creation_only=*/true},
      {"disk", "",
       "local: size of /workspace (an ext4 image on a loop device, root only;\n"
       "elsewhere a warning says it is not enforced): e.g. 10G; at least 16M;\n"
       "0 = none (/workspace on the host's disk). Default 10G",
       0, /*creation_only=*/true},
  };
  r.check = [](const ProviderRequest& request) -> Status {
    auto limits = LimitsFrom(request);
    if (!limits) return tl::unexpected(limits.error());
    return {};
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
