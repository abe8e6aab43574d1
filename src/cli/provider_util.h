// The local provider as the CLI configures it.
#pragma once

#include <memory>

#include "cli/commands.h"
#include "common/error.h"
#include "local/lifecycle/provider.h"

namespace deepbox::cli {

// INVALID_ARGUMENT (exit 2) for a bad --memory, --max-processes, --cpus or --disk.
Result<std::unique_ptr<local::lifecycle::LocalSandboxProvider>> MakeProvider(
    const ProviderFlags& flags);

// The defaults (DefaultSandboxLimits) overridden by the flags given.
Result<local::lifecycle::SandboxLimits> ResolveLimitFlags(const LimitFlags& flags);

}  // namespace deepbox::cli
