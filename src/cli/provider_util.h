// The local provider as the CLI configures it.
#pragma once

#include <memory>
#include <string>

#include "cli/commands.h"
#include "common/error.h"
#include "local/lifecycle/provider.h"
#include "local/lifecycle/registration.h"

namespace deepbox::cli {

// INVALID_ARGUMENT (exit 2) for a bad --memory, --max-processes, --cpus or --disk.
Result<std::unique_ptr<local::lifecycle::LocalSandboxProvider>> MakeProvider(
    const ProviderFlags& flags);

// CheckPoolExists: local/lifecycle/provider.h.
using local::lifecycle::CheckPoolExists;

// The local provider's settings (local/lifecycle/registration.h) of the flags given.
ProviderRequest LocalRequest(const ProviderFlags& flags);

}  // namespace deepbox::cli
