#include "k8s/router_token.h"

#include <gtest/gtest.h>

namespace deepbox::k8s {
namespace {

const std::string kSecret = "0123456789abcdef0123456789abcdef";
// The same token computed independently (Python's hmac over the documented
// format) for {"ns":"default","name":"sb","exp":2000000000}.
const std::string kExpected =
    "v1.eyJucyI6ImRlZmF1bHQiLCJuYW1lIjoic2IiLCJleHAiOjIwMDAwMDAwMDB9."
    "jtwzlz4DWB0xAsP4Ntw1IczO0LNk-BLt-Vk-co83xCA";

SystemTime At(int64_t unix_seconds) { return SystemTime(std::chrono::seconds(unix_seconds)); }

TEST(ScopedRouterTokenTest, MintsTheRoutersV1Format) {
  auto t = MintScopedRouterToken(kSecret, {"default", "sb", 2000000000});
  ASSERT_TRUE(t) << t.error().ToString();
  EXPECT_EQ(*t, kExpected);
  // The secret file's whitespace is trimmed, as the router does.
  EXPECT_EQ(*MintScopedRouterToken("  " + kSecret + "\n", {"default", "sb", 2000000000}),
            kExpected);
}

TEST(ScopedRouterTokenTest, ReadsAndVerifiesTheScope) {
  auto scope = ReadScopedRouterToken(kExpected);
  ASSERT_TRUE(scope);
  EXPECT_EQ(scope->namespace_name, "default");
  EXPECT_EQ(scope->sandbox_name, "sb");
  EXPECT_EQ(scope->expires, 2000000000);
  auto ok = VerifyScopedRouterToken(kSecret, kExpected, At(1999999999));
  ASSERT_TRUE(ok) << ok.error().ToString();
  EXPECT_EQ(ok->sandbox_name, "sb");
  // Expired at exp, forged with another secret, or tampered with.
  EXPECT_EQ(VerifyScopedRouterToken(kSecret, kExpected, At(2000000000)).error().code,
            ErrorCode::kUnauthenticated);
  EXPECT_FALSE(VerifyScopedRouterToken(std::string(32, 'x'), kExpected, At(0)));
  std::string tampered = kExpected;
  tampered[5] = tampered[5] == 'A' ? 'B' : 'A';
  EXPECT_FALSE(VerifyScopedRouterToken(kSecret, tampered, At(0)));
}

TEST(ScopedRouterTokenTest, OtherBearerTokensAreNotScoped) {
  for (std::string token : {"", "secret-router-token", "v1.abc", "v2.a.b", "v1.!!.x",
                            "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", "v1.e30.x"}) {
    EXPECT_FALSE(ReadScopedRouterToken(token)) << token;
  }
}

TEST(ScopedRouterTokenTest, RefusesAShortSecretAndMissingNames) {
  auto t = MintScopedRouterToken(" short ", {"default", "sb", 1});
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(t.error().message.find("at least 32 bytes"), std::string::npos);
  EXPECT_FALSE(MintScopedRouterToken(kSecret, {"", "sb", 1}));
  EXPECT_FALSE(MintScopedRouterToken(kSecret, {"default", "", 1}));
}

}  // namespace
}  // namespace deepbox::k8s
