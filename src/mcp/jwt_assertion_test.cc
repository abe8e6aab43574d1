#include "mcp/jwt_assertion.h"

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <memory>
#include <vector>

#include "common/base64.h"
#include "common/json.h"
#include "common/strings.h"
#include "mcp/testing/private_key_pem.h"

namespace deepbox::mcp {
namespace {

using testing::EcPrivateKeyPem;
using testing::RsaPrivateKeyPem;

std::string Base64UrlDecodeForTest(std::string_view s) {
  std::string b(s);
  for (char& c : b) {
    if (c == '-') c = '+';
    if (c == '_') c = '/';
  }
  while (b.size() % 4 != 0) b += '=';
  return Base64Decode(b).value_or("<bad base64>");
}

// Verifies a compact JWS with the key of `pem`, as an authorization server does.
bool VerifiesWith(const std::string& pem, const std::string& jwt) {
  std::vector<std::string_view> parts = Split(jwt, '.');
  if (parts.size() != 3) return false;
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (key == nullptr) return false;
  std::string sig = Base64UrlDecodeForTest(parts[2]);
  const EVP_MD* md = EVP_sha256();
  if (EVP_PKEY_is_a(key, "EC")) {
    // r || s back into DER.
    const size_t half = sig.size() / 2;
    if (EVP_PKEY_get_bits(key) == 384) md = EVP_sha384();
    if (EVP_PKEY_get_bits(key) == 521) md = EVP_sha512();
    ECDSA_SIG* es = ECDSA_SIG_new();
    ECDSA_SIG_set0(es,
                   BN_bin2bn(reinterpret_cast<const unsigned char*>(sig.data()),
                             static_cast<int>(half), nullptr),
                   BN_bin2bn(reinterpret_cast<const unsigned char*>(sig.data() + half),
                             static_cast<int>(half), nullptr));
    unsigned char* der = nullptr;
    int len = i2d_ECDSA_SIG(es, &der);
    sig.assign(reinterpret_cast<char*>(der), static_cast<size_t>(len));
    OPENSSL_free(der);
    ECDSA_SIG_free(es);
  }
  const std::string input = std::string(parts[0]) + "." + std::string(parts[1]);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok =
      EVP_DigestVerifyInit(ctx, nullptr, md, nullptr, key) == 1 &&
      EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                       reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1;
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(key);
  return ok;
}

json::object Part(const std::string& jwt, size_t index) {
  return ParseJsonObject(Base64UrlDecodeForTest(Split(jwt, '.')[index])).value_or(json::object{});
}

JwtAssertionClaims Claims() {
  JwtAssertionClaims c;
  c.issuer = "client-7";
  c.audience = "https://as.example";
  return c;
}

TEST(JwtAssertionTest, EcKeysSignWithTheirCurvesAlgorithm) {
  for (auto [curve, alg] :
       {std::pair{"P-256", "ES256"}, std::pair{"P-384", "ES384"}, std::pair{"P-521", "ES512"}}) {
    const std::string pem = EcPrivateKeyPem(curve);
    EXPECT_EQ(JwtAlgorithmForKey(pem).value_or("?"), alg);
    auto jwt = SignJwtAssertion(pem, "", Claims(), 1000);
    ASSERT_TRUE(jwt) << jwt.error().message;
    EXPECT_TRUE(VerifiesWith(pem, *jwt)) << curve;
    json::object header = Part(*jwt, 0);
    EXPECT_EQ(GetOptString(header, "alg").value_or(""), alg);
    EXPECT_EQ(GetOptString(header, "typ").value_or(""), "JWT");
  }
}

TEST(JwtAssertionTest, ClaimsNameTheClientTheAudienceAndAShortLife) {
  const std::string pem = EcPrivateKeyPem("P-256");
  auto a = SignJwtAssertion(pem, "ES256", Claims(), 1000);
  auto b = SignJwtAssertion(pem, "ES256", Claims(), 1000);
  ASSERT_TRUE(a && b);
  json::object claims = Part(*a, 1);
  EXPECT_EQ(GetOptString(claims, "iss").value_or(""), "client-7");
  EXPECT_EQ(GetOptString(claims, "sub").value_or(""), "client-7");  // the issuer by default
  EXPECT_EQ(GetOptString(claims, "aud").value_or(""), "https://as.example");
  EXPECT_EQ(claims.at("iat").as_int64(), 1000);
  EXPECT_EQ(claims.at("exp").as_int64(), 1300);
  // Each assertion is single-use: its own jti.
  EXPECT_NE(GetOptString(claims, "jti").value_or(""), "");
  EXPECT_NE(GetOptString(claims, "jti"), GetOptString(Part(*b, 1), "jti"));
}

TEST(JwtAssertionTest, RsaKeysSignRs256) {
  const std::string pem = RsaPrivateKeyPem(2048);
  auto jwt = SignJwtAssertion(pem, "", Claims(), 1000);
  ASSERT_TRUE(jwt) << jwt.error().message;
  EXPECT_EQ(GetOptString(Part(*jwt, 0), "alg").value_or(""), "RS256");
  EXPECT_TRUE(VerifiesWith(pem, *jwt));
}

TEST(JwtAssertionTest, BadKeysAndMismatchedAlgorithmsAreClearErrors) {
  auto garbage = SignJwtAssertion("not a key", "", Claims(), 1000);
  ASSERT_FALSE(garbage);
  EXPECT_NE(garbage.error().message.find("not a PEM private key"), std::string::npos)
      << garbage.error().message;
  const std::string ec = EcPrivateKeyPem("P-256");
  for (const char* wrong : {"RS256", "HS256", "none", "ES384"}) {
    auto r = SignJwtAssertion(ec, wrong, Claims(), 1000);
    ASSERT_FALSE(r) << wrong;
    EXPECT_NE(r.error().message.find("signs ES256, not"), std::string::npos) << r.error().message;
  }
  auto small = SignJwtAssertion(RsaPrivateKeyPem(1024), "", Claims(), 1000);
  ASSERT_FALSE(small);
  EXPECT_NE(small.error().message.find("1024 bits"), std::string::npos);
  JwtAssertionClaims no_audience = Claims();
  no_audience.audience.clear();
  EXPECT_FALSE(SignJwtAssertion(ec, "", no_audience, 1000));
}

}  // namespace
}  // namespace deepbox::mcp
