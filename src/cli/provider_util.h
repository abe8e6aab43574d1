// The local provider as the CLI configures it.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/error.h"
#include "local/lifecycle/provider.h"

namespace deepbox::cli {

// INVALID_ARGUMENT (exit 2) for a bad --memory, --max-processes, --cpus or --disk.
Result<std::unique_ptr<local::lifecycle::LocalSandboxProvider>> MakeProvider(
    const ProviderFlags& flags);

// A warm pool named by the user (--pool NAME, not the default) must exist: a
// `deepbox pool serve --name NAME` has run in this state directory (its
// pools/NAME/). INVALID_ARGUMENT (a usage error, exit 2) naming the known ones;
// a misspelt pool would otherwise silently create a cold sandbox.
inline Status CheckPoolExists(const local::lifecycle::LocalSandboxProvider& provider,
                              const std::string& pool) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(provider.store().pool_dir(pool), ec)) return {};
  std::vector<std::string> known;
  for (const auto& e : fs::directory_iterator(provider.store().root() / "pools", ec)) {
    if (e.is_directory(ec)) known.push_back(e.path().filename().string());
  }
  std::sort(known.begin(), known.end());
  std::string list;
  for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
  return MakeError(ErrorCode::kInvalidArgument,
                   fmt::format("--pool {}: no such warm pool here ({}; a pool is started with "
                               "`deepbox pool serve --name NAME`)",
                               pool, list.empty() ? "none has been served" : "known: " + list));
}

// The defaults (DefaultSandboxLimits) overridden by the flags given.
Result<local::lifecycle::SandboxLimits> ResolveLimitFlags(const LimitFlags& flags);

}  // namespace deepbox::cli
