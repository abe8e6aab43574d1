#include "mcp/http_transport.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <thread>

#include "mcp/testing/request_text.h"
#include "mcp/testing/test_registry.h"
#include "net/http_client.h"
#include "net/sse.h"

namespace deepbox::mcp {
namespace {

constexpr const char* kToken = "s3cret-token";
using testing::kModernMeta;

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
  return std::string(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{)") + kModernMeta +
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
  r.headers.Set("Origin", fmt::format("http://localhost:{}", http_->port()));
  EXPECT_EQ(Send(r).status, 200);
}

// Raw HTTP to `port`: the whole answer (the server closes after a refusal;
// else the request says Connection: close).
std::string RawExchange(int port, const std::string& bytes, bool shutdown = true) {
  auto conn = net::Conn::Connect(net::Endpoint::Parse(fmt::format("127.0.0.1:{}", port)).value(),
                                 net::DeadlineAfter(std::chrono::seconds(5)));
  EXPECT_TRUE(conn) << conn.error().message;
  if (!conn) return "";
  EXPECT_TRUE(conn->WriteAll(bytes, net::DeadlineAfter(std::chrono::seconds(30))));
  if (shutdown) conn->ShutdownWrite();
  std::string out;
  char buf[4096];
  const auto until = net::DeadlineAfter(std::chrono::seconds(30));
  for (;;) {
    auto n = conn->ReadSome(buf, sizeof buf, until);
    if (!n || *n == 0) break;
    out.append(buf, *n);
  }
  return out;
}

int StatusOf(const std::string& response) {
  if (!response.starts_with("HTTP/1.1 ") || response.size() < 12) return 0;
  return std::stoi(response.substr(9, 3));
}

const std::string kToolsList =
    std::string(R"({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{)") + kModernMeta +
    "}}}";

// A modern tools/list with `host` as its Host header ("" = none).
std::string RawToolsList(const std::string& host, const std::string& extra = "") {
  return "POST /mcp HTTP/1.1\r\n" + (host.empty() ? "" : "Host: " + host + "\r\n") +
         "Content-Type: application/json\r\nAccept: application/json\r\n"
         "Authorization: Bearer " +
         kToken +
         "\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\n"
         "Connection: close\r\n" +
         extra + fmt::format("Content-Length: {}\r\n\r\n", kToolsList.size()) + kToolsList;
}

// M4: the token and Origin are checked on the head. A client that announces
// 60 MiB and sends 1 MiB gets its refusal at once; before, the server waited
// for (and buffered) the whole body and only then said 401.
TEST_F(HttpTest, RefusalsComeOnTheHeadBeforeTheBody) {
  const int port = http_->port();
  const std::string host = fmt::format("Host: 127.0.0.1:{}\r\n", port);
  const std::string bearer = std::string("Authorization: Bearer ") + kToken + "\r\n";
  struct Case {
    std::string headers;
    int status;
    std::string says;
  };
  const std::vector<Case> cases = {
      {host, 401, "a bearer token is required"},
      {host + "Authorization: Bearer wrong\r\n", 401, "a bearer token is required"},
      {host + bearer + "Origin: https://evil.example\r\n", 403, "origin 'https://evil.example'"},
      {host + bearer + "Origin: null\r\n", 403, "origin 'null'"},
      {"Host: evil.test\r\n" + bearer, 421, "Host 'evil.test' does not name this server"},
  };
  for (const auto& c : cases) {
    std::string got = RawExchange(port, "POST /mcp HTTP/1.1\r\n" + c.headers +
                                            "Content-Type: application/json\r\n"
                                            "Content-Length: 62914560\r\n\r\n" +
                                            std::string(1u << 20, 'x'));
    EXPECT_EQ(StatusOf(got), c.status) << c.headers << got.substr(0, 400);
    EXPECT_NE(got.find("Connection: close"), std::string::npos) << got.substr(0, 400);
    EXPECT_NE(got.find(c.says), std::string::npos) << got.substr(0, 400);
  }
}

// M4: the body cap is what the largest upload_file needs, not 64 MiB.
TEST_F(HttpTest, BodiesAreCappedAtTheLargestUpload) {
  // SandboxToolsOptions::max_transfer_bytes (tests/mcp uploads that much).
  constexpr size_t kUploadMax = size_t{32} << 20;
  const size_t base64 = (kUploadMax + 2) / 3 * 4;
  const size_t cap = HttpTransportOptions{}.max_body_bytes;
  EXPECT_GE(cap, base64 + 4096);
  EXPECT_LE(cap, base64 + (2u << 20));
  // One byte over: 413 on the head, before the body.
  std::string got =
      RawExchange(http_->port(), fmt::format("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n"
                                             "Authorization: Bearer {}\r\n"
                                             "Content-Type: application/json\r\n"
                                             "Content-Length: {}\r\n\r\n",
                                             http_->port(), kToken, cap + 1));
  EXPECT_EQ(StatusOf(got), 413) << got;
  // The largest upload passes: a call carrying as much base64 as it does (an
  // argument `fail` does not take: a tool error, so the body was read whole).
  auto res = Send(Post(Call("fail", R"({"blob":")" + std::string(base64, 'A') + R"("})"),
                       "tools/call", "fail"));
  ASSERT_EQ(res.status, 200) << res.body.substr(0, 400);
  auto result = Body(res).at("result");
  EXPECT_EQ(result.at("isError"), true);
  EXPECT_NE(std::string(result.at("content").at(0).at("text").as_string()).find("'blob'"),
            std::string::npos)
      << res.body;
}

// L3: the Host header must name the listener (a loopback one: a loopback name
// or address with its port).
TEST_F(HttpTest, HostMustNameTheListener) {
  const int port = http_->port();
  for (const std::string& host :
       {fmt::format("127.0.0.1:{}", port), fmt::format("localhost:{}", port),
        fmt::format("LocalHost:{}", port), fmt::format("127.9.8.7:{}", port),
        fmt::format("[::1]:{}", port)}) {
    std::string got = RawExchange(port, RawToolsList(host), /*shutdown=*/false);
    EXPECT_EQ(StatusOf(got), 200) << host << ": " << got.substr(0, 400);
  }
  for (const std::string& host :
       {std::string("evil.test:") + std::to_string(port), std::string("evil.test"),
        std::string("localhost:1"), std::string("127.0.0.1"),
        std::string("127.0.0.1.evil.test:") + std::to_string(port),
        std::string("[::2]:") + std::to_string(port),
        std::string("localhost:") + std::to_string(port) + ":1"}) {
    std::string got = RawExchange(port, RawToolsList(host), /*shutdown=*/false);
    EXPECT_EQ(StatusOf(got), 421) << host << ": " << got.substr(0, 400);
    EXPECT_NE(got.find(fmt::format("expected localhost, 127.0.0.1 or [::1] with port {}", port)),
              std::string::npos)
        << got;
  }
  std::string got = RawExchange(port, RawToolsList(""), /*shutdown=*/false);
  EXPECT_EQ(StatusOf(got), 400) << got;
  EXPECT_NE(got.find("the Host header is missing"), std::string::npos) << got;
}

// Names allowed besides the listener's: NAME for any port, NAME:PORT for that one.
TEST_F(HttpTest, AllowedHostsAreAcceptedBesides) {
  HttpTransportOptions o;
  o.bearer_token = kToken;
  o.allowed_hosts = {"proxy.example", "other.example:8443"};
  auto s = McpHttpServer::Start(server_, net::Endpoint::Parse("127.0.0.1:0").value(), o);
  ASSERT_TRUE(s) << s.error().message;
  const int other = (*s)->port();
  for (const std::string& host :
       {std::string("proxy.example"), std::string("PROXY.example:443"),
        std::string("other.example:8443"), fmt::format("localhost:{}", other)}) {
    std::string got = RawExchange(other, RawToolsList(host), /*shutdown=*/false);
    EXPECT_EQ(StatusOf(got), 200) << host << ": " << got.substr(0, 400);
  }
  o.allowed_hosts.push_back("bad:port");
  auto bad = McpHttpServer::Start(server_, net::Endpoint::Parse("127.0.0.1:0").value(), o);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "allowed host 'bad:port': expected NAME or NAME:PORT");
  std::string got = RawExchange(other, RawToolsList("other.example"), /*shutdown=*/false);
  EXPECT_EQ(StatusOf(got), 421) << got.substr(0, 400);
  got = RawExchange(other, RawToolsList("evil.test:" + std::to_string(other)), false);
  EXPECT_EQ(StatusOf(got), 421) << got.substr(0, 400);
}

// L3: a loopback Origin must carry the listener's port: a page on another
// local port (a dev server showing untrusted content) is another origin.
TEST_F(HttpTest, LoopbackOriginsMustHaveTheListenersPort) {
  const int port = http_->port();
  auto r = Post(Call("echo", R"({"text":"a"})"), "tools/call", "echo");
  for (const std::string& origin :
       {fmt::format("http://localhost:{}", port), fmt::format("http://127.0.0.1:{}", port),
        fmt::format("https://[::1]:{}", port)}) {
    r.headers.Set("Origin", origin);
    EXPECT_EQ(Send(r).status, 200) << origin;
  }
  r.headers.Set("Origin", "http://localhost:9999");
  auto res = Send(r);
  EXPECT_EQ(res.status, 403);
  EXPECT_NE(res.body.find("a loopback origin must have this server's port"), std::string::npos)
      << res.body;
  r.headers.Set("Origin", "http://localhost");
  EXPECT_EQ(Send(r).status, 403);
  r.headers.Set("Origin", "null");
  EXPECT_EQ(Send(r).status, 403);
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
  r = Send(Post(std::string(R"({"jsonrpc":"2.0","id":2,"method":"prompts/list","params":{)") +
                    kModernMeta + "}}}",
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
  // 2025-03-26, which the official SDKs still speak (never negotiated here:
  // it has batches), is accepted on a session.
  list.headers.Set("MCP-Protocol-Version", "2025-03-26");
  EXPECT_EQ(Send(list).status, 200);

  // A session that set a log level gets the tool's messages at or above it
  // on the call's stream, before the result (no progressToken needed).
  auto level = Post(R"({"jsonrpc":"2.0","id":5,"method":"logging/setLevel",
      "params":{"level":"info"}})");
  level.headers.Set("Mcp-Session-Id", *sid);
  level.headers.Set("MCP-Protocol-Version", "2025-06-18");
  r = Send(level);
  ASSERT_EQ(r.status, 200);
  EXPECT_TRUE(Body(r).at("result").as_object().empty());
  auto logged = Post(R"({"jsonrpc":"2.0","id":6,"method":"tools/call",
      "params":{"name":"progress","arguments":{"count":2}}})");
  logged.headers.Set("Mcp-Session-Id", *sid);
  logged.headers.Set("MCP-Protocol-Version", "2025-06-18");
  r = Send(logged);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.Get("Content-Type"), "text/event-stream");
  std::vector<json::object> events;
  net::SseParser parser([&](const net::SseEvent& e) {
    events.push_back(ParseJsonObject(e.data).value());
    return true;
  });
  parser.Feed(r.body);
  parser.Finish();
  ASSERT_EQ(events.size(), 2u) << r.body;  // step 1 is debug: filtered out
  EXPECT_EQ(events[0].at("method"), "notifications/message");
  EXPECT_EQ(events[0].at("params").at("level"), "notice");
  EXPECT_EQ(events[0].at("params").at("logger"), "test.progress");
  EXPECT_EQ(events[0].at("params").at("data").at("step"), 2);
  EXPECT_EQ(events[1].at("result").at("content").at(0).at("text"), "done");
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
  EXPECT_TRUE(IsLoopbackOrigin("http://127.0.0.1:8080", 8080));
  EXPECT_FALSE(IsLoopbackOrigin("http://127.0.0.1:8080", 8081));
  EXPECT_TRUE(IsLoopbackOrigin("http://localhost", 80));
  EXPECT_TRUE(IsLoopbackOrigin("https://localhost", 443));
  EXPECT_FALSE(IsLoopbackOrigin("https://localhost", 80));
  EXPECT_TRUE(IsLoopbackHostName("localhost"));
  EXPECT_TRUE(IsLoopbackHostName("127.1.2.3"));
  EXPECT_TRUE(IsLoopbackHostName("::1"));
  EXPECT_TRUE(IsLoopbackHostName("::ffff:127.0.0.1"));
  EXPECT_FALSE(IsLoopbackHostName("127.1"));
  EXPECT_FALSE(IsLoopbackHostName("128.0.0.1"));
  EXPECT_FALSE(IsLoopbackHostName("localhost.evil.test"));
  EXPECT_FALSE(IsLoopbackHostName("0.0.0.0"));
  EXPECT_TRUE(IsLoopbackOrigin("http://127.0.0.1:8080"));
  EXPECT_TRUE(IsLoopbackOrigin("http://localhost"));
  EXPECT_TRUE(IsLoopbackOrigin("https://[::1]:3000"));
  EXPECT_FALSE(IsLoopbackOrigin("http://127.0.0.1.evil.example"));
  EXPECT_FALSE(IsLoopbackOrigin("null"));
  EXPECT_FALSE(IsLoopbackOrigin("file://"));
}

}  // namespace
}  // namespace deepbox::mcp
