#include "mcp/elicitation.h"

#include <gtest/gtest.h>

namespace deepbox::mcp {
namespace {

json::object Params() {
  auto v = ParseJsonObject(R"({"message": "who?", "requestedSchema": {"type": "object",
      "properties": {"name": {"type": "string", "default": "John"},
                     "age": {"type": "integer", "default": 30},
                     "email": {"type": "string"}},
      "required": ["email"]}})");
  EXPECT_TRUE(v);
  return *v;
}

TEST(ElicitationTest, AcceptedFormsGetTheSchemaDefaults) {
  std::string seen;
  auto result = AnswerElicitation(Params(), [&](const ElicitationRequest& r) {
    seen = r.message;
    ElicitationAnswer a;
    a.action = "accept";
    a.content["email"] = "a@b";
    a.content["age"] = 41;  // given: kept
    return a;
  });
  EXPECT_EQ(seen, "who?");
  EXPECT_EQ(ToJson(result),
            R"({"action":"accept","content":{"email":"a@b","age":41,"name":"John"}})");
}

TEST(ElicitationTest, DeclinesWithoutAHandlerOrForUrlMode) {
  EXPECT_EQ(ToJson(AnswerElicitation(Params(), nullptr)), R"({"action":"decline"})");
  json::object url = Params();
  url["mode"] = "url";
  bool asked = false;
  auto r = AnswerElicitation(url, [&](const ElicitationRequest&) {
    asked = true;
    return ElicitationAnswer{"accept", {}};
  });
  EXPECT_FALSE(asked);
  EXPECT_EQ(ToJson(r), R"({"action":"decline"})");
  // A decline or cancel carries no content.
  auto cancel = AnswerElicitation(Params(), [](const ElicitationRequest&) {
    return ElicitationAnswer{"cancel", {{"name", "x"}}};
  });
  EXPECT_EQ(ToJson(cancel), R"({"action":"cancel"})");
}

}  // namespace
}  // namespace deepbox::mcp
