#include "sandboxd/server/shlex.h"

#include <gtest/gtest.h>

namespace deepbox::sandboxd {
namespace {

using V = std::vector<std::string>;

TEST(ShlexTest, MatchesPythonShlexSplit) {
  EXPECT_EQ(*ShlexSplit("echo 'hello world'"), (V{"echo", "hello world"}));
  EXPECT_EQ(*ShlexSplit(R"(a "b c" d\ e)"), (V{"a", "b c", "d e"}));
  EXPECT_EQ(*ShlexSplit(R"("x\"y" 'a\b')"), (V{"x\"y", "a\\b"}));
  EXPECT_EQ(*ShlexSplit(R"("a\b")"), (V{"a\\b"}));
  EXPECT_EQ(*ShlexSplit("  a\t\nb  "), (V{"a", "b"}));
  EXPECT_EQ(*ShlexSplit("a''b \"\""), (V{"ab", ""}));
  EXPECT_EQ(*ShlexSplit("echo #notacomment"), (V{"echo", "#notacomment"}));
  EXPECT_TRUE(ShlexSplit("")->empty());
}

TEST(ShlexTest, Errors) {
  EXPECT_EQ(ShlexSplit("echo 'x").error().message, "No closing quotation");
  EXPECT_EQ(ShlexSplit("echo \"x").error().message, "No closing quotation");
  EXPECT_EQ(ShlexSplit("echo x\\").error().message, "No escaped character");
}

TEST(ShlexTest, EveryPrefixIsSplitOrRefused) {
  const std::string text = R"(a "b \" c" 'd e' f\ g "h\\" \)";
  for (size_t n = 0; n <= text.size(); ++n) {
    auto words = ShlexSplit(std::string_view(text).substr(0, n));
    if (words) {
      for (const auto& w : *words) EXPECT_LE(w.size(), n);
    } else {
      EXPECT_TRUE(words.error().message == "No closing quotation" ||
                  words.error().message == "No escaped character")
          << words.error().message;
    }
  }
  EXPECT_FALSE(ShlexSplit(text));  // ends with a lone backslash
  EXPECT_EQ(*ShlexSplit(std::string_view(text).substr(0, text.size() - 2)),
            (V{"a", "b \" c", "d e", "f g", "h\\"}));
}

}  // namespace
}  // namespace deepbox::sandboxd
