#include "k8s/connection.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "k8s/testing/test_router.h"
#include "net/http_client.h"
#include "net/http_server.h"

namespace deepbox::k8s {
namespace {

using namespace std::chrono_literals;
using testing::TestRouter;

std::string FakeKubectl() { return std::string(DEEPBOX_BIN_DIR) + "/deepbox-fake-kubectl"; }

// Stands in for the daemon in a pod: echoes what reached it.
std::unique_ptr<net::HttpServer> EchoDaemon() {
  auto s = net::HttpServer::Create(*net::Endpoint::Parse("127.0.0.1:0"),
                                   [](net::Request& req, net::ResponseWriter& w) {
                                     json::object o;
                                     o["path"] = req.path;
                                     o["method"] = req.method;
                                     o["body"] = req.body;
                                     json::object h;
                                     for (const auto& [k, v] : req.headers.entries()) h[k] = v;
                                     o["headers"] = std::move(h);
                                     (void)w.Send(net::Response::Json(200, ToJson(o)));
                                   });
  EXPECT_TRUE(s);
  (*s)->Start();
  return std::move(*s);
}

class ConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/deepbox-pf-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    daemon_ = EchoDaemon();
    auto router = TestRouter::Start();
    ASSERT_TRUE(router);
    router_ = std::move(*router);
    router_->SetBackend("10.244.0.10:8888", fmt::format("127.0.0.1:{}", daemon_->port()));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  PortForwardOptions Options() {
    PortForwardOptions o;
    o.kubectl = FakeKubectl();
    o.kubectl_args = {"--kubeconfig", dir_ + "/kubeconfig", "--context", "kind-agent-sandbox"};
    o.env = {{"DEEPBOX_FAKE_KUBECTL_TARGET", fmt::format("127.0.0.1:{}", router_->port())},
             {"DEEPBOX_FAKE_KUBECTL_LOG", dir_ + "/log"},
             {"DEEPBOX_FAKE_KUBECTL_FAIL_IF", dir_ + "/fail"}};
    o.ready_timeout = 30s;
    return o;
  }

  // GET through the endpoint (router headers included); the daemon's echo.
  Result<json::object> Get(const DaemonEndpoint& ep, const std::string& path) {
    net::ClientOptions co;
    co.default_headers = ep.headers;
    auto c = net::HttpClient::Create(ep.base_url, co);
    if (!c) return tl::unexpected(c.error());
    auto r = (*c)->Send({"GET", path, {}, "", 10s});
    if (!r) return tl::unexpected(r.error());
    if (r->status != 200) return MakeError(ErrorCode::kUnavailable, r->body);
    return ParseJsonObject(r->body);
  }

  std::string ReadLog() {
    std::ifstream in(dir_ + "/log");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::string dir_;
  std::unique_ptr<net::HttpServer> daemon_;
  std::unique_ptr<TestRouter> router_;
};

ClaimedSandbox Claimed() {
  ClaimedSandbox c;
  c.namespace_name = "default";
  c.claim_name = "sandbox-claim-12345678";
  c.sandbox_name = "deepagents-warmpool-abcde";
  c.pod_ip = "10.244.0.10";
  return c;
}

TEST(RouterHeadersTest, CarriesTheSandboxCoordinates) {
  auto h = RouterHeaders({"deepagents-warmpool-abcde", "agents", 8888, "10.244.0.7", "tok"});
  EXPECT_EQ(h.Get("X-Sandbox-ID"), "deepagents-warmpool-abcde");
  EXPECT_EQ(h.Get("X-Sandbox-Namespace"), "agents");
  EXPECT_EQ(h.Get("X-Sandbox-Port"), "8888");
  EXPECT_EQ(h.Get("X-Sandbox-Pod-IP"), "10.244.0.7");
  EXPECT_EQ(h.Get("Authorization"), "Bearer tok");
  auto bare = RouterHeaders({"sb", "", 9000, "", ""});
  EXPECT_EQ(bare.Get("X-Sandbox-Namespace"), "default");
  EXPECT_FALSE(bare.Has("X-Sandbox-Pod-IP"));
  EXPECT_FALSE(bare.Has("Authorization"));
}

TEST_F(ConnectionTest, PortForwardReachesTheDaemonThroughTheRouter) {
  ConnectionOptions co;
  co.port_forward = Options();
  auto conn = SandboxConnection::Open(co, Claimed());
  ASSERT_TRUE(conn) << conn.error().ToString();
  const auto& ep = (*conn)->endpoint();
  EXPECT_EQ(ep.base_url, (*conn)->port_forward()->base_url());
  auto echo = Get(ep, "/v1/health");
  ASSERT_TRUE(echo) << echo.error().ToString();
  EXPECT_EQ(FindString(*echo, {"path"}), "/v1/health");
  // The router consumed its headers; the daemon does not see them.
  EXPECT_EQ(FindString(*echo, {"headers", "X-Sandbox-ID"}), "");
  auto routed = router_->requests();
  ASSERT_FALSE(routed.empty());
  EXPECT_EQ(routed.back().sandbox_id, "deepagents-warmpool-abcde");
  EXPECT_EQ(routed.back().pod_ip, "10.244.0.10");
  EXPECT_EQ(routed.back().port, "8888");
  EXPECT_EQ(routed.back().status, 200);
  int port = (*conn)->port_forward()->local_port();
  EXPECT_EQ(ReadLog(), fmt::format("--kubeconfig {}/kubeconfig --context kind-agent-sandbox "
                                   "port-forward svc/sandbox-router-svc {}:8080 -n "
                                   "agent-sandbox-system \n",
                                   dir_, port));
  pid_t pid = (*conn)->port_forward()->pid();
  (*conn)->Close();
  EXPECT_FALSE((*conn)->Health());
  EXPECT_NE(::kill(pid, 0), 0);  // reaped
  EXPECT_FALSE(Get(ep, "/v1/health"));
}

TEST_F(ConnectionTest, ADeadPortForwardIsRestartedOnceThenReported) {
  auto pf = PortForward::Start(Options());
  ASSERT_TRUE(pf) << pf.error().ToString();
  DaemonEndpoint ep{(*pf)->base_url(), RouterHeaders({"deepagents-warmpool-abcde", "default", 8888,
                                                      "10.244.0.10", ""})};
  ASSERT_TRUE(Get(ep, "/x"));
  pid_t first = (*pf)->pid();
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  ASSERT_TRUE((*pf)->WaitForRestarts(1, 30s));
  EXPECT_EQ((*pf)->restarts(), 1);
  ASSERT_TRUE((*pf)->Health());
  EXPECT_NE((*pf)->pid(), first);
  auto again = Get(ep, "/y");  // same port, same URL
  ASSERT_TRUE(again) << again.error().ToString();

  ASSERT_EQ(::kill((*pf)->pid(), SIGKILL), 0);
  ASSERT_TRUE((*pf)->WaitForRestarts(2, 30s));  // returns once it is declared dead
  auto h = (*pf)->Health();
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(h.error().message.find("killed by signal 9"), std::string::npos) << h.error().message;
  EXPECT_NE(h.error().message.find("after 1 restart"), std::string::npos) << h.error().message;
}

TEST_F(ConnectionTest, ARestartThatFailsIsReported) {
  auto pf = PortForward::Start(Options());
  ASSERT_TRUE(pf);
  std::ofstream(dir_ + "/fail") << "error: services \"sandbox-router-svc\" not found";
  ASSERT_EQ(::kill((*pf)->pid(), SIGKILL), 0);
  ASSERT_TRUE((*pf)->WaitForRestarts(1, 30s));
  auto h = (*pf)->Health();
  ASSERT_FALSE(h);
  EXPECT_NE(h.error().message.find("restarting it failed"), std::string::npos);
  EXPECT_NE(h.error().message.find("sandbox-router-svc\" not found"), std::string::npos)
      << h.error().message;
}

TEST_F(ConnectionTest, StartFailuresCarryKubectlsMessage) {
  std::ofstream(dir_ + "/fail") << "error: services \"sandbox-router-svc\" not found";
  auto pf = PortForward::Start(Options());
  ASSERT_FALSE(pf);
  EXPECT_EQ(pf.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(pf.error().message.find("exited with status 1"), std::string::npos);
  EXPECT_NE(pf.error().message.find("not found"), std::string::npos) << pf.error().message;

  PortForwardOptions missing = Options();
  missing.kubectl = dir_ + "/no-kubectl-here";
  pf = PortForward::Start(missing);
  ASSERT_FALSE(pf);
  EXPECT_NE(pf.error().message.find("cannot start kubectl port-forward"), std::string::npos)
      << pf.error().message;

  // A kubectl that never listens: bounded by the ready timeout, then killed.
  std::string sleeper = dir_ + "/sleepy-kubectl";
  std::ofstream(sleeper) << "#!/bin/sh\necho 'waiting for pod...' >&2\nexec sleep 1000\n";
  ::chmod(sleeper.c_str(), 0755);
  PortForwardOptions slow = Options();
  slow.kubectl = sleeper;
  slow.ready_timeout = 300ms;
  pf = PortForward::Start(slow);
  ASSERT_FALSE(pf);
  EXPECT_EQ(pf.error().code, ErrorCode::kTimeout);
  EXPECT_NE(pf.error().message.find("waiting for pod..."), std::string::npos) << pf.error().message;
}

TEST_F(ConnectionTest, DirectAndInClusterEndpoints) {
  ConnectionOptions direct;
  direct.mode = ConnectionMode::kDirect;
  direct.direct_url = router_->url() + "/";
  direct.router_token = "";
  auto conn = SandboxConnection::Open(direct, Claimed());
  ASSERT_TRUE(conn);
  EXPECT_EQ((*conn)->endpoint().base_url, router_->url());
  ASSERT_TRUE(Get((*conn)->endpoint(), "/direct"));

  ConnectionOptions in_cluster;
  in_cluster.mode = ConnectionMode::kInCluster;
  conn = SandboxConnection::Open(in_cluster, Claimed());
  ASSERT_TRUE(conn);
  EXPECT_EQ((*conn)->endpoint().base_url, "http://10.244.0.10:8888");
  EXPECT_TRUE((*conn)->endpoint().headers.entries().empty());
  ClaimedSandbox v6 = Claimed();
  v6.pod_ip = "fd00::7";
  EXPECT_EQ((*SandboxConnection::Open(in_cluster, v6))->endpoint().base_url,
            "http://[fd00::7]:8888");
  ClaimedSandbox no_ip = Claimed();
  no_ip.pod_ip.clear();
  EXPECT_EQ((*SandboxConnection::Open(in_cluster, no_ip))->endpoint().base_url,
            "http://deepagents-warmpool-abcde.default.svc.cluster.local:8888");
  ConnectionOptions bad;
  bad.mode = ConnectionMode::kDirect;
  EXPECT_FALSE(SandboxConnection::Open(bad, Claimed()));
}

TEST_F(ConnectionTest, TheTestRouterValidatesLikeUpstream) {
  auto send = [&](net::Headers h) {
    net::ClientOptions co;
    co.default_headers = std::move(h);
    auto c = net::HttpClient::Create(router_->url(), co);
    return (*c)->Send({"GET", "/v1/health", {}, "", 10s});
  };
  net::Headers h;
  EXPECT_EQ(send(h)->status, 400);
  h.Set("X-Sandbox-ID", "Bad_Name");
  EXPECT_EQ(send(h)->status, 400);
  h.Set("X-Sandbox-ID", "ok-name");
  h.Set("X-Sandbox-Pod-IP", "127.0.0.1");
  EXPECT_EQ(send(h)->status, 400);
  h.Set("X-Sandbox-Pod-IP", "10.9.9.9");
  auto r = send(h);
  EXPECT_EQ(r->status, 502);
  EXPECT_NE(r->body.find("Could not connect to the backend sandbox: ok-name"), std::string::npos);
  auto locked = TestRouter::Start("secret");
  ASSERT_TRUE(locked);
  net::ClientOptions co;
  co.default_headers = RouterHeaders({"ok-name", "default", 8888, "", "wrong"});
  auto c = net::HttpClient::Create((*locked)->url(), co);
  EXPECT_EQ((*c)->Send({"GET", "/", {}, "", 10s})->status, 401);
}

}  // namespace
}  // namespace deepbox::k8s
