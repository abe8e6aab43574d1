#include "common/base64.h"

#include <gtest/gtest.h>

namespace deepbox {
namespace {

TEST(Base64Test, KnownVectors) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
}

TEST(Base64Test, RoundTripAllBytes) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  auto back = Base64Decode(Base64Encode(all));
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, all);
}

TEST(Base64Test, RejectsGarbage) {
  EXPECT_FALSE(Base64Decode("Zm9v!"));
  EXPECT_FALSE(Base64Decode("Z"));
}

}  // namespace
}  // namespace deepbox
