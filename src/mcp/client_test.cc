#include "mcp/client.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "mcp/http_transport.h"
#include "mcp/testing/test_registry.h"
#include "net/http_server.h"

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

// A 2025 session server on loopback HTTP whose tools/call answers as the
// tests need: its stream ends after a priming event (the answer is replayed
// to GET + Last-Event-ID), or it asks the client for input first
// (elicitation/create on the POST's stream, the client's answer POSTed back).
class SessionServer {
 public:
  enum class Mode { kEndEarly, kElicit };
  explicit SessionServer(Mode mode) : mode_(mode) {
    auto s = net::HttpServer::Create(
        net::Endpoint::Parse("127.0.0.1:0").value(),
        [this](net::Request& req, net::ResponseWriter& w) { Handle(req, w); });
    EXPECT_TRUE(s);
    server_ = std::move(*s);
    server_->Start();
  }
  ~SessionServer() { server_->Stop(std::chrono::milliseconds(100)); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()) + "/mcp"; }

  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> last_event_ids;  // of the GETs
  json::object client_capabilities;
  std::optional<json::object> elicit_answer;

 private:
  static net::Headers SseHeaders() {
    net::Headers h;
    h.Set("Content-Type", "text/event-stream");
    h.Set("Mcp-Session-Id", "s1");
    return h;
  }
  void Handle(net::Request& req, net::ResponseWriter& w) {
    if (req.method == "GET") {
      std::string last = req.Header("Last-Event-ID").value_or("");
      {
        std::lock_guard<std::mutex> lock(mu);
        last_event_ids.push_back(last);
      }
      if (last != "e1") {
        (void)w.Send(net::Response::Text(405, "no standalone stream\n"));
        return;
      }
      (void)w.BeginStream(200, SseHeaders());
      (void)w.WriteChunk("id: e2\ndata: " + SerializeResult(call_id_, Text("resumed")) + "\n\n");
      (void)w.EndStream();
      return;
    }
    if (req.method == "DELETE") {  // the session's end
      (void)w.Send(net::Response::Text(200, ""));
      return;
    }
    auto m = ParseMessage(req.body);
    ASSERT_TRUE(m);
    net::Response r;
    r.headers.Set("Mcp-Session-Id", "s1");
    if (m->is_response()) {  // the client's answer to elicitation/create
      std::lock_guard<std::mutex> lock(mu);
      elicit_answer = m->result;
      cv.notify_all();
      r.status = 202;
    } else if (m->is_notification()) {
      r.status = 202;
    } else if (m->method == "initialize") {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (const json::value* c = m->params.if_contains("capabilities"); c && c->is_object()) {
          client_capabilities = c->get_object();
        }
      }
      json::object result;
      result["protocolVersion"] = "2025-06-18";
      result["capabilities"] = json::object{{"tools", json::object{}}};
      result["serverInfo"] = json::object{{"name", "session"}, {"version", "1"}};
      r = net::Response::Json(200, SerializeResult(m->id, result));
      r.headers.Set("Mcp-Session-Id", "s1");
    } else if (m->method == "tools/call" && mode_ == Mode::kEndEarly) {
      call_id_ = m->id;
      (void)w.BeginStream(200, SseHeaders());
      (void)w.WriteChunk("id: e1\nretry: 5\ndata: \n\n");
      (void)w.EndStream();
      return;
    } else if (m->method == "tools/call") {
      (void)w.BeginStream(200, SseHeaders());
      json::object params;
      params["message"] = "your name?";
      params["requestedSchema"] = json::object{
          {"type", "object"},
          {"properties",
           json::object{{"name", json::object{{"type", "string"}, {"default", "Ada"}}}}}};
      (void)w.WriteChunk("data: " + SerializeRequest("el-1", "elicitation/create", params) +
                         "\n\n");
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return elicit_answer.has_value(); });
      std::string text = ToJson(*elicit_answer);
      lock.unlock();
      (void)w.WriteChunk("data: " + SerializeResult(m->id, Text(text)) + "\n\n");
      (void)w.EndStream();
      return;
    } else {
      r = net::Response::Json(200,
                              SerializeError(m->id, RpcError(kMethodNotFound, "Method not found")));
      r.headers.Set("Mcp-Session-Id", "s1");
    }
    (void)w.Send(r);
  }
  static json::object Text(const std::string& text) {
    return json::object{{"content", json::array{json::object{{"type", "text"}, {"text", text}}}}};
  }

  Mode mode_;
  json::value call_id_;
  std::unique_ptr<net::HttpServer> server_;
};

TEST(HttpSessionClient, AStreamThatEndsEarlyIsResumedFromItsLastEvent) {
  SessionServer server(SessionServer::Mode::kEndEarly);
  auto c = McpClient::ConnectHttp(server.url(), {});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ((*c)->protocol_version(), "2025-06-18");
  auto r = (*c)->CallTool("t", {});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->text, "resumed");
  std::lock_guard<std::mutex> lock(server.mu);
  EXPECT_EQ(server.last_event_ids, std::vector<std::string>{"e1"});
  // Without an elicitation handler the client declares nothing.
  EXPECT_TRUE(server.client_capabilities.empty());
}

TEST(HttpSessionClient, ElicitationIsAnsweredWithTheSchemaDefaults) {
  SessionServer server(SessionServer::Mode::kElicit);
  ClientOptions o;
  std::string asked;
  o.on_elicitation = [&](const ElicitationRequest& req) {
    asked = req.message;
    return ElicitationAnswer{"accept", {}};
  };
  auto c = McpClient::ConnectHttp(server.url(), {}, o);
  ASSERT_TRUE(c) << c.error().message;
  {
    std::lock_guard<std::mutex> lock(server.mu);
    EXPECT_TRUE(server.client_capabilities.contains("elicitation"));
  }
  auto r = (*c)->CallTool("t", {});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(asked, "your name?");
  EXPECT_EQ(r->text, R"({"action":"accept","content":{"name":"Ada"}})");
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
