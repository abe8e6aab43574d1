// The proxy's stub resolver: wire format, hostile answers, and real queries to
// a test DNS server on this process's loopback (never any other resolver).
#include "local/dns_client.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "local/testing/test_world.h"

namespace deepbox::local {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> Texts(const std::vector<sockaddr_storage>& v) {
  std::vector<std::string> out;
  for (const auto& a : v) out.push_back(AddressText(a));
  return out;
}

TEST(DnsClientTest, QueryAndAnswerRoundTrip) {
  auto q = BuildDnsQuery(0x1234, "Public.Test.", DnsType::kA);
  ASSERT_TRUE(q.has_value());
  std::string answer = testing::TestDnsAnswer(*q);
  auto r = ParseDnsResponse(answer, 0x1234, "public.test", DnsType::kA);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(Texts(*r), (std::vector<std::string>{"203.0.113.10"}));
  q = BuildDnsQuery(7, "public.test", DnsType::kAaaa);
  r = ParseDnsResponse(testing::TestDnsAnswer(*q), 7, "public.test", DnsType::kAaaa);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(Texts(*r), (std::vector<std::string>{"2001:db8:1::10"}));
  q = BuildDnsQuery(8, "nope.test", DnsType::kA);
  r = ParseDnsResponse(testing::TestDnsAnswer(*q), 8, "nope.test", DnsType::kA);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
}

TEST(DnsClientTest, RejectsBadNames) {
  EXPECT_FALSE(BuildDnsQuery(1, "", DnsType::kA).has_value());
  EXPECT_FALSE(BuildDnsQuery(1, "a..b", DnsType::kA).has_value());
  EXPECT_FALSE(BuildDnsQuery(1, std::string(64, 'a') + ".test", DnsType::kA).has_value());
}

TEST(DnsClientTest, HostileAnswers) {
  auto q = BuildDnsQuery(0x0101, "public.test", DnsType::kA);
  std::string good = testing::TestDnsAnswer(*q);
  ASSERT_TRUE(ParseDnsResponse(good, 0x0101, "public.test", DnsType::kA).has_value());
  // Any truncation: an error (or, cut between records, fewer records), never a crash.
  for (size_t n = 0; n < good.size(); ++n) {
    auto r = ParseDnsResponse(good.substr(0, n), 0x0101, "public.test", DnsType::kA);
    EXPECT_FALSE(r.has_value() && !r->empty()) << n;
  }
  EXPECT_FALSE(ParseDnsResponse(good, 0x0102, "public.test", DnsType::kA).has_value());
  EXPECT_FALSE(ParseDnsResponse(good, 0x0101, "other.test", DnsType::kA).has_value());
  std::string tc = good;
  tc[2] = static_cast<char>(tc[2] | 0x02);
  EXPECT_FALSE(ParseDnsResponse(tc, 0x0101, "public.test", DnsType::kA).has_value());
  // A compression pointer to itself (a loop) and one pointing forward.
  std::string loop = good;
  size_t rr = q->size();  // the answer record starts with "\xc0\x0c"
  loop[rr] = '\xc0';
  loop[rr + 1] = static_cast<char>(rr);
  EXPECT_FALSE(ParseDnsResponse(loop, 0x0101, "public.test", DnsType::kA).has_value());
  std::string fwd = good;
  fwd[rr + 1] = static_cast<char>(rr + 2);
  EXPECT_FALSE(ParseDnsResponse(fwd, 0x0101, "public.test", DnsType::kA).has_value());
  // rdlength past the end.
  std::string big = good;
  big[rr + 10] = '\x7f';
  EXPECT_FALSE(ParseDnsResponse(big, 0x0101, "public.test", DnsType::kA).has_value());
  // A record for another name is ignored (no cache poisoning through extras).
  std::string other = good;
  other.replace(rr, 2, std::string("\x05other\x04test\x00", 12));
  auto r = ParseDnsResponse(other, 0x0101, "public.test", DnsType::kA);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_TRUE(r->empty());
}

TEST(DnsClientTest, ParsesServers) {
  EXPECT_EQ(ParseDnsServer("10.0.0.2")->port, 53);
  EXPECT_EQ(ParseDnsServer("127.0.0.1:5353")->port, 5353);
  EXPECT_EQ(ParseDnsServer("[::1]:5353")->ip, "::1");
  EXPECT_EQ(ParseDnsServer("2001:db8:1::53")->ip, "2001:db8:1::53");
  EXPECT_FALSE(ParseDnsServer("resolver.example").has_value());
  EXPECT_FALSE(ParseDnsServer("10.0.0.2:99999").has_value());
}

TEST(DnsClientTest, ResolvesAgainstALoopbackServer) {
  // The server's socket is bound here (port 0 on 127.0.0.1), then served by a child.
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(s, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  testing::WorldServer server(
      -1, [s] { return s; },
      [](int fd) {
        char buf[2048];
        for (;;) {
          sockaddr_storage from{};
          socklen_t fl = sizeof(from);
          ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &fl);
          if (n <= 0) continue;
          std::string ans = testing::TestDnsAnswer(std::string(buf, static_cast<size_t>(n)));
          sendto(fd, ans.data(), ans.size(), 0, reinterpret_cast<sockaddr*>(&from), fl);
        }
      });
  close(s);
  ASSERT_TRUE(server.ready());
  std::vector<DnsServer> servers = {{"127.0.0.1", port}};
  auto r = ResolveHost("mixed.allowed.test", servers, std::chrono::milliseconds(3000));
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(Texts(*r), (std::vector<std::string>{"203.0.113.10", "10.99.0.10"}));
  r = ResolveHost("public.test", servers, std::chrono::milliseconds(3000));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(Texts(*r), (std::vector<std::string>{"203.0.113.10", "2001:db8:1::10"}));
  r = ResolveHost("missing.test", servers, std::chrono::milliseconds(3000));
  ASSERT_FALSE(r.has_value());
  EXPECT_THAT(r.error().message, HasSubstr("no such name"));
  EXPECT_FALSE(ResolveHost("public.test", {}, std::chrono::milliseconds(100)).has_value());
}

}  // namespace
}  // namespace deepbox::local
