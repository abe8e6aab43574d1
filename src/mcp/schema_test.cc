#include "mcp/schema.h"

#include <gtest/gtest.h>

namespace deepbox::mcp {
namespace {

json::object Schema() {
  return ParseJsonObject(R"({
    "type":"object",
    "properties":{
      "path":{"type":"string","minLength":1},
      "limit":{"type":"integer","minimum":1,"maximum":10},
      "timeout":{"type":["integer","null"]},
      "mode":{"type":"string","enum":["content","count"]},
      "labels":{"type":"object","additionalProperties":{"type":"string"}},
      "items":{"type":"array","items":{"type":"boolean"},"maxItems":2}
    },
    "required":["path"],
    "additionalProperties":false})")
      .value();
}

std::vector<std::string> Check(const char* args) {
  return ValidateAgainstSchema(ParseJson(args).value(), Schema());
}

TEST(Schema, AcceptsValidArguments) {
  EXPECT_TRUE(Check(R"({"path":"a"})").empty());
  EXPECT_TRUE(Check(R"({"path":"a","limit":3,"timeout":null,"mode":"count"})").empty());
  EXPECT_TRUE(Check(R"({"path":"a","limit":3.0})").empty());  // 2020-12: an integral number
  EXPECT_TRUE(Check(R"({"path":"a","labels":{"k":"v"},"items":[true,false]})").empty());
}

TEST(Schema, RejectsWithoutCoercion) {
  auto e = Check(R"({"path":"a","limit":"5"})");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0], "'limit' must be an integer, not a string");
  e = Check(R"({"path":5})");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0], "'path' must be a string, not an integer");
  e = Check(R"({"path":"a","timeout":"x"})");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0], "'timeout' must be an integer (or null), not a string");
  EXPECT_EQ(Check(R"({"path":"a","limit":2.5})").size(), 1u);
}

TEST(Schema, ReportsEveryProblem) {
  auto e = Check(R"({"limit":0,"mode":"x","extra":1,"labels":{"k":1},"items":[1,true,false]})");
  std::string all;
  for (const auto& s : e) all += s + "\n";
  EXPECT_NE(all.find("missing required argument 'path'"), std::string::npos) << all;
  EXPECT_NE(all.find("'limit' must be at least 1, not 0"), std::string::npos) << all;
  EXPECT_NE(all.find("'mode' must be one of \"content\", \"count\", not \"x\""), std::string::npos)
      << all;
  EXPECT_NE(all.find("unknown argument 'extra' (allowed: path, limit, timeout, mode, labels, "
                     "items)"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("'labels.k' must be a string"), std::string::npos) << all;
  EXPECT_NE(all.find("'items[0]' must be a boolean"), std::string::npos) << all;
  EXPECT_NE(all.find("'items' must have at most 2 items"), std::string::npos) << all;
  EXPECT_EQ(Check(R"({"path":""})").size(), 1u);  // minLength
}

TEST(Schema, TypeNames) {
  EXPECT_EQ(JsonTypeName(json::value(1)), "integer");
  EXPECT_EQ(JsonTypeName(json::value(1.5)), "number");
  EXPECT_EQ(JsonTypeName(json::value(nullptr)), "null");
  EXPECT_EQ(JsonTypeName(json::value(json::array{})), "array");
}

}  // namespace
}  // namespace deepbox::mcp
