#include "common/user_state_dir.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <map>

namespace deepbox {
namespace {

EnvGetter Env(std::map<std::string, std::string> vars) {
  return [vars](const char* name) {
    auto it = vars.find(name);
    return it == vars.end() ? std::string() : it->second;
  };
}

std::string PasswdHome() {
  struct passwd* pw = getpwuid(geteuid());
  return pw != nullptr && pw->pw_dir != nullptr ? pw->pw_dir : "";
}

TEST(UserStateDirTest, XdgStateHomeThenHome) {
  EXPECT_EQ(UserStateDir(Env({{"XDG_STATE_HOME", "/x"}, {"HOME", "/h"}}), "images", "V").value(),
            "/x/deepbox/images");
  // A relative XDG_STATE_HOME is ignored, as the XDG spec says.
  EXPECT_EQ(UserStateDir(Env({{"XDG_STATE_HOME", "x"}, {"HOME", "/h"}}), "images", "V").value(),
            "/h/.local/state/deepbox/images");
}

TEST(UserStateDirTest, WithoutAHomeRootUsesTheSystemsStateOthersThePasswordDatabase) {
  for (const auto& env : {Env({}), Env({{"HOME", "relative"}})}) {
    auto dir = UserStateDir(env, "snapshots", "DEEPBOX_SNAPSHOT_DIR");
    if (geteuid() == 0) {
      EXPECT_EQ(dir.value(), "/var/lib/deepbox/snapshots");
    } else if (PasswdHome().starts_with("/")) {
      EXPECT_EQ(dir.value(), PasswdHome() + "/.local/state/deepbox/snapshots");
    } else {
      ASSERT_FALSE(dir);
      EXPECT_THAT(dir.error().message, ::testing::HasSubstr("set DEEPBOX_SNAPSHOT_DIR (or HOME)"));
    }
  }
}

TEST(UserStateDirTest, HomeIsTheEnvironmentsWhenAbsoluteElseThePasswordDatabases) {
  EXPECT_EQ(UserHomeDir(Env({{"HOME", "/h"}})), "/h");
  std::string fallback = PasswdHome().starts_with("/") ? PasswdHome() : "";
  EXPECT_EQ(UserHomeDir(Env({{"HOME", "relative"}})), fallback);
  EXPECT_EQ(UserHomeDir(Env({})), fallback);
}

}  // namespace
}  // namespace deepbox
