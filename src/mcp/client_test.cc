#include "mcp/client.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "mcp/http_transport.h"
#include "mcp/testing/test_registry.h"

namespace deepbox::mcp {
namespace {

std::string TestServer() { return std::string(DEEPBOX_BIN_DIR) + "/mcp_test_server"; }

std::unique_ptr<McpClient> ConnectStdio(std::vector<std::string> argv) {
  auto ch = SpawnProcessChannel(argv, {}, "");
  EXPECT_TRUE(ch) << ch.error().message;
  if (!ch) return nullptr;
  auto c = McpClient::ConnectStdio(std::move(*ch));
  EXPECT_TRUE(c) << c.error().message;
  return c ? std::move(*c) : nullptr;
}

void Exercise(McpClient& c) {
  auto tools = c.ListTools();
  ASSERT_TRUE(tools) << tools.error().message;
  std::vector<std::string> names;
  for (const auto& t : *tools) names.push_back(t.name);
  EXPECT_EQ(names[0], "echo");
  EXPECT_EQ((*tools)[0].input_schema.at("type"), "object");
  auto r = c.CallTool("echo", {{"text", "hello"}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->is_error);
  EXPECT_EQ(r->text, "hello");
  ASSERT_TRUE(r->structured);
  auto f = c.CallTool("fail", {});
  ASSERT_TRUE(f);
  EXPECT_TRUE(f->is_error);
  EXPECT_EQ(f->text, "it failed");
  std::vector<std::string> progress;
  CallOptions o;
  o.on_progress = [&](double, std::optional<double>, std::string_view m) {
    progress.emplace_back(m);
  };
  auto p = c.CallTool("progress", {{"count", 2}}, o);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->text, "done with progress");
  EXPECT_EQ(progress, (std::vector<std::string>{"step 1", "step 2"}));
  auto unknown = c.CallTool("nope", {});
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("Unknown tool: nope"), std::string::npos);
}

TEST(Client, ModernServerOverStdio) {
  auto c = ConnectStdio({TestServer()});
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->modern());
  EXPECT_EQ(c->protocol_version(), "2026-07-28");
  EXPECT_EQ(c->server_info().at("name"), "deepbox");
  EXPECT_EQ(c->instructions(), "test server");
  Exercise(*c);
}

TEST(Client, LegacyServerOverStdioGetsTheHandshake) {
  auto c = ConnectStdio({TestServer(), "--legacy"});
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->modern());
  EXPECT_EQ(c->protocol_version(), "2025-11-25");
  Exercise(*c);
}

TEST(Client, CancellingACallStopsItOnTheServer) {
  auto c = ConnectStdio({TestServer()});
  ASSERT_TRUE(c);
  std::atomic<bool> cancel{false};
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel = true;
  });
  CallOptions o;
  o.cancel = &cancel;
  auto r = c->CallTool("wait", {}, o);
  t.join();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kCancelled);
  // The connection goes on.
  auto e = c->CallTool("echo", {{"text", "still here"}});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->text, "still here");
}

TEST(Client, AServerThatDiesIsReportedWithItsStderr) {
  auto c = ConnectStdio({TestServer()});
  ASSERT_TRUE(c);
  auto r = c->CallTool("crash", {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("exited with status 3: boom"), std::string::npos)
      << r.error().message;
  ASSERT_TRUE(c->failure());
  auto again = c->CallTool("echo", {{"text", "x"}});
  ASSERT_FALSE(again);
}

TEST(Client, ServersThatCannotStart) {
  auto missing = SpawnProcessChannel({"/nonexistent/mcp-server"}, {}, "");
  ASSERT_FALSE(missing);
  // Starts, but never speaks MCP: the handshake fails and says why.
  auto ch = SpawnProcessChannel({"/bin/sh", "-c", "echo not json; exit 7"}, {}, "");
  ASSERT_TRUE(ch) << ch.error().message;
  auto c = McpClient::ConnectStdio(std::move(*ch));
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("status 7"), std::string::npos) << c.error().message;
}

class HttpClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpTransportOptions o;
    o.bearer_token = "tok";
    auto s = McpHttpServer::Start(server_, net::Endpoint::Parse("127.0.0.1:0").value(), o);
    ASSERT_TRUE(s);
    http_ = std::move(*s);
    url_ = "http://127.0.0.1:" + std::to_string(http_->port()) + "/mcp";
    headers_.Set("Authorization", "Bearer tok");
  }
  McpServer server_{testing::TestRegistry(), ServerConfig{}};
  std::unique_ptr<McpHttpServer> http_;
  std::string url_;
  net::Headers headers_;
};

TEST_F(HttpClientTest, ModernOverHttp) {
  auto c = McpClient::ConnectHttp(url_, headers_);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE((*c)->modern());
  Exercise(**c);
}

TEST_F(HttpClientTest, WrongTokenFailsToConnect) {
  net::Headers h;
  h.Set("Authorization", "Bearer wrong");
  auto c = McpClient::ConnectHttp(url_, h);
  ASSERT_FALSE(c);
}

TEST_F(HttpClientTest, CancelOverHttpClosesTheStream) {
  auto c = McpClient::ConnectHttp(url_, headers_);
  ASSERT_TRUE(c);
  int before = testing::CancelledWaits().load();
  std::atomic<bool> cancel{false};
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel = true;
  });
  CallOptions o;
  o.cancel = &cancel;
  o.on_progress = [](double, std::optional<double>, std::string_view) {};  // SSE reply
  auto r = (*c)->CallTool("wait", {}, o);
  t.join();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kCancelled);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (testing::CancelledWaits().load() == before &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(testing::CancelledWaits().load(), before + 1);
}

TEST(ClientResult, ContentBlocksBecomeText) {
  auto r = ToolCallResultFromJson(ParseJsonObject(R"({"content":[
      {"type":"text","text":"a"},{"type":"image","data":"QUJD","mimeType":"image/png"},
      {"type":"resource","resource":{"uri":"file:///x","mimeType":"text/plain","text":"t"}},
      {"type":"resource","resource":{"uri":"file:///b","mimeType":"x/y","blob":"AAAA"}},
      {"type":"resource_link","uri":"file:///l","name":"l"},{"type":"weird"}],
      "isError":true})")
                                      .value());
  EXPECT_TRUE(r.is_error);
  EXPECT_EQ(r.text, "a\nt\n[resource file:///b (x/y, 4 bytes of base64)]\n[resource: file:///l]");
  ASSERT_EQ(r.images.size(), 1u);
  EXPECT_EQ(r.images[0].media_type, "image/png");
}

}  // namespace
}  // namespace deepbox::mcp
