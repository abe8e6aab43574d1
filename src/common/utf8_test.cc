#include "common/utf8.h"

#include <gtest/gtest.h>

namespace deepbox {
namespace {

TEST(Utf8Test, ValidPassesThrough) {
  EXPECT_TRUE(IsValidUtf8("héllo ✓"));
  EXPECT_EQ(SanitizeUtf8("héllo ✓"), "héllo ✓");
}

TEST(Utf8Test, InvalidBytesReplaced) {
  std::string bad =
      "a\xff"
      "b\xc3";
  EXPECT_FALSE(IsValidUtf8(bad));
  std::string fixed = SanitizeUtf8(bad);
  EXPECT_TRUE(IsValidUtf8(fixed));
  EXPECT_EQ(fixed.substr(0, 1), "a");
  EXPECT_NE(fixed.find("\xEF\xBF\xBD"), std::string::npos);
}

TEST(Utf8Test, CompletePrefixStopsBeforeSplitSequence) {
  std::string check = "ok\xE2\x9C\x93";  // "ok✓"
  EXPECT_EQ(Utf8CompletePrefix(check), check.size());
  EXPECT_EQ(Utf8CompletePrefix(check.substr(0, 4)), 2u);
  EXPECT_EQ(Utf8CompletePrefix(check.substr(0, 3)), 2u);
  EXPECT_EQ(Utf8CompletePrefix("abc"), 3u);
  EXPECT_EQ(Utf8CompletePrefix(""), 0u);
}

}  // namespace
}  // namespace deepbox
