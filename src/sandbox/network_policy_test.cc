#include "sandbox/network_policy.h"

#include <gtest/gtest.h>

namespace deepbox {
namespace {

TEST(NetworkPolicyTest, ParseMode) {
  EXPECT_EQ(*ParseNetworkMode("none"), NetworkMode::kNone);
  EXPECT_EQ(*ParseNetworkMode("public"), NetworkMode::kPublic);
  EXPECT_FALSE(ParseNetworkMode("host").has_value());
  EXPECT_EQ(NetworkModeName(NetworkMode::kPublic), "public");
}

TEST(NetworkPolicyTest, ParsePolicy) {
  auto p =
      ParseNetworkPolicy("allow=PyPI.org,files.pythonhosted.org,*.github.com,git.example.com:8443");
  ASSERT_TRUE(p.has_value()) << p.error().ToString();
  EXPECT_EQ(p->mode, NetworkMode::kAllow);
  EXPECT_EQ(p->ToString(),
            "allow=pypi.org,files.pythonhosted.org,*.github.com,git.example.com:8443");
  EXPECT_EQ(ParseNetworkPolicy(p->ToString())->allow, p->allow);
  EXPECT_EQ(ParseNetworkPolicy("public")->mode, NetworkMode::kPublic);
  EXPECT_EQ(ParseNetworkPolicy("none")->ToString(), "none");
  for (const char* bad : {"allow=", "allow=a..b", "allow=*", "allow=*.com.", "allow=localhost",
                          "allow=pypi.org:0", "allow=pypi.org:70000", "allow=a b.com",
                          "allow=-a.com", "allow=**.a.com", "allow=10.0.0.1", "host"}) {
    EXPECT_FALSE(ParseNetworkPolicy(bad).has_value()) << bad;
  }
}

TEST(NetworkPolicyTest, AllowlistMatching) {
  std::vector<std::string> allow = {"pypi.org", "*.github.com", "git.example.com:8443"};
  EXPECT_TRUE(AllowlistMatches(allow, "PyPI.org.", 443));
  EXPECT_TRUE(AllowlistMatches(allow, "pypi.org", 80));
  EXPECT_FALSE(AllowlistMatches(allow, "pypi.org", 8080));
  EXPECT_FALSE(AllowlistMatches(allow, "evilpypi.org", 443));
  EXPECT_FALSE(AllowlistMatches(allow, "pypi.org.evil.com", 443));
  EXPECT_TRUE(AllowlistMatches(allow, "api.github.com", 443));
  EXPECT_TRUE(AllowlistMatches(allow, "a.b.github.com", 443));
  EXPECT_FALSE(AllowlistMatches(allow, "github.com", 443));  // *. means subdomains only
  EXPECT_FALSE(AllowlistMatches(allow, "evilgithub.com", 443));
  EXPECT_TRUE(AllowlistMatches(allow, "git.example.com", 8443));
  EXPECT_FALSE(AllowlistMatches(allow, "", 443));
}

TEST(NetworkPolicyTest, ParsePolicyPlainFlag) {
  auto p = ParseNetworkPolicy("allow=git.example.com:22!plain,pypi.org");
  ASSERT_TRUE(p.has_value()) << p.error().ToString();
  EXPECT_EQ(ParseNetworkPolicy(p->ToString())->allow, p->allow);
  AllowMatch m = MatchAllowlist(p->allow, "git.example.com", 22);
  EXPECT_TRUE(m.matched);
  EXPECT_TRUE(m.plain);
  EXPECT_TRUE(MatchAllowlist(p->allow, "git.example.com", 443).plain);
  m = MatchAllowlist(p->allow, "pypi.org", 443);
  EXPECT_TRUE(m.matched);
  EXPECT_FALSE(m.plain);
  for (const char* bad : {"allow=a.com!tls", "allow=a.com!", "allow=a.com!plain!plain",
                          "allow=!plain", "allow=a.com:22!plainx"}) {
    EXPECT_FALSE(ParseNetworkPolicy(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace deepbox
