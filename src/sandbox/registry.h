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

// One setting of a provider: a command-line flag `--NAME` and, where it has
// one, an environment variable read when the flag is not given.
struct ProviderSetting {
  std::string name;  // "namespace" (the flag without "--")
  std::string env;   // "AGENT_SANDBOX_NAMESPACE" ("" = flag only)
  std::string help;  // one line for --help
};

// What a consumer asks a provider to be made with.
struct ProviderRequest {
  // Values given on the command line (or by the caller), by setting name;
  // a setting missing here falls back to its environment variable, then to
  // the provider's default.
  std::map<std::string, std::string> settings;
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

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<ProviderRegistration>> registrations_;
};

// The value of `setting` in `request`: the given value, else its environment
// variable (when set and not empty), else nullopt.
std::optional<std::string> SettingValue(const ProviderRequest& request,
                                        const ProviderRegistration& registration,
                                        std::string_view setting);

}  // namespace deepbox
