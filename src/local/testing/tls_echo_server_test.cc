// The HTTPS echo server against real clients: curl (HTTP/1.1 and h2 over
// ALPN) and a raw OpenSSL client, with a CA and leaf for "echo.test" made
// here. Tests that need curl skip without it.
#include "local/testing/tls_echo_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "common/testing/temp_dir.h"
#include "local/testing/test_pki.h"

namespace deepbox::local::testing {
namespace {

using std::chrono::steady_clock;

// ---- a CA and a leaf for echo.test (EC P-256): testing/test_pki.h ----

using Pki = TestPki;
Pki MakePki() { return MakeTestPki("echo.test"); }

// ---- sockets, files ----

UniqueFd Listen() {
  UniqueFd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (!s || bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      listen(s.get(), 64) != 0) {
    return {};
  }
  return s;
}

int PortOf(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

UniqueFd ConnectTcp(int port) {
  UniqueFd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (!s || connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return {};
  timeval tv{10, 0};  // a hung server fails the test, not the run
  setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(s.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return s;
}

std::string FindInPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

std::string ReadFileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFileText(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
}

// Whether `data` is exactly `size` bytes of the /bytes pattern.
::testing::AssertionResult IsPattern(const std::string& data, size_t size) {
  if (data.size() != size) {
    return ::testing::AssertionFailure() << data.size() << " bytes, not " << size;
  }
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] != static_cast<char>('a' + i % 26)) {
      return ::testing::AssertionFailure() << "byte " << i << " is '" << data[i] << "'";
    }
  }
  return ::testing::AssertionSuccess();
}

// The echo texts in curl's output (one after the other), by "protocol " lines.
std::vector<std::string> SplitEchoes(const std::string& out) {
  std::vector<std::string> echoes;
  for (size_t at = 0; at < out.size();) {
    size_t next = out.find("\nprotocol ", at);
    next = next == std::string::npos ? out.size() : next + 1;
    echoes.push_back(out.substr(at, next - at));
    at = next;
  }
  return echoes;
}

// ---- a raw TLS client (blocking, 10 s timeouts) ----

class RawTlsClient {
 public:
  // alpn: wire format ("\x02h2"), or "" for no ALPN at all.
  RawTlsClient(int port, const std::string& ca_pem, const std::string& alpn) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    BIO* bio = BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size()));
    X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx_), ca);
    X509_free(ca);
    BIO_free(bio);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    fd_ = ConnectTcp(port);
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_.get());
    SSL_set_tlsext_host_name(ssl_, "echo.test");
    SSL_set1_host(ssl_, "echo.test");
    if (!alpn.empty()) {
      SSL_set_alpn_protos(ssl_, reinterpret_cast<const unsigned char*>(alpn.data()),
                          static_cast<unsigned>(alpn.size()));
    }
    connected_ = fd_.valid() && SSL_connect(ssl_) == 1;
    ERR_clear_error();
  }
  ~RawTlsClient() {
    SSL_free(ssl_);
    SSL_CTX_free(ctx_);
  }
  bool connected() const { return connected_; }
  std::string alpn() const {
    const unsigned char* p = nullptr;
    unsigned int len = 0;
    SSL_get0_alpn_selected(ssl_, &p, &len);
    return std::string(reinterpret_cast<const char*>(p), len);
  }
  bool Write(const std::string& data) {
    size_t n = 0;
    return SSL_write_ex(ssl_, data.data(), data.size(), &n) == 1 && n == data.size();
  }
  // Everything until the server ends the connection; *closed = false when a
  // read timed out instead.
  std::string ReadToEnd(bool* closed) {
    std::string out;
    char buf[16384];
    for (;;) {
      size_t n = 0;
      if (SSL_read_ex(ssl_, buf, sizeof(buf), &n) == 1) {
        out.append(buf, n);
        continue;
      }
      int err = SSL_get_error(ssl_, 0);
      *closed = !(err == SSL_ERROR_WANT_READ || errno == EAGAIN || errno == EWOULDBLOCK);
      ERR_clear_error();
      return out;
    }
  }

 private:
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  UniqueFd fd_;
  bool connected_ = false;
};

// ---- the fixture ----

class TlsEchoServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pki_ = MakePki();
    ca_path_ = dir_.Path("ca.pem");
    WriteFileText(ca_path_, pki_.ca_pem);
    curl_ = FindInPath("curl");
    // A write to a connection the server has ended fails (EPIPE), not the test.
    signal(SIGPIPE, SIG_IGN);
  }

  void StartServer(bool offer_h2 = true) {
    UniqueFd listener = Listen();
    ASSERT_TRUE(listener.valid());
    auto server =
        TlsEchoServer::Start(std::move(listener), {pki_.chain_pem, pki_.key_pem, offer_h2});
    ASSERT_TRUE(server) << server.error().ToString();
    server_ = std::move(*server);
    port_ = server_->port();
    ASSERT_GT(port_, 0);
  }

  std::string Url(const std::string& path) const {
    return "https://echo.test:" + std::to_string(port_) + path;
  }

  // curl's stdout, with the test CA and echo.test resolved to 127.0.0.1;
  // a failed run fails the test.
  std::string Curl(const std::vector<std::string>& args) {
    SubprocessOptions options;
    options.argv = {
        curl_,      "-sS",    "--max-time", "60",
        "--cacert", ca_path_, "--resolve",  "echo.test:" + std::to_string(port_) + ":127.0.0.1"};
    options.argv.insert(options.argv.end(), args.begin(), args.end());
    options.capture_stdout = true;
    options.capture_stderr = true;
    auto run = RunCommand(options, std::chrono::seconds(90));
    EXPECT_TRUE(run) << run.error().ToString();
    if (!run) return {};
    EXPECT_TRUE(run->exited_ok()) << "curl " << DescribeWaitStatus(run->wait_status) << ": "
                                  << run->err;
    return run->out;
  }

  // One GET over the raw client (no ALPN): the server still answers.
  void ExpectServing() {
    RawTlsClient client(port_, pki_.ca_pem, "");
    ASSERT_TRUE(client.connected());
    ASSERT_TRUE(
        client.Write("GET /alive HTTP/1.1\r\nHost: echo.test\r\nConnection: close\r\n\r\n"));
    bool closed = false;
    std::string out = client.ReadToEnd(&closed);
    EXPECT_TRUE(closed);
    EXPECT_NE(out.find("\r\n\r\nprotocol http/1.1 request 1\nmethod GET\npath /alive\n"),
              std::string::npos)
        << out;
    if (!curl_.empty()) {
      EXPECT_NE(Curl({"--http2", Url("/after")}).find("protocol h2 request 1\n"),
                std::string::npos);
    }
  }

  deepbox::testing::TempDir dir_{"tls-echo-test"};
  Pki pki_;
  std::string ca_path_;
  std::string curl_;
  std::unique_ptr<TlsEchoServer> server_;
  int port_ = 0;
};

#define NEED_CURL()                                                                    \
  if (curl_.empty()) {                                                                 \
    GTEST_SKIP() << "curl is not in PATH (scripts/install-deps.sh installs it): "      \
                    "these tests drive the server with a real HTTP/1.1 and h2 client"; \
  }

TEST_F(TlsEchoServerTest, Http11KeepAliveServesBothUrlsOnOneConnection) {
  NEED_CURL();
  StartServer();
  std::string out = Curl({"--http1.1", Url("/first"), Url("/second?x=1")});
  auto echoes = SplitEchoes(out);
  ASSERT_EQ(echoes.size(), 2u) << out;
  const std::string host = "header host: echo.test:" + std::to_string(port_) + "\n";
  EXPECT_EQ(echoes[0].rfind(
                "protocol http/1.1 request 1\nmethod GET\npath /first\nbody-bytes 0\n" + host, 0),
            0u)
      << echoes[0];
  EXPECT_EQ(echoes[1].rfind("protocol http/1.1 request 2\nmethod GET\npath /second?x=1\n"
                            "body-bytes 0\n" +
                                host,
                            0),
            0u)
      << echoes[1];
  EXPECT_NE(echoes[1].find("header user-agent: curl/"), std::string::npos);
}

TEST_F(TlsEchoServerTest, Http2ServesBothUrlsOnOneConnection) {
  NEED_CURL();
  StartServer();
  std::string out = Curl({"--http2", Url("/first"), Url("/second")});
  auto echoes = SplitEchoes(out);
  ASSERT_EQ(echoes.size(), 2u) << out;
  const std::string prefix = "protocol h2 request 1\nmethod GET\npath /first\nbody-bytes 0\n";
  ASSERT_EQ(echoes[0].rfind(prefix, 0), 0u) << echoes[0];
  // The four pseudo-headers first (in the client's order), then the others.
  std::vector<std::string> lines;
  std::stringstream rest(echoes[0].substr(prefix.size()));
  for (std::string line; std::getline(rest, line);) lines.push_back(line);
  ASSERT_GT(lines.size(), 4u) << echoes[0];
  std::set<std::string> pseudo(lines.begin(), lines.begin() + 4);
  EXPECT_EQ(pseudo, (std::set<std::string>{
                        "header :method: GET", "header :path: /first", "header :scheme: https",
                        "header :authority: echo.test:" + std::to_string(port_)}))
      << echoes[0];
  EXPECT_EQ(lines[4].rfind("header ", 0), 0u);
  EXPECT_NE(lines[4].rfind("header :", 0), 0u);
  EXPECT_EQ(echoes[1].rfind("protocol h2 request 2\nmethod GET\npath /second\n", 0), 0u)
      << echoes[1];
}

TEST_F(TlsEchoServerTest, Http2StreamsInParallelShareTheConnection) {
  NEED_CURL();
  StartServer();
  std::vector<std::string> args = {"--http2", "--parallel", "--parallel-max", "3"};
  for (int i = 0; i < 3; ++i) {
    args.insert(args.end(), {"-o", dir_.Path("p" + std::to_string(i)),
                             Url("/bytes/300000?" + std::to_string(i))});
  }
  args.insert(args.end(), {"-o", dir_.Path("echo"), Url("/echo")});
  Curl(args);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(IsPattern(ReadFileText(dir_.Path("p" + std::to_string(i))), 300000));
  }
  // One connection: the echo's request number counts the other three.
  std::string echo = ReadFileText(dir_.Path("echo"));
  EXPECT_EQ(echo.rfind("protocol h2 request ", 0), 0u) << echo;
  EXPECT_NE(echo.find("protocol h2 request 4\n"), std::string::npos) << echo;
}

TEST_F(TlsEchoServerTest, HeadersAndPostBodiesAreEchoed) {
  NEED_CURL();
  StartServer();
  for (const std::string protocol : {"--http1.1", "--http2"}) {
    SCOPED_TRACE(protocol);
    std::string out = Curl({protocol, "-H", "Authorization: Bearer x", "-H", "X-Two: a, b",
                            "--data-binary", "hello=world", Url("/post")});
    EXPECT_NE(out.find("\nmethod POST\npath /post\nbody-bytes 11\n"), std::string::npos) << out;
    EXPECT_NE(out.find("\nheader authorization: Bearer x\nheader x-two: a, b\n"), std::string::npos)
        << out;
    EXPECT_NE(out.find("\nheader content-length: 11\n"), std::string::npos) << out;
  }
}

TEST_F(TlsEchoServerTest, LargeAndChunkedUploadsAreCounted) {
  NEED_CURL();
  StartServer();
  // 3 MiB: more than h2's windows (flow control), and curl's Expect: 100-continue on h1.
  const std::string big = dir_.Path("big");
  WriteFileText(big, std::string(3 << 20, 'u'));
  for (const std::string protocol : {"--http1.1", "--http2"}) {
    SCOPED_TRACE(protocol);
    std::string out = Curl({protocol, "--data-binary", "@" + big, Url("/up")});
    EXPECT_NE(out.find("\nbody-bytes 3145728\n"), std::string::npos) << out;
  }
  std::string out = Curl({"--http1.1", "-H", "Transfer-Encoding: chunked", "--data-binary",
                          "@" + big, Url("/chunked")});
  EXPECT_NE(out.find("\nbody-bytes 3145728\n"), std::string::npos) << out;
  EXPECT_NE(out.find("\nheader transfer-encoding: chunked\n"), std::string::npos) << out;
}

TEST_F(TlsEchoServerTest, BytesPathAnswersExactlyThatManyBytes) {
  NEED_CURL();
  StartServer();
  for (const std::string protocol : {"--http1.1", "--http2"}) {
    SCOPED_TRACE(protocol);
    const std::string file = dir_.Path("mib" + protocol);
    std::string headers =
        Curl({protocol, "-D", "-", "-o", file, Url("/bytes/1048576"), Url("/bytes/0")});
    for (char& c : headers) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_TRUE(IsPattern(ReadFileText(file), 1048576));
    EXPECT_NE(headers.find("content-type: application/octet-stream"), std::string::npos) << headers;
  }
}

TEST_F(TlsEchoServerTest, WithoutOfferH2ClientsGetHttp11) {
  NEED_CURL();
  StartServer(/*offer_h2=*/false);
  std::string out = Curl({"--http2", Url("/a"), Url("/b")});
  auto echoes = SplitEchoes(out);
  ASSERT_EQ(echoes.size(), 2u) << out;
  EXPECT_EQ(echoes[1].rfind("protocol http/1.1 request 2\n", 0), 0u) << out;
}

TEST_F(TlsEchoServerTest, RawClientSeesTheExactEchoAndConnectionClose) {
  StartServer();
  RawTlsClient client(port_, pki_.ca_pem, "");
  ASSERT_TRUE(client.connected());
  EXPECT_EQ(client.alpn(), "");
  // Pipelined: the second request says close, so a third is never answered.
  ASSERT_TRUE(
      client.Write("GET /exact?q=1 HTTP/1.1\r\nHost: echo.test\r\nX-Empty:\r\n"
                   "X-Spaces:   padded value \t\r\n\r\n"
                   "POST /two HTTP/1.1\r\nHost: echo.test\r\nTransfer-Encoding: chunked\r\n"
                   "Connection: close\r\n\r\n"
                   "5;ext=1\r\nhello\r\n3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n"
                   "GET /three HTTP/1.1\r\nHost: echo.test\r\n\r\n"));
  bool closed = false;
  std::string out = client.ReadToEnd(&closed);
  EXPECT_TRUE(closed);
  const std::string first =
      "protocol http/1.1 request 1\nmethod GET\npath /exact?q=1\nbody-bytes 0\n"
      "header host: echo.test\nheader x-empty: \nheader x-spaces: padded value\n";
  const std::string second =
      "protocol http/1.1 request 2\nmethod POST\npath /two\nbody-bytes 8\n"
      "header host: echo.test\nheader transfer-encoding: chunked\nheader connection: close\n"
      "trailer x-trailer: t\n";
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
                     std::to_string(first.size()) + "\r\n\r\n" + first +
                     "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
                     std::to_string(second.size()) + "\r\nConnection: close\r\n\r\n" + second);
}

TEST_F(TlsEchoServerTest, Http10ClosesAndHeadHasNoBody) {
  StartServer();
  RawTlsClient client(port_, pki_.ca_pem, std::string("\x08http/1.1", 9));
  ASSERT_TRUE(client.connected());
  EXPECT_EQ(client.alpn(), "http/1.1");
  ASSERT_TRUE(client.Write("HEAD /h HTTP/1.0\r\n\r\nGET /never HTTP/1.0\r\n\r\n"));
  bool closed = false;
  std::string out = client.ReadToEnd(&closed);
  EXPECT_TRUE(closed);
  const std::string body = "protocol http/1.1 request 1\nmethod HEAD\npath /h\nbody-bytes 0\n";
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n");
}

TEST_F(TlsEchoServerTest, GarbageAfterTheHandshakeEndsOnlyThatConnection) {
  StartServer();
  for (const std::string& alpn : {std::string(), std::string("\x02h2", 3)}) {
    SCOPED_TRACE(alpn.empty() ? "no ALPN" : "h2");
    RawTlsClient client(port_, pki_.ca_pem, alpn);
    ASSERT_TRUE(client.connected());
    EXPECT_EQ(client.alpn(), alpn.empty() ? "" : "h2");
    // (It may fail part way: the server ends the connection as soon as it sees garbage.)
    (void)client.Write(std::string("\x00\x01\xff garbage \x7f\r\n\r\n", 17) +
                       std::string(20000, '\xee'));
    bool closed = false;
    auto start = steady_clock::now();
    std::string out = client.ReadToEnd(&closed);
    EXPECT_TRUE(closed) << "the server did not end the connection";
    EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(5));
    if (alpn.empty()) {
      EXPECT_EQ(out.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u) << out;
    }
  }
  // A malformed head and an oversized one (no ALPN: HTTP/1.1).
  for (const std::string& request :
       {std::string("GET /x HTTP/1.1\r\nBad Header\r\n\r\n"),
        std::string("GET /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"),
        std::string("GET /x HTTP/1.1\r\n X-Fold: y\r\n\r\n"),
        "GET /x HTTP/1.1\r\nX-Big: " + std::string(70000, 'b') + "\r\n\r\n"}) {
    RawTlsClient client(port_, pki_.ca_pem, "");
    ASSERT_TRUE(client.connected());
    ASSERT_TRUE(client.Write(request));
    bool closed = false;
    std::string out = client.ReadToEnd(&closed);
    EXPECT_TRUE(closed);
    EXPECT_EQ(out.rfind("HTTP/1.1 4", 0), 0u) << out;
  }
  ExpectServing();
}

TEST_F(TlsEchoServerTest, PlainTcpJunkAndSilentClientsEndOnlyTheirConnection) {
  StartServer();
  {
    UniqueFd junk = ConnectTcp(port_);
    ASSERT_TRUE(junk.valid());
    std::string data = "GET / HTTP/1.1\r\nHost: echo.test\r\n\r\n" + std::string(5000, '\x16');
    ASSERT_EQ(send(junk.get(), data.data(), data.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(data.size()));
    char buf[4096];
    ssize_t n;
    while ((n = recv(junk.get(), buf, sizeof(buf), 0)) > 0) {
    }
    EXPECT_TRUE(n == 0 || errno == ECONNRESET) << "the server did not close: " << errno;
  }
  UniqueFd idle = ConnectTcp(port_);  // connects and says nothing, for now
  UniqueFd gone = ConnectTcp(port_);  // connects and leaves
  gone.reset();
  ExpectServing();
}

TEST_F(TlsEchoServerTest, StoppingEndsOpenConnectionsPromptly) {
  StartServer();
  UniqueFd idle = ConnectTcp(port_);
  RawTlsClient mid_request(port_, pki_.ca_pem, "");
  ASSERT_TRUE(mid_request.connected());
  ASSERT_TRUE(mid_request.Write("POST /x HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc"));
  auto start = steady_clock::now();
  server_.reset();
  EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(3));
}

TEST_F(TlsEchoServerTest, StartRefusesAKeyThatIsNotTheLeafs) {
  UniqueFd listener = Listen();
  Pki other = MakePki();
  auto server = TlsEchoServer::Start(std::move(listener), {pki_.chain_pem, other.key_pem});
  ASSERT_FALSE(server);
  EXPECT_NE(server.error().message.find("does not match"), std::string::npos)
      << server.error().ToString();
  EXPECT_FALSE(TlsEchoServer::Start(Listen(), {"junk", pki_.key_pem}));
  EXPECT_FALSE(TlsEchoServer::Start(UniqueFd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)),
                                    {pki_.chain_pem, pki_.key_pem}));
}

// ServeTlsEcho as a WorldServer runs it: in a forked process, forking per
// connection (this process is single-threaded here: every earlier test's
// server threads have been joined).
TEST_F(TlsEchoServerTest, ForkedServeTlsEchoServesCurl) {
  NEED_CURL();
  UniqueFd listener = Listen();
  ASSERT_TRUE(listener.valid());
  port_ = PortOf(listener.get());
  const TlsEchoConfig config{pki_.chain_pem, pki_.key_pem};
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) _exit(1);  // not past a crashed test
    ServeTlsEcho(listener.get(), config);
  }
  listener.reset();
  std::string h1 = Curl({"--http1.1", Url("/one"), Url("/two")});
  std::string h2 = Curl({"--http2", "-H", "Authorization: Bearer x", Url("/one"), Url("/two")});
  {
    RawTlsClient garbage(port_, pki_.ca_pem, "");
    ASSERT_TRUE(garbage.connected());
    ASSERT_TRUE(garbage.Write("\x01\x02\x03\r\n\r\n"));
    bool closed = false;
    garbage.ReadToEnd(&closed);
    EXPECT_TRUE(closed);
  }
  std::string after = Curl({Url("/after")});
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << DescribeWaitStatus(status);

  EXPECT_NE(h1.find("protocol http/1.1 request 2\nmethod GET\npath /two\n"), std::string::npos)
      << h1;
  EXPECT_NE(h2.find("protocol h2 request 2\nmethod GET\npath /two\n"), std::string::npos) << h2;
  EXPECT_NE(h2.find("\nheader authorization: Bearer x\n"), std::string::npos) << h2;
  EXPECT_NE(after.find("protocol h2 request 1\n"), std::string::npos) << after;
}

}  // namespace
}  // namespace deepbox::local::testing
