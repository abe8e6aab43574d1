#include "common/json.h"

#include <gtest/gtest.h>

namespace deepbox {
namespace {

TEST(JsonTest, ParseErrorsAreInvalidArgument) {
  auto r = ParseJson("{not json");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  auto o = ParseJsonObject("[1]");
  ASSERT_FALSE(o);
}

TEST(JsonTest, TypedGetters) {
  auto o = ParseJsonObject(R"({"s":"x","i":3,"b":true,"n":null,"bad":1.5})");
  ASSERT_TRUE(o);
  EXPECT_EQ(*GetString(*o, "s"), "x");
  EXPECT_FALSE(GetString(*o, "missing"));
  EXPECT_FALSE(GetString(*o, "i"));
  EXPECT_EQ(**GetOptInt(*o, "i"), 3);
  EXPECT_FALSE(GetOptInt(*o, "bad"));
  EXPECT_FALSE(GetOptInt(*o, "n")->has_value());
  EXPECT_TRUE(**GetOptBool(*o, "b"));
}

TEST(JsonTest, InvalidUtf8NeverProducesBrokenJson) {
  json::object o;
  o["out"] = JsonString("a\xff\xfe");
  std::string text = ToJson(o);
  EXPECT_TRUE(ParseJson(text));
}

TEST(JsonTest, ErrorShape) {
  std::string text = ToJson(ErrorToJson(Error(ErrorCode::kNotFound, "gone")));
  EXPECT_EQ(text, R"({"error":{"code":"NOT_FOUND","message":"gone"}})");
}

TEST(JsonTest, FindFollowsAPathOfKeys) {
  auto v = ParseJson(R"({"metadata": {"name": "a", "labels": {"k": "v"}, "n": 1}, "list": []})");
  ASSERT_TRUE(v.has_value());
  const json::object& o = v->as_object();
  EXPECT_EQ(FindString(*v, {"metadata", "labels", "k"}), "v");
  EXPECT_EQ(FindString(o, {"metadata", "name"}), "a");
  ASSERT_NE(Find(o, {"metadata", "n"}), nullptr);
  EXPECT_EQ(Find(o, {"metadata", "n"})->as_int64(), 1);
  EXPECT_EQ(FindString(o, {"metadata", "n"}), "");             // not a string
  EXPECT_EQ(Find(*v, {"metadata", "missing", "k"}), nullptr);  // a missing step
  EXPECT_EQ(Find(*v, {"list", "0"}), nullptr);                 // not an object
  EXPECT_EQ(Find(o, {}), nullptr);
  EXPECT_EQ(Find(*v, {}), &*v);
}

}  // namespace
}  // namespace deepbox
