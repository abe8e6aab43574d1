// The allowlist proxy: unit checks (SNI parsing, hostile ClientHellos) and a
// real sandbox in allow mode whose proxy reaches only the test's own world.
#include "local/egress_proxy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "local/address_policy.h"
#include "local/launcher.h"
#include "local/testing/sandbox_fixture.h"
#include "local/testing/test_world.h"

namespace deepbox::local {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::TestWorld;

// A minimal TLS 1.2 ClientHello record, with an SNI extension when sni != ""
// and an ALPN extension when `alpn` (wire format: length-prefixed names) is.
std::string ClientHello(const std::string& sni, const std::string& alpn = "") {
  std::string ext;
  if (!sni.empty()) {
    std::string list = std::string(1, '\0') + char(sni.size() >> 8) + char(sni.size() & 255) + sni;
    std::string body = std::string() + char(list.size() >> 8) + char(list.size() & 255) + list;
    ext = std::string("\0\0", 2) + char(body.size() >> 8) + char(body.size() & 255) + body;
  }
  if (!alpn.empty()) {
    std::string body = std::string() + char(alpn.size() >> 8) + char(alpn.size() & 255) + alpn;
    ext += std::string("\0\x10", 2) + char(body.size() >> 8) + char(body.size() & 255) + body;
  }
  std::string hello = std::string("\x03\x03", 2) + std::string(32, 'r') + std::string(1, '\0') +
                      std::string("\x00\x02\x13\x01", 4) + std::string("\x01\x00", 2) +
                      char(ext.size() >> 8) + char(ext.size() & 255) + ext;
  std::string hs =
      std::string(1, '\x01') + '\0' + char(hello.size() >> 8) + char(hello.size() & 255) + hello;
  return std::string("\x16\x03\x01", 3) + char(hs.size() >> 8) + char(hs.size() & 255) + hs;
}

TEST(EgressProxyTest, ParsesSni) {
  auto r = ParseTlsSni(ClientHello("Allowed.Test"));
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(*r, "allowed.test");
  r = ParseTlsSni(ClientHello(""));
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(*r, "");
}

TEST(EgressProxyTest, ParsesAlpn) {
  auto r = ParseTlsClientHello(ClientHello("a.test", std::string("\x02h2\x08http/1.1", 12)));
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->sni, "a.test");
  EXPECT_EQ(r->alpn, (std::vector<std::string>{"h2", "http/1.1"}));
  r = ParseTlsClientHello(ClientHello("a.test"));
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->alpn.empty());
  // An empty protocol name, or one running past its list: refused.
  EXPECT_FALSE(ParseTlsClientHello(ClientHello("a.test", std::string("\x00", 1))));
  EXPECT_FALSE(ParseTlsClientHello(ClientHello("a.test", std::string("\x09h2", 3))));
  std::string good = ClientHello("a.test", std::string("\x02h2", 3));
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(ParseTlsClientHello(good.substr(0, n)).has_value()) << n;
  }
}

TEST(EgressProxyTest, HostileClientHellos) {
  std::string good = ClientHello("allowed.test");
  // Every truncation is an error, never a crash or a partial name.
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(ParseTlsSni(good.substr(0, n)).has_value()) << n;
  }
  std::string bad = good;
  bad[0] = 0x17;  // application data
  EXPECT_FALSE(ParseTlsSni(bad).has_value());
  bad = good;
  bad[5] = 2;  // ServerHello
  EXPECT_FALSE(ParseTlsSni(bad).has_value());
  bad = good;
  bad[bad.size() - 14] = '\x7f';  // the name's length points past the end
  EXPECT_FALSE(ParseTlsSni(bad).has_value());
  EXPECT_FALSE(ParseTlsSni(std::string("\x16\x03\x01\xff\xff", 5) + std::string(100, 'x')));
}

TEST(EgressProxyTest, EnvPointsAtTheListener) {
  auto env = EgressProxyEnv();
  EXPECT_THAT(env, ::testing::Contains("HTTPS_PROXY=http://127.0.0.1:3128"));
  EXPECT_THAT(env, ::testing::Contains("http_proxy=http://127.0.0.1:3128"));
}

// Inside the sandbox: one line per attempt, "name OK|BLOCKED|REFUSED detail".
constexpr char kChecks[] = R"PY(
import os, socket, sys
P = ("127.0.0.1", 3128)
hello = bytes.fromhex(sys.argv[1]) if len(sys.argv) > 1 else b""
def hello_for(sni):
    name = sni.encode()
    lst = b"\x00" + len(name).to_bytes(2, "big") + name
    body = len(lst).to_bytes(2, "big") + lst
    ext = b"\x00\x00" + len(body).to_bytes(2, "big") + body if sni else b""
    h = b"\x03\x03" + b"r" * 32 + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00" + len(ext).to_bytes(2, "big") + ext
    hs = b"\x01\x00" + len(h).to_bytes(2, "big") + h
    return b"\x16\x03\x01" + len(hs).to_bytes(2, "big") + hs
def talk(name, request, after=b""):
    try:
        s = socket.create_connection(P, timeout=5)
        s.settimeout(5)
        s.sendall(request)
        got = b""
        while b"\r\n\r\n" not in got:
            d = s.recv(4096)
            if not d: break
            got += d
        status = got.split(b"\r\n", 1)[0].decode(errors="replace")
        if after and " 200 " in status:
            s.sendall(after)
        rest = got.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in got else b""
        while True:
            d = s.recv(4096)
            if not d: break
            rest += d
        text = rest.decode(errors="replace").strip().replace("\r\n", " | ").replace("\n", " ")
        print(name, "OK" if " 200 " in status and rest else "REFUSED", status, text[:160])
    except Exception as e:
        print(name, "BLOCKED", type(e).__name__, e)
def connect(name, target, sni, after=None):
    talk(name, ("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode(),
         hello_for(sni) if after is None else after)
def read_all(s):
    got = b""
    while True:
        try:
            d = s.recv(4096)
        except socket.timeout:
            break
        if not d: break
        got += d
    return got
def show(b):
    # One line whatever came back (the test server's bodies end in "\n").
    return b.decode(errors="replace").replace("\r\n", " | ").replace("\n", " | ")[:600]
# Several requests on one connection: everything that comes back, in one line.
def raw(name, data):
    try:
        s = socket.create_connection(P, timeout=5)
        s.settimeout(5)
        s.sendall(data)
        print(name, "GOT", show(read_all(s)))
    except Exception as e:
        print(name, "BLOCKED", type(e).__name__, e)
# Keep-alive: the first answer, then a second request on the same connection.
def keepalive(name, first, second):
    try:
        s = socket.create_connection(P, timeout=5)
        s.settimeout(5)
        s.sendall(first)
        got = b""
        while b"\r\n\r\n" not in got:
            d = s.recv(4096)
            if not d: break
            got += d
        head, _, body = got.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        while len(body) < length:
            d = s.recv(4096)
            if not d: break
            body += d
        try:
            s.sendall(second)
            again = read_all(s)
        except Exception as e:
            again = type(e).__name__.encode()
        print(name, "FIRST", show(body), "SECOND", show(again))
    except Exception as e:
        print(name, "BLOCKED", type(e).__name__, e)
def req(url, host, extra=""):
    return ("GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (url, host, extra)).encode()
def get(name, url, host=None):
    h = host or url.split("/")[2]
    talk(name, ("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (url, h)).encode())
get("http_allowed", "http://allowed.test/x")
connect("https_allowed", "allowed.test:443", "allowed.test")
connect("https_wildcard", "www.allowed.test:443", "www.allowed.test")
connect("https_other", "other.test:443", "other.test")
connect("https_rebind", "rebind.allowed.test:443", "rebind.allowed.test")
connect("https_mixed", "mixed.allowed.test:443", "mixed.allowed.test")
connect("https_ip", "203.0.113.10:443", "allowed.test")
connect("https_sni_mismatch", "allowed.test:443", "other.test")
connect("port_8080", "allowed.test:8080", "allowed.test")
get("http_other", "http://other.test/")
get("http_host_mismatch", "http://allowed.test/", "other.test")
get("http_metadata", "http://metadata.test/latest/meta-data/")
# M5: one request per connection, whatever comes after it.
raw("pipelined", req("http://allowed.test/first", "allowed.test") +
    req("http://other.test/second", "other.test") + req("/third", "secret-vhost.internal"))
keepalive("keepalive", req("http://allowed.test/first", "allowed.test"),
          req("/second", "other.test"))
raw("smuggled_cl", b"POST http://allowed.test/post HTTP/1.1\r\nHost: allowed.test\r\n"
    b"Content-Length: 5\r\n\r\nhello" + req("/smuggled", "other.test"))
raw("smuggled_chunked", b"POST http://allowed.test/post HTTP/1.1\r\nHost: allowed.test\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + req("/smuggled", "other.test"))
raw("cl_and_te", b"POST http://allowed.test/post HTTP/1.1\r\nHost: allowed.test\r\n"
    b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
connect("connect_plaintext", "allowed.test:443", "",
        req("/inside", "other.test", "Connection: close\r\n"))
connect("connect_no_sni", "allowed.test:443", "")
connect("connect_plain_entry", "plain.test:443", "",
        req("/inside", "plain.test", "Connection: close\r\n"))
# L1: an allowed name that resolves to the host's own address; L2: to a
# documentation address (refused unless the operator allows it).
connect("https_hostself", "hostself.allowed.test:443", "hostself.allowed.test")
get("http_doc", "http://doc.allowed.test/doc")
for name, host, port in [("direct4", "203.0.113.10", 8080), ("direct6", "2001:db8:1::10", 8080),
                         ("direct_private", "10.99.0.10", 8080), ("direct_metadata", "169.254.169.254", 80)]:
    try:
        s = socket.create_connection((host, port), timeout=3)
        print(name, "OK", s.recv(100))
    except Exception as e:
        print(name, "BLOCKED", type(e).__name__)
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    s.sendto(b"x", ("203.0.113.53", 53))
    print("udp_dns", "OK", s.recv(100))
except Exception as e:
    print("udp_dns", "BLOCKED", type(e).__name__)
print("env", os.environ.get("HTTPS_PROXY"))
)PY";

class AllowModeTest : public testing::SandboxFixture {
 protected:
  void SetUp() override {
    SandboxFixture::SetUp();
    if (IsSkipped()) return;
    if (geteuid() != 0) GTEST_SKIP() << "building the test world needs root";
    for (const char* bin : {"/usr/sbin/nft", "/usr/sbin/ip", "/usr/bin/python3"}) {
      if (access(bin, X_OK) != 0) GTEST_SKIP() << bin << " missing";
    }
    ASSERT_EQ(world_.Build("dbxworld" + std::to_string(getpid())), "");
    spec_.network = NetworkMode::kAllow;
    spec_.public_network.allow = {"allowed.test", "*.allowed.test", "plain.test!plain"};
    spec_.public_network.allowed_cidrs = TestWorld::AllowedCidrs();
    spec_.public_network.uplink_netns = world_.ns().path();
    spec_.public_network.nameservers = {TestWorld::kDns4};
    std::ofstream(workspace_ / "checks.py") << kChecks;
  }

  static std::map<std::string, std::string> Lines(const std::string& out) {
    std::map<std::string, std::string> m;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);) {
      size_t sp = l.find(' ');
      if (sp != std::string::npos) m[l.substr(0, sp)] = l.substr(sp + 1);
    }
    return m;
  }

  void ExpectPolicy(const std::string& out) {
    auto m = Lines(out);
    const std::string& tok = world_.token();
    EXPECT_THAT(m["http_allowed"], HasSubstr("OK HTTP/1.1 200 OK " + tok)) << out;
    EXPECT_THAT(m["http_allowed"], HasSubstr("GET /x HTTP/1.1")) << out;  // origin-form upstream
    EXPECT_THAT(m["https_allowed"], HasSubstr(tok + " 203.0.113.10 tls")) << out;
    EXPECT_THAT(m["https_wildcard"], HasSubstr(tok)) << out;
    for (const char* no :
         {"https_other", "https_rebind", "https_mixed", "https_ip", "https_sni_mismatch",
          "port_8080", "http_other", "http_host_mismatch", "http_metadata", "direct4", "direct6",
          "direct_private", "direct_metadata", "udp_dns"}) {
      EXPECT_THAT(m[no], Not(HasSubstr(tok))) << no << "\n" << out;
      EXPECT_THAT(m[no], Not(HasSubstr("OK"))) << no << "\n" << out;
    }
    EXPECT_THAT(m["https_other"], HasSubstr("403"));
    EXPECT_THAT(m["https_rebind"], HasSubstr("blocked"));
    EXPECT_THAT(m["https_ip"], HasSubstr("403"));
    EXPECT_EQ(m["env"], "http://127.0.0.1:3128");
    // M5: only the first request of a connection reaches the upstream.
    EXPECT_THAT(m["pipelined"], HasSubstr(tok + " 203.0.113.10 GET /first HTTP/1.1")) << out;
    EXPECT_THAT(m["keepalive"], HasSubstr(tok + " 203.0.113.10 GET /first HTTP/1.1")) << out;
    EXPECT_THAT(m["smuggled_cl"], HasSubstr(tok + " 203.0.113.10 POST /post HTTP/1.1")) << out;
    EXPECT_THAT(m["smuggled_chunked"], HasSubstr(tok + " 203.0.113.10 POST /post HTTP/1.1")) << out;
    for (const char* line : {"pipelined", "keepalive", "smuggled_cl", "smuggled_chunked"}) {
      for (const char* path : {"/second", "/third", "/smuggled"}) {
        EXPECT_THAT(m[line], Not(HasSubstr(path))) << line << "\n" << out;
      }
    }
    EXPECT_THAT(m["cl_and_te"], HasSubstr("400")) << out;
    EXPECT_THAT(m["cl_and_te"], Not(HasSubstr(tok))) << out;
    // CONNECT: not TLS, or TLS without SNI: closed; a "!plain" entry: carried.
    for (const char* no : {"connect_plaintext", "connect_no_sni"}) {
      EXPECT_THAT(m[no], Not(HasSubstr(tok))) << no << "\n" << out;
      EXPECT_THAT(m[no], Not(HasSubstr("OK"))) << no << "\n" << out;
    }
    EXPECT_THAT(m["connect_plain_entry"], HasSubstr(tok + " 203.0.113.10 GET /inside")) << out;
    // L1: the host's own address, although inside the operator's exceptions.
    EXPECT_THAT(m["https_hostself"], HasSubstr("403")) << out;
    EXPECT_THAT(m["https_hostself"], HasSubstr("an address of the host")) << out;
    EXPECT_THAT(m["https_hostself"], Not(HasSubstr(tok))) << out;
  }

  TestWorld world_;
};

TEST_F(AllowModeTest, OnlyAllowedNamesAsRoot) {
  auto r = Run("python3 /workspace/checks.py 2>&1");
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->network, NetworkMode::kAllow);
  ExpectPolicy(r->output);
  // L2: a documentation address is refused by default.
  auto m = Lines(r->output);
  EXPECT_THAT(m["http_doc"], HasSubstr("403")) << r->output;
  EXPECT_THAT(m["http_doc"], HasSubstr("198.51.100.10")) << r->output;
  EXPECT_THAT(m["http_doc"], Not(HasSubstr(world_.token()))) << r->output;
}

// L2: the operator's exceptions (the environment variable) open exactly that
// documentation address, and still never the host's own.
TEST_F(AllowModeTest, OperatorAllowsADocumentationAddress) {
  setenv(kAllowCidrsEnv, "198.51.100.10/32", 1);
  auto r = Run("python3 /workspace/checks.py 2>&1");
  unsetenv(kAllowCidrsEnv);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  auto m = Lines(r->output);
  EXPECT_THAT(m["http_doc"], HasSubstr("OK HTTP/1.1 200 OK " + world_.token() +
                                       " 198.51.100.10 GET /doc HTTP/1.1"))
      << r->output;
  EXPECT_THAT(m["https_hostself"], HasSubstr("403")) << r->output;
}

TEST_F(AllowModeTest, OperatorExceptionsAreChecked) {
  setenv(kAllowCidrsEnv, "127.0.0.0/8", 1);
  auto r = Run("true");
  unsetenv(kAllowCidrsEnv);
  ASSERT_FALSE(r.has_value());
  EXPECT_THAT(r.error().message, HasSubstr("can never be allowed"));
}

TEST(HttpBodyFramerTest, FramesLengthAndChunkedBodies) {
  HttpBodyFramer none = HttpBodyFramer::None();
  EXPECT_EQ(none.Consume("GET / HTTP/1.1\r\n"), 0u);
  HttpBodyFramer len = HttpBodyFramer::Length(5);
  EXPECT_EQ(len.Consume("hel"), 3u);
  EXPECT_EQ(len.Consume("loGET"), 2u);
  EXPECT_TRUE(len.done());
  // Chunked, fed one byte at a time: the body ends after the trailer's empty line.
  std::string body = "5;ext=1\r\nhello\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n";
  HttpBodyFramer ch = HttpBodyFramer::Chunked();
  size_t used = 0;
  for (char c : body + "GET /next") used += ch.Consume(std::string_view(&c, 1));
  EXPECT_EQ(used, body.size());
  EXPECT_TRUE(ch.done());
  for (const char* bad : {"zz\r\n", "5\r\nhelloXX", "5\nhello", "1234567890abcdef0\r\n"}) {
    HttpBodyFramer b = HttpBodyFramer::Chunked();
    b.Consume(bad);
    EXPECT_TRUE(b.failed()) << bad;
  }
}

TEST_F(AllowModeTest, OnlyAllowedNamesUnprivileged) {
  const uid_t kUid = 65534;
  std::filesystem::path base = tmp_.path() / "unpriv";
  std::filesystem::create_directories(base / "workspace");
  std::filesystem::copy_file(workspace_ / "checks.py", base / "workspace" / "checks.py");
  for (const auto& p : {tmp_.path(), base, base / "workspace", base / "workspace" / "checks.py"}) {
    ASSERT_EQ(chown(p.c_str(), kUid, kUid), 0);
  }
  auto run = testing::RunAsUserInNetns(world_.ns().fd(), kUid, [&](int w) {
    if (!UserNamespacesAvailable()) {
      (void)!write(w, "SKIP", 4);
      return 0;
    }
    SandboxSpec spec = spec_;
    spec.id = spec_.id + "u";
    spec.runtime_dir = base / "rt";
    spec.workspace_dir = base / "workspace";
    spec.use_cgroups = false;
    spec.public_network.uplink_netns = "";  // our own: the world
    spec.argv = {"/bin/sh", "-c", "python3 /workspace/checks.py 2>&1"};
    spec.stdout_fd = w;
    spec.stderr_fd = w;
    auto sp = Launch(spec);
    if (!sp) {
      std::string e = "LAUNCH " + sp.error().ToString();
      (void)!write(w, e.data(), e.size());
      return 4;
    }
    (void)sp->Wait(std::chrono::milliseconds(60000));
    return sp->uplink() == Uplink::kProxy ? 0 : 5;
  });
  if (run.output == "SKIP") GTEST_SKIP() << "no unprivileged user namespaces here";
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0)
      << run.status << ": " << run.output;
  ExpectPolicy(run.output);
}

}  // namespace
}  // namespace deepbox::local
