#include "sandbox/registry.h"

#include <fmt/format.h>

#include <algorithm>
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

Result<const ProviderRegistration*> ProviderRegistry::Known(std::string_view name,
                                                            const ProviderRequest& request) const {
  const ProviderRegistration* r = Lookup(name);
  if (r == nullptr) {
    std::string known;
    for (const auto& n : Names()) known += (known.empty() ? "" : ", ") + n;
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("unknown sandbox provider '{}' (this deepbox has: {})", name,
                                 known.empty() ? "none" : known));
  }
  for (const auto* given : {&request.settings, &request.file_settings}) {
    for (const auto& [key, value] : *given) {
      if (FindSetting(*r, key) == nullptr) {
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("the {} provider has no setting '{}'", r->name, key));
      }
    }
  }
  return r;
}

Result<std::unique_ptr<SandboxProvider>> ProviderRegistry::Make(
    std::string_view name, const ProviderRequest& request) const {
  auto r = Known(name, request);
  if (!r) return tl::unexpected(r.error());
  return (*r)->make(request);
}

Status ProviderRegistry::Check(std::string_view name, const ProviderRequest& request) const {
  auto r = Known(name, request);
  if (!r) return tl::unexpected(r.error());
  if (!(*r)->check) return {};
  return (*r)->check(request);
}

std::vector<const ProviderRegistration*> ProviderRegistry::WithSetting(
    std::string_view setting) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const ProviderRegistration*> out;
  for (const auto& r : registrations_) {
    if (FindSetting(*r, setting) != nullptr) out.push_back(r.get());
  }
  return out;
}

std::string ConfigKeyOf(std::string_view setting_name) {
  std::string key(setting_name);
  std::replace(key.begin(), key.end(), '-', '_');
  return key;
}

const ProviderSetting* FindSetting(const ProviderRegistration& registration,
                                   std::string_view setting) {
  for (const auto& s : registration.settings) {
    if (s.name == setting) return &s;
  }
  return nullptr;
}

std::optional<SettingLookup> LookupSetting(const ProviderRequest& request,
                                           const ProviderRegistration& registration,
                                           std::string_view setting) {
  const ProviderSetting* s = FindSetting(registration, setting);
  if (s == nullptr) return std::nullopt;
  std::string name(setting);
  if (auto it = request.settings.find(name); it != request.settings.end()) {
    return SettingLookup{it->second, "--" + name};
  }
  auto env = [&](const std::string& var) -> const char* {
    if (var.empty()) return nullptr;
    const char* v = request.getenv ? request.getenv(var.c_str()) : std::getenv(var.c_str());
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  if (const char* v = env(s->env)) return SettingLookup{v, s->env};
  if (auto it = request.file_settings.find(name); it != request.file_settings.end()) {
    if (env(s->env_over_file) != nullptr) return std::nullopt;
    return SettingLookup{
        it->second,
        fmt::format("config {}: {}", request.file_name.empty() ? "file" : request.file_name,
                    ConfigKeyOf(name))};
  }
  return std::nullopt;
}

std::optional<std::string> SettingValue(const ProviderRequest& request,
                                        const ProviderRegistration& registration,
                                        std::string_view setting) {
  auto found = LookupSetting(request, registration, setting);
  if (!found) return std::nullopt;
  return std::move(found->value);
}

}  // namespace deepbox
