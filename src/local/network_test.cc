// The veth uplink of public mode (PublicNetwork) and its probe. All traffic
// stays inside network namespaces this test creates: an "uplink" netns
// (playing the host) and a "testhost" netns holding a private address
// (10.123.0.2), the metadata address (169.254.169.254) and a public-like
// address (198.18.0.2, benchmarking range, reached only through routes inside
// these namespaces, and only because the fixture allows it as an operator
// exception).
#include "local/network.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "local/launcher.h"
#include "local/netns.h"
#include "local/testing/netns_holder.h"
#include "local/testing/sandbox_fixture.h"

namespace deepbox::local {
namespace {

using ::testing::HasSubstr;
using testing::NetnsHolder;
using ::testing::Not;

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

TEST(NetworkTest, ProbeFailsClosedWithoutForwarding) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  NetnsHolder ns;
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

  NetnsHolder uplink_;
  NetnsHolder testhost_;
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
