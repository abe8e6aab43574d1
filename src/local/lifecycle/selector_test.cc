#include "local/lifecycle/selector.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace deepbox::local::lifecycle {
namespace {

using ::testing::HasSubstr;

TEST(LabelTest, ParsesAndValidates) {
  auto l = ParseLabel("deepagents.example/claim=true");
  ASSERT_TRUE(l.has_value()) << l.error().ToString();
  EXPECT_EQ(l->first, "deepagents.example/claim");
  EXPECT_EQ(l->second, "true");
  EXPECT_TRUE(ParseLabel("a=").has_value());  // empty value is allowed
  EXPECT_THAT(ParseLabel("novalue").error().message, HasSubstr("expected KEY=VALUE"));
  EXPECT_THAT(ParseLabel("=v").error().message, HasSubstr("must not be empty"));
  EXPECT_THAT(ParseLabel("a b=c").error().message, HasSubstr("contains ' '"));
  EXPECT_THAT(ParseLabel("-a=c").error().message, HasSubstr("start and end"));
  EXPECT_THAT(ParseLabel("Bad_Prefix/a=c").error().message, HasSubstr("DNS subdomain"));
  EXPECT_THAT(ParseLabel(std::string(64, 'a') + "=x").error().message, HasSubstr("at most 63"));
  EXPECT_THAT(ParseLabel("a=x/y").error().message, HasSubstr("bad value"));
}

TEST(SelectorTest, MatchesAllOperators) {
  Labels labels = {{"app", "fib"}, {"tier", "dev"}};
  auto match = [&](std::string_view text) {
    auto s = Selector::Parse(text);
    EXPECT_TRUE(s.has_value()) << text << ": " << s.error().ToString();
    return s && s->Matches(labels);
  };
  EXPECT_TRUE(match(""));
  EXPECT_TRUE(match("app=fib"));
  EXPECT_TRUE(match("app==fib"));
  EXPECT_TRUE(match("app=fib,tier=dev"));
  EXPECT_TRUE(match(" app = fib , tier "));
  EXPECT_FALSE(match("app=fib,tier=prod"));
  EXPECT_TRUE(match("app!=other"));
  EXPECT_FALSE(match("app!=fib"));
  EXPECT_TRUE(match("missing!=x"));
  EXPECT_TRUE(match("tier"));
  EXPECT_FALSE(match("missing"));
  EXPECT_TRUE(match("!missing"));
  EXPECT_FALSE(match("!app"));
}

TEST(SelectorTest, RejectsBadSelectorsClearly) {
  for (const char* bad : {"app=fib,", ",", "=x", "!", "a=b=c", "a!=b!=c", "a b", "a=b c"}) {
    auto s = Selector::Parse(bad);
    ASSERT_FALSE(s.has_value()) << bad;
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
    EXPECT_THAT(s.error().message, HasSubstr("bad selector")) << bad;
  }
}

TEST(SelectorTest, RoundTrips) {
  auto s = Selector::Parse("a=1,b!=2,c,!d");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->ToString(), "a=1,b!=2,c,!d");
  EXPECT_EQ(Selector::FromLabels({{"x", "1"}, {"y", "2"}}).ToString(), "x=1,y=2");
}

}  // namespace
}  // namespace deepbox::local::lifecycle
