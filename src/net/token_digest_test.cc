#include "net/token_digest.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace deepbox::net {
namespace {

std::string Hex(std::string_view raw) {
  std::string out;
  for (unsigned char c : raw) out += fmt::format("{:02x}", c);
  return out;
}

TEST(TokenDigestTest, KnownVectors) {
  EXPECT_EQ(Hex(Sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // RFC 4231 test case 2.
  EXPECT_EQ(Hex(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(Base64UrlEncode(std::string("\xfb\xff", 2)), "-_8");
}

TEST(TokenDigestTest, VerifierRoundTrip) {
  std::string v = TokenVerifier("s3cret");
  EXPECT_EQ(v.size(), 50u);  // fits any annotation or label value
  EXPECT_TRUE(v.starts_with("sha256:"));
  auto digest = ParseTokenVerifier(v + "\n");
  ASSERT_TRUE(digest);
  EXPECT_TRUE(TokenMatchesDigest("s3cret", *digest));
  EXPECT_FALSE(TokenMatchesDigest("s3cres", *digest));
  EXPECT_FALSE(TokenMatchesDigest("", *digest));
  EXPECT_FALSE(TokenMatchesDigest("s3cret", ""));
}

TEST(TokenDigestTest, MalformedVerifiersAreRefused) {
  std::string good = TokenVerifier("t");
  for (std::string bad : {std::string(), std::string("sha256:"), good.substr(7),
                          "sha512:" + good.substr(7), good + "A", good.substr(0, 49),
                          "sha256:" + std::string(43, '+'), good.substr(0, 49) + "="}) {
    EXPECT_FALSE(ParseTokenVerifier(bad)) << bad;
  }
}

}  // namespace
}  // namespace deepbox::net
