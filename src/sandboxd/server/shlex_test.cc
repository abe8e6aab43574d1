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

}  // namespace
}  // namespace deepbox::sandboxd
