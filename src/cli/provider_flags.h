// The providers' settings (sandbox/registry.h) as command-line flags: every
// command that makes providers — `deepbox run`, `sandbox create|ls|rm|...`,
// `deepbox mcp`, `pool serve` — declares them from the registrations, so a
// setting, its help and its environment variable are written once, in the
// provider's folder, and a new provider's settings appear everywhere.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/registry.h"

namespace CLI {
class App;
}

namespace deepbox::cli {

// The settings given on one command line (a setting not given is absent: the
// provider then reads its environment variable, else uses its default).
struct ProviderSettingFlags {
  std::map<std::string, std::string> given;  // setting name -> value as typed

  // The given settings `registration` has: its ProviderRequest::settings.
  std::map<std::string, std::string> For(const ProviderRegistration& registration) const;
  // The given settings `registration` does not have, as flags ("--memory").
  std::vector<std::string> NotFor(const ProviderRegistration& registration) const;
};

// Which settings a command offers.
struct ProviderFlagSet {
  // Also the settings only used to make sandboxes (ProviderSetting::
  // creation_only); false for commands that find, use or delete them.
  bool creation = true;
  std::vector<std::string> providers;  // only these providers' (empty = every registered one)
  std::vector<std::string> only;       // only these settings (empty = all)
};

// Declares the flags of the registered providers' settings on `cmd`, each
// once (a setting two providers share is one flag), with its help; the short
// flag only where `cmd` does not use the letter already (declare the
// command's own options first). Values land in `flags.given`.
void AddProviderSettingFlags(CLI::App* cmd, ProviderSettingFlags& flags,
                             const ProviderFlagSet& set = {});

// The registered providers that have `setting`, for an error about it:
// "local", "k8s and third" ("" = none).
std::string ProvidersWithSetting(std::string_view setting);

// "k8s: AGENT_SANDBOX_NAMESPACE, AGENT_SANDBOX_WARMPOOL, ..." — the
// registered providers' environment variables, one provider per line, for a
// command's footer.
std::string ProviderEnvironmentHelp();

}  // namespace deepbox::cli
