#include "sandbox/registry.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace deepbox {
namespace {

// A provider that makes nothing: the registry's rules, not a provider's.
ProviderRegistration Fake(std::string name, std::vector<ProviderSetting> settings = {}) {
  ProviderRegistration r;
  r.name = std::move(name);
  r.settings = std::move(settings);
  std::string prefix = r.name + ":";
  r.owns_id = [prefix](std::string_view id) { return id.starts_with(prefix); };
  r.make = [](const ProviderRequest&) -> Result<std::unique_ptr<SandboxProvider>> {
    return MakeError(ErrorCode::kUnimplemented, "made");
  };
  return r;
}

ProviderRegistration Zoned() {
  ProviderSetting zone{"zone", "FAKE_ZONE", "fake: the zone", 'z'};
  ProviderSetting config{"config-file", "", "fake: its config", 0, false, "FAKE_CONFIG"};
  ProviderSetting size{"size", "", "fake: the size", 0, /*creation_only=*/true};
  return Fake("fake", {zone, config, size});
}

// Reads the environment from a map (the process's is not touched).
std::function<const char*(const char*)> Env(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(ProviderRegistryTest, RegistersByNameAndRefusesDuplicatesAndIncompleteEntries) {
  ProviderRegistry registry;
  ASSERT_TRUE(registry.Register(Fake("one")).has_value());
  ASSERT_TRUE(registry.Register(Fake("two")).has_value());
  auto twice = registry.Register(Fake("one"));
  ASSERT_FALSE(twice.has_value());
  EXPECT_NE(twice.error().message.find("registered twice"), std::string::npos);
  ProviderRegistration no_make = Fake("three");
  no_make.make = nullptr;
  EXPECT_EQ(registry.Register(no_make).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(registry.Names(), (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(registry.Lookup("two")->name, "two");
  EXPECT_EQ(registry.Lookup("three"), nullptr);
  EXPECT_EQ(registry.ForId("two:abc")->name, "two");
  EXPECT_EQ(registry.ForId("sb-abc"), nullptr);
}

TEST(ProviderRegistryTest, MakeAndCheckRefuseUnknownProvidersAndSettingsNamingThem) {
  ProviderRegistry registry;
  ProviderRegistration fake = Zoned();
  int checked = 0;
  fake.check = [&checked](const ProviderRequest& request) -> Status {
    ++checked;
    if (request.settings.count("size") != 0 && request.settings.at("size") == "bad") {
      return MakeError(ErrorCode::kInvalidArgument, "--size: bad");
    }
    return {};
  };
  ASSERT_TRUE(registry.Register(fake).has_value());
  auto unknown = registry.Make("nope", {});
  ASSERT_FALSE(unknown.has_value());
  EXPECT_NE(unknown.error().message.find("this deepbox has: fake"), std::string::npos);
  ProviderRequest request;
  request.settings["colour"] = "red";
  auto bad = registry.Check("fake", request);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message, "the fake provider has no setting 'colour'");
  request = {};
  request.file_settings["colour"] = "red";  // a config file's key is checked too
  EXPECT_FALSE(registry.Make("fake", request).has_value());
  EXPECT_EQ(checked, 0);
  request = {};
  request.settings["size"] = "bad";
  EXPECT_EQ(registry.Check("fake", request).error().message, "--size: bad");
  request.settings["size"] = "1";
  EXPECT_TRUE(registry.Check("fake", request).has_value());
  EXPECT_EQ(checked, 2);
  // Make goes to the provider's make (which says so here).
  EXPECT_EQ(registry.Make("fake", request).error().message, "made");
}

TEST(ProviderRegistryTest, AGivenValueWinsOverTheVariableWhichWinsOverTheConfigFile) {
  ProviderRegistration fake = Zoned();
  ProviderRequest request;
  request.getenv = Env({});
  EXPECT_FALSE(LookupSetting(request, fake, "zone").has_value());

  request.file_settings["zone"] = "from-file";
  request.file_name = "deepbox.yaml";
  auto v = LookupSetting(request, fake, "zone");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->value, "from-file");
  EXPECT_EQ(v->source, "config deepbox.yaml: zone");

  request.getenv = Env({{"FAKE_ZONE", "from-env"}});
  v = LookupSetting(request, fake, "zone");
  EXPECT_EQ(v->value, "from-env");
  EXPECT_EQ(v->source, "FAKE_ZONE");

  // An empty variable counts as unset, as in a shell's `FAKE_ZONE= cmd`.
  request.getenv = Env({{"FAKE_ZONE", ""}});
  EXPECT_EQ(LookupSetting(request, fake, "zone")->value, "from-file");

  request.getenv = Env({{"FAKE_ZONE", "from-env"}});
  request.settings["zone"] = "from-flag";
  v = LookupSetting(request, fake, "zone");
  EXPECT_EQ(v->value, "from-flag");
  EXPECT_EQ(v->source, "--zone");
  EXPECT_EQ(SettingValue(request, fake, "zone"), "from-flag");
  // A name the provider does not have has no value, whatever the request holds.
  request.settings["colour"] = "red";
  EXPECT_FALSE(LookupSetting(request, fake, "colour").has_value());
}

TEST(ProviderRegistryTest, AVariableThatOverridesTheFileHidesTheFilesValueOnly) {
  ProviderRegistration fake = Zoned();
  ProviderRequest request;
  request.file_settings["config-file"] = "/from/file";
  request.getenv = Env({});
  EXPECT_EQ(SettingValue(request, fake, "config-file"), "/from/file");
  // FAKE_CONFIG is read by someone else (as KUBECONFIG is by the kubeconfig
  // loader): set, the file's value gives way; the variable is not the value.
  request.getenv = Env({{"FAKE_CONFIG", "/a:/b"}});
  EXPECT_FALSE(SettingValue(request, fake, "config-file").has_value());
  request.settings["config-file"] = "/from/flag";
  EXPECT_EQ(SettingValue(request, fake, "config-file"), "/from/flag");
}

TEST(ProviderRegistryTest, ConfigKeysAndProvidersOfASetting) {
  EXPECT_EQ(ConfigKeyOf("warm-pool"), "warm_pool");
  EXPECT_EQ(ConfigKeyOf("ready-timeout"), "ready_timeout");
  EXPECT_EQ(ConfigKeyOf("namespace"), "namespace");
  ProviderRegistry registry;
  ASSERT_TRUE(registry.Register(Zoned()).has_value());
  ASSERT_TRUE(registry.Register(Fake("other", {{"zone", "", "other: the zone"}})).has_value());
  ASSERT_TRUE(registry.Register(Fake("bare")).has_value());
  auto with_zone = registry.WithSetting("zone");
  ASSERT_EQ(with_zone.size(), 2u);
  EXPECT_EQ(with_zone[0]->name, "fake");
  EXPECT_EQ(with_zone[1]->name, "other");
  EXPECT_TRUE(registry.WithSetting("colour").empty());
  EXPECT_NE(FindSetting(*registry.Lookup("fake"), "size"), nullptr);
  EXPECT_EQ(FindSetting(*registry.Lookup("bare"), "size"), nullptr);
}

}  // namespace
}  // namespace deepbox
