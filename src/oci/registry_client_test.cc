#include "oci/registry_client.h"

#include <gtest/gtest.h>

namespace deepbox::oci {
namespace {

TEST(RegistryClientTest, ParsesBearerAndBasicChallenges) {
  auto c = ParseAuthChallenge(
      R"(Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/python:pull,push")");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->scheme, "bearer");
  EXPECT_EQ(c->realm, "https://auth.docker.io/token");
  EXPECT_EQ(c->service, "registry.docker.io");
  EXPECT_EQ(c->scope, "repository:library/python:pull,push");  // a comma inside quotes

  auto basic = ParseAuthChallenge(R"(Basic realm="my \"quoted\" realm")");
  ASSERT_TRUE(basic);
  EXPECT_EQ(basic->scheme, "basic");
  EXPECT_EQ(basic->realm, R"(my "quoted" realm)");

  auto bare = ParseAuthChallenge("BEARER realm=https://x/token, service=svc");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->realm, "https://x/token");
  EXPECT_EQ(bare->service, "svc");

  EXPECT_FALSE(ParseAuthChallenge(R"(Bearer realm="unterminated)"));
  EXPECT_FALSE(ParseAuthChallenge(""));
}

}  // namespace
}  // namespace deepbox::oci
