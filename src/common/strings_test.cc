#include "common/strings.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace deepbox {
namespace {

using Views = std::vector<std::string_view>;

TEST(StringsTest, TrimTakesAsciiWhitespaceFromTheEndsOnly) {
  EXPECT_EQ(Trim(" \t\n\v\f\ra b\r\n"), "a b");
  EXPECT_EQ(TrimLeft("  a  "), "a  ");
  EXPECT_EQ(TrimRight("  a  "), "  a");
  EXPECT_EQ(Trim(""), "");
  EXPECT_EQ(Trim(" \n "), "");
  EXPECT_EQ(TrimRight("\n\n"), "");
  // Non-ASCII bytes are never whitespace (no locale decides).
  EXPECT_EQ(Trim("\xa0x\xa0"), "\xa0x\xa0");
}

TEST(StringsTest, TrimTakesTheGivenBytesWhenAsked) {
  EXPECT_EQ(Trim(" \ta\t ", " "), "\ta\t");
  EXPECT_EQ(TrimRight("x/.//", "/."), "x");
  EXPECT_EQ(TrimLeft("\r\n x", "\r\n"), " x");
}

TEST(StringsTest, TheTrimmedViewPointsIntoTheText) {
  std::string_view text = "  abc ";
  EXPECT_EQ(Trim(text).data(), text.data() + 2);
}

TEST(StringsTest, IsBlankMeansOnlyWhitespace) {
  EXPECT_TRUE(IsBlank(""));
  EXPECT_TRUE(IsBlank(" \n\t"));
  EXPECT_FALSE(IsBlank(" . "));
}

TEST(StringsTest, SplitKeepsEveryFieldLikePython) {
  EXPECT_EQ(Split("a,b", ','), (Views{"a", "b"}));
  EXPECT_EQ(Split("", ','), (Views{""}));
  EXPECT_EQ(Split(",", ','), (Views{"", ""}));
  EXPECT_EQ(Split("a,,b,", ','), (Views{"a", "", "b", ""}));
  EXPECT_EQ(Split("/x/y", '/'), (Views{"", "x", "y"}));
}

TEST(StringsTest, SplitLinesEndsLinesLikePythonSplitlines) {
  EXPECT_EQ(SplitLines("a\r\nb\rc\n"), (Views{"a", "b", "c"}));
  EXPECT_EQ(SplitLines(""), Views{});
  EXPECT_EQ(SplitLines("\n\nx"), (Views{"", "", "x"}));
  EXPECT_EQ(SplitLines("a\n\r\n"), (Views{"a", ""}));
}

TEST(StringsTest, JoinPutsTheSeparatorBetweenEveryPart) {
  EXPECT_EQ(Join({}, ", "), "");
  EXPECT_EQ(Join({"a"}, ", "), "a");
  EXPECT_EQ(Join({"a", "", "b"}, ","), "a,,b");
}

TEST(StringsTest, ReplaceAllReplacesEveryOccurrenceOnce) {
  EXPECT_EQ(ReplaceAll("a.b.c", ".", "\\."), "a\\.b\\.c");
  EXPECT_EQ(ReplaceAll("aaa", "aa", "a"), "aa");
  EXPECT_EQ(ReplaceAll("abc", "", "x"), "abc");
}

TEST(StringsTest, AsciiLowerChangesOnlyAsciiLetters) {
  EXPECT_EQ(AsciiLower("Content-Type: ÄB"), "content-type: Äb");
  EXPECT_EQ(AsciiLower("\xC3\x84"), "\xC3\x84");
}

}  // namespace
}  // namespace deepbox
