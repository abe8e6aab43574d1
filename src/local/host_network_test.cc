// The uplink as the sandbox rules and the proxy see it, read with rtnetlink
// from a thread inside a netns this test builds (a veth pair of its own, no
// packets; root).
#include "local/host_network.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <unistd.h>

#include <map>
#include <thread>

#include "local/testing/netns_holder.h"
#include "local/testing/sockaddr.h"

namespace deepbox::local {
namespace {

using testing::Addr;
using testing::Sa;

TEST(HostNetworkTest, HostSetsAndRoutesOfTheUplink) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a bare network namespace";
  testing::NetnsHolder ns;
  ASSERT_TRUE(ns.ok());
  auto r = ns.Ip(
      "link set lo up\nlink add d0 type veth peer name d1\nlink set d1 up\nlink set d0 up\n"
      "addr add 192.0.2.1/24 dev d0\naddr add 2001:db8:5::1/64 dev d0 nodad\n"
      "route add default via 192.0.2.254\nroute add default via 2001:db8:5::ffff\n"
      "route add 198.51.100.0/24 dev d0\nroute add 0.0.0.0/1 dev d0\n"
      "route add 203.0.113.7/32 via 203.0.113.7 dev d0 onlink\n"
      // ECMP: the kernel lists both gateways in RTA_MULTIPATH, its last attribute.
      "route add 203.0.113.8/31 nexthop via 203.0.113.8 dev d0 onlink"
      " nexthop via 203.0.113.9 dev d0 onlink\n");
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
         {"192.0.2.1", "192.0.2.77", "192.0.2.255", "198.51.100.9", "203.0.113.7", "203.0.113.9",
          "8.8.8.8", "127.0.0.1", "2001:db8:5::1", "2001:db8:5::7", "2606:4700::1"}) {
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
  EXPECT_EQ(open_sets->near,
            (std::vector<std::string>{"192.0.2.0/24", "198.51.100.0/24", "203.0.113.7",
                                      "203.0.113.8", "203.0.113.9", "2001:db8:5::/64"}));
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
  EXPECT_EQ(kind("203.0.113.9"), static_cast<int>(RouteKind::kGateway));  // a next hop
  EXPECT_EQ(kind("8.8.8.8"), static_cast<int>(RouteKind::kVia));          // 0.0.0.0/1 dev d0
  EXPECT_EQ(kind("2001:db8:5::1"), static_cast<int>(RouteKind::kLocal));
  EXPECT_EQ(kind("2001:db8:5::7"), static_cast<int>(RouteKind::kOnLink));
  EXPECT_EQ(kind("2606:4700::1"), static_cast<int>(RouteKind::kVia));
}

TEST(HostNetworkTest, NotAnIpAddressIsUnroutable) {
  sockaddr_storage unix_addr{};
  unix_addr.ss_family = AF_UNIX;
  auto kind = ClassifyRoute(Sa(unix_addr));
  ASSERT_TRUE(kind.has_value()) << kind.error().ToString();
  EXPECT_EQ(*kind, RouteKind::kUnroutable);
}

}  // namespace
}  // namespace deepbox::local
