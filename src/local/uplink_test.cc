// The pasta uplink. Every packet stays in the test's own world (testing/
// test_world.h): pasta runs inside that network namespace, so its sockets
// land there and never on the host's network.
#include "local/uplink.h"

#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "local/address_policy.h"
#include "local/launcher.h"
#include "local/testing/sandbox_fixture.h"
#include "local/testing/test_world.h"

namespace deepbox::local {
namespace {

// A /proc file of a process that may exit meanwhile: the read then fails with
// ESRCH, which an istreambuf_iterator would throw; operator<< of a streambuf
// catches it and gives what was read (nothing).
std::string ReadProcFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  return text.str();
}

using ::testing::HasSubstr;
using ::testing::Not;
using testing::TestWorld;

TEST(UplinkTest, PastaNeverReachesTheHostLoopbackNorForwardsPorts) {
  PublicNetworkConfig c;
  UplinkDns dns = PlanUplinkDns(c, {"10.0.0.2"});
  std::vector<std::string> argv = PastaArgv(42, c, dns, 3);
  std::string joined;
  for (const auto& a : argv) joined += a + " ";
  for (const char* flag : {"-t none", "-u none", "-T none", "-U none", "--no-map-gw",
                           "--config-net", "--pid /proc/self/fd/3", "--foreground"}) {
    EXPECT_THAT(joined, HasSubstr(flag));
  }
  EXPECT_EQ(argv.back(), "42");
}

TEST(UplinkTest, DnsPlan) {
  PublicNetworkConfig c;
  // The host's loopback resolver is only reachable through pasta's mapping.
  UplinkDns d = PlanUplinkDns(c, {"127.0.0.53", "10.0.0.2", "bogus"});
  EXPECT_EQ(d.sandbox_nameservers, (std::vector<std::string>{kPastaDnsForward, "10.0.0.2"}));
  EXPECT_EQ(d.pasta_args, (std::vector<std::string>{"--dns-forward", kPastaDnsForward}));
  // Explicit resolvers: used as they are; pasta reads nothing from the host.
  c.nameservers = {"203.0.113.53", "2001:db8:1::53"};
  d = PlanUplinkDns(c, {"127.0.0.53"});
  EXPECT_EQ(d.sandbox_nameservers, c.nameservers);
  EXPECT_EQ(d.pasta_args, (std::vector<std::string>{"-D", "203.0.113.53", "-D", "2001:db8:1::53"}));
}

TEST(UplinkTest, ChooseUplinkNamesBothReasons) {
  PublicNetworkConfig c;
  c.pasta_path = "/nonexistent/pasta";
  c.uplink = UplinkChoice::kPasta;
  NetworkProbe p = ChooseUplink(c);
  EXPECT_FALSE(p.public_possible);
  EXPECT_THAT(p.reason, HasSubstr("passt"));
  EXPECT_EQ(p.veth_reason, "not asked for");
  c.pasta_path = "/usr/bin/pasta";
  if (access(c.pasta_path.c_str(), X_OK) == 0 && access("/usr/sbin/nft", X_OK) == 0) {
    p = ChooseUplink(c);
    EXPECT_TRUE(p.public_possible) << p.reason;
    EXPECT_EQ(p.uplink, Uplink::kPasta);
  }
}

// What the sandbox checks (python3 from the host's /usr): one line per target,
// "name OK <reply>" or "name BLOCKED <error>".
constexpr char kChecks[] = R"PY(
import socket, sys
def tcp(name, host, port):
    try:
        s = socket.create_connection((host, port), timeout=3)
        s.settimeout(3)
        print(name, "OK", s.recv(200).decode().strip())
    except Exception as e:
        print(name, "BLOCKED", type(e).__name__)
def udp(name, host, port, payload=b"ping"):
    try:
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.settimeout(2)
        s.sendto(payload, (host, port))
        print(name, "OK", s.recv(200)[:60])
    except Exception as e:
        print(name, "BLOCKED", type(e).__name__)
tcp("public4", "203.0.113.10", 8080)
tcp("public6", "2001:db8:1::10", 8080)
udp("udp4", "203.0.113.10", 9053)
udp("udp6", "2001:db8:1::10", 9053)
try:
    print("dns OK", sorted({a[4][0] for a in socket.getaddrinfo("public.test", 8080)}))
except Exception as e:
    print("dns BLOCKED", e)
tcp("byname", "public.test", 8080)
tcp("private4", "10.99.0.10", 8080)
tcp("private6", "fd00:99::10", 8080)
tcp("cgnat", "100.64.0.10", 8080)
tcp("metadata", "169.254.169.254", 8080)
tcp("mapped", "::ffff:10.99.0.10", 8080)
tcp("nat64", "64:ff9b::a63:a", 8080)
tcp("hostaddr4", "203.0.113.1", 8081)
tcp("gateway4", "203.0.113.254", 8080)
tcp("gateway6", "2001:db8::ffff", 8080)
tcp("doc4", "198.51.100.10", 8080)
tcp("hostaddr6", "2001:db8::1", 8081)
tcp("loopback", "127.0.0.1", 8081)
tcp("loopback6", "::1", 8081)
udp("udp_private", "10.99.0.10", 9053)
q = bytes.fromhex("abcd01000001000000000000067075626c696304746573740000010001")
udp("dns_private", "10.99.0.10", 53, q)
)PY";

class PastaUplinkTest : public testing::SandboxFixture {
 protected:
  void SetUp() override {
    SandboxFixture::SetUp();
    if (IsSkipped()) return;
    if (geteuid() != 0) GTEST_SKIP() << "building the test world needs root";
    for (const char* bin :
         {"/usr/bin/pasta", "/usr/sbin/nft", "/usr/sbin/ip", "/usr/bin/python3"}) {
      if (access(bin, X_OK) != 0) GTEST_SKIP() << bin << " missing";
    }
    std::string why = world_.Build("dbxworld" + std::to_string(getpid()));
    ASSERT_EQ(why, "");
    spec_.network = NetworkMode::kPublic;
    spec_.public_network.uplink = UplinkChoice::kPasta;
    spec_.public_network.uplink_netns = world_.ns().path();
    spec_.public_network.nameservers = TestWorld::Nameservers();
    spec_.public_network.allowed_cidrs = TestWorld::AllowedCidrs();
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
    for (const char* ok : {"public4", "public6", "udp4", "udp6", "byname"}) {
      EXPECT_THAT(m[ok], ::testing::StartsWith("OK ")) << ok << "\n" << out;
      EXPECT_THAT(m[ok], HasSubstr(tok)) << ok << "\n" << out;
    }
    EXPECT_THAT(m["dns"], HasSubstr("203.0.113.10")) << out;
    EXPECT_THAT(m["dns"], HasSubstr("2001:db8:1::10")) << out;
    for (const char* no :
         {"private4", "private6", "cgnat", "metadata", "mapped", "nat64", "hostaddr4", "hostaddr6",
          "loopback", "loopback6", "udp_private", "dns_private", "gateway4", "gateway6"}) {
      EXPECT_THAT(m[no], HasSubstr("BLOCKED")) << no << "\n" << out;
      EXPECT_THAT(m[no], Not(HasSubstr(tok))) << no;
    }
  }

  TestWorld world_;
};

TEST_F(PastaUplinkTest, PolicyAsRoot) {
  auto r = Run("python3 /workspace/checks.py 2>&1");
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->network, NetworkMode::kPublic) << r->network_note;
  ExpectPolicy(r->output);
  // L2: a documentation address outside the operator's exceptions.
  EXPECT_THAT(Lines(r->output)["doc4"], HasSubstr("BLOCKED")) << r->output;
}

// L2: the operator's environment variable opens that documentation address.
TEST_F(PastaUplinkTest, OperatorAllowsADocumentationAddress) {
  setenv(kAllowCidrsEnv, "198.51.100.10", 1);
  auto r = Run("python3 /workspace/checks.py 2>&1");
  unsetenv(kAllowCidrsEnv);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  auto m = Lines(r->output);
  EXPECT_THAT(m["doc4"], HasSubstr("OK " + world_.token() + " 198.51.100.10")) << r->output;
  EXPECT_THAT(m["hostaddr4"], HasSubstr("BLOCKED")) << r->output;
  EXPECT_THAT(m["gateway4"], HasSubstr("BLOCKED")) << r->output;
}

// M8: an address the host (the world) gains after the sandbox started is
// refused too: the watch rewrites the sandbox's sets. 203.0.113.100 and
// 2001:db8:1::100 lie inside the operator's exceptions, so only "it is the
// host's own" refuses them.
TEST_F(PastaUplinkTest, HostAddressAddedLaterIsRefused) {
  std::ofstream(workspace_ / "late.py") << R"PY(
import socket
for name, host in [("late4", "203.0.113.100"), ("late6", "2001:db8:1::100"),
                   ("public4", "203.0.113.10")]:
    try:
        s = socket.create_connection((host, 8081 if name.startswith("late") else 8080), timeout=3)
        s.settimeout(3)
        print(name, "OK", s.recv(200).decode().strip())
    except Exception as e:
        print(name, "BLOCKED", type(e).__name__)
)PY";
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  UniqueFd r(fds[0]), w(fds[1]);
  SandboxSpec spec = spec_;
  spec.argv = {
      "/bin/sh", "-c",
      "while [ ! -e /workspace/go ]; do sleep 0.05; done; python3 /workspace/late.py 2>&1"};
  spec.stdout_fd = w.get();
  spec.stderr_fd = w.get();
  auto sp = Launch(spec);
  w.reset();
  ASSERT_TRUE(sp.has_value()) << sp.error().ToString();
  ASSERT_EQ(sp->uplink(), Uplink::kPasta);
  ASSERT_NE(sp->host_watch(), nullptr);
  auto added = world_.ns().Ip(
      "addr add 203.0.113.100/32 dev lo\naddr add 2001:db8:1::100/128 dev lo nodad\n");
  ASSERT_TRUE(added.has_value()) << added.error().ToString();
  // Wait (bounded) until the watch has rewritten the sets; the assertion is on
  // what the sandbox reaches, not on how long this took.
  auto has = [&](const std::string& a) {
    auto self = sp->host_watch()->current().self;
    return std::find(self.begin(), self.end(), a) != self.end();
  };
  for (int i = 0; i < 500 && !(has("203.0.113.100") && has("2001:db8:1::100")); ++i) {
    usleep(10000);
  }
  std::ofstream(workspace_ / "go") << "";
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(r.get(), buf, sizeof(buf))) > 0;) out.append(buf, n);
  ASSERT_TRUE(sp->Wait(std::chrono::milliseconds(60000)).has_value());
  auto m = Lines(out);
  EXPECT_THAT(m["public4"], HasSubstr("OK " + world_.token())) << out;
  EXPECT_THAT(m["late4"], HasSubstr("BLOCKED")) << out;
  EXPECT_THAT(m["late6"], HasSubstr("BLOCKED")) << out;
  EXPECT_THAT(out, Not(HasSubstr(world_.token() + " 203.0.113.100"))) << out;
  EXPECT_THAT(out, Not(HasSubstr(world_.token() + " 2001:db8:1::100"))) << out;
  EXPECT_EQ(sp->host_watch()->last_error(), "");
}

TEST_F(PastaUplinkTest, RulesCannotBeFlushedFromInside) {
  auto r =
      Run("nft flush ruleset 2>&1 | head -1; unshare -rn true 2>&1 | head -1; "
          "python3 /workspace/checks.py 2>&1 | grep -E '^(private4|metadata) '");
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_THAT(r->output, HasSubstr("private4 BLOCKED"));
  EXPECT_THAT(r->output, HasSubstr("metadata BLOCKED"));
}

TEST_F(PastaUplinkTest, PastaEndsWithTheSandbox) {
  spec_.argv = {"/bin/sleep", "30"};
  pid_t pasta = -1;
  {
    auto sp = Launch(spec_);
    ASSERT_TRUE(sp.has_value()) << sp.error().ToString();
    ASSERT_EQ(sp->uplink(), Uplink::kPasta);
    // pasta is our child: find it.
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      std::string c = ReadProcFile(e.path() / "cmdline");
      if (c.rfind("/usr/bin/pasta", 0) == 0 &&
          c.find(std::to_string(sp->pid())) != std::string::npos) {
        pasta = std::stoi(e.path().filename());
      }
    }
    ASSERT_GT(pasta, 0);
  }
  // Reaped by ~SandboxProcess: the pid names no pasta any more (never signal it).
  std::string c = ReadProcFile("/proc/" + std::to_string(pasta) + "/cmdline");
  EXPECT_THAT(c, Not(HasSubstr("pasta")));
}

// The same policy with the launcher unprivileged: a child joins the world,
// drops to uid 65534 and launches the sandbox with pasta in its own netns
// (with a 0666 /dev/net/tun in a private mount namespace where the host's is
// 0600, see PrivateTunDevice).
TEST_F(PastaUplinkTest, PolicyUnprivileged) {
  const uid_t kUid = 65534;
  std::filesystem::path base = tmp_.path() / "unpriv";
  std::filesystem::create_directories(base / "workspace");
  std::filesystem::copy_file(workspace_ / "checks.py", base / "workspace" / "checks.py");
  for (const auto& p : {tmp_.path(), base, base / "workspace", base / "workspace" / "checks.py"}) {
    ASSERT_EQ(chown(p.c_str(), kUid, kUid), 0);
  }
  auto run = testing::RunAsUserInNetns(
      world_.ns().fd(), kUid,
      [&](int w) {
        if (!UserNamespacesAvailable()) {
          (void)!write(w, "SKIP no unprivileged user namespaces here", 41);
          return 0;
        }
        PublicNetworkConfig probe = spec_.public_network;
        probe.uplink_netns = "";
        if (std::string why = PastaObstacle(probe); !why.empty()) {
          why = "SKIP " + why;
          (void)!write(w, why.data(), why.size());
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
        return sp->uplink() == Uplink::kPasta ? 0 : 5;
      },
      /*private_tun=*/true);
  const std::string& out = run.output;
  int status = run.status;
  if (out.rfind("SKIP ", 0) == 0) GTEST_SKIP() << out.substr(5);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << ": " << out;
  ExpectPolicy(out);
}

}  // namespace
}  // namespace deepbox::local
