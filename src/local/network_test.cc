// Network tests. All traffic stays inside network namespaces this test creates:
// an "uplink" netns (playing the host) and a "testhost" netns holding a private
// address (10.123.0.2), the metadata address (169.254.169.254) and a
// public-like address (198.18.0.2, benchmarking range, reached only through
// routes inside these namespaces).
#include "local/network.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "local/launcher.h"
#include "local/testing/sandbox_fixture.h"

namespace deepbox::local {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A network namespace held by a paused child process.
class TestNetns {
 public:
  TestNetns() {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(p[0]);
      if (unshare(CLONE_NEWNET) != 0) _exit(1);
      (void)!write(p[1], "r", 1);
      for (;;) pause();
    }
    close(p[1]);
    char c;
    if (read(p[0], &c, 1) == 1) {
      fd_.reset(open(path().c_str(), O_RDONLY | O_CLOEXEC));
    }
    close(p[0]);
  }
  ~TestNetns() {
    fd_.reset();
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  std::string path() const { return "/proc/" + std::to_string(pid_) + "/ns/net"; }
  int fd() const { return fd_.get(); }
  pid_t pid() const { return pid_; }
  bool ok() const { return fd_.valid(); }
  Result<std::string> Ip(const std::string& batch) {
    return RunInNetns(fd(), {"/usr/sbin/ip", "-batch", "-"}, batch);
  }
  Result<std::string> Sh(const std::string& script) {
    return RunInNetns(fd(), {"/bin/sh", "-c", script});
  }

 private:
  pid_t pid_ = -1;
  UniqueFd fd_;
};

// A TCP server in `netns` on 0.0.0.0:port answering "hello\n" to every connection.
class TestServer {
 public:
  TestServer(int netns_fd, int port) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(p[0]);
      if (setns(netns_fd, CLONE_NEWNET) != 0) _exit(1);
      int s = socket(AF_INET, SOCK_STREAM, 0);
      int one = 1;
      setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      if (bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(s, 16) != 0) {
        _exit(2);
      }
      (void)!write(p[1], "r", 1);
      for (;;) {
        int c = accept(s, nullptr, nullptr);
        if (c < 0) continue;
        (void)!write(c, "hello\n", 6);
        close(c);
      }
    }
    close(p[1]);
    char c;
    ready_ = read(p[0], &c, 1) == 1;
    close(p[0]);
  }
  ~TestServer() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool ready() const { return ready_; }

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
};

TEST(NetworkTest, ParseMode) {
  EXPECT_EQ(*ParseNetworkMode("none"), NetworkMode::kNone);
  EXPECT_EQ(*ParseNetworkMode("public"), NetworkMode::kPublic);
  EXPECT_FALSE(ParseNetworkMode("host").has_value());
  EXPECT_EQ(NetworkModeName(NetworkMode::kPublic), "public");
}

TEST(NetworkTest, ParsePolicy) {
  auto p =
      ParseNetworkPolicy("allow=PyPI.org,files.pythonhosted.org,*.github.com,git.example.com:8443");
  ASSERT_TRUE(p.has_value()) << p.error().ToString();
  EXPECT_EQ(p->mode, NetworkMode::kAllow);
  EXPECT_EQ(p->ToString(),
            "allow=pypi.org,files.pythonhosted.org,*.github.com,git.example.com:8443");
  EXPECT_EQ(ParseNetworkPolicy(p->ToString())->allow, p->allow);
  EXPECT_EQ(ParseNetworkPolicy("public")->mode, NetworkMode::kPublic);
  EXPECT_EQ(ParseNetworkPolicy("none")->ToString(), "none");
  for (const char* bad : {"allow=", "allow=a..b", "allow=*", "allow=*.com.", "allow=localhost",
                          "allow=pypi.org:0", "allow=pypi.org:70000", "allow=a b.com",
                          "allow=-a.com", "allow=**.a.com", "allow=10.0.0.1", "host"}) {
    EXPECT_FALSE(ParseNetworkPolicy(bad).has_value()) << bad;
  }
}

TEST(NetworkTest, AllowlistMatching) {
  std::vector<std::string> allow = {"pypi.org", "*.github.com", "git.example.com:8443"};
  EXPECT_TRUE(AllowlistMatches(allow, "PyPI.org.", 443));
  EXPECT_TRUE(AllowlistMatches(allow, "pypi.org", 80));
  EXPECT_FALSE(AllowlistMatches(allow, "pypi.org", 8080));
  EXPECT_FALSE(AllowlistMatches(allow, "evilpypi.org", 443));
  EXPECT_FALSE(AllowlistMatches(allow, "pypi.org.evil.com", 443));
  EXPECT_TRUE(AllowlistMatches(allow, "api.github.com", 443));
  EXPECT_TRUE(AllowlistMatches(allow, "a.b.github.com", 443));
  EXPECT_FALSE(AllowlistMatches(allow, "github.com", 443));  // *. means subdomains only
  EXPECT_FALSE(AllowlistMatches(allow, "evilgithub.com", 443));
  EXPECT_TRUE(AllowlistMatches(allow, "git.example.com", 8443));
  EXPECT_FALSE(AllowlistMatches(allow, "", 443));
}

TEST(NetworkTest, AddressBlockedCoversEmbeddedForms) {
  for (const char* a : {"10.1.2.3",
                        "172.16.0.1",
                        "192.168.1.1",
                        "100.64.0.10",
                        "127.0.0.1",
                        "169.254.169.254",
                        "0.0.0.0",
                        "224.0.0.1",
                        "255.255.255.255",
                        "::1",
                        "::",
                        "fd00::1",
                        "fe80::1",
                        "ff02::1",
                        "::ffff:10.0.0.1",
                        "::ffff:8.8.8.8",
                        "::10.0.0.1",
                        "64:ff9b::a9fe:a9fe",
                        "2002:a00:1::1",
                        "2001::1",
                        "not-an-address"}) {
    EXPECT_TRUE(AddressBlocked(std::string_view(a))) << a;
  }
  for (const char* a : {"203.0.113.10", "8.8.8.8", "2001:db8::10", "2606:4700::1111",
                        "64:ff9b::808:808", "2002:808:808::1"}) {
    EXPECT_FALSE(AddressBlocked(std::string_view(a))) << a;
  }
}

TEST(NetworkTest, SlotAddresses) {
  SlotAddresses a = AddressesForSlot(0);
  EXPECT_EQ(a.gateway, "100.100.0.1");
  EXPECT_EQ(a.sandbox, "100.100.0.2");
  EXPECT_EQ(a.host_if, "dbx0h");
  SlotAddresses b = AddressesForSlot(70);
  EXPECT_EQ(b.sandbox, "100.100.1.26");
  EXPECT_LE(AddressesForSlot(kMaxPublicSlots - 1).host_if.size(), 15u);  // IFNAMSIZ - 1
}

TEST(NetworkTest, RulesCoverEveryRefusedRange) {
  PublicNetworkConfig c;
  c.slot = 3;
  c.nameservers = {"10.0.0.2", "127.0.0.53"};
  std::string rules = SandboxNftRules(c);
  for (const char* r : {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
                        "169.254.0.0/16", "127.0.0.0/8", "fc00::/7", "fe80::/10"}) {
    EXPECT_THAT(rules, HasSubstr(r));
  }
  EXPECT_THAT(rules, HasSubstr("ip daddr 10.0.0.2 udp dport 53 accept"));
  EXPECT_THAT(rules, Not(HasSubstr("127.0.0.53")));  // the host's loopback is unreachable
  std::string uplink = UplinkNftRules(c);
  EXPECT_THAT(uplink, HasSubstr("deepbox_s3"));
  EXPECT_THAT(uplink, HasSubstr("masquerade"));
  EXPECT_THAT(uplink, HasSubstr("iifname \"dbx3h\" drop"));
}

TEST(NetworkTest, RulesAreValidNftables) {
  if (geteuid() != 0 || access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs root + nft";
  TestNetns ns;
  ASSERT_TRUE(ns.ok());
  PublicNetworkConfig c;
  c.nameservers = {"10.0.0.2", "2001:db8::53"};
  auto r = RunInNetns(ns.fd(), {"/usr/sbin/nft", "-c", "-f", "-"}, SandboxNftRules(c));
  EXPECT_TRUE(r.has_value()) << r.error().ToString();
  // With host addresses inside blocked ranges (they overlap: auto-merge).
  r = RunInNetns(ns.fd(), {"/usr/sbin/nft", "-f", "-"},
                 SandboxNftRules(c, {"10.0.0.5", "203.0.113.1", "2001:db8::1", "fd00::2"}));
  EXPECT_TRUE(r.has_value()) << r.error().ToString();
  r = RunInNetns(ns.fd(), {"/usr/sbin/nft", "-c", "-f", "-"}, SandboxAllowModeNftRules());
  EXPECT_TRUE(r.has_value()) << r.error().ToString();
  r = RunInNetns(ns.fd(), {"/usr/sbin/nft", "-c", "-f", "-"}, UplinkNftRules(c));
  EXPECT_TRUE(r.has_value()) << r.error().ToString();
}

TEST(NetworkTest, LoopbackUpInNewNetns) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a bare network namespace";
  pid_t p = fork();
  if (p == 0) {
    if (unshare(CLONE_NEWNET) != 0) _exit(1);
    ChildCall call;
    if (BringUpLoopbackRaw(&call) != 0) _exit(2);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) _exit(3);
    _exit(0);
  }
  int status = 0;
  waitpid(p, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(NetworkTest, ProbeFailsClosedWithoutForwarding) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  TestNetns ns;
  ASSERT_TRUE(ns.ok());
  PublicNetworkConfig c;
  c.uplink_netns = ns.path();
  NetworkProbe p = ProbePublicNetwork(c);
  EXPECT_FALSE(p.public_possible);
  EXPECT_THAT(p.reason, HasSubstr("ip_forward"));
  c.nft_path = "/nonexistent/nft";
  EXPECT_THAT(ProbePublicNetwork(c).reason, HasSubstr("missing"));
}

class PublicNetworkTest : public testing::SandboxFixture {
 protected:
  void SetUp() override {
    SandboxFixture::SetUp();
    if (IsSkipped()) return;
    if (geteuid() != 0) GTEST_SKIP() << "public mode needs root";
    for (const char* bin : {"/usr/sbin/ip", "/usr/sbin/nft", "/bin/bash"}) {
      if (access(bin, X_OK) != 0) GTEST_SKIP() << bin << " missing";
    }
    ASSERT_TRUE(uplink_.ok());
    ASSERT_TRUE(testhost_.ok());
    auto r =
        uplink_.Ip("link add tup type veth peer name tth netns " + std::to_string(testhost_.pid()) +
                   "\n"
                   "addr add 10.123.0.1/24 dev tup\nlink set tup up\nlink set lo up\n"
                   "route add default via 10.123.0.2\n");
    ASSERT_TRUE(r.has_value()) << r.error().ToString();
    r = uplink_.Sh("echo 1 > /proc/sys/net/ipv4/ip_forward");
    ASSERT_TRUE(r.has_value()) << r.error().ToString();
    r = testhost_.Ip(
        "addr add 10.123.0.2/24 dev tth\nlink set tth up\nlink set lo up\n"
        "addr add 198.18.0.2/32 dev lo\naddr add 169.254.169.254/32 dev lo\n"
        "route add default via 10.123.0.1\n");
    ASSERT_TRUE(r.has_value()) << r.error().ToString();
    spec_.network = NetworkMode::kPublic;
    spec_.public_network.uplink = UplinkChoice::kVeth;  // this fixture tests the veth path
    spec_.public_network.uplink_netns = uplink_.path();
    spec_.public_network.slot = 77;
    spec_.public_network.nameservers = {"198.18.0.53"};
  }

  std::string Connect(const std::string& ip, int port) {
    return "timeout 5 bash -c 'exec 3<>/dev/tcp/" + ip + "/" + std::to_string(port) +
           " && head -1 <&3' 2>/dev/null || echo refused-" + ip + ":" + std::to_string(port) + "; ";
  }

  TestNetns uplink_;
  TestNetns testhost_;
};

TEST_F(PublicNetworkTest, PolicyAgainstTestHosts) {
  TestServer remote(testhost_.fd(), 8080);
  TestServer host_service(uplink_.fd(), 8081);
  ASSERT_TRUE(remote.ready());
  ASSERT_TRUE(host_service.ready());
  // From the uplink itself, every address of the test host is reachable (sanity check).
  auto direct = uplink_.Sh("timeout 5 bash -c 'exec 3<>/dev/tcp/10.123.0.2/8080 && head -1 <&3'");
  ASSERT_TRUE(direct.has_value()) << direct.error().ToString();
  EXPECT_EQ(*direct, "hello\n");

  SlotAddresses a = AddressesForSlot(77);
  auto r = Run(Connect("198.18.0.2", 8080) +       // public-like: allowed
               Connect("10.123.0.2", 8080) +       // RFC 1918
               Connect("169.254.169.254", 8080) +  // metadata
               Connect(a.gateway, 8081) +          // the uplink's own address
               Connect("10.123.0.1", 8081) +       // the uplink via its other address
               Connect("127.0.0.1", 8081) +        // the sandbox's own loopback
               "cat /etc/resolv.conf; ip -br addr show eth0 2>/dev/null | head -1");
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->network, NetworkMode::kPublic) << r->network_note;
  EXPECT_THAT(r->output, HasSubstr("hello\n"));
  EXPECT_THAT(r->output, Not(HasSubstr("refused-198.18.0.2")));
  EXPECT_THAT(r->output, HasSubstr("refused-10.123.0.2:8080"));
  EXPECT_THAT(r->output, HasSubstr("refused-169.254.169.254:8080"));
  EXPECT_THAT(r->output, HasSubstr("refused-" + a.gateway + ":8081"));
  EXPECT_THAT(r->output, HasSubstr("refused-10.123.0.1:8081"));
  EXPECT_THAT(r->output, HasSubstr("refused-127.0.0.1:8081"));
  EXPECT_THAT(r->output, HasSubstr("nameserver 198.18.0.53"));
  // Exactly one "hello": only the public-like address answered.
  size_t count = 0;
  for (size_t pos = 0; (pos = r->output.find("hello", pos)) != std::string::npos; ++pos) ++count;
  EXPECT_EQ(count, 1u) << r->output;
}

TEST_F(PublicNetworkTest, NoIngressAndCleanup) {
  SlotAddresses a = AddressesForSlot(77);
  spec_.argv = {"/bin/bash", "-c",
                "exec 3<>/dev/tcp/198.18.0.2/8080 2>/dev/null; "
                "python3 -c 'import socket,time; s=socket.socket(); s.bind((\"0.0.0.0\",9000)); "
                "s.listen(); time.sleep(30)' 2>/dev/null || sleep 30"};
  {
    auto sp = Launch(spec_);
    ASSERT_TRUE(sp.has_value()) << sp.error().ToString();
    ASSERT_EQ(sp->network(), NetworkMode::kPublic) << sp->network_note();
    usleep(300000);
    // The uplink (the "host") cannot open a connection into the sandbox.
    auto in = uplink_.Sh("timeout 3 bash -c 'exec 3<>/dev/tcp/" + a.sandbox +
                         "/9000' 2>/dev/null && echo connected || echo blocked");
    ASSERT_TRUE(in.has_value());
    EXPECT_EQ(*in, "blocked\n");
    auto tables = RunInNetns(uplink_.fd(), {"/usr/sbin/nft", "list", "tables"});
    ASSERT_TRUE(tables.has_value());
    EXPECT_THAT(*tables, HasSubstr("deepbox_s77"));
  }
  // After destruction: no table, no veth left in the uplink.
  auto tables = RunInNetns(uplink_.fd(), {"/usr/sbin/nft", "list", "tables"});
  ASSERT_TRUE(tables.has_value());
  EXPECT_THAT(*tables, Not(HasSubstr("deepbox_s77")));
  auto links = uplink_.Ip("link show\n");
  ASSERT_TRUE(links.has_value());
  EXPECT_THAT(*links, Not(HasSubstr(a.host_if)));
}

TEST_F(PublicNetworkTest, FailsClosedToNone) {
  // Forwarding off in the uplink and only veth allowed: public is impossible,
  // the sandbox gets none. (By default pasta would serve it: uplink_test.cc.)
  ASSERT_TRUE(uplink_.Sh("echo 0 > /proc/sys/net/ipv4/ip_forward").has_value());
  spec_.public_network.uplink = UplinkChoice::kVeth;
  spec_.public_network.slot = 78;
  auto r = Run("cat /proc/net/dev | awk -F: 'NR>2{print $1}' | tr -d ' '");
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->network, NetworkMode::kNone);
  EXPECT_THAT(r->network_note, HasSubstr("ip_forward"));
  EXPECT_EQ(r->output, "lo\n");
}

}  // namespace
}  // namespace deepbox::local
