#include "net/url.h"

#include <gtest/gtest.h>

#include "net/conn.h"

namespace deepbox::net {
namespace {

TEST(UrlTest, ParsesHttpAndHttps) {
  auto u = ParseUrl("https://api.anthropic.com/v1?x=1");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->scheme, "https");
  EXPECT_EQ(u->host, "api.anthropic.com");
  EXPECT_EQ(u->port, 443);
  EXPECT_EQ(u->path, "/v1");
  EXPECT_EQ(u->query, "x=1");
  auto v6 = ParseUrl("http://[::1]:8080");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 8080);
  EXPECT_EQ(v6->path, "/");
}

TEST(UrlTest, ParsesUnix) {
  auto u = ParseUrl("unix:/run/x.sock");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->scheme, "unix");
  EXPECT_EQ(u->path, "/run/x.sock");
}

TEST(UrlTest, RejectsBadUrls) {
  EXPECT_FALSE(ParseUrl("ftp://x"));
  EXPECT_FALSE(ParseUrl("localhost:80"));
  EXPECT_FALSE(ParseUrl("http://host:99999"));
  EXPECT_FALSE(ParseUrl("http://"));
}

TEST(UrlTest, PercentCoding) {
  EXPECT_EQ(PercentEncode("a b/c"), "a%20b%2Fc");
  EXPECT_EQ(PercentEncode("a b/c", true), "a%20b/c");
  EXPECT_EQ(*PercentDecode("a%20b%2Fc"), "a b/c");
  EXPECT_FALSE(PercentDecode("%2"));
  EXPECT_FALSE(PercentDecode("%zz"));
  auto q = ParseQuery("a=1&b=x%20y&c&d=p+q");
  ASSERT_EQ(q.size(), 4u);
  EXPECT_EQ(q[1].second, "x y");
  EXPECT_EQ(q[2].first, "c");
  EXPECT_EQ(q[3].second, "p q");
  EXPECT_EQ(BuildQuery({{"labelSelector", "a=b,c"}}), "labelSelector=a%3Db%2Cc");
}

TEST(EndpointTest, Parse) {
  auto a = Endpoint::Parse("127.0.0.1:8080");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 8080);
  auto b = Endpoint::Parse(":0");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->host, "0.0.0.0");
  auto c = Endpoint::Parse("unix:/tmp/s");
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->is_unix);
  EXPECT_FALSE(Endpoint::Parse("nocolon"));
  EXPECT_FALSE(Endpoint::Parse("h:70000"));
  EXPECT_FALSE(Endpoint::Parse("unix:" + std::string(200, 'x')));
}

}  // namespace
}  // namespace deepbox::net
