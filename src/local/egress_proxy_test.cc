// The allowlist proxy: unit checks (SNI parsing, hostile ClientHellos) and a
// real sandbox in allow mode whose proxy reaches only the test's own world.
#include "local/egress_proxy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "local/launcher.h"
#include "local/testing/sandbox_fixture.h"
#include "local/testing/test_world.h"

namespace deepbox::local {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::TestWorld;

// A minimal TLS 1.2 ClientHello record, with an SNI extension when sni != "".
std::string ClientHello(const std::string& sni) {
  std::string ext;
  if (!sni.empty()) {
    std::string list = std::string(1, '\0') + char(sni.size() >> 8) + char(sni.size() & 255) + sni;
    std::string body = std::string() + char(list.size() >> 8) + char(list.size() & 255) + list;
    ext = std::string("\0\0", 2) + char(body.size() >> 8) + char(body.size() & 255) + body;
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
    ext = b"\x00\x00" + len(body).to_bytes(2, "big") + body
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
        print(name, "OK" if " 200 " in status and rest else "REFUSED", status, rest.decode(errors="replace").strip()[:120])
    except Exception as e:
        print(name, "BLOCKED", type(e).__name__, e)
def connect(name, target, sni):
    talk(name, ("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode(), hello_for(sni))
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
    spec_.public_network.allow = {"allowed.test", "*.allowed.test"};
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
  }

  TestWorld world_;
};

TEST_F(AllowModeTest, OnlyAllowedNamesAsRoot) {
  auto r = Run("python3 /workspace/checks.py 2>&1");
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->network, NetworkMode::kAllow);
  ExpectPolicy(r->output);
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
