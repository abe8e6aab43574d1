// The sandbox providers this deepbox was built with, in the provider
// registry (sandbox/registry.h): local and k8s. A new provider is one more
// line here and one in CMakeLists.txt.
#pragma once

#include <memory>
#include <string_view>

#include "common/error.h"
#include "sandbox/provider.h"

namespace deepbox::cli {

// Idempotent; main() calls it before any command runs.
void RegisterBuiltinProviders();

// The provider of sandbox `id` by its id form (a name that no provider's id
// form matches is a local sandbox's), made from the environment for one
// command (`sandbox exec`, `cp`).
Result<std::unique_ptr<SandboxProvider>> ProviderOfSandbox(std::string_view id);

}  // namespace deepbox::cli
