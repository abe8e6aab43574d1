#include "mcp/registry.h"

#include <gtest/gtest.h>

#include "mcp/testing/request_text.h"
#include "mcp/testing/test_registry.h"

namespace deepbox::mcp {
namespace {

using testing::Params;

TEST(Registry, ListsToolsInOrderWithSchemas) {
  auto r = testing::TestRegistry();
  json::array list = r->ListJson();
  ASSERT_EQ(list.size(), 4u);
  EXPECT_EQ(list[0].at("name"), "echo");
  EXPECT_EQ(list[0].at("title"), "Echo");
  EXPECT_EQ(list[0].at("inputSchema").at("type"), "object");
  EXPECT_TRUE(list[0].as_object().contains("outputSchema"));
  EXPECT_FALSE(list[1].as_object().contains("title"));
  EXPECT_EQ(list[3].at("name"), "wait");
}

TEST(Registry, CallsReturnCallToolResults) {
  auto r = testing::TestRegistry();
  testing::PlainContext ctx;
  auto ok = r->Call(Params(R"({"name":"echo","arguments":{"text":"hi"}})"), ctx);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ToJson(*ok),
            R"({"content":[{"type":"text","text":"hi"}],"structuredContent":{"text":"hi"},)"
            R"("isError":false})");
  auto fail = r->Call(Params(R"({"name":"fail"})"), ctx);
  ASSERT_TRUE(fail);
  EXPECT_EQ(fail->at("isError"), true);
  EXPECT_EQ(fail->at("content").at(0).at("text"), "it failed");
}

TEST(Registry, UnknownToolAndMalformedParamsAreProtocolErrors) {
  auto r = testing::TestRegistry();
  testing::PlainContext ctx;
  auto unknown = r->Call(Params(R"({"name":"nope"})"), ctx);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, kInvalidParams);
  EXPECT_EQ(unknown.error().message, "Unknown tool: nope");
  auto noname = r->Call(Params(R"({"arguments":{}})"), ctx);
  ASSERT_FALSE(noname);
  EXPECT_EQ(noname.error().code, kInvalidParams);
  auto badargs = r->Call(Params(R"({"name":"echo","arguments":[1]})"), ctx);
  ASSERT_FALSE(badargs);
  EXPECT_EQ(badargs.error().code, kInvalidParams);
}

TEST(Registry, BadArgumentsAreToolErrorsTheModelCanActOn) {
  auto r = testing::TestRegistry();
  testing::PlainContext ctx;
  auto res = r->Call(Params(R"({"name":"echo","arguments":{"text":5,"x":1}})"), ctx);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->at("isError"), true);
  EXPECT_FALSE(res->contains("structuredContent"));
  EXPECT_EQ(res->at("content").at(0).at("text"),
            "Invalid arguments for tool echo:\n - 'text' must be a string, not an integer\n"
            " - unknown argument 'x' (allowed: text)\nFix the arguments and call the tool "
            "again.");
}

TEST(Registry, ContentBlocks) {
  EXPECT_EQ(ToJson(ImageContent("QUJD", "image/png")),
            R"({"type":"image","data":"QUJD","mimeType":"image/png"})");
  EXPECT_EQ(
      ToJson(BlobResourceContent("file:///workspace/a.bin", "application/octet-stream", "AA==")),
      R"({"type":"resource","resource":{"uri":"file:///workspace/a.bin",)"
      R"("mimeType":"application/octet-stream","blob":"AA=="}})");
}

}  // namespace
}  // namespace deepbox::mcp
