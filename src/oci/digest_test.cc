#include "oci/digest.h"

#include <gtest/gtest.h>

namespace deepbox::oci {
namespace {

TEST(DigestTest, KnownValuesAndPieces) {
  EXPECT_EQ(Sha256Digest(""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256Digester d;
  d.Update("ab");
  d.Update("c");
  EXPECT_EQ(d.Finish(), Sha256Digest("abc"));
}

TEST(DigestTest, OnlyLowercaseSha256IsValid) {
  std::string good = Sha256Digest("x");
  EXPECT_TRUE(ValidDigest(good));
  EXPECT_EQ(DigestHex(good).size(), 64u);
  std::string upper = good;
  upper[10] = 'A';
  EXPECT_FALSE(ValidDigest(upper));
  EXPECT_FALSE(ValidDigest("sha512:" + std::string(64, 'a')));
  EXPECT_FALSE(ValidDigest(good + "0"));
  EXPECT_FALSE(ValidDigest("sha256:../../etc/passwd"));
  EXPECT_FALSE(CheckDigest("sha256:zz", "layer digest"));
}

}  // namespace
}  // namespace deepbox::oci
