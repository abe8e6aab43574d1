#include "oci/credential_helper.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "common/testing/temp_dir.h"
#include "fs/testing/test_util.h"

namespace deepbox::oci {
namespace {

// Real helper programs (shell scripts) in a directory of their own, found
// through the PATH the options give, as docker finds them.
class CredentialHelperTest : public ::testing::Test {
 protected:
  void Helper(const std::string& name, const std::string& body) {
    std::string file = bin_.Path("docker-credential-" + name);
    fs::testing::WriteRaw(file, "#!/bin/sh\n" + body);
    ASSERT_EQ(::chmod(file.c_str(), 0755), 0);
  }
  CredentialHelperOptions Options() {
    CredentialHelperOptions o;
    o.path = bin_.path().string() + ":/usr/bin:/bin";
    return o;
  }
  deepbox::testing::TempDir bin_{"oci-cred-helpers"};
};

TEST_F(CredentialHelperTest, AnswersCredentialsForTheServerUrlOnStdin) {
  // The helper answers only for the server it is asked about (stdin).
  Helper("store", R"(url=$(cat)
if [ "$1" = get ] && [ "$url" = "r.test:5000" ]; then
  printf '{"ServerURL":"%s","Username":"alice","Secret":"pw:with:colons"}' "$url"
else
  echo "credentials not found in native keychain"; exit 1
fi
)");
  auto found = RunCredentialHelper("store", "r.test:5000", Options());
  ASSERT_TRUE(found) << found.error().message;
  ASSERT_TRUE(*found);
  EXPECT_EQ((*found)->username, "alice");
  EXPECT_EQ((*found)->password, "pw:with:colons");
  EXPECT_TRUE((*found)->identity_token.empty());
  auto none = RunCredentialHelper("store", "other.test", Options());
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_FALSE(*none);
}

TEST_F(CredentialHelperTest, DockerHubIsAskedAboutByItsHistoricalUrl) {
  Helper("echo", R"sh(printf '{"Username":"%s","Secret":"s"}' "$(cat)")sh");
  auto hub = RunCredentialHelper("echo", "docker.io", Options());
  ASSERT_TRUE(hub && *hub);
  EXPECT_EQ((*hub)->username, "https://index.docker.io/v1/");
}

TEST_F(CredentialHelperTest, AnIdentityTokenIsKeptApart) {
  Helper("oauth", R"(cat >/dev/null; echo '{"Username":"<token>","Secret":"refresh-123"}')");
  auto t = RunCredentialHelper("oauth", "r.test", Options());
  ASSERT_TRUE(t && *t);
  EXPECT_EQ((*t)->identity_token, "refresh-123");
  EXPECT_TRUE((*t)->username.empty());
  EXPECT_TRUE((*t)->password.empty());
}

TEST_F(CredentialHelperTest, FailuresAreClearAndNeverEchoStdout) {
  Helper("garbage", "cat >/dev/null; echo 'hunter2-not-json'\n");
  auto garbage = RunCredentialHelper("garbage", "r.test", Options());
  ASSERT_FALSE(garbage);
  EXPECT_EQ(garbage.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(garbage.error().message.find("docker-credential-garbage"), std::string::npos);
  EXPECT_EQ(garbage.error().message.find("hunter2"), std::string::npos)
      << "stdout may hold a secret: " << garbage.error().message;

  Helper("fails", "cat >/dev/null; echo 'hunter2'; echo 'the keyring is locked' >&2; exit 3\n");
  auto fails = RunCredentialHelper("fails", "r.test", Options());
  ASSERT_FALSE(fails);
  EXPECT_EQ(fails.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(fails.error().message.find("exited with status 3: the keyring is locked"),
            std::string::npos)
      << fails.error().message;
  EXPECT_EQ(fails.error().message.find("hunter2"), std::string::npos);

  Helper("hangs", "exec sleep 30\n");
  CredentialHelperOptions quick = Options();
  quick.timeout = std::chrono::milliseconds(200);
  auto hangs = RunCredentialHelper("hangs", "r.test", quick);
  ASSERT_FALSE(hangs);
  EXPECT_EQ(hangs.error().code, ErrorCode::kTimeout) << hangs.error().message;

  auto missing = RunCredentialHelper("absent", "r.test", Options());
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("docker-credential-absent is not on PATH"),
            std::string::npos)
      << missing.error().message;

  // A name is a plain name, never a path to some program.
  for (const char* name : {"../../bin/sh", "a/b", "", ".."}) {
    auto bad = RunCredentialHelper(name, "r.test", Options());
    ASSERT_FALSE(bad) << name;
    EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument) << name;
  }
}

TEST_F(CredentialHelperTest, AuthFileHelpersComeBeforeInlineCredentials) {
  Helper("per", R"(cat >/dev/null; echo '{"Username":"from-credHelpers","Secret":"p"}')");
  Helper("store", R"(url=$(cat)
[ "$url" = "stored.test" ] && { echo '{"Username":"from-credsStore","Secret":"p"}'; exit 0; }
echo "credentials not found in native keychain"; exit 1
)");
  const std::string text = R"({
    "credHelpers": {"per.test": "per"},
    "credsStore": "store",
    "auths": {"per.test": {"username": "inline", "password": "p"},
              "inline.test": {"username": "inline", "password": "p"}}})";
  const std::string path = Options().path;
  auto per = ResolveCredentials(text, "per.test", "f", path);
  ASSERT_TRUE(per && *per) << (per ? "none" : per.error().message);
  EXPECT_EQ((*per)->username, "from-credHelpers");
  auto stored = ResolveCredentials(text, "stored.test", "f", path);
  ASSERT_TRUE(stored && *stored);
  EXPECT_EQ((*stored)->username, "from-credsStore");
  // The store has none for it: the inline entry.
  auto inline_creds = ResolveCredentials(text, "inline.test", "f", path);
  ASSERT_TRUE(inline_creds && *inline_creds);
  EXPECT_EQ((*inline_creds)->username, "inline");
  auto nothing = ResolveCredentials(text, "nothing.test", "f", path);
  ASSERT_TRUE(nothing);
  EXPECT_FALSE(*nothing);
  // A helper that is named but missing is an error naming the file.
  auto missing =
      ResolveCredentials(R"({"credsStore":"absent"})", "r.test", "/my/config.json", path);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("/my/config.json"), std::string::npos)
      << missing.error().message;
}

}  // namespace
}  // namespace deepbox::oci
