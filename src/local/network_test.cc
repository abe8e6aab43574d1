// Network tests. All traffic stays inside network namespaces this test creates:
// an "uplink" netns (playing the host) and a "testhost" netns holding a private
// address (10.123.0.2), the metadata address (169.254.169.254) and a
// public-like address (198.18.0.2, benchmarking range, reached only through
// routes inside these namespaces, and only because the fixture allows it as
// an operator exception).
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

#include <algorithm>
#include <fstream>
#include <map>
#include <thread>

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

TEST(NetworkTest, AddressBlockedCoversEmbeddedForms) {
  for (const char* a : {"10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.10", "127.0.0.1",
                        "169.254.169.254", "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1",
                        "::", "fd00::1", "fe80::1", "ff02::1", "::ffff:10.0.0.1", "::ffff:8.8.8.8",
                        "::10.0.0.1", "64:ff9b::a9fe:a9fe", "2002:a00:1::1", "2001::1",
                        // L2: IANA special-purpose, not globally reachable.
                        "192.0.2.1", "198.51.100.7", "203.0.113.10", "198.18.0.10",
                        "198.19.255.255", "192.88.99.1", "2001:db8::10", "100::1", "100:0:0:1::1",
                        "2001:2::1", "2001:10::1", "2001:1f::1", "3fff::1", "5f00::1",
                        "64:ff9b::cb00:710a",  // NAT64 form of 203.0.113.10
                        "::ffff:198.51.100.7",
                        "2002:c000:201::1",  // 6to4 form of 192.0.2.1
                        "not-an-address"}) {
    EXPECT_TRUE(AddressBlocked(std::string_view(a))) << a;
  }
  for (const char* a : {"8.8.8.8", "198.20.0.1", "192.0.3.1", "203.0.114.1", "2606:4700::1111",
                        "2001:db9::1", "2001:20::1", "64:ff9b::808:808", "2002:808:808::1"}) {
    EXPECT_FALSE(AddressBlocked(std::string_view(a))) << a;
  }
}

sockaddr_storage Addr(const std::string& ip) {
  sockaddr_storage ss{};
  auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, ip.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
  } else if (inet_pton(AF_INET6, ip.c_str(), &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
  }
  return ss;
}
const sockaddr* Sa(const sockaddr_storage& ss) { return reinterpret_cast<const sockaddr*>(&ss); }

TEST(NetworkTest, OperatorExceptions) {
  auto c =
      ParseAllowedCidrs("192.0.2.77/24, 198.51.100.10 2001:DB8:1::5/48,192.0.2.9\t10.1.0.0/16");
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ(*c, (std::vector<std::string>{"10.1.0.0/16", "192.0.2.0/24", "198.51.100.10",
                                          "2001:db8:1::/48"}));
  EXPECT_EQ(ParseAllowedCidrs("")->size(), 0u);
  for (const char* bad :
       {"127.0.0.1", "0.0.0.0/0", "169.254.169.254", "224.0.0.1", "::/0", "::1", "fe80::1",
        "::ffff:0:0/96", "ff02::1", "bogus", "10.0.0.0/33", "192.0.2.0/", "2001:db8::/129"}) {
    auto r = ParseAllowedCidrs(bad);
    EXPECT_FALSE(r.has_value()) << bad;
    if (!r) {
      EXPECT_THAT(r.error().message, HasSubstr(kAllowCidrsEnv)) << bad;
    }
  }
  EXPECT_TRUE(AddressRefused(Sa(Addr("192.0.2.5")), {}));
  EXPECT_FALSE(AddressRefused(Sa(Addr("192.0.2.5")), *c));
  EXPECT_FALSE(AddressRefused(Sa(Addr("192.0.3.5")), {}));  // never blocked at all
  EXPECT_TRUE(AddressRefused(Sa(Addr("198.51.100.11")), *c));
  EXPECT_FALSE(AddressRefused(Sa(Addr("10.1.2.3")), *c));
  EXPECT_TRUE(AddressRefused(Sa(Addr("10.2.0.1")), *c));
  // Loopback and link-local stay refused even if a list names them.
  EXPECT_TRUE(AddressRefused(Sa(Addr("127.0.0.1")), {"127.0.0.0/8"}));
  EXPECT_TRUE(AddressRefused(Sa(Addr("169.254.169.254")), {"169.254.0.0/16"}));
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
  for (const char* r : {"192.0.2.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
                        "192.88.99.0/24", "2001:db8::/32", "100::/64", "2001:10::/28"}) {
    EXPECT_THAT(rules, HasSubstr(r));
  }
  // The host's own addresses before the operator's exceptions, those before the rest.
  size_t self = rules.find("@self4 reject"), allow = rules.find("@allow4 accept"),
         blocked = rules.find("@blocked4 reject"), near = rules.find("@near4 reject");
  ASSERT_NE(self, std::string::npos);
  EXPECT_LT(self, allow);
  EXPECT_LT(allow, blocked);
  EXPECT_LT(allow, near);
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
  // With host sets and exceptions inside blocked ranges (they overlap: auto-merge).
  c.allowed_cidrs = {"198.51.100.0/24", "2001:db8:1::/48"};
  HostNetworkSets host{{"10.0.0.5", "203.0.113.1", "2001:db8::1", "fd00::2"},
                       {"192.0.2.0/24", "203.0.113.254", "2001:db8::/64"}};
  r = RunInNetns(ns.fd(), {"/usr/sbin/nft", "-f", "-"}, SandboxNftRules(c, host));
  EXPECT_TRUE(r.has_value()) << r.error().ToString();
  // The watch's rewrite: one transaction replacing the dynamic sets.
  HostNetworkSets later{{"203.0.113.100", "2001:db8:1::100"}, {"192.0.2.0/24"}};
  r = RunInNetns(ns.fd(), {"/usr/sbin/nft", "-f", "-"}, HostSetsNftScript(later));
  EXPECT_TRUE(r.has_value()) << r.error().ToString();
  auto listed = RunInNetns(ns.fd(), {"/usr/sbin/nft", "list", "table", "inet", "deepbox"});
  ASSERT_TRUE(listed.has_value()) << listed.error().ToString();
  EXPECT_THAT(*listed, HasSubstr("203.0.113.100"));
  EXPECT_THAT(*listed, HasSubstr("2001:db8:1::100"));
  EXPECT_THAT(*listed, Not(HasSubstr("10.0.0.5")));
  EXPECT_THAT(*listed, HasSubstr("198.51.100.0/24"));  // allow4
  r = RunInNetns(ns.fd(), {"/usr/sbin/nft", "-f", "-"}, HostSetsNftScript({}));
  EXPECT_TRUE(r.has_value()) << r.error().ToString();
  r = RunInNetns(ns.fd(), {"/usr/sbin/nft", "-c", "-f", "-"}, SandboxAllowModeNftRules());
  EXPECT_TRUE(r.has_value()) << r.error().ToString();
  r = RunInNetns(ns.fd(), {"/usr/sbin/nft", "-c", "-f", "-"}, UplinkNftRules(c));
  EXPECT_TRUE(r.has_value()) << r.error().ToString();
}

// The uplink as the sandbox rules and the proxy see it, read with rtnetlink
// from a thread inside a netns this test builds (a veth pair of its own, no packets).
TEST(NetworkTest, HostSetsAndRoutesOfTheUplink) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a bare network namespace";
  TestNetns ns;
  ASSERT_TRUE(ns.ok());
  auto r = ns.Ip(
      "link set lo up\nlink add d0 type veth peer name d1\nlink set d1 up\nlink set d0 up\n"
      "addr add 192.0.2.1/24 dev d0\naddr add 2001:db8:5::1/64 dev d0 nodad\n"
      "route add default via 192.0.2.254\nroute add default via 2001:db8:5::ffff\n"
      "route add 198.51.100.0/24 dev d0\nroute add 0.0.0.0/1 dev d0\n"
      "route add 203.0.113.7/32 via 203.0.113.7 dev d0 onlink\n");
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  Result<HostNetworkSets> open_sets = HostNetworkSets{}, closed_sets = HostNetworkSets{};
  std::map<std::string, Result<RouteKind>> kinds;
  std::thread t([&] {
    if (setns(ns.fd(), CLONE_NEWNET) != 0) return;
    // Documentation ranges: left out unless an exception reopens them.
    closed_sets = ReadHostNetworkSets({});
    open_sets = ReadHostNetworkSets(
        {"192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8:5::/48"});
    for (const char* a :
         {"192.0.2.1", "192.0.2.77", "192.0.2.255", "198.51.100.9", "203.0.113.7", "8.8.8.8",
          "127.0.0.1", "2001:db8:5::1", "2001:db8:5::7", "2606:4700::1"}) {
      sockaddr_storage ss = Addr(a);
      kinds.emplace(a, ClassifyRoute(Sa(ss)));
    }
  });
  t.join();
  ASSERT_TRUE(closed_sets.has_value()) << closed_sets.error().ToString();
  EXPECT_EQ(closed_sets->self, std::vector<std::string>{});
  EXPECT_EQ(closed_sets->near, std::vector<std::string>{});
  ASSERT_TRUE(open_sets.has_value()) << open_sets.error().ToString();
  EXPECT_EQ(open_sets->self, (std::vector<std::string>{"192.0.2.1", "2001:db8:5::1"}));
  // The gateway 192.0.2.254 lies in its subnet; 0.0.0.0/1 is too short for a LAN.
  EXPECT_EQ(open_sets->near, (std::vector<std::string>{"192.0.2.0/24", "198.51.100.0/24",
                                                       "203.0.113.7", "2001:db8:5::/64"}));
  auto kind = [&](const char* a) {
    auto& k = kinds.at(a);
    return k ? static_cast<int>(*k) : -1;
  };
  EXPECT_EQ(kind("192.0.2.1"), static_cast<int>(RouteKind::kLocal));
  EXPECT_EQ(kind("192.0.2.255"), static_cast<int>(RouteKind::kLocal));  // broadcast
  EXPECT_EQ(kind("127.0.0.1"), static_cast<int>(RouteKind::kLocal));
  EXPECT_EQ(kind("192.0.2.77"), static_cast<int>(RouteKind::kOnLink));
  EXPECT_EQ(kind("198.51.100.9"), static_cast<int>(RouteKind::kOnLink));
  EXPECT_EQ(kind("203.0.113.7"), static_cast<int>(RouteKind::kGateway));
  EXPECT_EQ(kind("8.8.8.8"), static_cast<int>(RouteKind::kVia));  // 0.0.0.0/1 dev d0
  EXPECT_EQ(kind("2001:db8:5::1"), static_cast<int>(RouteKind::kLocal));
  EXPECT_EQ(kind("2001:db8:5::7"), static_cast<int>(RouteKind::kOnLink));
  EXPECT_EQ(kind("2606:4700::1"), static_cast<int>(RouteKind::kVia));
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
    // Benchmarking range: refused by default, so the operator opens this host.
    spec_.public_network.allowed_cidrs = {"198.18.0.2/32"};
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

// L2 on veth: without the operator's exception the benchmarking address is refused.
TEST_F(PublicNetworkTest, SpecialPurposeRefusedByDefault) {
  TestServer remote(testhost_.fd(), 8080);
  ASSERT_TRUE(remote.ready());
  spec_.public_network.allowed_cidrs.clear();
  auto r = Run(Connect("198.18.0.2", 8080));
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->network, NetworkMode::kPublic) << r->network_note;
  EXPECT_THAT(r->output, HasSubstr("refused-198.18.0.2:8080"));
  EXPECT_THAT(r->output, Not(HasSubstr("hello")));
}

// M8 on veth: an address the uplink gains after the launch is refused (its
// input chain drops the sandbox's packets, and the watch adds it to self4).
TEST_F(PublicNetworkTest, UplinkAddressAddedLaterIsRefused) {
  TestServer host_service(uplink_.fd(), 8081);
  ASSERT_TRUE(host_service.ready());
  spec_.public_network.allowed_cidrs = {"198.18.0.0/24"};
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  UniqueFd rd(fds[0]), wr(fds[1]);
  SandboxSpec spec = spec_;
  spec.argv = {
      "/bin/bash", "-c",
      "while [ ! -e /workspace/go ]; do sleep 0.05; done; " + Connect("198.18.0.77", 8081)};
  spec.stdout_fd = wr.get();
  spec.stderr_fd = wr.get();
  auto sp = Launch(spec);
  wr.reset();
  ASSERT_TRUE(sp.has_value()) << sp.error().ToString();
  ASSERT_NE(sp->host_watch(), nullptr);
  ASSERT_TRUE(uplink_.Ip("addr add 198.18.0.77/32 dev lo\n").has_value());
  for (int i = 0; i < 500; ++i) {
    auto self = sp->host_watch()->current().self;
    if (std::find(self.begin(), self.end(), "198.18.0.77") != self.end()) break;
    usleep(10000);
  }
  { std::ofstream(workspace_ / "go") << ""; }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(rd.get(), buf, sizeof(buf))) > 0;) out.append(buf, n);
  ASSERT_TRUE(sp->Wait(std::chrono::milliseconds(60000)).has_value());
  EXPECT_THAT(out, HasSubstr("refused-198.18.0.77:8081"));
  EXPECT_THAT(out, Not(HasSubstr("hello")));
  auto self = sp->host_watch()->current().self;
  EXPECT_NE(std::find(self.begin(), self.end(), "198.18.0.77"), self.end());
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
