#include "sandbox/registry.h"

#include <fmt/format.h>

#include <cstdlib>

namespace deepbox {

ProviderRegistry& ProviderRegistry::Global() {
  static ProviderRegistry* registry = new ProviderRegistry();  // never destroyed: used at exit
  return *registry;
}

Status ProviderRegistry::Register(ProviderRegistration registration) {
  if (registration.name.empty() || !registration.owns_id || !registration.make) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("provider registration '{}' needs a name, owns_id and make",
                                 registration.name));
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& r : registrations_) {
    if (r->name == registration.name) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("provider '{}' is registered twice", registration.name));
    }
  }
  registrations_.push_back(std::make_unique<ProviderRegistration>(std::move(registration)));
  return {};
}

const ProviderRegistration* ProviderRegistry::Lookup(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& r : registrations_) {
    if (r->name == name) return r.get();
  }
  return nullptr;
}

std::vector<std::string> ProviderRegistry::Names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const auto& r : registrations_) names.push_back(r->name);
  return names;
}

const ProviderRegistration* ProviderRegistry::ForId(std::string_view id) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& r : registrations_) {
    if (r->owns_id(id)) return r.get();
  }
  return nullptr;
}

Result<std::unique_ptr<SandboxProvider>> ProviderRegistry::Make(
    std::string_view name, const ProviderRequest& request) const {
  const ProviderRegistration* r = Lookup(name);
  if (r == nullptr) {
    std::string known;
    for (const auto& n : Names()) known += (known.empty() ? "" : ", ") + n;
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("unknown sandbox provider '{}' (this deepbox has: {})", name,
                                 known.empty() ? "none" : known));
  }
  for (const auto& [key, value] : request.settings) {
    bool known = false;
    for (const auto& s : r->settings) known = known || s.name == key;
    if (!known) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("the {} provider has no setting '{}'", r->name, key));
    }
  }
  return r->make(request);
}

std::optional<std::string> SettingValue(const ProviderRequest& request,
                                        const ProviderRegistration& registration,
                                        std::string_view setting) {
  if (auto it = request.settings.find(std::string(setting)); it != request.settings.end()) {
    return it->second;
  }
  for (const auto& s : registration.settings) {
    if (s.name != setting || s.env.empty()) continue;
    const char* env = std::getenv(s.env.c_str());
    if (env != nullptr && *env != '\0') return std::string(env);
  }
  return std::nullopt;
}

}  // namespace deepbox
