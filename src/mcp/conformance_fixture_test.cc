#include "mcp/conformance_fixture.h"

#include <gtest/gtest.h>

#include "mcp/client.h"
#include "mcp/http_transport.h"
#include "mcp/server.h"
#include "mcp/testing/test_registry.h"

namespace deepbox::mcp {
namespace {

std::shared_ptr<ToolRegistry> Fixtures() {
  auto r = std::make_shared<ToolRegistry>();
  AddConformanceFixtureTools(*r);
  return r;
}

TEST(ConformanceFixture, ToolsAnswerOverHttpAsTheSuiteExpects) {
  McpServer server(Fixtures(), ServerConfig{});
  auto http = McpHttpServer::Start(server, net::Endpoint::Parse("127.0.0.1:0").value(), {});
  ASSERT_TRUE(http) << http.error().message;
  auto c =
      McpClient::ConnectHttp("http://127.0.0.1:" + std::to_string((*http)->port()) + "/mcp", {});
  ASSERT_TRUE(c) << c.error().message;
  auto text = (*c)->CallTool("test_simple_text", {});
  ASSERT_TRUE(text) << text.error().message;
  EXPECT_EQ(text->text, "This is a simple text response for testing.");
  auto image = (*c)->CallTool("test_image_content", {});
  ASSERT_TRUE(image);
  ASSERT_EQ(image->images.size(), 1u);
  EXPECT_EQ(image->images[0].media_type, "image/png");
  auto mixed = (*c)->CallTool("test_multiple_content_types", {});
  ASSERT_TRUE(mixed);
  EXPECT_EQ(mixed->text, "Multiple content types test:\n{\"test\":\"data\",\"value\":123}");
  EXPECT_EQ(mixed->images.size(), 1u);
  auto error = (*c)->CallTool("test_error_handling", {});
  ASSERT_TRUE(error);
  EXPECT_TRUE(error->is_error);
  std::vector<double> progress;
  CallOptions o;
  o.on_progress = [&](double p, std::optional<double> total, std::string_view) {
    progress.push_back(p);
    EXPECT_EQ(total, 100.0);
  };
  auto with_progress = (*c)->CallTool("test_tool_with_progress", {}, o);
  ASSERT_TRUE(with_progress);
  EXPECT_EQ(progress, (std::vector<double>{0, 50, 100}));
}

TEST(ConformanceFixture, SchemaKeywordsReachTheListing) {
  auto r = Fixtures();
  const ToolDef* t = r->Find("json_schema_2020_12_tool");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->input_schema.at("$schema"), "https://json-schema.org/draft/2020-12/schema");
  EXPECT_TRUE(t->input_schema.at("$defs").as_object().contains("address"));
  EXPECT_EQ(t->input_schema.at("additionalProperties"), false);
}

TEST(ConformanceFixture, LoggingToolLogsThreeInfoMessages) {
  auto r = Fixtures();
  testing::PlainContext ctx;
  auto result = r->Call(json::object{{"name", "test_tool_with_logging"}}, ctx);
  ASSERT_TRUE(result);
  ASSERT_EQ(ctx.logs.size(), 3u);
  EXPECT_EQ(ctx.logs[0].level, LogLevel::kInfo);
  EXPECT_EQ(ctx.logs[2].data, json::value("Tool execution completed"));
}

}  // namespace
}  // namespace deepbox::mcp
