#include "cli/provider_flags.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <set>

namespace deepbox::cli {

std::map<std::string, std::string> ProviderSettingFlags::For(
    const ProviderRegistration& registration) const {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : given) {
    if (FindSetting(registration, name) != nullptr) out[name] = value;
  }
  return out;
}

std::vector<std::string> ProviderSettingFlags::NotFor(
    const ProviderRegistration& registration) const {
  std::vector<std::string> out;
  for (const auto& [name, value] : given) {
    if (FindSetting(registration, name) == nullptr) out.push_back("--" + name);
  }
  return out;
}

void AddProviderSettingFlags(CLI::App* cmd, ProviderSettingFlags& flags,
                             const ProviderFlagSet& set) {
  const ProviderRegistry& registry = ProviderRegistry::Global();
  auto wanted = [](const std::vector<std::string>& list, const std::string& name) {
    return list.empty() || std::find(list.begin(), list.end(), name) != list.end();
  };
  std::set<std::string> declared;
  for (const auto& provider : registry.Names()) {
    if (!wanted(set.providers, provider)) continue;
    const ProviderRegistration* r = registry.Lookup(provider);
    for (const ProviderSetting& s : r->settings) {
      if (s.creation_only && !set.creation) continue;
      if (!wanted(set.only, s.name) || !declared.insert(s.name).second) continue;
      std::string names = "--" + s.name;
      if (s.short_flag != 0) {
        std::string short_name = std::string("-") + s.short_flag;
        if (cmd->get_option_no_throw(short_name) == nullptr) names += "," + short_name;
      }
      std::string name = s.name;
      cmd->add_option_function<std::string>(
             names, [&flags, name](const std::string& value) { flags.given[name] = value; }, s.help)
          ->type_name("TEXT");
    }
  }
}

std::string ProvidersWithSetting(std::string_view setting) {
  std::string names;
  for (const auto* r : ProviderRegistry::Global().WithSetting(setting)) {
    names += (names.empty() ? "" : " and ") + r->name;
  }
  return names;
}

std::string ProviderEnvironmentHelp() {
  const ProviderRegistry& registry = ProviderRegistry::Global();
  std::string out;
  for (const auto& provider : registry.Names()) {
    // "k8s: A, B," wrapped at 80 columns, continuation lines indented.
    std::string line = provider + ":";
    std::string block;
    std::set<std::string> listed;
    for (const auto& s : registry.Lookup(provider)->settings) {
      for (const std::string* var : {&s.env, &s.env_over_file}) {
        if (var->empty() || !listed.insert(*var).second) continue;
        std::string word = (listed.size() > 1 ? ", " : " ") + *var;
        if (line.size() + word.size() > 80) {
          block += line + ",\n";
          line = "  " + *var;
        } else {
          line += word;
        }
      }
    }
    if (listed.empty()) continue;
    out += (out.empty() ? "" : "\n") + block + line;
  }
  return out;
}

}  // namespace deepbox::cli
