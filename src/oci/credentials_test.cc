#include "oci/credentials.h"

#include <gtest/gtest.h>

#include <map>

#include "common/base64.h"
#include "common/testing/temp_dir.h"
#include "fs/testing/test_util.h"

namespace deepbox::oci {
namespace {

TEST(CredentialsTest, AuthFieldAndUsernamePassword) {
  std::string text = R"({"auths":{"https://index.docker.io/v1/":{"auth":")" +
                     Base64Encode("hub:secret:with:colons") +
                     R"("},"localhost:5000":{"username":"u","password":"p"}}})";
  auto hub = CredentialsFromAuthFile(text, "docker.io", "f");
  ASSERT_TRUE(hub && *hub);
  EXPECT_EQ((*hub)->username, "hub");
  EXPECT_EQ((*hub)->password, "secret:with:colons");
  auto local = CredentialsFromAuthFile(text, "localhost:5000", "f");
  ASSERT_TRUE(local && *local);
  EXPECT_EQ((*local)->username, "u");
  auto none = CredentialsFromAuthFile(text, "ghcr.io", "f");
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
}

TEST(CredentialsTest, BadFilesAreClearErrors) {
  auto bad = CredentialsFromAuthFile("{not json", "x", "/some/config.json");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("/some/config.json"), std::string::npos);
  auto undecodable =
      CredentialsFromAuthFile(R"({"auths":{"x":{"auth":"bm9jb2xvbg=="}}})", "x", "f");
  ASSERT_FALSE(undecodable);  // "nocolon"
}

TEST(CredentialsTest, FileOrderRegistryAuthFileThenDockerConfig) {
  deepbox::testing::TempDir dir("oci-creds");
  fs::testing::WriteRaw(dir.Path("auth.json"),
                        R"({"auths":{"r.test":{"username":"from-auth-file","password":"p"}}})");
  fs::testing::WriteRaw(dir.Path("docker/config.json"),
                        R"({"auths":{"r.test":{"username":"from-docker","password":"p"}}})");
  std::map<std::string, std::string> env{{"REGISTRY_AUTH_FILE", dir.Path("auth.json")},
                                         {"DOCKER_CONFIG", dir.Path("docker")}};
  auto lookup = [&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto c = LookupCredentials("r.test", lookup);
  ASSERT_TRUE(c && *c);
  EXPECT_EQ((*c)->username, "from-auth-file");
  env.erase("REGISTRY_AUTH_FILE");
  c = LookupCredentials("r.test", lookup);
  ASSERT_TRUE(c && *c);
  EXPECT_EQ((*c)->username, "from-docker");
  env["DOCKER_CONFIG"] = dir.Path("missing");
  c = LookupCredentials("r.test", lookup);
  ASSERT_TRUE(c);
  EXPECT_FALSE(*c);
}

}  // namespace
}  // namespace deepbox::oci
