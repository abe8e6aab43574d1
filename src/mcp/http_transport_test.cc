#include "mcp/http_transport.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <thread>

#include "mcp/testing/test_registry.h"
#include "net/http_client.h"
#include "net/sse.h"

namespace deepbox::mcp {
namespace {

constexpr const char* kToken = "s3cret-token";
constexpr const char* kMeta = R"("_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",)"
                              R"("io.modelcontextprotocol/clientCapabilities":{})";

class HttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpTransportOptions o;
    o.bearer_token = kToken;
    o.on_owner_gone = [this](const std::string& owner) {
      std::lock_guard<std::mutex> lock(mu_);
      gone_.push_back(owner);
    };
    auto s = McpHttpServer::Start(server_, net::Endpoint::Parse("127.0.0.1:0").value(), o);
    ASSERT_TRUE(s) << s.error().message;
    http_ = std::move(*s);
    // Named options, not the default argument: GCC 12 at -O3 takes the
    // temporary's strings for uninitialized (-Werror=maybe-uninitialized).
    net::ClientOptions client_options;
    auto c =
        net::HttpClient::Create(fmt::format("http://127.0.0.1:{}", http_->port()), client_options);
    ASSERT_TRUE(c);
    client_ = std::move(*c);
  }

  net::ClientRequest Post(const std::string& body, const std::string& method = "",
                          const std::string& name = "") {
    net::ClientRequest r;
    r.method = "POST";
    r.target = "/mcp";
    r.body = body;
    r.headers.Set("Content-Type", "application/json");
    r.headers.Set("Accept", "application/json, text/event-stream");
    r.headers.Set("Authorization", std::string("Bearer ") + kToken);
    if (!method.empty()) {
      r.headers.Set("MCP-Protocol-Version", "2026-07-28");
      r.headers.Set("Mcp-Method", method);
    }
    if (!name.empty()) r.headers.Set("Mcp-Name", name);
    return r;
  }
  net::Response Send(const net::ClientRequest& r) {
    auto res = client_->Send(r);
    EXPECT_TRUE(res) << res.error().message;
    return res ? *res : net::Response{};
  }
  static json::object Body(const net::Response& r) {
    auto v = ParseJsonObject(r.body);
    EXPECT_TRUE(v) << r.body;
    return v ? *v : json::object{};
  }
  std::vector<std::string> Gone() {
    std::lock_guard<std::mutex> lock(mu_);
    return gone_;
  }

  // Declared first: the server's Stop() (in its destructor) reports to them.
  std::mutex mu_;
  std::vector<std::string> gone_;
  McpServer server_{testing::TestRegistry(), ServerConfig{}};
  std::unique_ptr<McpHttpServer> http_;
  std::unique_ptr<net::HttpClient> client_;
};

std::string Call(const std::string& name, const std::string& args,
                 const std::string& meta_extra = "") {
  return std::string(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{)") + kMeta +
         meta_extra + R"(},"name":")" + name + R"(","arguments":)" + args + "}}";
}

TEST_F(HttpTest, RequiresTheBearerToken) {
  auto r = Post(Call("echo", R"({"text":"a"})"), "tools/call", "echo");
  r.headers.Remove("Authorization");
  auto res = Send(r);
  EXPECT_EQ(res.status, 401);
  EXPECT_TRUE(res.headers.Get("WWW-Authenticate"));
  r.headers.Set("Authorization", "Bearer wrong");
  EXPECT_EQ(Send(r).status, 401);
  r.headers.Set("Authorization", std::string("Bearer ") + kToken);
  EXPECT_EQ(Send(r).status, 200);
}

TEST_F(HttpTest, RefusesForeignOrigins) {
  auto r = Post(Call("echo", R"({"text":"a"})"), "tools/call", "echo");
  r.headers.Set("Origin", "https://evil.example");
  auto res = Send(r);
  EXPECT_EQ(res.status, 403);
  EXPECT_EQ(Body(res).at("error").at("code"), kInvalidRequest);
  r.headers.Set("Origin", "http://localhost:3000");
  EXPECT_EQ(Send(r).status, 200);
}

TEST_F(HttpTest, ModernRequestsAreStatelessAndValidated) {
  auto ok = Send(Post(Call("echo", R"({"text":"hi"})"), "tools/call", "echo"));
  ASSERT_EQ(ok.status, 200);
  EXPECT_EQ(ok.headers.Get("Content-Type"), "application/json");
  auto body = Body(ok);
  EXPECT_EQ(body.at("result").at("content").at(0).at("text"), "hi");
  EXPECT_FALSE(ok.headers.Get("Mcp-Session-Id"));

  // Headers must mirror the body.
  auto nov = Post(Call("echo", R"({"text":"hi"})"), "tools/call", "echo");
  nov.headers.Remove("MCP-Protocol-Version");
  auto r = Send(nov);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Body(r).at("error").at("code"), kHeaderMismatch);
  r = Send(Post(Call("echo", R"({"text":"hi"})"), "tools/list", "echo"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Body(r).at("error").at("code"), kHeaderMismatch);
  r = Send(Post(Call("echo", R"({"text":"hi"})"), "tools/call", "other"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Body(r).at("error").at("code"), kHeaderMismatch);
  r = Send(Post(Call("echo", R"({"text":"hi"})"), "tools/call", ""));
  EXPECT_EQ(r.status, 400);
  // Mcp-Name in the base64 form is decoded before comparing.
  r = Send(Post(Call("echo", R"({"text":"hi"})"), "tools/call", "=?base64?ZWNobw==?="));
  EXPECT_EQ(r.status, 200);

  // An unknown method: 404 with -32601.
  r = Send(Post(
      std::string(R"({"jsonrpc":"2.0","id":2,"method":"prompts/list","params":{)") + kMeta + "}}}",
      "prompts/list"));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(Body(r).at("error").at("code"), kMethodNotFound);
  // A version we do not speak: 400 with -32022 and the versions we do.
  auto old = Post(R"({"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{
      "io.modelcontextprotocol/protocolVersion":"1900-01-01",
      "io.modelcontextprotocol/clientCapabilities":{}}}})",
                  "tools/list");
  old.headers.Set("MCP-Protocol-Version", "1900-01-01");
  r = Send(old);
  EXPECT_EQ(r.status, 400);
  auto e = Body(r);
  EXPECT_EQ(e.at("error").at("code"), kUnsupportedProtocolVersion);
  EXPECT_EQ(e.at("error").at("data").at("supported").at(0), "2026-07-28");
  // Bad arguments: a tool error, HTTP 200.
  r = Send(Post(Call("echo", R"({"text":1})"), "tools/call", "echo"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(Body(r).at("result").at("isError"), true);
}

TEST_F(HttpTest, MalformedPostsAreRejected) {
  auto r = Post("{not json", "tools/list");
  auto res = Send(r);
  EXPECT_EQ(res.status, 400);
  EXPECT_EQ(Body(res).at("error").at("code"), kParseError);
  r = Post(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})");
  r.headers.Set("Content-Type", "text/plain");
  EXPECT_EQ(Send(r).status, 415);
  r = Post(Call("echo", R"({"text":"a"})"), "tools/call", "echo");
  r.headers.Set("Accept", "text/html");
  EXPECT_EQ(Send(r).status, 406);
  // No session and no envelope.
  res = Send(Post(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})"));
  EXPECT_EQ(res.status, 400);
  net::ClientRequest get;
  get.target = "/mcp";
  get.headers.Set("Authorization", std::string("Bearer ") + kToken);
  EXPECT_EQ(Send(get).status, 405);
  get.target = "/other";
  EXPECT_EQ(Send(get).status, 404);
}

TEST_F(HttpTest, ProgressStreamsAsServerSentEvents) {
  auto res = Send(
      Post(Call("progress", R"({"count":2})", R"(,"progressToken":9)"), "tools/call", "progress"));
  ASSERT_EQ(res.status, 200);
  EXPECT_EQ(res.headers.Get("Content-Type"), "text/event-stream");
  std::vector<json::object> events;
  net::SseParser parser([&](const net::SseEvent& e) {
    EXPECT_EQ(e.event, "message");
    events.push_back(ParseJsonObject(e.data).value());
    return true;
  });
  parser.Feed(res.body);
  parser.Finish();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].at("method"), "notifications/progress");
  EXPECT_EQ(events[0].at("params").at("progressToken"), 9);
  EXPECT_EQ(events[1].at("params").at("message"), "step 2");
  EXPECT_EQ(events[2].at("id"), 1);
  EXPECT_EQ(events[2].at("result").at("content").at(0).at("text"), "done with progress");
}

TEST_F(HttpTest, LegacySessions) {
  auto init = Send(Post(R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
      "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})"));
  ASSERT_EQ(init.status, 200);
  auto sid = init.headers.Get("Mcp-Session-Id");
  ASSERT_TRUE(sid);
  EXPECT_EQ(sid->size(), 32u);
  EXPECT_EQ(Body(init).at("result").at("protocolVersion"), "2025-06-18");

  auto note = Post(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
  note.headers.Set("Mcp-Session-Id", *sid);
  note.headers.Set("MCP-Protocol-Version", "2025-06-18");
  auto r = Send(note);
  EXPECT_EQ(r.status, 202);
  EXPECT_EQ(r.body, "");

  auto list = Post(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})");
  list.headers.Set("Mcp-Session-Id", *sid);
  list.headers.Set("MCP-Protocol-Version", "2025-06-18");
  r = Send(list);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(Body(r).at("result").at("tools").as_array().size(), 4u);

  list.headers.Set("MCP-Protocol-Version", "1999-01-01");
  EXPECT_EQ(Send(list).status, 400);
  list.headers.Set("MCP-Protocol-Version", "2025-06-18");
  list.headers.Set("Mcp-Session-Id", "0123");
  EXPECT_EQ(Send(list).status, 404);

  net::ClientRequest del;
  del.method = "DELETE";
  del.target = "/mcp";
  del.headers.Set("Authorization", std::string("Bearer ") + kToken);
  del.headers.Set("Mcp-Session-Id", *sid);
  EXPECT_EQ(Send(del).status, 200);
  EXPECT_EQ(Gone(), std::vector<std::string>{"session:" + *sid});
  EXPECT_EQ(Send(del).status, 404);  // gone
  del.headers.Remove("Mcp-Session-Id");
  EXPECT_EQ(Send(del).status, 405);
}

TEST_F(HttpTest, ADisconnectingClientCancelsItsRequest) {
  int before = testing::CancelledWaits().load();
  auto req = Post(Call("wait", "{}", R"(,"progressToken":"p")"), "tools/call", "wait");
  int status = 0;
  auto res = client_->SendStreaming(
      req,
      [&](const net::Response& head) {
        status = head.status;
        return true;
      },
      // Hang up at the first event ("waiting"): the tool is running then.
      [](std::string_view) { return false; });
  EXPECT_EQ(status, 200);
  client_->CloseIdle();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (testing::CancelledWaits().load() == before &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(testing::CancelledWaits().load(), before + 1);
}

TEST_F(HttpTest, StopEndsSessionsAndTheStatelessOwner) {
  auto init = Send(Post(R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
      "protocolVersion":"2025-11-25","capabilities":{}}})"));
  auto sid = init.headers.Get("Mcp-Session-Id");
  ASSERT_TRUE(sid);
  http_->Stop();
  auto gone = Gone();
  ASSERT_EQ(gone.size(), 2u);
  EXPECT_EQ(gone[0], "session:" + *sid);
  EXPECT_EQ(gone[1], "http");
}

TEST(HttpOrigin, Loopback) {
  EXPECT_TRUE(IsLoopbackOrigin("http://127.0.0.1:8080"));
  EXPECT_TRUE(IsLoopbackOrigin("http://localhost"));
  EXPECT_TRUE(IsLoopbackOrigin("https://[::1]:3000"));
  EXPECT_FALSE(IsLoopbackOrigin("http://127.0.0.1.evil.example"));
  EXPECT_FALSE(IsLoopbackOrigin("null"));
  EXPECT_FALSE(IsLoopbackOrigin("file://"));
}

}  // namespace
}  // namespace deepbox::mcp
