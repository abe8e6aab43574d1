#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "net/http_client.h"
#include "net/http_server.h"
#include "net/testing/test_certs.h"

namespace deepbox::net {
namespace {

using namespace std::chrono_literals;

// A handler exercising the features the daemon and fakes rely on.
void TestHandler(Request& req, ResponseWriter& w) {
  if (req.path == "/echo") {
    Response r = Response::Text(200, req.method + " " + req.body);
    r.headers.Set("X-Query-A", req.Query("a").value_or(""));
    r.headers.Set("X-Got-Header", req.Header("x-test").value_or(""));
    (void)w.Send(r);
  } else if (req.path == "/stream") {
    Headers h;
    h.Set("Content-Type", "application/x-ndjson");
    (void)w.BeginStream(200, h);
    for (int i = 0; i < 5; ++i) (void)w.WriteChunk("{\"n\":" + std::to_string(i) + "}\n");
    (void)w.EndStream();
  } else if (req.path == "/big") {
    (void)w.Send(Response::Text(200, std::string(size_t{5} << 20, 'z')));
  } else if (req.path == "/a b") {
    (void)w.Send(Response::Text(200, "decoded"));
  } else if (req.path == "/nothing") {
    // Sends no response: the server must answer 500 on its own.
  } else {
    (void)w.Send(Response::Json(404, R"({"error":"nope"})"));
  }
}

class HttpTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("deepbox-net-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::create_directories(dir_);
    std::string spec = GetParam() == "unix" ? "unix:" + (dir_ / "s.sock").string() : "127.0.0.1:0";
    auto ep = Endpoint::Parse(spec);
    ASSERT_TRUE(ep);
    auto server = HttpServer::Create(*ep, TestHandler);
    ASSERT_TRUE(server) << server.error().ToString();
    server_ = std::move(*server);
    server_->Start();
    base_ = GetParam() == "unix" ? spec : "http://127.0.0.1:" + std::to_string(server_->port());
    auto client = HttpClient::Create(base_);
    ASSERT_TRUE(client);
    client_ = std::move(*client);
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  static inline std::atomic<int> counter_{0};
  std::filesystem::path dir_;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<HttpClient> client_;
  std::string base_;
};

TEST_P(HttpTest, RoundTripWithQueryHeadersAndKeepAlive) {
  for (int i = 0; i < 20; ++i) {
    ClientRequest req;
    req.method = "POST";
    req.target = "/echo?a=x%20y";
    req.headers.Set("X-Test", "yes");
    req.body = "hello" + std::to_string(i);
    auto r = client_->Send(req);
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "POST hello" + std::to_string(i));
    EXPECT_EQ(r->headers.Get("x-query-a"), "x y");
    EXPECT_EQ(r->headers.Get("X-Got-Header"), "yes");
  }
  // Keep-alive: all requests shared one connection.
  EXPECT_EQ(server_->active_connections(), 1u);
}

TEST_P(HttpTest, PercentDecodedPath) {
  ClientRequest req;
  req.target = "/a%20b";
  auto r = client_->Send(req);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "decoded");
}

TEST_P(HttpTest, StreamingChunksArriveInOrder) {
  ClientRequest req;
  req.target = "/stream";
  std::string got;
  int heads = 0;
  auto r = client_->SendStreaming(
      req,
      [&](const Response& head) {
        ++heads;
        EXPECT_EQ(head.status, 200);
        return true;
      },
      [&](std::string_view d) {
        got.append(d);
        return true;
      });
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(heads, 1);
  EXPECT_EQ(got, "{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n{\"n\":4}\n");
}

TEST_P(HttpTest, LargeBodiesBothWays) {
  ClientRequest req;
  req.method = "POST";
  req.target = "/echo";
  req.body = std::string(size_t{10} << 20, 'q');
  auto r = client_->Send(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->body.size(), req.body.size() + 5);
  ClientRequest big;
  big.target = "/big";
  auto b = client_->Send(big);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->body.size(), size_t{5} << 20);
}

TEST_P(HttpTest, HandlerWithoutResponseGets500) {
  ClientRequest req;
  req.target = "/nothing";
  auto r = client_->Send(req);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
}

TEST_P(HttpTest, HeadHasNoBody) {
  ClientRequest req;
  req.method = "HEAD";
  req.target = "/big";
  auto r = client_->Send(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(r->body.empty());
  EXPECT_EQ(r->headers.Get("Content-Length"), std::to_string(size_t{5} << 20));
  // The connection is still usable afterwards.
  ClientRequest again;
  again.target = "/a%20b";
  EXPECT_TRUE(client_->Send(again));
}

TEST_P(HttpTest, ManyConcurrentRequests) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 50; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 4; ++i) {
        ClientRequest req;
        req.method = "POST";
        req.target = "/echo";
        req.body = std::to_string(t * 100 + i);
        auto r = client_->Send(req);
        if (r && r->body == "POST " + req.body) ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 200);
}

INSTANTIATE_TEST_SUITE_P(Transports, HttpTest, ::testing::Values("tcp", "unix"));

// Raw-socket helper: send bytes, read the whole reply until close.
std::string RawExchange(int port, const std::string& bytes) {
  auto ep = Endpoint::Parse("127.0.0.1:" + std::to_string(port));
  auto conn = Conn::Connect(*ep, DeadlineAfter(5000ms));
  EXPECT_TRUE(conn);
  EXPECT_TRUE(conn->WriteAll(bytes, DeadlineAfter(5000ms)));
  std::string out;
  char buf[4096];
  for (;;) {
    auto n = conn->ReadSome(buf, sizeof buf, DeadlineAfter(5000ms));
    if (!n || *n == 0) break;
    out.append(buf, *n);
  }
  return out;
}

TEST(HttpServerTest, MalformedRequestsGet400AndServerSurvives) {
  auto server = HttpServer::Create(*Endpoint::Parse("127.0.0.1:0"), TestHandler);
  ASSERT_TRUE(server);
  (*server)->Start();
  int port = (*server)->port();
  EXPECT_NE(RawExchange(port, "GARBAGE\r\n\r\n").find("400"), std::string::npos);
  EXPECT_NE(RawExchange(port, "GET / HTTP/1.1\r\nContent-Length: zz\r\n\r\n").find("400"),
            std::string::npos);
  std::string huge_header = "GET / HTTP/1.1\r\nX: " + std::string(100000, 'a') + "\r\n\r\n";
  EXPECT_NE(RawExchange(port, huge_header).find("431"), std::string::npos);
  // Still serving.
  auto client = HttpClient::Create("http://127.0.0.1:" + std::to_string(port));
  ClientRequest req;
  req.target = "/echo";
  EXPECT_TRUE((*client)->Send(req));
}

TEST(HttpServerTest, OversizedBodyGets413) {
  ServerOptions opts;
  opts.max_body_bytes = 1024;
  auto server = HttpServer::Create(*Endpoint::Parse("127.0.0.1:0"), TestHandler, opts);
  ASSERT_TRUE(server);
  (*server)->Start();
  auto client = HttpClient::Create("http://127.0.0.1:" + std::to_string((*server)->port()));
  ClientRequest req;
  req.method = "POST";
  req.target = "/echo";
  req.body = std::string(4096, 'x');
  auto r = (*client)->Send(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->status, 413);
}

TEST(HttpServerTest, StopInterruptsIdleKeepAlive) {
  auto server = HttpServer::Create(*Endpoint::Parse("127.0.0.1:0"), TestHandler);
  ASSERT_TRUE(server);
  (*server)->Start();
  auto client = HttpClient::Create("http://127.0.0.1:" + std::to_string((*server)->port()));
  ClientRequest req;
  req.target = "/echo";
  ASSERT_TRUE((*client)->Send(req));
  EXPECT_EQ((*server)->active_connections(), 1u);
  (*server)->Stop(10000ms);
  EXPECT_EQ((*server)->active_connections(), 0u);
  // New connections are refused once stopped.
  (*client)->CloseIdle();
  EXPECT_FALSE((*client)->Send(req));
}

TEST(HttpClientTest, ConnectionRefusedIsUnavailable) {
  // Grab a free port, then close it.
  int port;
  {
    auto l = Listener::Bind(*Endpoint::Parse("127.0.0.1:0"));
    port = l->port();
  }
  auto client = HttpClient::Create("http://127.0.0.1:" + std::to_string(port));
  ClientRequest req;
  auto r = (*client)->Send(req);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  // Typed, not in the words: nothing was sent, and connect's errno.
  EXPECT_EQ(r.error().reason, kReasonConnectFailed);
  EXPECT_EQ(r.error().sys_errno, ECONNREFUSED);
  EXPECT_TRUE(NothingSent(r.error()));
}

TEST(HttpClientTest, AMissingUnixSocketIsAConnectFailureWithItsErrno) {
  auto client = HttpClient::Create("unix:/nonexistent/deepbox-test.sock");
  ASSERT_TRUE(client) << client.error().message;
  auto r = (*client)->Send(ClientRequest{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, kReasonConnectFailed);
  EXPECT_EQ(r.error().sys_errno, ENOENT);
  EXPECT_TRUE(NothingSent(r.error()));
  // An error that merely says so in its message is not one.
  Error worded(ErrorCode::kUnavailable, "cannot connect to unix:/x: connect(...) (ECONNREFUSED)");
  EXPECT_FALSE(NothingSent(worded));
}

TEST(HttpClientTest, SilentServerTimesOut) {
  auto l = Listener::Bind(*Endpoint::Parse("127.0.0.1:0"));
  ASSERT_TRUE(l);
  ClientOptions opts;
  opts.read_idle_timeout = 300ms;
  auto client = HttpClient::Create("http://127.0.0.1:" + std::to_string(l->port()), opts);
  ClientRequest req;
  auto r = (*client)->Send(req);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kTimeout);
}

TEST(ConnTest, GatheredWriteKeepsOrderAcrossBatchesAndPartialWrites) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  Conn writer{UniqueFd(sv[0])};
  Conn reader{UniqueFd(sv[1])};
  // More parts than one sendmsg takes, empty ones among them, and far more
  // bytes than the socket buffer: writes come back partial and must resume
  // mid-part.
  std::vector<std::string> storage;
  for (int i = 0; i < 300; ++i) {
    size_t len = i % 7 == 0 ? 0 : (i % 5 == 0 ? size_t{40000} + i : size_t(i));
    storage.emplace_back(len, static_cast<char>('a' + i % 26));
  }
  std::vector<std::string_view> parts(storage.begin(), storage.end());
  std::string expected;
  for (const auto& p : storage) expected += p;
  std::string got;
  std::thread drain([&] {
    char buf[7000];
    while (got.size() < expected.size()) {
      auto n = reader.ReadSome(buf, sizeof buf, DeadlineAfter(10000ms));
      if (!n || *n == 0) break;
      got.append(buf, *n);
    }
  });
  auto s = writer.WriteAllGather(parts.data(), parts.size(), DeadlineAfter(10000ms));
  drain.join();
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected);
  EXPECT_TRUE(writer.WriteAllGather(parts.data(), 0, DeadlineAfter(1000ms)));
}

TEST(HttpClientTest, ResponseOverTheCapIsRefused) {
  auto server = HttpServer::Create(*Endpoint::Parse("127.0.0.1:0"), TestHandler);
  ASSERT_TRUE(server);
  (*server)->Start();
  ClientOptions opts;
  opts.max_response_bytes = 1 << 20;
  auto client = HttpClient::Create("http://127.0.0.1:" + std::to_string((*server)->port()), opts);
  ASSERT_TRUE(client);
  ClientRequest big;
  big.target = "/big";
  auto r = (*client)->Send(big);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kResourceExhausted) << r.error().message;
  ClientRequest small;
  small.method = "POST";
  small.target = "/echo";
  small.body = "hi";
  auto ok = (*client)->Send(small);
  ASSERT_TRUE(ok) << ok.error().ToString();
  EXPECT_EQ(ok->body, "POST hi");
}

TEST(ConnTest, UnixConnectRefusesASymlinkedSocketPath) {
  auto dir =
      std::filesystem::temp_directory_path() / ("deepbox-net-link-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto real = Endpoint::Parse("unix:" + (dir / "real.sock").string());
  auto l = Listener::Bind(*real);
  ASSERT_TRUE(l);
  std::filesystem::create_symlink(dir / "real.sock", dir / "link.sock");
  auto via_link = Conn::Connect(*Endpoint::Parse("unix:" + (dir / "link.sock").string()),
                                DeadlineAfter(1000ms));
  ASSERT_FALSE(via_link);
  EXPECT_EQ(via_link.error().code, ErrorCode::kPermissionDenied) << via_link.error().message;
  EXPECT_TRUE(Conn::Connect(*real, DeadlineAfter(1000ms)));
  std::ofstream(dir / "plain.file") << "x";
  EXPECT_FALSE(Conn::Connect(*Endpoint::Parse("unix:" + (dir / "plain.file").string()),
                             DeadlineAfter(1000ms)));
  l->Close();
  std::filesystem::remove_all(dir);
}

TEST(EndpointTest, FdEndpointsParseAndCannotBeDialed) {
  auto ep = Endpoint::Parse("fd:3");
  ASSERT_TRUE(ep);
  EXPECT_TRUE(ep->is_fd);
  EXPECT_EQ(ep->fd, 3);
  EXPECT_EQ(ep->ToString(), "fd:3");
  for (const char* bad : {"fd:", "fd:-1", "fd:3x", "fd:x", "fd:99999999999999"}) {
    EXPECT_FALSE(Endpoint::Parse(bad)) << bad;
  }
  auto dial = Conn::Connect(*ep, DeadlineAfter(100ms));
  ASSERT_FALSE(dial);
  EXPECT_EQ(dial.error().code, ErrorCode::kInvalidArgument);
}

// The sandbox's daemon serves on a listening socket the host created and passed
// to it: the server adopts it, and it must not leak into children.
TEST(HttpServerTest, ServesOnAnInheritedListeningFd) {
  auto dir =
      std::filesystem::temp_directory_path() / ("deepbox-net-fd-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = dir / "d.sock";
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);  // no CLOEXEC, as if inherited
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  auto server = HttpServer::Create(*Endpoint::Parse("fd:" + std::to_string(fd)), TestHandler);
  ASSERT_TRUE(server) << server.error().ToString();
  EXPECT_EQ(::fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  (*server)->Start();
  auto client = HttpClient::Create("unix:" + path.string());
  ASSERT_TRUE(client);
  ClientRequest req;
  req.method = "POST";
  req.target = "/echo";
  req.body = "hi";
  auto r = (*client)->Send(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->body, "POST hi");
  (*server)->Stop();
  server->reset();
  // The host owns the path: stopping the server does not unlink it.
  EXPECT_TRUE(std::filesystem::exists(path));
  std::filesystem::remove_all(dir);
}

TEST(HttpServerTest, RefusesAnFdThatIsNotAListeningSocket) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  auto server = HttpServer::Create(*Endpoint::Parse("fd:" + std::to_string(sv[0])), TestHandler);
  EXPECT_FALSE(server);
  ::close(sv[0]);
  ::close(sv[1]);
  auto closed = HttpServer::Create(*Endpoint::Parse("fd:987"), TestHandler);
  EXPECT_FALSE(closed);
}

TEST(HttpClientTest, CancelFdInterruptsASilentServer) {
  auto l = Listener::Bind(*Endpoint::Parse("127.0.0.1:0"));
  ASSERT_TRUE(l);
  auto client = HttpClient::Create("http://127.0.0.1:" + std::to_string(l->port()));
  UniqueFd cancel(::eventfd(0, EFD_CLOEXEC));
  std::thread canceller([&] {
    std::this_thread::sleep_for(200ms);
    uint64_t one = 1;
    (void)::write(cancel.get(), &one, sizeof one);
  });
  ClientRequest req;
  req.cancel_fd = cancel.get();
  auto r = (*client)->Send(req);
  canceller.join();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kCancelled) << r.error().ToString();
}

TEST(HttpClientTest, DroppedConnectionMidBodyIsAnError) {
  auto l = Listener::Bind(*Endpoint::Parse("127.0.0.1:0"));
  ASSERT_TRUE(l);
  std::thread srv([&] {
    auto fd = l->Accept(-1);
    Conn c(std::move(*fd));
    char buf[4096];
    (void)c.ReadSome(buf, sizeof buf, DeadlineAfter(5000ms));
    (void)c.WriteAll("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial",
                     DeadlineAfter(5000ms));
  });
  auto client = HttpClient::Create("http://127.0.0.1:" + std::to_string(l->port()));
  ClientRequest req;
  auto r = (*client)->Send(req);
  srv.join();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
}

// A server that reads a request on a kept-alive connection and dies before
// answering may have carried it out: a POST is not sent again (a sandbox's
// `exec` must never run twice), a GET is.
TEST(HttpClientTest, ARequestSentOnAKeptAliveConnectionIsRetriedOnlyWhenIdempotent) {
  auto l = Listener::Bind(*Endpoint::Parse("127.0.0.1:0"));
  ASSERT_TRUE(l);
  std::atomic<int> received{0};
  std::thread srv([&] {
    // Per connection: answer the warm-up, read the next request, vanish;
    // a new connection's request is answered.
    for (int conn = 0; conn < 3; ++conn) {
      auto fd = l->Accept(10000);
      if (!fd) return;
      Conn c(std::move(*fd));
      char buf[4096];
      auto n = c.ReadSome(buf, sizeof buf, DeadlineAfter(5000ms));
      if (!n || *n == 0) continue;
      std::string first(buf, *n);
      if (first.find("/warm") != std::string::npos) {
        (void)c.WriteAll("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", DeadlineAfter(5000ms));
        n = c.ReadSome(buf, sizeof buf, DeadlineAfter(5000ms));
        if (n && *n > 0) ++received;
        continue;  // closed without an answer
      }
      ++received;
      (void)c.WriteAll("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                       DeadlineAfter(5000ms));
    }
  });
  auto client = HttpClient::Create("http://127.0.0.1:" + std::to_string(l->port()));
  ASSERT_TRUE(client);
  ClientRequest warm;
  warm.target = "/warm";
  ASSERT_TRUE((*client)->Send(warm));
  ClientRequest post;
  post.method = "POST";
  post.target = "/exec";
  post.body = "{}";
  auto r = (*client)->Send(post);
  ASSERT_FALSE(r) << "a POST the server may have carried out was sent again";
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_FALSE(NothingSent(r.error()));
  EXPECT_EQ(received.load(), 1);
  ASSERT_TRUE((*client)->Send(warm));
  ClientRequest get;
  get.target = "/read";
  auto again = (*client)->Send(get);
  ASSERT_TRUE(again) << again.error().ToString();
  EXPECT_EQ(again->body, "ok");
  EXPECT_EQ(received.load(), 3);  // the GET that vanished, then its retry
  srv.join();
}

TEST(HttpTlsTest, MutualTlsRoundTripAndVerificationFailures) {
  auto pki = testing::GenerateTestPki();
  TlsServerConfig scfg{pki.server_cert_pem, pki.server_key_pem, pki.ca_cert_pem, true};
  ServerOptions opts;
  auto tls = TlsContext::ForServer(scfg);
  ASSERT_TRUE(tls) << tls.error().ToString();
  opts.tls = *tls;
  auto server = HttpServer::Create(*Endpoint::Parse("127.0.0.1:0"), TestHandler, opts);
  ASSERT_TRUE(server);
  (*server)->Start();
  std::string url = "https://localhost:" + std::to_string((*server)->port());

  ClientOptions good;
  good.tls.ca_pem = pki.ca_cert_pem;
  good.tls.client_cert_pem = pki.client_cert_pem;
  good.tls.client_key_pem = pki.client_key_pem;
  auto client = HttpClient::Create(url, good);
  ASSERT_TRUE(client);
  ClientRequest req;
  req.method = "POST";
  req.target = "/echo";
  req.body = "over tls";
  auto r = (*client)->Send(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->body, "POST over tls");
  ClientRequest stream_req;
  stream_req.target = "/stream";
  std::string got;
  auto s = (*client)->SendStreaming(
      stream_req, [](const Response&) { return true; },
      [&](std::string_view d) {
        got.append(d);
        return true;
      });
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_NE(got.find("{\"n\":4}"), std::string::npos);

  // By IP address: the certificate's IP SAN must verify.
  auto by_ip = HttpClient::Create("https://127.0.0.1:" + std::to_string((*server)->port()), good);
  EXPECT_TRUE((*by_ip)->Send(req));

  // Unknown CA: handshake fails with a clear message.
  ClientOptions no_ca = good;
  no_ca.tls.ca_pem = testing::GenerateTestPki().ca_cert_pem;
  auto bad = HttpClient::Create(url, no_ca);
  auto br = (*bad)->Send(req);
  ASSERT_FALSE(br);
  EXPECT_NE(br.error().message.find("TLS handshake"), std::string::npos) << br.error().message;

  // insecure_skip_verify accepts the unknown CA.
  ClientOptions insecure = no_ca;
  insecure.tls.insecure_skip_verify = true;
  auto ic = HttpClient::Create(url, insecure);
  EXPECT_TRUE((*ic)->Send(req));

  // No client certificate: the server refuses.
  ClientOptions no_cert;
  no_cert.tls.ca_pem = pki.ca_cert_pem;
  auto nc = HttpClient::Create(url, no_cert);
  EXPECT_FALSE((*nc)->Send(req));
}

}  // namespace
}  // namespace deepbox::net

// ------------------------------------------------------- streamed request bodies

namespace deepbox::net {
namespace {

// Deterministic bytes (all 256 values) for streamed bodies.
char PatternByte(uint64_t i) { return static_cast<char>((i * 131 + (i >> 11)) & 0xff); }

// A body source producing `total` pattern bytes in pieces.
std::function<Result<size_t>(char*, size_t)> PatternSource(uint64_t total) {
  auto pos = std::make_shared<uint64_t>(0);
  return [pos, total](char* buf, size_t size) -> Result<size_t> {
    size_t n = static_cast<size_t>(std::min<uint64_t>(size, total - *pos));
    for (size_t i = 0; i < n; ++i) buf[i] = PatternByte(*pos + i);
    *pos += n;
    return n;
  };
}

// /count streams the body and answers its size and whether every byte matched
// the pattern; /reject answers 507 without reading; /buffered is not streamed.
class StreamedBodyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions opts;
    opts.max_body_bytes = 1 << 20;
    opts.stream_request_body = [](const Request& head) { return head.path != "/buffered"; };
    auto server = HttpServer::Create(
        *Endpoint::Parse("127.0.0.1:0"),
        [](Request& req, ResponseWriter& w) {
          if (req.path == "/buffered") {
            (void)w.Send(Response::Text(200, std::to_string(req.body.size())));
            return;
          }
          if (req.path == "/reject") {
            (void)w.Send(Response::Json(507, R"({"error":{"code":"RESOURCE_EXHAUSTED"}})"));
            return;
          }
          // An empty body is complete with the head: nothing to stream.
          if (req.body_reader == nullptr) {
            (void)w.Send(Response::Text(200, std::to_string(req.body.size()) + " same"));
            return;
          }
          uint64_t total = 0;
          bool same = true;
          std::vector<char> buf(100000);  // not a power of two on purpose
          for (;;) {
            auto n = req.body_reader->Read(buf.data(), buf.size());
            if (!n) {
              (void)w.Send(Response::Text(400, "read error: " + n.error().message));
              return;
            }
            if (*n == 0) break;
            for (size_t i = 0; i < *n; ++i) same = same && buf[i] == PatternByte(total + i);
            total += *n;
          }
          (void)w.Send(Response::Text(200, std::to_string(total) + (same ? " same" : " differ")));
        },
        opts);
    ASSERT_TRUE(server) << server.error().ToString();
    server_ = std::move(*server);
    server_->Start();
    auto client = HttpClient::Create("http://127.0.0.1:" + std::to_string(server_->port()));
    ASSERT_TRUE(client);
    client_ = std::move(*client);
  }
  void TearDown() override { server_->Stop(); }

  Result<Response> Put(const std::string& path, uint64_t total, bool with_length) {
    ClientRequest req;
    req.method = "PUT";
    req.target = path;
    req.body_source = PatternSource(total);
    if (with_length) req.body_length = total;
    return client_->Send(req);
  }

  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<HttpClient> client_;
};

TEST_F(StreamedBodyTest, LargeBodiesStreamBothFramings) {
  constexpr uint64_t kTotal = (64u << 20) + 12345;  // far above max_body_bytes
  for (bool with_length : {true, false}) {
    auto r = Put("/count", kTotal, with_length);
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, std::to_string(kTotal) + " same") << "with_length=" << with_length;
  }
  auto empty = Put("/count", 0, true);
  ASSERT_TRUE(empty) << empty.error().ToString();
  EXPECT_EQ(empty->body, "0 same");
  // The connection after a streamed body still serves ordinary requests.
  ClientRequest get;
  get.target = "/buffered";
  auto ok = client_->Send(get);
  ASSERT_TRUE(ok) << ok.error().ToString();
  EXPECT_EQ(ok->body, "0");
}

// The daemon's 413 must reach the client, not a broken pipe.
TEST_F(StreamedBodyTest, EarlyAnswersReachTheSender) {
  for (bool with_length : {true, false}) {
    auto too_big = Put("/buffered", 32u << 20, with_length);
    ASSERT_TRUE(too_big) << too_big.error().ToString();
    EXPECT_EQ(too_big->status, 413) << "with_length=" << with_length;
    auto rejected = Put("/reject", 32u << 20, with_length);
    ASSERT_TRUE(rejected) << rejected.error().ToString();
    EXPECT_EQ(rejected->status, 507);
  }
  auto fits = Put("/buffered", 1000, true);
  ASSERT_TRUE(fits) << fits.error().ToString();
  EXPECT_EQ(fits->body, "1000");
}

TEST_F(StreamedBodyTest, ASourceThatLiesAboutItsLengthFailsClearly) {
  ClientRequest req;
  req.method = "PUT";
  req.target = "/count";
  req.body_source = PatternSource(100);
  req.body_length = 200;
  auto r = client_->Send(req);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("ended after 100 of its announced 200 bytes"), std::string::npos)
      << r.error().message;
  ClientRequest failing;
  failing.method = "PUT";
  failing.target = "/count";
  failing.body_source = [](char*, size_t) -> Result<size_t> {
    return MakeError(ErrorCode::kPermissionDenied, "read(src): EACCES");
  };
  auto f = client_->Send(failing);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, ErrorCode::kPermissionDenied);
}

TEST_F(StreamedBodyTest, MalformedChunkedBodyIsAReadErrorForTheHandler) {
  auto conn = Conn::Connect(*Endpoint::Parse("127.0.0.1:" + std::to_string(server_->port())),
                            DeadlineAfter(2000ms));
  ASSERT_TRUE(conn);
  ASSERT_TRUE(
      conn->WriteAll("PUT /count HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
                     DeadlineAfter(2000ms)));
  ASSERT_TRUE(conn->WriteAll("zz\r\nnot-hex\r\n", DeadlineAfter(2000ms)));
  std::string got;
  char buf[4096];
  for (;;) {
    auto n = conn->ReadSome(buf, sizeof buf, DeadlineAfter(5000ms));
    if (!n || *n == 0) break;
    got.append(buf, *n);
  }
  EXPECT_NE(got.find("400"), std::string::npos) << got;
  EXPECT_NE(got.find("read error"), std::string::npos) << got;
}

}  // namespace
}  // namespace deepbox::net

// ------------------------------------------------------- request limits

namespace deepbox::net {
namespace {

Conn Dial(int port) {
  auto c =
      Conn::Connect(*Endpoint::Parse("127.0.0.1:" + std::to_string(port)), DeadlineAfter(5000ms));
  EXPECT_TRUE(c) << c.error().ToString();
  return c ? std::move(*c) : Conn();
}

// Everything the server sends until it closes (or 30 s pass).
std::string ReadToClose(Conn& conn) {
  std::string out;
  char buf[4096];
  const Deadline until = DeadlineAfter(30000ms);
  for (;;) {
    auto n = conn.ReadSome(buf, sizeof buf, until);
    if (!n || *n == 0) break;
    out.append(buf, *n);
  }
  return out;
}

// One response with a Content-Length on a kept-alive connection.
std::string ReadOneResponse(Conn& conn) {
  std::string out;
  char buf[4096];
  const Deadline until = DeadlineAfter(30000ms);
  for (;;) {
    auto end = out.find("\r\n\r\n");
    if (end != std::string::npos) {
      auto cl = out.find("Content-Length: ");
      size_t length = cl == std::string::npos ? 0 : std::stoul(out.substr(cl + 16));
      if (out.size() >= end + 4 + length) return out;
    }
    auto n = conn.ReadSome(buf, sizeof buf, until);
    if (!n || *n == 0) return out;
    out.append(buf, *n);
  }
}

bool Readable(const Conn& conn) {
  pollfd p{conn.fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

// Polls `pred` (a state another thread reaches) for up to 30 s.
bool Eventually(const std::function<bool()>& pred) {
  for (int i = 0; i < 3000 && !pred(); ++i) std::this_thread::sleep_for(10ms);
  return pred();
}

std::string PostHead(const std::string& path, size_t length, const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(length) +
         "\r\n" + extra + "\r\n";
}

// /size answers the size of the buffered body.
std::unique_ptr<HttpServer> SizeServer(ServerOptions opts, std::atomic<int>* handled = nullptr) {
  auto server = HttpServer::Create(
      *Endpoint::Parse("127.0.0.1:0"),
      [handled](Request& req, ResponseWriter& w) {
        if (handled) ++*handled;
        (void)w.Send(Response::Text(200, std::to_string(req.body.size())));
      },
      std::move(opts));
  EXPECT_TRUE(server) << server.error().ToString();
  if (!server) return nullptr;
  (*server)->Start();
  return std::move(*server);
}

TEST(HttpLimitsTest, AuthorizeHeadAnswersBeforeABodyByteIsRead) {
  ServerOptions opts;
  opts.max_body_bytes = 128u << 20;
  opts.authorize_head = [](const Request& head) -> std::optional<Response> {
    if (head.Header("X-Key") == std::optional<std::string>("k")) return std::nullopt;
    return Response::Text(401, "no key\n");
  };
  std::atomic<int> handled{0};
  auto server = SizeServer(opts, &handled);
  ASSERT_TRUE(server);

  // 64 MiB announced, 1 MiB sent: the answer comes without the rest.
  Conn c = Dial(server->port());
  ASSERT_TRUE(c.WriteAll(PostHead("/size", 64u << 20), DeadlineAfter(5000ms)));
  ASSERT_TRUE(c.WriteAll(std::string(1u << 20, 'b'), DeadlineAfter(30000ms)));
  c.ShutdownWrite();
  std::string got = ReadToClose(c);
  EXPECT_TRUE(got.starts_with("HTTP/1.1 401 ")) << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
  EXPECT_NE(got.find("no key"), std::string::npos) << got;
  EXPECT_EQ(handled.load(), 0);
  EXPECT_EQ(server->buffered_body_bytes(), 0u);

  // With Expect: 100-continue the refusal replaces the 100.
  Conn e = Dial(server->port());
  ASSERT_TRUE(
      e.WriteAll(PostHead("/size", 64u << 20, "Expect: 100-continue\r\n"), DeadlineAfter(5000ms)));
  got = ReadToClose(e);
  EXPECT_TRUE(got.starts_with("HTTP/1.1 401 ")) << got;
  EXPECT_EQ(got.find("100 Continue"), std::string::npos) << got;

  // Authorized: read and handled as before.
  auto client = HttpClient::Create("http://127.0.0.1:" + std::to_string(server->port()));
  ASSERT_TRUE(client);
  ClientRequest req;
  req.method = "POST";
  req.target = "/size";
  req.headers.Set("X-Key", "k");
  req.body = std::string(3u << 20, 'q');
  auto r = (*client)->Send(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, std::to_string(3u << 20));
  EXPECT_EQ(handled.load(), 1);
}

TEST(HttpLimitsTest, BufferedBodiesShareOneServerWideBudget) {
  ServerOptions opts;
  opts.max_body_bytes = 4u << 20;
  opts.max_buffered_body_bytes = 1u << 20;
  auto server = SizeServer(opts);
  ASSERT_TRUE(server);
  constexpr size_t kBody = 768u << 10;
  constexpr size_t kFirst = 700u << 10;

  // A holds 700 KiB of its body in the server.
  Conn a = Dial(server->port());
  ASSERT_TRUE(a.WriteAll(PostHead("/size", kBody, "Connection: close\r\n"), DeadlineAfter(5000ms)));
  ASSERT_TRUE(a.WriteAll(std::string(kFirst, 'a'), DeadlineAfter(5000ms)));
  ASSERT_TRUE(Eventually([&] { return server->buffered_body_bytes() == kFirst; }))
      << server->buffered_body_bytes();

  // B would take the budget over 1 MiB: 503 and closed.
  Conn b = Dial(server->port());
  ASSERT_TRUE(b.WriteAll(PostHead("/size", kBody), DeadlineAfter(5000ms)));
  (void)b.WriteAll(std::string(kBody, 'b'), DeadlineAfter(5000ms));
  b.ShutdownWrite();
  std::string got = ReadToClose(b);
  EXPECT_TRUE(got.starts_with("HTTP/1.1 503 ")) << got;
  EXPECT_NE(got.find("as many request bodies as it may (1048576 bytes in all)"), std::string::npos)
      << got;
  // B's share is given back as its connection ends.
  EXPECT_TRUE(Eventually([&] { return server->buffered_body_bytes() == kFirst; }))
      << server->buffered_body_bytes();

  // A completes; its bytes are given back after its handler.
  ASSERT_TRUE(a.WriteAll(std::string(kBody - kFirst, 'a'), DeadlineAfter(5000ms)));
  got = ReadToClose(a);
  EXPECT_TRUE(got.starts_with("HTTP/1.1 200 ")) << got;
  EXPECT_TRUE(got.ends_with("\r\n\r\n" + std::to_string(kBody))) << got;
  EXPECT_TRUE(Eventually([&] { return server->buffered_body_bytes() == 0; }))
      << server->buffered_body_bytes();

  // A body that fits in the whole budget is served.
  auto client = HttpClient::Create("http://127.0.0.1:" + std::to_string(server->port()));
  ASSERT_TRUE(client);
  ClientRequest req;
  req.method = "POST";
  req.target = "/size";
  req.body = std::string(900u << 10, 'c');
  auto r = (*client)->Send(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, std::to_string(900u << 10));
}

TEST(HttpLimitsTest, ConnectionsPerPeerAreCapped) {
  ServerOptions opts;
  opts.max_connections_per_peer = 2;
  auto server = SizeServer(opts);
  ASSERT_TRUE(server);
  const std::string get = "GET /size HTTP/1.1\r\nHost: x\r\n\r\n";
  std::vector<Conn> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(Dial(server->port()));
    ASSERT_TRUE(held.back().WriteAll(get, DeadlineAfter(5000ms)));
    std::string got = ReadOneResponse(held.back());
    EXPECT_TRUE(got.starts_with("HTTP/1.1 200 ")) << got;
  }
  Conn third = Dial(server->port());
  std::string got = ReadToClose(third);
  EXPECT_TRUE(got.starts_with("HTTP/1.1 503 ")) << got;
  EXPECT_NE(got.find("too many connections from 127.0.0.1 (at most 2 at once)"), std::string::npos)
      << got;
  // One goes: a new one is served.
  held.pop_back();
  ASSERT_TRUE(Eventually([&] { return server->active_connections() == 1; }));
  Conn again = Dial(server->port());
  ASSERT_TRUE(again.WriteAll(get, DeadlineAfter(5000ms)));
  got = ReadOneResponse(again);
  EXPECT_TRUE(got.starts_with("HTTP/1.1 200 ")) << got;
}

// A client that sent much of a body fast must not bank the credit of it
// (received / min_rate: 1024 s here) and then hold its buffer with a drip.
TEST(HttpLimitsTest, ADripAfterAFastStartIsCut) {
  ServerOptions opts;
  opts.max_body_bytes = 8u << 20;
  opts.body_timeout = 2000ms;
  opts.body_min_rate = 1024;
  auto server = SizeServer(opts);
  ASSERT_TRUE(server);
  Conn c = Dial(server->port());
  ASSERT_TRUE(c.WriteAll(PostHead("/size", 4u << 20), DeadlineAfter(5000ms)));
  ASSERT_TRUE(c.WriteAll(std::string(1u << 20, 'f'), DeadlineAfter(5000ms)));
  // A byte every 500 ms (2 B/s), for at most a minute.
  int drips = 0;
  for (; drips < 120 && !Readable(c); ++drips) {
    std::this_thread::sleep_for(500ms);
    (void)c.WriteAll("d", DeadlineAfter(5000ms));
  }
  std::string got = ReadToClose(c);
  EXPECT_TRUE(got.starts_with("HTTP/1.1 408 ")) << "after " << drips << " drips: " << got;
  EXPECT_LT(drips, 120);
}

TEST(HttpLimitsTest, ABufferedBodyMeetsItsWholeDeadline) {
  ServerOptions opts;
  opts.max_body_bytes = 8u << 20;
  opts.buffered_body_deadline = 1000ms;
  auto server = SizeServer(opts);
  ASSERT_TRUE(server);
  Conn c = Dial(server->port());
  ASSERT_TRUE(c.WriteAll(PostHead("/size", 4u << 20), DeadlineAfter(5000ms)));
  // 20 KiB/s, well above the minimum rate, for at most 30 s.
  int steps = 0;
  for (; steps < 300 && !Readable(c); ++steps) {
    std::this_thread::sleep_for(100ms);
    (void)c.WriteAll(std::string(2048, 's'), DeadlineAfter(5000ms));
  }
  std::string got = ReadToClose(c);
  EXPECT_TRUE(got.starts_with("HTTP/1.1 408 ")) << "after " << steps << " steps: " << got;
  EXPECT_LT(steps, 300);
}

}  // namespace
}  // namespace deepbox::net
