#include "cli/provider_flags.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "cli/providers.h"

namespace deepbox::cli {
namespace {

// A third provider, registered the way a new one would be: its settings must
// appear on every command without any change to the commands.
void RegisterThirdProvider() {
  static bool once = [] {
    ProviderRegistration r;
    r.name = "third";
    r.summary = "a provider only this test has";
    r.settings = {{"zone", "THIRD_ZONE", "third: the zone to create in", 'z', true},
                  {"endpoint", "THIRD_ENDPOINT", "third: where it is reached"}};
    r.owns_id = [](std::string_view id) { return id.starts_with("third-"); };
    r.make = [](const ProviderRequest&) -> Result<std::unique_ptr<SandboxProvider>> {
      return MakeError(ErrorCode::kUnimplemented, "third: nothing to make");
    };
    return ProviderRegistry::Global().Register(std::move(r)).has_value();
  }();
  ASSERT_TRUE(once);
}

class ProviderFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RegisterBuiltinProviders();
    RegisterThirdProvider();
  }

  // Parses `args` (without the program name) on a command that took the flags.
  static void Parse(CLI::App& app, std::vector<std::string> args) {
    std::reverse(args.begin(), args.end());  // CLI11's order for a vector
    app.parse(args);
  }

  static std::vector<std::string> LongFlags(CLI::App& app) {
    std::vector<std::string> out;
    for (const CLI::Option* o : app.get_options()) {
      for (const auto& name : o->get_lnames()) {
        if (name != "help") out.push_back(name);
      }
    }
    return out;
  }
};

TEST_F(ProviderFlagsTest, EverySettingOfEveryProviderIsAFlagWithItsOwnHelp) {
  CLI::App app;
  ProviderSettingFlags flags;
  AddProviderSettingFlags(&app, flags);
  for (const auto& provider : ProviderRegistry::Global().Names()) {
    for (const auto& s : ProviderRegistry::Global().Lookup(provider)->settings) {
      const CLI::Option* o = app.get_option_no_throw("--" + s.name);
      ASSERT_NE(o, nullptr) << provider << ": --" << s.name;
      EXPECT_EQ(o->get_description(), s.help);
    }
  }
  // Each once: local's and k8s's and the third's, no more.
  auto names = LongFlags(app);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "zone"), names.end());
}

TEST_F(ProviderFlagsTest, ValuesGivenLandByNameAndOnlyThose) {
  CLI::App app;
  ProviderSettingFlags flags;
  AddProviderSettingFlags(&app, flags);
  Parse(app, {"-n", "team-a", "--memory", "4G", "--ready-timeout=30", "-z", "eu"});
  EXPECT_EQ(
      flags.given,
      (std::map<std::string, std::string>{
          {"namespace", "team-a"}, {"memory", "4G"}, {"ready-timeout", "30"}, {"zone", "eu"}}));
  const auto& registry = ProviderRegistry::Global();
  EXPECT_EQ(flags.For(*registry.Lookup("local")),
            (std::map<std::string, std::string>{{"memory", "4G"}}));
  EXPECT_EQ(flags.For(*registry.Lookup("k8s")),
            (std::map<std::string, std::string>{{"namespace", "team-a"}, {"ready-timeout", "30"}}));
  EXPECT_EQ(flags.NotFor(*registry.Lookup("local")),
            (std::vector<std::string>{"--namespace", "--ready-timeout", "--zone"}));
  EXPECT_EQ(flags.For(*registry.Lookup("third")),
            (std::map<std::string, std::string>{{"zone", "eu"}}));
}

TEST_F(ProviderFlagsTest, AShortFlagOnlyWhereTheCommandHasTheLetterFree) {
  CLI::App app;
  int count = 1;
  app.add_option("-n,--count", count);  // as `sandbox fork -n K`
  ProviderSettingFlags flags;
  AddProviderSettingFlags(&app, flags);
  Parse(app, {"-n", "3", "--namespace", "team-b"});
  EXPECT_EQ(count, 3);
  EXPECT_EQ(flags.given.at("namespace"), "team-b");
}

TEST_F(ProviderFlagsTest, CommandsThatOnlyReachSandboxesTakeNoCreationSettings) {
  CLI::App app;
  ProviderSettingFlags flags;
  ProviderFlagSet reach;
  reach.creation = false;
  AddProviderSettingFlags(&app, flags, reach);
  for (const char* absent : {"--memory", "--pool", "--warm-pool", "--ready-timeout", "--zone"}) {
    EXPECT_EQ(app.get_option_no_throw(absent), nullptr) << absent;
  }
  for (const char* present : {"--namespace", "--context", "--kubeconfig", "--router-url",
                              "--router-token", "--endpoint"}) {
    EXPECT_NE(app.get_option_no_throw(present), nullptr) << present;
  }
  EXPECT_THROW(Parse(app, {"--memory", "1G"}), CLI::ParseError);
}

TEST_F(ProviderFlagsTest, ASetCanNameItsProvidersAndSettings) {
  CLI::App app;
  ProviderSettingFlags flags;
  ProviderFlagSet limits;
  limits.providers = {"local"};
  limits.only = {"memory", "cpus"};
  AddProviderSettingFlags(&app, flags, limits);
  auto names = LongFlags(app);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"cpus", "memory"}));
}

TEST_F(ProviderFlagsTest, ErrorsNameTheProvidersOfASetting) {
  EXPECT_EQ(ProvidersWithSetting("memory"), "local");
  EXPECT_EQ(ProvidersWithSetting("warm-pool"), "k8s");
  EXPECT_EQ(ProvidersWithSetting("zone"), "third");
  EXPECT_EQ(ProvidersWithSetting("colour"), "");
}

TEST_F(ProviderFlagsTest, TheEnvironmentHelpNamesEveryProvidersVariables) {
  std::string help = ProviderEnvironmentHelp();
  for (const auto& provider : ProviderRegistry::Global().Names()) {
    for (const auto& s : ProviderRegistry::Global().Lookup(provider)->settings) {
      if (!s.env.empty()) {
        EXPECT_NE(help.find(s.env), std::string::npos) << s.env;
      }
    }
  }
  EXPECT_NE(help.find("k8s: AGENT_SANDBOX_NAMESPACE, KUBECONFIG"), std::string::npos) << help;
  size_t start = 0;  // lines of at most 80 columns
  for (size_t nl = help.find('\n'); start <= help.size(); nl = help.find('\n', start)) {
    size_t end = nl == std::string::npos ? help.size() : nl;
    EXPECT_LE(end - start, 80u) << help;
    start = end + 1;
  }
  EXPECT_NE(help.find("third: THIRD_ZONE, THIRD_ENDPOINT"), std::string::npos) << help;
  EXPECT_EQ(help.find("local:"), std::string::npos) << help;  // local has no variables
}

}  // namespace
}  // namespace deepbox::cli
