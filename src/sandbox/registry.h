// The providers this program knows, by name, each with the settings it reads
// (as gVisor registers its platforms). A provider's folder says how to make
// it (ProviderRegistration); the program registers the ones it was built with
// at startup (cli/providers.cc), and every consumer — `deepbox run`,
// `deepbox sandbox ...`, `deepbox mcp` — makes providers only through here,
// so each setting is read in one place and means the same everywhere.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "sandbox/provider.h"

namespace deepbox {

// One setting of a provider, declared once here for every consumer: the
// command-line flag `--NAME` of `deepbox run`, `sandbox ...` and `mcp`
// (cli/provider_flags.h declares them from this), the key of `deepbox run`'s
// config file (NAME with '_' for '-') and, where it has one, an environment
// variable. A value given (flag) wins over the variable, the variable over
// the config file, the file over the provider's default.
struct ProviderSetting {
  std::string name;     // "namespace" (the flag without "--")
  std::string env;      // "AGENT_SANDBOX_NAMESPACE" ("" = none)
  std::string help;     // for --help (lines of at most 80 columns, '\n' between)
  char short_flag = 0;  // 'n' = also -n, on commands where the letter is free
  // Only for making sandboxes (a warm pool, limits, a ready timeout):
  // commands that find, use or delete existing ones do not offer it.
  bool creation_only = false;
  // A config file's value is ignored while this variable is set (kubeconfig:
  // KUBECONFIG, which the kubeconfig loader reads itself).
  std::string env_over_file;
};

// The config-file key of a setting: its name with '_' for '-' ("warm_pool").
std::string ConfigKeyOf(std::string_view setting_name);

// What a consumer asks a provider to be made with.
struct ProviderRequest {
  // Values given on the command line (or by the caller), by setting name;
  // a setting missing here falls back to its environment variable, then to
  // the provider's default.
  std::map<std::string, std::string> settings;
  // Values from a config file (by setting name), below the environment, and
  // the file's name for errors.
  std::map<std::string, std::string> file_settings;
  std::string file_name;
  // How environment variables are read (tests give their own).
  std::function<const char*(const char* name)> getenv;
  std::string created_by = "deepbox";  // recorded on what the provider creates
  // Warnings about the provider's setup (e.g. no NetworkPolicy isolates the
  // sandbox pods); null = none are looked for.
  std::function<void(const std::string& warning)> on_warning;
  // The provider acts only within its own scope (k8s: its namespace), what a
  // server acting for others wants.
  bool confined = false;
  // A one-shot command (`deepbox sandbox ls`): an unreachable service is
  // reported at once rather than after a running agent's retry budget.
  bool one_shot = false;
};

struct ProviderRegistration {
  std::string name;     // "local"
  std::string summary;  // one line for --help
  std::vector<ProviderSetting> settings;
  std::function<bool(std::string_view id)> owns_id;
  std::function<Result<std::unique_ptr<SandboxProvider>>(const ProviderRequest& request)> make;
  // Checks the settings of a request without making anything (no cluster or
  // state directory is touched): INVALID_ARGUMENT naming the flag, variable
  // or config key of a bad value. Null = nothing to check.
  std::function<Status(const ProviderRequest& request)> check;
};

class ProviderRegistry {
 public:
  // The program's registry (what cli/providers.cc fills).
  static ProviderRegistry& Global();

  // INVALID_ARGUMENT for a name already registered or a registration without
  // owns_id or make.
  Status Register(ProviderRegistration registration);
  const ProviderRegistration* Lookup(std::string_view name) const;
  std::vector<std::string> Names() const;  // in registration order
  // The provider whose id form `id` has (nullptr: none).
  const ProviderRegistration* ForId(std::string_view id) const;
  // INVALID_ARGUMENT naming the known providers for an unknown name, or for a
  // setting the provider does not have.
  Result<std::unique_ptr<SandboxProvider>> Make(std::string_view name,
                                                const ProviderRequest& request) const;
  // The same checks as Make, then the provider's own `check`.
  Status Check(std::string_view name, const ProviderRequest& request) const;
  // The registered providers that have a setting of this name (a flag shared
  // by two providers is given to both).
  std::vector<const ProviderRegistration*> WithSetting(std::string_view setting) const;

 private:
  // The registration of `name` when it has every setting `request` names.
  Result<const ProviderRegistration*> Known(std::string_view name,
                                            const ProviderRequest& request) const;

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<ProviderRegistration>> registrations_;
};

// The setting of this name (nullptr: the provider has none).
const ProviderSetting* FindSetting(const ProviderRegistration& registration,
                                   std::string_view setting);

// The value of `setting` in `request` and where it came from, for errors:
// the given value ("--warm-pool"), else its environment variable when set
// and not empty ("AGENT_SANDBOX_WARMPOOL"), else the config file's ("config
// FILE: warm_pool"), else nullopt.
struct SettingLookup {
  std::string value;
  std::string source;
};
std::optional<SettingLookup> LookupSetting(const ProviderRequest& request,
                                           const ProviderRegistration& registration,
                                           std::string_view setting);
// LookupSetting's value only.
std::optional<std::string> SettingValue(const ProviderRequest& request,
                                        const ProviderRegistration& registration,
                                        std::string_view setting);

}  // namespace deepbox
