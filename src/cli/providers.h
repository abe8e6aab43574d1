// The sandbox providers this deepbox was built with, in the provider
// registry (sandbox/registry.h): local always, k8s in builds with src/k8s.
// A new provider is one more line here and one in CMakeLists.txt.
#pragma once

namespace deepbox::cli {

// Idempotent; main() calls it before any command runs.
void RegisterBuiltinProviders();

}  // namespace deepbox::cli
