#include "mcp/jsonrpc.h"

#include <gtest/gtest.h>

namespace deepbox::mcp {
namespace {

TEST(JsonRpc, ParsesRequestNotificationAndResponses) {
  auto r = ParseMessage(R"({"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"a":1}})");
  ASSERT_TRUE(r) << r.error().error.message;
  EXPECT_TRUE(r->is_request());
  EXPECT_EQ(r->id, json::value(7));
  EXPECT_EQ(r->method, "tools/list");
  EXPECT_TRUE(r->has_params);

  auto n = ParseMessage(R"({"jsonrpc":"2.0","method":"notifications/cancelled"})");
  ASSERT_TRUE(n);
  EXPECT_TRUE(n->is_notification());
  EXPECT_FALSE(n->has_params);

  auto res = ParseMessage(R"({"jsonrpc":"2.0","id":"a","result":{"x":true}})");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->kind, MessageKind::kResult);
  EXPECT_EQ(res->id, json::value("a"));

  auto err = ParseMessage(R"({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"m"}})");
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind, MessageKind::kError);
  EXPECT_EQ(err->error.code, -32700);
}

TEST(JsonRpc, NotJsonIsAParseError) {
  for (const char* text : {"", "{", "nope", "{\"jsonrpc\":\"2.0\",}", "\"\xff\""}) {
    auto r = ParseMessage(text);
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error().error.code, kParseError) << text;
    EXPECT_TRUE(r.error().id.is_null());
  }
}

// Found by fuzz/mcp_jsonrpc: 1e4002 parsed as infinity and was echoed back
// as "Infinity", which is not JSON.
TEST(JsonRpc, NumbersBeyondDoubleAreAParseError) {
  for (const char* text :
       {R"({"jsonrpc":"2.0","id":7,"error":{"code":31,"message":"no","data":{"x":1e4002}}})",
        R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"a":[-1e999]}})"}) {
    auto r = ParseMessage(text);
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error().error.code, kParseError) << text;
  }
  EXPECT_TRUE(ParseMessage(R"({"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1e300}})"));
}

TEST(JsonRpc, InvalidRequestsNameWhatIsWrongAndKeepTheId) {
  struct Case {
    const char* text;
    bool has_id;
  } cases[] = {
      {R"([{"jsonrpc":"2.0","id":1,"method":"x"}])", false},  // batch
      {R"(42)", false},
      {R"({"id":1,"method":"x"})", true},  // no jsonrpc
      {R"({"jsonrpc":"1.0","id":1,"method":"x"})", true},
      {R"({"jsonrpc":"2.0","id":1,"method":5})", true},
      {R"({"jsonrpc":"2.0","id":1,"method":"x","params":[1]})", true},
      {R"({"jsonrpc":"2.0","id":null,"method":"x"})", false},  // null id
      {R"({"jsonrpc":"2.0","id":1.5,"method":"x"})", false},   // fractional id
      {R"({"jsonrpc":"2.0","id":true,"method":"x"})", false},
      {R"({"jsonrpc":"2.0","id":1})", true},  // neither method nor result
      {R"({"jsonrpc":"2.0","id":1,"result":{},"error":{}})", true},
      {R"({"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}})", true},
  };
  for (const auto& c : cases) {
    auto r = ParseMessage(c.text);
    ASSERT_FALSE(r) << c.text;
    EXPECT_EQ(r.error().error.code, kInvalidRequest) << c.text;
    EXPECT_EQ(!r.error().id.is_null(), c.has_id) << c.text;
  }
}

TEST(JsonRpc, SerializesOneLineMessages) {
  json::object params;
  params["text"] = "a\nb";
  std::string s = SerializeNotification("notifications/progress", params);
  EXPECT_EQ(s.find('\n'), std::string::npos);
  EXPECT_EQ(s, R"({"jsonrpc":"2.0","method":"notifications/progress","params":{"text":"a\nb"}})");
  EXPECT_EQ(SerializeError(nullptr, RpcError(kParseError, "bad")),
            R"({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad"}})");
  json::object data;
  data["k"] = 1;
  EXPECT_EQ(SerializeError(3, RpcError(kInvalidParams, "p", data)),
            R"({"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"p","data":{"k":1}}})");
  // Invalid UTF-8 in a message cannot break the JSON.
  auto parsed = ParseMessage(SerializeError("x", RpcError(1, std::string("\xff\xfe"))));
  ASSERT_TRUE(parsed);
}

TEST(JsonRpc, IdKeysKeepStringsAndNumbersApart) {
  EXPECT_NE(IdKey(json::value("1")), IdKey(json::value(1)));
  EXPECT_TRUE(IsValidId(json::value(INT64_MAX)));
  EXPECT_FALSE(IsValidId(json::value(uint64_t{1} << 63)));
}

}  // namespace
}  // namespace deepbox::mcp
