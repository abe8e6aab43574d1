#include "net/openssl_loader.h"

#include <gtest/gtest.h>

#include <string>

namespace deepbox::net {
namespace {

TEST(OpenSslLoaderTest, LoadsOnceAndTheFunctionsWork) {
  auto first = LoadLibOpenSsl("this test");
  ASSERT_TRUE(first) << first.error().ToString();
  auto second = LoadLibOpenSsl("this test");
  ASSERT_TRUE(second);
  EXPECT_EQ(*first, *second);
  EXPECT_EQ(LoadedLibOpenSsl(), *first);
  const LibOpenSsl& openssl = **first;
  // SHA-256("abc"), FIPS 180-2 appendix B.1.
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  ASSERT_EQ(openssl.EVP_Digest("abc", 3, out, &len, openssl.EVP_sha256(), nullptr), 1);
  ASSERT_EQ(len, 32u);
  static const unsigned char kAbc[4] = {0xba, 0x78, 0x16, 0xbf};
  EXPECT_EQ(std::string(reinterpret_cast<char*>(out), 4),
            std::string(reinterpret_cast<const char*>(kAbc), 4));
}

}  // namespace
}  // namespace deepbox::net
