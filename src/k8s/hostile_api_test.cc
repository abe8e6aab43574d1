// The API server is not trusted to be well-formed: every answer below (bad
// JSON, wrong kinds, invalid UTF-8, truncated bodies, absurd numbers, names
// that would break out of a URL or a header) must end in a clear error or a
// sane value, never a crash, an abort or a hang. The server is a scripted
// HttpServer on loopback speaking plain HTTP.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/utf8.h"
#include "k8s/claim.h"
#include "k8s/rest_client.h"
#include "k8s/sandbox_api.h"
#include "k8s/testing/client_fixtures.h"
#include "k8s/util.h"
#include "k8s/watch.h"
#include "net/http_server.h"

namespace deepbox::k8s {
namespace {

using namespace std::chrono_literals;

using testing::kClaims;

// Answers every request with what `answer` returns; records what it saw.
class ScriptedServer {
 public:
  using Answer = std::function<net::Response(const net::Request&)>;
  explicit ScriptedServer(Answer answer) : answer_(std::move(answer)) {
    auto s = net::HttpServer::Create(*net::Endpoint::Parse("127.0.0.1:0"),
                                     [this](net::Request& req, net::ResponseWriter& w) {
                                       {
                                         std::lock_guard lock(mu_);
                                         seen_.push_back(req.method + " " + req.target);
                                       }
                                       (void)w.Send(answer_(req));
                                     });
    EXPECT_TRUE(s) << s.error().ToString();
    server_ = std::move(*s);
    server_->Start();
  }
  ~ScriptedServer() { server_->Stop(); }

  std::unique_ptr<KubeClient> Client(ClientOptions options = {}, std::string token = "") {
    RestConfig rc;
    rc.token = std::move(token);
    rc.server = fmt::format("http://127.0.0.1:{}", server_->port());
    rc.source = "scripted API server";
    options.initial_backoff = 1ms;
    options.max_backoff = 2ms;
    if (!options.sleep) options.sleep = [](std::chrono::milliseconds) {};
    auto c = KubeClient::Create(rc, std::move(options));
    EXPECT_TRUE(c) << c.error().ToString();
    return std::move(*c);
  }
  std::vector<std::string> seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  Answer answer_;
  std::mutex mu_;
  std::vector<std::string> seen_;
  std::unique_ptr<net::HttpServer> server_;
};

net::Response Body(int status, std::string body) {
  net::Response r;
  r.status = status;
  r.headers.Set("Content-Type", "application/json");
  r.body = std::move(body);
  return r;
}

TEST(HostileApiServerTest, MalformedObjectsAreErrors) {
  for (std::string body :
       {std::string("{\"kind\":\"SandboxClaim\",\"metadata\":{\"name\":\"x"),
        std::string("[1,2,3]"), std::string("\"just a string\""),
        std::string("{\"metadata\":{\"name\":\"\xff\xfe\"}}"), std::string("{\"a\":1}{\"b\":2}"),
        std::string(""), std::string(100000, '[')}) {
    ScriptedServer server([&](const net::Request&) { return Body(200, body); });
    auto client = server.Client();
    auto r = client->Get(kClaims, "default", "x");
    ASSERT_FALSE(r) << body.substr(0, 50);
    EXPECT_EQ(r.error().code, ErrorCode::kInternal) << r.error().message;
    EXPECT_NE(r.error().message.find("bad JSON"), std::string::npos) << r.error().message;
  }
}

TEST(HostileApiServerTest, ListsOfTheWrongShapeAreSkippedNotTrusted) {
  // items of the wrong kinds, metadata that is a number: nothing usable, no crash.
  ScriptedServer server([](const net::Request&) {
    return Body(
        200, R"({"kind":"SandboxClaimList","metadata":5,"items":[1,"two",null,[],)"
             R"({"metadata":{"name":7,"labels":"x"},"status":{"conditions":{"type":"Ready"}}}]})");
  });
  auto client = server.Client();
  auto list = client->List(kClaims, "default");
  ASSERT_TRUE(list) << list.error().ToString();
  EXPECT_EQ(list->items.size(), 1u);  // the one object
  EXPECT_EQ(FindString(list->items[0], {"metadata", "name"}), "");

  ScriptedServer not_a_list(
      [](const net::Request&) { return Body(200, R"({"items":{"a":1},"metadata":{}})"); });
  auto empty = not_a_list.Client()->List(kClaims, "default");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->items.empty());
}

TEST(HostileApiServerTest, AnEndlessOrRepeatedContinueTokenEnds) {
  ScriptedServer server([](const net::Request&) {
    return Body(200, R"({"metadata":{"continue":"same"},"items":[]})");
  });
  auto r = server.Client()->List(kClaims, "default");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("repeated its continue token"), std::string::npos)
      << r.error().message;
  EXPECT_EQ(server.seen().size(), 2u);
}

TEST(HostileApiServerTest, AbsurdRetryAfterValuesAreBounded) {
  for (std::string retry_after :
       {"9223372036854775807", "99999999999999999999999", "-5", "abc", "1e9", " 3", "3 "}) {
    int calls = 0;
    ScriptedServer server([&](const net::Request&) {
      if (++calls == 1) {
        net::Response r = Body(429, R"({"kind":"Status","code":429})");
        r.headers.Set("Retry-After", retry_after);
        return r;
      }
      return Body(200, R"({"metadata":{"name":"x"}})");
    });
    std::vector<std::chrono::milliseconds> slept;
    ClientOptions o;
    o.max_retry_after = 60s;
    o.sleep = [&](std::chrono::milliseconds d) { slept.push_back(d); };
    auto client = server.Client(o);
    auto r = client->Get(kClaims, "default", "x");
    ASSERT_TRUE(r) << retry_after << ": " << r.error().ToString();
    ASSERT_EQ(slept.size(), 1u) << retry_after;
    EXPECT_GE(slept[0].count(), 0) << retry_after;
    EXPECT_LE(slept[0], 60s) << retry_after;
  }
}

TEST(HostileApiServerTest, StatusBodiesCannotForgeOrFloodTheError) {
  // A code that would narrow to 410 (and so mean "re-list") must not.
  for (std::string code : {"4294967706", "-410", "410.5", "\"410\"", "1e300", "99", "600"}) {
    auto s = ParseApiStatus(500, fmt::format(R"({{"kind":"Status","code":{}}})", code));
    EXPECT_EQ(s.code, 500) << code;
  }
  auto huge =
      ParseApiStatus(403, fmt::format(R"({{"kind":"Status","reason":"Forbidden","message":"{}"}})",
                                      std::string(1 << 20, 'm')));
  EXPECT_LT(huge.message.size(), 3000u);
  auto kinds = ParseApiStatus(404, R"({"kind":"Status","reason":7,"message":["x"],"code":{}})");
  EXPECT_EQ(kinds.code, 404);
  EXPECT_EQ(kinds.reason, "NotFound");
  EXPECT_EQ(kinds.message, "");
  auto binary = ParseApiStatus(502, std::string("\xff\x00\x1b[2J", 6));
  EXPECT_EQ(binary.code, 502);
  EXPECT_TRUE(IsValidUtf8(binary.message));
}

TEST(HostileApiServerTest, MalformedWatchEventsAreErrors) {
  const std::string good =
      R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"2"}}})";
  for (std::string stream : {
           good + "\nnot json\n",
           std::string(R"({"type":"ADDED","object":"x"})") + "\n",
           std::string(R"({"type":7,"object":{}})") + "\n",
           std::string(R"({"type":"ADDED","object":{"metadata":{"name":"\xff"}}})") + "\n",
           std::string(R"({"type":"EXPLODED","object":{}})") + "\n",
           std::string(R"([1,2])") + "\n",
           good + "\n" + R"({"type":"ADDED","object":{"metadata":)",  // truncated
           std::string(R"({"type":"ERROR","object":{"kind":"Status","code":4294967706}})") + "\n",
       }) {
    ScriptedServer server([&](const net::Request&) { return Body(200, stream); });
    auto client = server.Client();
    WatchOptions wo;
    wo.resource_version = "1";  // straight to the watch
    wo.deadline = std::chrono::steady_clock::now() + 30s;
    int events = 0;
    auto r = WatchObjects(*client, kClaims, "default", wo, [&](const WatchEvent&) {
      ++events;
      return true;
    });
    ASSERT_FALSE(r) << stream;
    EXPECT_NE(r.error().code, ErrorCode::kTimeout) << stream << ": " << r.error().message;
    EXPECT_LE(events, 1) << stream;
  }
}

// Discovery, create and watch of an API server that binds the claim to a
// Sandbox of its choosing.
class BindingServer {
 public:
  explicit BindingServer(std::string sandbox_name)
      : sandbox_(std::move(sandbox_name)),
        server_([this](const net::Request& req) { return Answer(req); }) {}
  ScriptedServer& server() { return server_; }

 private:
  net::Response Answer(const net::Request& req) {
    if (req.path == "/apis/extensions.agents.x-k8s.io" || req.path == "/apis/agents.x-k8s.io") {
      return Body(200, R"({"preferredVersion":{"version":"v1beta1"},)"
                       R"("versions":[{"version":"v1beta1"}]})");
    }
    if (req.method == "POST") {
      auto obj = ParseJsonObject(req.body);
      json::object o = obj ? *obj : json::object{};
      if (auto* meta = o["metadata"].if_object()) (*meta)["resourceVersion"] = "1";
      name_ = FindString(o, {"metadata", "name"});
      return Body(201, ToJson(o));
    }
    if (req.method == "GET" && req.Query("watch")) {
      json::object ev;
      ev["type"] = "MODIFIED";
      json::object o;
      o["metadata"] = json::object{{"name", name_}, {"resourceVersion", "2"}};
      json::object status;
      status["sandbox"] = json::object{{"name", JsonString(sandbox_)}};
      status["conditions"] = json::array{json::object{{"type", "Ready"}, {"status", "True"}}};
      o["status"] = std::move(status);
      ev["object"] = std::move(o);
      return Body(200, ToJson(ev) + "\n");
    }
    if (req.method == "DELETE") return Body(200, "{}");
    return Body(404, R"({"kind":"Status","code":404})");
  }

  std::string sandbox_;
  std::string name_;
  ScriptedServer server_;
};

TEST(HostileApiServerTest, AnInvalidSandboxNameFailsTheClaimAndDeletesIt) {
  for (std::string name :
       {std::string("../../etc"), std::string("a\r\nX-Evil: 1"), std::string(70000, 'a'),
        std::string("Bad_Name"), std::string("."), std::string("-a"), std::string("a/b")}) {
    BindingServer api(name);
    auto client = api.server().Client();
    SandboxApi sandbox_api(*client);
    Claimer claimer(sandbox_api);
    ClaimRequest req;
    req.warm_pool = "pool";
    req.ready_timeout = 30s;
    auto r = claimer.Claim(req);
    ASSERT_FALSE(r) << name.substr(0, 40);
    EXPECT_NE(r.error().message.find("invalid name"), std::string::npos) << r.error().message;
    EXPECT_LT(r.error().message.size(), 2000u);
    // The claim is deleted. (Not necessarily the last request: the Events
    // watch runs beside the claim's and may send its GET after the DELETE.)
    auto seen = api.server().seen();
    ASSERT_FALSE(seen.empty());
    EXPECT_TRUE(std::any_of(seen.begin(), seen.end(), [](const std::string& r) {
      return r.starts_with("DELETE ") && r.find("/sandboxclaims/") != std::string::npos;
    })) << seen.back();
  }
  // A valid name passes.
  BindingServer fine("deepagents-warmpool-abcde");
  auto client = fine.server().Client();
  SandboxApi sandbox_api(*client);
  Claimer claimer(sandbox_api);
  ClaimRequest req;
  req.warm_pool = "pool";
  auto r = claimer.Claim(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->sandbox_name, "deepagents-warmpool-abcde");
}

TEST(HostileApiServerTest, DeleteBySelectorRefusesInvalidNamesBeforeDeletingAnything) {
  ScriptedServer server([](const net::Request& req) {
    if (req.path.starts_with("/apis/extensions.agents.x-k8s.io/v1beta1")) {
      return Body(200, R"({"metadata":{},"items":[{"metadata":{"name":"sandbox-claim-1"}},)"
                       R"({"metadata":{"name":".."}}]})");
    }
    return Body(200, R"({"preferredVersion":{"version":"v1beta1"},)"
                     R"("versions":[{"version":"v1beta1"}]})");
  });
  auto client = server.Client();
  SandboxApi api(*client);
  Claimer claimer(api);
  auto r = claimer.DeleteBySelector("default", "a=b");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("invalid name"), std::string::npos) << r.error().message;
  for (const auto& s : server.seen()) EXPECT_FALSE(s.starts_with("DELETE")) << s;
}

TEST(HostileCredentialsTest, ATokenThatCannotBeAHeaderIsRefusedBeforeSending) {
  ScriptedServer server([](const net::Request&) { return Body(200, "{}"); });
  for (std::string token :
       {std::string("tok\r\nX-Evil: 1"), std::string("two words"), std::string("t\x1b[2J"),
        std::string(70000, 't'), std::string("caf\xc3\xa9")}) {
    auto r = server.Client({}, token)->Get(kClaims, "default", "x");
    ASSERT_FALSE(r) << token.substr(0, 20);
    EXPECT_EQ(r.error().code, ErrorCode::kUnauthenticated) << r.error().message;
  }
  EXPECT_TRUE(server.seen().empty());
  EXPECT_TRUE(server.Client({}, std::string(60000, 't'))->Get(kClaims, "default", "x"));
}

TEST(HostileTimesTest, TimestampsOutsideTheClocksRangeAreErrors) {
  for (std::string t : {"9999-12-31T23:59:59Z", "2262-04-12T00:00:00Z", "0000-01-01T00:00:00Z",
                        "1677-01-01T00:00:00Z", "2020-01-01T00:00:00+99:99",
                        "2020-01-01T00:00:00.99999999999999999999Z"}) {
    auto r = ParseRfc3339(t);
    if (t.ends_with("9999Z")) {
      EXPECT_TRUE(r) << t;  // extra fraction digits are ignored
    } else {
      EXPECT_FALSE(r) << t;
    }
  }
  EXPECT_TRUE(ParseRfc3339("2261-12-31T23:59:59Z"));
  EXPECT_TRUE(ParseRfc3339("1970-01-01T00:00:00-23:59"));
}

TEST(ObjectNameTest, OnlyDns1123Subdomains) {
  EXPECT_TRUE(IsObjectName("deepagents-warmpool-abcde"));
  EXPECT_TRUE(IsObjectName("a.b-c"));
  EXPECT_TRUE(IsObjectName(std::string(253, 'a')));
  for (std::string bad :
       {std::string(""), std::string("."), std::string(".."), std::string("A"), std::string("a_b"),
        std::string("a/b"), std::string("a b"), std::string("-a"), std::string("a-"),
        std::string(254, 'a'), std::string("a\nb"), std::string("\xc3\xa9")}) {
    EXPECT_FALSE(IsObjectName(bad)) << bad;
  }
}

}  // namespace
}  // namespace deepbox::k8s
