// The local provider as the CLI configures it, and the check that the
// provider settings given belong to the provider a command uses.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "cli/provider_flags.h"
#include "common/error.h"
#include "local/lifecycle/provider.h"
#include "local/lifecycle/registration.h"

namespace deepbox::cli {

// The local provider with the local settings given (pool, limits; see
// local/lifecycle/registration.h). INVALID_ARGUMENT (exit 2) for a bad
// --memory, --max-processes, --cpus or --disk, or a --pool never served.
Result<std::unique_ptr<local::lifecycle::LocalSandboxProvider>> MakeProvider(
    const ProviderSettingFlags& flags = {});

// INVALID_ARGUMENT naming the settings given that `provider` does not have
// ("--warm-pool: a setting of the k8s provider, not of local (--provider)"):
// a setting asked for is never silently ignored.
Status CheckSettingsFor(std::string_view provider, const ProviderSettingFlags& flags);

// CheckPoolExists: local/lifecycle/provider.h.
using local::lifecycle::CheckPoolExists;

}  // namespace deepbox::cli
