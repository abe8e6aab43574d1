// The local provider's entry in the provider registry (sandbox/registry.h):
// its settings (the warm pool and the limits, as `--pool`, `--memory`, ...)
// and how a request becomes a LocalSandboxProvider.
#pragma once

#include <memory>

#include "common/error.h"
#include "local/lifecycle/provider.h"
#include "local/lifecycle/sandbox_limits.h"
#include "sandbox/registry.h"

namespace deepbox::local::lifecycle {

// The limits of `request`: DefaultSandboxLimits() with the settings memory,
// max-processes, cpus and disk given ("0"/"none" = no limit) applied.
// INVALID_ARGUMENT names the flag ("--memory: ...").
Result<SandboxLimits> LimitsFrom(const ProviderRequest& request);

// A provider for `request`: the warm pool of the `pool` setting ("default"
// when not given; a pool given must exist, see CheckPoolExists) and the
// limits of LimitsFrom.
Result<std::unique_ptr<LocalSandboxProvider>> MakeLocalProvider(const ProviderRequest& request);

ProviderRegistration LocalProviderRegistration();

}  // namespace deepbox::local::lifecycle
