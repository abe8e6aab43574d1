#include "k8s/connection.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"
#include "k8s/router_token.h"
#include "k8s/socket_owner.h"
#include "k8s/testing/fixtures.h"
#include "k8s/testing/test_router.h"
#include "net/http_client.h"
#include "net/http_server.h"

namespace deepbox::k8s {
namespace {

using namespace std::chrono_literals;
using testing::TestRouter;

net::ClientRequest GetRequest(std::string target) {
  net::ClientRequest r;
  r.method = "GET";
  r.target = std::move(target);
  r.timeout = 10s;
  return r;
}

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
    daemon_ = EchoDaemon();
    auto router = TestRouter::Start();
    ASSERT_TRUE(router);
    router_ = std::move(*router);
    router_->SetBackend("10.244.0.10:8888", fmt::format("127.0.0.1:{}", daemon_->port()));
  }

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
    auto r = (*c)->Send(GetRequest(path));
    if (!r) return tl::unexpected(r.error());
    if (r->status != 200) return MakeError(ErrorCode::kUnavailable, r->body);
    return ParseJsonObject(r->body);
  }

  std::string ReadLog() {
    std::ifstream in(dir_ + "/log");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  deepbox::testing::TempDir tmp_{"deepbox-pf"};
  std::string dir_ = tmp_.path().string();
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
  // kubectl chose the port (we passed ":8080") and we read it back.
  EXPECT_EQ(ReadLog(), fmt::format("--kubeconfig {}/kubeconfig --context kind-agent-sandbox "
                                   "port-forward --address 127.0.0.1 svc/sandbox-router-svc :8080 "
                                   "-n agent-sandbox-system \n",
                                   dir_));
  int port = (*conn)->port_forward()->local_port();
  EXPECT_EQ(ep.base_url, fmt::format("http://127.0.0.1:{}", port));
  pid_t pid = (*conn)->port_forward()->pid();
  EXPECT_TRUE(CheckListenerOwner(pid, static_cast<uint16_t>(port)));
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
  int port = (*pf)->local_port();
  EXPECT_TRUE(CheckListenerOwner((*pf)->pid(), static_cast<uint16_t>(port)));
  // The restart asked for that port explicitly.
  EXPECT_NE(ReadLog().find(fmt::format(" {}:8080 ", port)), std::string::npos) << ReadLog();

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

TEST(ForwardingLineTest, OnlyKubectlsLineForTheLoopbackAddressIsAccepted) {
  EXPECT_EQ(ParseForwardingLine("Forwarding from 127.0.0.1:43121 -> 8080", 8080), 43121);
  EXPECT_EQ(ParseForwardingLine("Forwarding from 127.0.0.1:1 -> 8080\r", 8080), 1);
  EXPECT_EQ(ParseForwardingLine("Forwarding from 127.0.0.1:65535 -> 9000", 9000), 65535);
  for (std::string bad :
       {"", "Forwarding from [::1]:43121 -> 8080", "Forwarding from 0.0.0.0:43121 -> 8080",
        "Forwarding from 127.0.0.1:43121 -> 8081", "Forwarding from 127.0.0.1:43121 -> 8080 extra",
        "Forwarding from 127.0.0.1: -> 8080", "Forwarding from 127.0.0.1:0 -> 8080",
        "Forwarding from 127.0.0.1:-1 -> 8080", "Forwarding from 127.0.0.1:+80 -> 8080",
        "Forwarding from 127.0.0.1:65536 -> 8080",
        "Forwarding from 127.0.0.1:99999999999999999999999 -> 8080",
        "Forwarding from 127.0.0.1:80x -> 8080", "Forwarding from 127.0.0.1:80->8080",
        "Forwarding from 127.0.0.1:80", "error: unable to forward port"}) {
    auto r = ParseForwardingLine(bad, 8080);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  }
  // The offending line is quoted without its control sequences.
  auto r = ParseForwardingLine("\x1b]0;owned\x07Forwarding \x1b[2J", 8080);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message.find('\x1b'), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.find('\x07'), std::string::npos) << r.error().message;
}

// A kubectl stand-in: `body` is a shell script (kept as the child with exec).
std::string Script(const std::string& dir, const std::string& name, const std::string& body) {
  std::string path = dir + "/" + name;
  std::ofstream(path) << "#!/bin/sh\n" << body;
  ::chmod(path.c_str(), 0755);
  return path;
}

TEST_F(ConnectionTest, UnexpectedKubectlOutputIsRefused) {
  struct Case {
    std::string body;
    std::string says;
  };
  std::vector<Case> cases = {
      {"echo 'Forwarding from 127.0.0.1:notaport -> 8080'\nexec sleep 1000\n",
       "127.0.0.1:notaport"},
      {"echo 'Forwarding from [::1]:43121 -> 8080'\nexec sleep 1000\n", "[::1]:43121"},
      {"echo 'Forwarding from 127.0.0.1:43121 -> 9999'\nexec sleep 1000\n", "-> 9999"},
      {"printf 'Forwarding from 127.0.0.1:4\\033]0;x\\007 -> 8080\\n'\nexec sleep 1000\n",
       "Forwarding from 127.0.0.1:4"},
      {"head -c 5000 /dev/zero | tr '\\0' x\nexec sleep 1000\n", "longer than 4096 bytes"},
  };
  for (const auto& c : cases) {
    PortForwardOptions o = Options();
    o.kubectl = Script(dir_, "odd-kubectl", c.body);
    auto pf = PortForward::Start(o);
    ASSERT_FALSE(pf) << c.body;
    EXPECT_EQ(pf.error().code, ErrorCode::kUnavailable) << pf.error().message;
    EXPECT_NE(pf.error().message.find(c.says), std::string::npos) << pf.error().message;
    EXPECT_EQ(pf.error().message.find('\x1b'), std::string::npos) << pf.error().message;
  }
}

// A socket of the test's own on 127.0.0.1, listening: "another user's" listener.
struct Squatter {
  UniqueFd fd;
  int port = 0;
  static Squatter On(int port) {
    Squatter s;
    s.fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    int one = 1;
    ::setsockopt(s.fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(s.fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(s.fd.get(), 8) != 0) {
      s.fd.reset();
      return s;
    }
    socklen_t len = sizeof addr;
    ::getsockname(s.fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
    s.port = ntohs(addr.sin_port);
    return s;
  }
  // Whether anyone connected (and so could have sent the token).
  bool Contacted() const {
    int c = ::accept4(fd.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (c >= 0) ::close(c);
    return c >= 0;
  }
};

TEST_F(ConnectionTest, AListenerThatIsNotTheChildsIsRefused) {
  Squatter squatter = Squatter::On(0);
  ASSERT_TRUE(squatter.fd.valid());
  // A "kubectl" that claims the squatter's port without listening itself.
  PortForwardOptions o = Options();
  o.kubectl = Script(
      dir_, "lying-kubectl",
      fmt::format("echo 'Forwarding from 127.0.0.1:{} -> 8080'\nexec sleep 1000\n", squatter.port));
  ConnectionOptions co;
  co.port_forward = o;
  co.router_token = "router-secret";
  auto conn = SandboxConnection::Open(co, Claimed());
  ASSERT_FALSE(conn);
  EXPECT_EQ(conn.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(conn.error().message.find(fmt::format("127.0.0.1:{}", squatter.port)),
            std::string::npos)
      << conn.error().message;
  EXPECT_NE(conn.error().message.find("refusing"), std::string::npos) << conn.error().message;
  EXPECT_FALSE(squatter.Contacted());
}

TEST_F(ConnectionTest, AWrapperThatDoesNotExecKubectlIsAccepted) {
  // The listener is held by the wrapper's child, in the wrapper's process group.
  PortForwardOptions o = Options();
  o.kubectl = Script(dir_, "wrapper-kubectl", fmt::format("'{}' \"$@\"\n", FakeKubectl()));
  auto pf = PortForward::Start(o);
  ASSERT_TRUE(pf) << pf.error().ToString();
  DaemonEndpoint ep{(*pf)->base_url(), RouterHeaders({"deepagents-warmpool-abcde", "default", 8888,
                                                      "10.244.0.10", ""})};
  auto echo = Get(ep, "/wrapped");
  ASSERT_TRUE(echo) << echo.error().ToString();
  EXPECT_EQ(FindString(*echo, {"path"}), "/wrapped");
}

TEST_F(ConnectionTest, StopDuringARestartEndsIt) {
  // The restart's kubectl never says where it listens; the ready timeout is
  // far away, so only Stop() can end the wait (else this test hangs).
  PortForwardOptions o = Options();
  o.ready_timeout = std::chrono::hours(1);
  o.kubectl = Script(dir_, "stuck-kubectl",
                     fmt::format(R"(if [ -e '{dir}/second' ]; then
  echo $$ > '{dir}/second-pid'
  exec sleep 100000
fi
touch '{dir}/second'
exec '{fake}' "$@"
)",
                                 fmt::arg("dir", dir_), fmt::arg("fake", FakeKubectl())));
  auto pf = PortForward::Start(o);
  ASSERT_TRUE(pf) << pf.error().ToString();
  ASSERT_EQ(::kill((*pf)->pid(), SIGKILL), 0);
  std::string pid_text;
  ASSERT_TRUE(testing::WaitUntil([&] {
    std::ifstream in(dir_ + "/second-pid");
    return static_cast<bool>(std::getline(in, pid_text)) && !pid_text.empty();
  }));
  (*pf)->Stop();
  EXPECT_FALSE((*pf)->Health());
  EXPECT_NE(::kill(std::atoi(pid_text.c_str()), 0), 0);  // killed and reaped
}

TEST_F(ConnectionTest, APortTakenDuringARestartIsRefused) {
  // First run: the real fake kubectl. Second run (the restart): wait until the
  // test holds the port, then claim it without listening.
  PortForwardOptions o = Options();
  o.kubectl = Script(dir_, "restart-kubectl",
                     fmt::format(R"(if [ -e '{dir}/second' ]; then
  for a in "$@"; do case "$a" in *:8080) p="${{a%%:*}}";; esac; done
  while [ ! -e '{dir}/taken' ]; do sleep 0.01; done
  echo "Forwarding from 127.0.0.1:$p -> 8080"
  exec sleep 1000
fi
touch '{dir}/second'
exec '{fake}' "$@"
)",
                                 fmt::arg("dir", dir_), fmt::arg("fake", FakeKubectl())));
  auto pf = PortForward::Start(o);
  ASSERT_TRUE(pf) << pf.error().ToString();
  int port = (*pf)->local_port();
  ASSERT_EQ(::kill((*pf)->pid(), SIGKILL), 0);
  Squatter squatter;
  ASSERT_TRUE(testing::WaitUntil([&] {
    squatter = Squatter::On(port);  // free once the child is gone
    return squatter.fd.valid();
  }));
  std::ofstream(dir_ + "/taken") << "";
  ASSERT_TRUE((*pf)->WaitForRestarts(1, 30s));
  auto h = (*pf)->Health();
  ASSERT_FALSE(h);
  EXPECT_NE(h.error().message.find("restarting it failed"), std::string::npos) << h.error().message;
  EXPECT_NE(h.error().message.find("refusing"), std::string::npos) << h.error().message;
  EXPECT_FALSE(squatter.Contacted());
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
  // A token that would forge or break headers.
  for (std::string token :
       {std::string("a\r\nX-Evil: 1"), std::string("a b"), std::string(70000, 't')}) {
    ConnectionOptions forged = direct;
    forged.router_token = token;
    auto r = SandboxConnection::Open(forged, Claimed());
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  }
}

// The Go router's --authz-mode=scoped-token: deepbox signs the sandbox's own
// token with the router's secret and sends no pod IP (such a router refuses
// it and finds the pod by name).
TEST_F(ConnectionTest, AScopedTokenRouterGetsTheSandboxsOwnTokenAndNoPodIp) {
  const std::string secret = "0123456789abcdef0123456789abcdef\n";  // a file's trailing newline
  router_->RequireScopedTokens(secret);
  router_->SetBackend("deepagents-warmpool-abcde.default.svc.cluster.local:8888",
                      fmt::format("127.0.0.1:{}", daemon_->port()));
  ConnectionOptions o;
  o.mode = ConnectionMode::kDirect;
  o.direct_url = router_->url();
  o.router_token_secret = secret;
  auto conn = SandboxConnection::Open(o, Claimed());
  ASSERT_TRUE(conn) << conn.error().ToString();
  const auto& headers = (*conn)->endpoint().headers;
  EXPECT_FALSE(headers.Get("X-Sandbox-Pod-IP"));
  auto auth = headers.Get("Authorization");
  ASSERT_TRUE(auth);
  auto scope = ReadScopedRouterToken(auth->substr(7));
  ASSERT_TRUE(scope);
  EXPECT_EQ(scope->namespace_name, "default");
  EXPECT_EQ(scope->sandbox_name, "deepagents-warmpool-abcde");
  ASSERT_TRUE(Get((*conn)->endpoint(), "/scoped")) << "the router refused the minted token";

  // The same token for another sandbox, or with the pod IP: 403; a forged one: 401.
  net::Headers other = headers;
  other.Set("X-Sandbox-ID", "another-sandbox");
  auto refused = Get({router_->url(), other, "", 8888}, "/x");
  ASSERT_FALSE(refused);
  net::Headers with_ip = headers;
  with_ip.Set("X-Sandbox-Pod-IP", "10.244.0.10");
  EXPECT_FALSE(Get({router_->url(), with_ip, "", 8888}, "/x"));
  auto log = router_->requests();
  ASSERT_GE(log.size(), 3u);
  EXPECT_EQ(log[log.size() - 2].status, 403);
  EXPECT_EQ(log.back().status, 403);

  // A scoped token given as --router-token: used for its own sandbox only.
  ConnectionOptions given;
  given.mode = ConnectionMode::kDirect;
  given.direct_url = router_->url();
  given.router_token = std::string(auth->substr(7));
  auto ok = SandboxConnection::Open(given, Claimed());
  ASSERT_TRUE(ok) << ok.error().ToString();
  EXPECT_FALSE((*ok)->endpoint().headers.Get("X-Sandbox-Pod-IP"));
  ClaimedSandbox elsewhere = Claimed();
  elsewhere.sandbox_name = "another-sandbox";
  auto wrong = SandboxConnection::Open(given, elsewhere);
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(wrong.error().message.find("scoped to sandbox default/deepagents-warmpool-abcde"),
            std::string::npos)
      << wrong.error().message;
  // A secret too short to be the router's.
  o.router_token_secret = "short";
  EXPECT_FALSE(SandboxConnection::Open(o, Claimed()));
}

TEST_F(ConnectionTest, TheTestRouterValidatesLikeUpstream) {
  auto send = [&](net::Headers h) {
    net::ClientOptions co;
    co.default_headers = std::move(h);
    auto c = net::HttpClient::Create(router_->url(), co);
    return (*c)->Send(GetRequest("/v1/health"));
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
  EXPECT_EQ((*c)->Send(GetRequest("/"))->status, 401);
}

}  // namespace
}  // namespace deepbox::k8s
