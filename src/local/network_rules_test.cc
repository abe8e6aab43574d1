// The nftables text: what it refuses and in which order (pure), and that nft
// accepts it, checked in a network namespace of the test's own (root).
#include "local/network_rules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "local/netns.h"
#include "local/testing/netns_holder.h"

namespace deepbox::local {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(NetworkRulesTest, SlotAddresses) {
  SlotAddresses a = AddressesForSlot(0);
  EXPECT_EQ(a.gateway, "100.100.0.1");
  EXPECT_EQ(a.sandbox, "100.100.0.2");
  EXPECT_EQ(a.host_if, "dbx0h");
  SlotAddresses b = AddressesForSlot(70);
  EXPECT_EQ(b.sandbox, "100.100.1.26");
  EXPECT_LE(AddressesForSlot(kMaxPublicSlots - 1).host_if.size(), 15u);  // IFNAMSIZ - 1
}

TEST(NetworkRulesTest, RulesCoverEveryRefusedRange) {
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

TEST(NetworkRulesTest, RulesAreValidNftables) {
  if (geteuid() != 0 || access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs root + nft";
  testing::NetnsHolder ns;
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

}  // namespace
}  // namespace deepbox::local
