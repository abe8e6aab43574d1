#include "sandbox/secrets.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace deepbox {
namespace {

TEST(SecretsTest, ParsesTheThreeSources) {
  auto env = ParseSecretSpec("GH_TOKEN=env:GITHUB_TOKEN@api.github.com,GitHub.com");
  ASSERT_TRUE(env) << env.error().message;
  EXPECT_EQ(env->name, "GH_TOKEN");
  EXPECT_EQ(env->source.kind, SecretSource::Kind::kEnv);
  EXPECT_EQ(env->source.ref, "GITHUB_TOKEN");
  EXPECT_EQ(env->hosts, (std::vector<std::string>{"api.github.com", "github.com"}));

  auto file = ParseSecretSpec("K=file:/run/keys/k@*.example.com");
  ASSERT_TRUE(file);
  EXPECT_EQ(file->source.kind, SecretSource::Kind::kFile);
  EXPECT_EQ(file->source.ref, "/run/keys/k");
  EXPECT_EQ(file->hosts, std::vector<std::string>{"*.example.com"});

  // The last '@' separates the hosts: a command may hold '@'.
  auto cmd = ParseSecretSpec("T=cmd:pass show me@work@pypi.org");
  ASSERT_TRUE(cmd);
  EXPECT_EQ(cmd->source.kind, SecretSource::Kind::kCommand);
  EXPECT_EQ(cmd->source.ref, "pass show me@work");
  EXPECT_EQ(cmd->source.ToString(), "cmd:pass show me@work");
  EXPECT_FALSE(cmd->in_query);

  auto query = ParseSecretSpec("Q=env:X@a.example.com,b.example.com;query");
  ASSERT_TRUE(query) << query.error().message;
  EXPECT_TRUE(query->in_query);
  EXPECT_EQ(query->hosts, (std::vector<std::string>{"a.example.com", "b.example.com"}));
  EXPECT_FALSE(ParseSecretSpec("Q=env:X@a.example.com;headers"));
}

TEST(SecretsTest, RefusesBadFlagsClearly) {
  for (const char* bad :
       {"", "NOEQUALS", "1X=env:A@a.com", "A-B=env:A@a.com", "A=env:A", "A=env:@a.com",
        "A=env:1X@a.com", "A=file:@a.com", "A=cmd:@a.com", "A=vault:x@a.com", "A=env:X@",
        "A=env:X@a.com:8443", "A=env:X@a.com!plain", "A=env:X@10.0.0.1", "A=env:X@localhost",
        "A=env:X@a..com"}) {
    auto r = ParseSecretSpec(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_NE(r.error().message.find("NAME=SOURCE@HOST"), std::string::npos) << bad;
    }
  }
}

TEST(SecretsTest, ValuesMustFitInAHeaderAndErrorsNeverQuoteThem) {
  EXPECT_TRUE(ValidateSecretValue("ghp_abc123"));
  for (std::string v : {std::string(""), std::string("a\r\nX-Evil: 1"), std::string("a\nb"),
                        std::string("a\0b", 3), std::string(kMaxSecretValueBytes + 1, 'x'),
                        std::string(" lead"), std::string("trail\t"), std::string("del\x7f")}) {
    auto st = ValidateSecretValue(v);
    ASSERT_FALSE(st);
    if (v.size() > 2) {
      EXPECT_EQ(st.error().message.find(v), std::string::npos);
    }
  }
}

TEST(SecretsTest, PlaceholdersAreRandomAndRecognisable) {
  std::string a = MakeSecretPlaceholder(), b = MakeSecretPlaceholder();
  EXPECT_NE(a, b);
  EXPECT_TRUE(IsSecretPlaceholder(a));
  EXPECT_EQ(a.rfind("deepbox-secret-", 0), 0u);
  EXPECT_FALSE(IsSecretPlaceholder("deepbox-secret-xyz"));
  EXPECT_FALSE(IsSecretPlaceholder(a + "0"));
}

TEST(SecretsTest, ResolvesFromEnvironmentFileAndCommand) {
  setenv("DEEPBOX_TEST_SECRET_SRC", "s3cret-env", 1);
  auto env = ResolveSecretFlags({"A=env:DEEPBOX_TEST_SECRET_SRC@a.example.com"});
  ASSERT_TRUE(env) << env.error().message;
  ASSERT_EQ(env->size(), 1u);
  EXPECT_EQ((*env)[0].value, "s3cret-env");
  EXPECT_TRUE(IsSecretPlaceholder((*env)[0].placeholder));

  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("secrets_test." + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "k") << "s3cret-file\r\n";
  auto file = ResolveSecretFlags({"B=file:" + (dir / "k").string() + "@a.example.com"});
  ASSERT_TRUE(file) << file.error().message;
  EXPECT_EQ((*file)[0].value, "s3cret-file");  // one trailing CRLF removed

  auto cmd = ResolveSecretFlags({"C=cmd:printf 's3cret-cmd\\n'@a.example.com"});
  ASSERT_TRUE(cmd) << cmd.error().message;
  EXPECT_EQ((*cmd)[0].value, "s3cret-cmd");

  // Failures name the secret and the source, never a value.
  unsetenv("DEEPBOX_TEST_SECRET_UNSET");
  auto unset = ResolveSecretFlags({"D=env:DEEPBOX_TEST_SECRET_UNSET@a.example.com"});
  ASSERT_FALSE(unset);
  EXPECT_NE(unset.error().message.find("secret D (env:DEEPBOX_TEST_SECRET_UNSET)"),
            std::string::npos);
  auto failing = ResolveSecretFlags({"E=cmd:printf '%s-%s' s3cret leak; exit 3@a.example.com"});
  ASSERT_FALSE(failing);
  EXPECT_NE(failing.error().message.find("exited with status 3"), std::string::npos)
      << failing.error().message;
  EXPECT_EQ(failing.error().message.find("s3cret-leak"), std::string::npos);
  std::ofstream(dir / "two") << "line1\nline2\n";
  auto two = ResolveSecretFlags({"F=file:" + (dir / "two").string() + "@a.example.com"});
  ASSERT_FALSE(two);
  EXPECT_EQ(two.error().message.find("line1"), std::string::npos);
  auto missing = ResolveSecretFlags({"G=file:" + (dir / "nope").string() + "@a.example.com"});
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("open"), std::string::npos);
  auto dup = ResolveSecretFlags({"H=env:DEEPBOX_TEST_SECRET_SRC@a.example.com",
                                 "H=env:DEEPBOX_TEST_SECRET_SRC@b.example.com"});
  ASSERT_FALSE(dup);
  EXPECT_NE(dup.error().message.find("two --secret flags name H"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(SecretsTest, HostMatching) {
  std::vector<std::string> hosts = {"api.github.com", "*.example.com"};
  EXPECT_TRUE(SecretHostMatches(hosts, "API.github.com."));
  EXPECT_TRUE(SecretHostMatches(hosts, "a.example.com"));
  EXPECT_FALSE(SecretHostMatches(hosts, "example.com"));
  EXPECT_FALSE(SecretHostMatches(hosts, "github.com"));
  EXPECT_FALSE(SecretHostMatches(hosts, "api.github.com.evil.com"));
}

}  // namespace
}  // namespace deepbox
