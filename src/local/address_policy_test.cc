// The address policy as pure functions: refused ranges, operator exceptions,
// CIDR text, and rtnetlink answers built here byte by byte (the kernel's own
// answers: host_network_test.cc).
#include "local/address_policy.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>

#include <cstring>

#include "local/testing/sockaddr.h"

namespace deepbox::local {
namespace {

using ::testing::HasSubstr;

TEST(AddressPolicyTest, AddressBlockedCoversEmbeddedForms) {
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

using testing::Addr;
using testing::Sa;

TEST(AddressPolicyTest, OperatorExceptions) {
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

TEST(AddressPolicyTest, CidrText) {
  auto text = [](const char* in) {
    auto c = ParseCidr(in);
    return c ? CidrText(*c) : std::string("(none)");
  };
  EXPECT_EQ(text("192.0.2.77/24"), "192.0.2.0/24");
  EXPECT_EQ(text("192.0.2.77"), "192.0.2.77");
  EXPECT_EQ(text("192.0.2.77/32"), "192.0.2.77");
  EXPECT_EQ(text("10.255.0.1/9"), "10.128.0.0/9");
  EXPECT_EQ(text("2001:DB8:1::5/48"), "2001:db8:1::/48");
  EXPECT_EQ(text("::/0"), "::/0");
  for (const char* bad : {"", "/8", "10.0.0.0/", "10.0.0.0/33", "10.0.0.0/-1", "10.0.0.0/0008",
                          "10.0.0.0/8/8", "::/129", "10.0.0", "10.0.0.0 /8"}) {
    EXPECT_EQ(text(bad), "(none)") << bad;
  }
  auto outer = ParseCidr("10.0.0.0/8"), inner = ParseCidr("10.1.0.0/16");
  EXPECT_TRUE(CidrContains(*outer, *inner));
  EXPECT_FALSE(CidrContains(*inner, *outer));
  EXPECT_FALSE(CidrContains(*outer, *ParseCidr("::a00:0/104")));  // another family
  EXPECT_EQ(NormaliseCidrs({*inner, *ParseCidr("2001:db8::/32"), *outer, *outer}),
            (std::vector<std::string>{"10.0.0.0/8", "2001:db8::/32"}));
  sockaddr_storage v6 = Addr("2001:db8::1");
  EXPECT_EQ(CidrText(*AddressAsCidr(Sa(v6))), "2001:db8::1");
  sockaddr_storage none{};
  none.ss_family = AF_UNIX;
  EXPECT_FALSE(AddressAsCidr(Sa(none)).has_value());
  EXPECT_FALSE(AddressAsCidr(nullptr).has_value());
}

// One rtnetlink message as the kernel sends it: header, family header, attributes.
class Message {
 public:
  template <typename FamilyHeader>
  Message(uint16_t type, const FamilyHeader& family_header) {
    bytes_.resize(NLMSG_LENGTH(sizeof(FamilyHeader)));
    auto* h = reinterpret_cast<nlmsghdr*>(bytes_.data());
    h->nlmsg_type = type;
    memcpy(NLMSG_DATA(h), &family_header, sizeof(FamilyHeader));
  }
  Message& Attr(uint16_t type, const void* data, size_t len) {
    size_t at = NLMSG_ALIGN(bytes_.size());
    bytes_.resize(at + RTA_SPACE(len));
    auto* a = reinterpret_cast<rtattr*>(bytes_.data() + at);
    a->rta_type = type;
    a->rta_len = static_cast<unsigned short>(RTA_LENGTH(len));
    memcpy(RTA_DATA(a), data, len);
    return *this;
  }
  Message& Address(uint16_t type, const char* ip) {
    Cidr c = *ParseCidr(ip);
    return Attr(type, c.bytes, c.family == AF_INET ? 4 : 16);
  }
  std::string Bytes() const {
    std::string out(bytes_.begin(), bytes_.end());
    reinterpret_cast<nlmsghdr*>(out.data())->nlmsg_len = static_cast<uint32_t>(out.size());
    return out;
  }

 private:
  std::vector<char> bytes_;
};

rtmsg Route(int family, int type, int dst_len, int table = RT_TABLE_MAIN) {
  rtmsg r{};
  r.rtm_family = static_cast<unsigned char>(family);
  r.rtm_type = static_cast<unsigned char>(type);
  r.rtm_dst_len = static_cast<unsigned char>(dst_len);
  r.rtm_table = static_cast<unsigned char>(table);
  return r;
}

TEST(AddressPolicyTest, RouteAnswers) {
  Cidr dst = *ParseCidr("192.0.2.7");
  auto kind = [&](const Message& m) { return ClassifyRouteAnswer(m.Bytes(), dst); };
  EXPECT_EQ(kind(Message(RTM_NEWROUTE, Route(AF_INET, RTN_LOCAL, 32))), RouteKind::kLocal);
  EXPECT_EQ(kind(Message(RTM_NEWROUTE, Route(AF_INET, RTN_BROADCAST, 32))), RouteKind::kLocal);
  EXPECT_EQ(kind(Message(RTM_NEWROUTE, Route(AF_INET, RTN_BLACKHOLE, 0))), RouteKind::kUnroutable);
  EXPECT_EQ(kind(Message(RTM_NEWROUTE, Route(AF_INET, RTN_UNICAST, 24))), RouteKind::kOnLink);
  // A device route shorter than /16 is no LAN.
  EXPECT_EQ(kind(Message(RTM_NEWROUTE, Route(AF_INET, RTN_UNICAST, 1))), RouteKind::kVia);
  EXPECT_EQ(kind(Message(RTM_NEWROUTE, Route(AF_INET, RTN_UNICAST, 0))
                     .Address(RTA_GATEWAY, "192.0.2.254")),
            RouteKind::kVia);
  EXPECT_EQ(
      kind(
          Message(RTM_NEWROUTE, Route(AF_INET, RTN_UNICAST, 32)).Address(RTA_GATEWAY, "192.0.2.7")),
      RouteKind::kGateway);
  // One of a multipath route's next hops.
  std::vector<char> hops;
  for (const char* gw : {"198.51.100.1", "192.0.2.7"}) {
    size_t at = hops.size();
    hops.resize(at + RTNH_SPACE(RTA_SPACE(4)));
    auto* nh = reinterpret_cast<rtnexthop*>(hops.data() + at);
    nh->rtnh_len = static_cast<unsigned short>(RTNH_LENGTH(RTA_SPACE(4)));
    auto* a = RTNH_DATA(nh);
    a->rta_type = RTA_GATEWAY;
    a->rta_len = static_cast<unsigned short>(RTA_LENGTH(4));
    memcpy(RTA_DATA(a), ParseCidr(gw)->bytes, 4);
  }
  EXPECT_EQ(kind(Message(RTM_NEWROUTE, Route(AF_INET, RTN_UNICAST, 0))
                     .Attr(RTA_MULTIPATH, hops.data(), hops.size())),
            RouteKind::kGateway);
  EXPECT_EQ(ClassifyRouteAnswer("short", dst), RouteKind::kUnroutable);
}

TEST(AddressPolicyTest, HostSetsFromDumps) {
  ifaddrmsg v4{};
  v4.ifa_family = AF_INET;
  ifaddrmsg v6{};
  v6.ifa_family = AF_INET6;
  std::vector<std::string> addresses = {
      // IFA_ADDRESS of a point-to-point IPv4 link is the peer: not ours.
      Message(RTM_NEWADDR, v4)
          .Address(IFA_ADDRESS, "198.51.100.9")
          .Address(IFA_LOCAL, "192.0.2.1")
          .Bytes(),
      Message(RTM_NEWADDR, v4).Address(IFA_LOCAL, "127.0.0.1").Bytes(),  // never allowed
      Message(RTM_NEWADDR, v6).Address(IFA_ADDRESS, "2001:db8:5::1").Bytes(),
      Message(RTM_NEWADDR, v4).Address(IFA_LOCAL, "8.8.4.4").Bytes(),  // public: kept
      Message(RTM_NEWROUTE, Route(AF_INET, RTN_UNICAST, 0)).Bytes(),   // not an address
  };
  std::vector<std::string> routes = {
      Message(RTM_NEWROUTE, Route(AF_INET, RTN_UNICAST, 0))
          .Address(RTA_GATEWAY, "192.0.2.254")
          .Bytes(),
      Message(RTM_NEWROUTE, Route(AF_INET, RTN_UNICAST, 24)).Address(RTA_DST, "192.0.2.0").Bytes(),
      Message(RTM_NEWROUTE, Route(AF_INET, RTN_UNICAST, 1)).Address(RTA_DST, "0.0.0.0").Bytes(),
      Message(RTM_NEWROUTE, Route(AF_INET, RTN_LOCAL, 32, RT_TABLE_LOCAL))
          .Address(RTA_DST, "203.0.113.5")
          .Bytes(),
      Message(RTM_NEWROUTE, Route(AF_INET6, RTN_UNICAST, 64))
          .Address(RTA_DST, "2001:db8:5::")
          .Bytes(),
  };
  HostNetworkSets closed = HostNetworkSetsFromDumps(addresses, routes, {});
  EXPECT_EQ(closed.self, std::vector<std::string>{"8.8.4.4"});
  EXPECT_EQ(closed.near, std::vector<std::string>{});
  HostNetworkSets open = HostNetworkSetsFromDumps(
      addresses, routes, {"192.0.2.0/24", "203.0.113.0/24", "2001:db8:5::/48"});
  EXPECT_EQ(open.self,
            (std::vector<std::string>{"8.8.4.4", "192.0.2.1", "203.0.113.5", "2001:db8:5::1"}));
  EXPECT_EQ(open.near, (std::vector<std::string>{"192.0.2.0/24", "2001:db8:5::/64"}));
}

// Messages the kernel never sends (the fuzz target's findings,
// fuzz/corpus/address_policy/regress-*) change nothing or are left out.
TEST(AddressPolicyTest, ImpossibleMessagesAreHarmless) {
  Cidr dst = *ParseCidr("192.0.2.7");
  // A prefix longer than the address: ignored.
  EXPECT_EQ(
      ClassifyRouteAnswer(Message(RTM_NEWROUTE, Route(AF_INET, RTN_UNICAST, 200)).Bytes(), dst),
      RouteKind::kUnroutable);
  std::vector<std::string> routes = {
      Message(RTM_NEWROUTE, Route(AF_INET, RTN_LOCAL, 229)).Address(RTA_DST, "8.8.4.4").Bytes(),
      // Host bits set: read as the kernel would send it (128.0.0.0/1), so
      // that 192.0.2.1 below is seen inside it and left out.
      Message(RTM_NEWROUTE, Route(AF_INET, RTN_LOCAL, 1)).Address(RTA_DST, "203.0.113.5").Bytes(),
  };
  ifaddrmsg v4{};
  v4.ifa_family = AF_INET;
  ifaddrmsg packet{};
  packet.ifa_family = AF_PACKET;
  std::vector<std::string> addresses = {
      Message(RTM_NEWADDR, v4).Address(IFA_LOCAL, "192.0.2.1").Bytes(),
      // An address of another family: no text, left out.
      Message(RTM_NEWADDR, packet).Address(IFA_LOCAL, "2606:4700::1").Bytes(),
  };
  HostNetworkSets sets = HostNetworkSetsFromDumps(addresses, routes, {"192.0.2.0/24"});
  EXPECT_EQ(sets.self, std::vector<std::string>{"128.0.0.0/1"});
  EXPECT_EQ(sets.near, std::vector<std::string>{});
}

}  // namespace
}  // namespace deepbox::local
