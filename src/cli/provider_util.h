// The local provider as the CLI configures it.
#pragma once

#include <memory>

#include "cli/commands.h"
#include "common/error.h"
#include "local/lifecycle/provider.h"

namespace deepbox::cli {

Result<std::unique_ptr<local::lifecycle::LocalSandboxProvider>> MakeProvider(
    const ProviderFlags& flags);

}  // namespace deepbox::cli
