#include "k8s/rest_client.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "common/testing/temp_dir.h"
#include "k8s/testing/client_fixtures.h"
#include "k8s/testing/fake_api_server.h"

namespace deepbox::k8s {
namespace {

using testing::Claim;
using testing::FakeApiServer;
using testing::FakeApiServerOptions;
using testing::FastOptions;
using testing::kClaims;
using testing::MakeClient;
using namespace std::chrono_literals;

TEST(KubeClientTest, CrudOverMutualTls) {
  FakeApiServerOptions opts;
  opts.auth = FakeApiServerOptions::Auth::kClientCert;
  auto server = FakeApiServer::Start(opts);
  ASSERT_TRUE(server) << server.error().ToString();
  auto client = MakeClient(**server);
  auto created = client->Create(kClaims, "default", Claim("c1", {{"app", "x"}}));
  ASSERT_TRUE(created) << created.error().ToString();
  EXPECT_FALSE(FindString(*created, {"metadata", "uid"}).empty());
  EXPECT_FALSE(FindString(*created, {"metadata", "resourceVersion"}).empty());
  auto got = client->Get(kClaims, "default", "c1");
  ASSERT_TRUE(got);
  EXPECT_EQ(FindString(*got, {"spec", "warmPoolRef", "name"}), "pool");
  auto dup = client->Create(kClaims, "default", Claim("c1"));
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code, ErrorCode::kConflict);
  EXPECT_NE(dup.error().message.find("409 AlreadyExists"), std::string::npos);
  ASSERT_TRUE(client->Delete(kClaims, "default", "c1"));
  auto gone = client->Delete(kClaims, "default", "c1");
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ErrorCode::kNotFound);
  auto missing = client->Get(kClaims, "default", "c1");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("404 NotFound"), std::string::npos)
      << missing.error().message;

  // Without a client certificate the TLS handshake is refused.
  RestConfig anonymous = (*server)->ClientConfig();
  anonymous.tls.client_cert_pem.clear();
  anonymous.tls.client_key_pem.clear();
  ClientOptions no_retry = FastOptions();
  no_retry.max_retries = 0;
  auto anon = KubeClient::Create(anonymous, no_retry);
  ASSERT_TRUE(anon);
  EXPECT_FALSE((*anon)->Get(kClaims, "default", "c1"));
}

TEST(KubeClientTest, BearerTokenAuth) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server);
  auto client = MakeClient(**server);
  ASSERT_TRUE(client->Create(kClaims, "default", Claim("c1")));
  RestConfig wrong = (*server)->ClientConfig();
  wrong.token = "wrong";
  auto bad = KubeClient::Create(wrong, FastOptions());
  ASSERT_TRUE(bad);
  auto r = (*bad)->Get(kClaims, "default", "c1");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnauthenticated);
  EXPECT_NE(r.error().message.find("401 Unauthorized"), std::string::npos);
}

TEST(KubeClientTest, ExecPluginTokenIsRefreshedAfter401) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server);
  deepbox::testing::TempDir tmp("deepbox-exec");
  std::string dir = tmp.path().string();
  std::string plugin = dir + "/plugin.sh";
  std::ofstream(plugin) << fmt::format(R"(#!/bin/sh
n=$(cat "{0}/count" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "{0}/count"
echo '{{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{{"token":"tok-'$n'"}}}}'
)",
                                       dir);
  ::chmod(plugin.c_str(), 0755);
  (*server)->SetTokens({"tok-2"});  // the first token has "expired"
  RestConfig cfg = (*server)->ClientConfig();
  cfg.token.clear();
  cfg.exec = ExecConfig{};
  cfg.exec->api_version = "client.authentication.k8s.io/v1";
  cfg.exec->command = plugin;
  cfg.exec->origin = "test exec";
  auto client = KubeClient::Create(cfg, FastOptions());
  ASSERT_TRUE(client) << client.error().ToString();
  auto r = (*client)->List(kClaims, "default");
  ASSERT_TRUE(r) << r.error().ToString();
}

TEST(KubeClientTest, ListWithLabelAndFieldSelectorsAndPages) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server);
  auto client = MakeClient(**server);
  ASSERT_TRUE(
      client->Create(kClaims, "default", Claim("a", {{"deepagents.example/claim", "true"}})));
  ASSERT_TRUE(client->Create(kClaims, "default",
                             Claim("b", {{"deepagents.example/claim", "true"}, {"tier", "x"}})));
  ASSERT_TRUE(client->Create(kClaims, "default", Claim("c", {{"other", "1"}})));
  ASSERT_TRUE(
      client->Create(kClaims, "elsewhere", Claim("d", {{"deepagents.example/claim", "true"}})));
  auto names = [](const ObjectList& l) {
    std::vector<std::string> out;
    for (const auto& i : l.items) out.push_back(FindString(i, {"metadata", "name"}));
    return out;
  };
  auto l = client->List(kClaims, "default", {"deepagents.example/claim=true", "", "", 0});
  ASSERT_TRUE(l) << l.error().ToString();
  EXPECT_EQ(names(*l), (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(l->resource_version.empty());
  l = client->List(kClaims, "default", {"deepagents.example/claim=true,tier notin (x)", "", "", 0});
  ASSERT_TRUE(l);
  EXPECT_EQ(names(*l), (std::vector<std::string>{"a"}));
  l = client->List(kClaims, "default", {"", "metadata.name=c", "", 0});
  ASSERT_TRUE(l);
  EXPECT_EQ(names(*l), (std::vector<std::string>{"c"}));
  l = client->List(kClaims, "default", {"", "", "", 1});  // one per page, all pages followed
  ASSERT_TRUE(l);
  EXPECT_EQ(names(*l), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ((*server)->CountRequests("GET", "/sandboxclaims"), 3 + 3);
}

TEST(KubeClientTest, RetriesOn5xxAnd429HonouringRetryAfter) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server);
  std::vector<std::chrono::milliseconds> slept;
  ClientOptions opts = FastOptions();
  opts.sleep = [&](std::chrono::milliseconds d) { slept.push_back(d); };
  auto client = MakeClient(**server, opts);
  ASSERT_TRUE(client->Create(kClaims, "default", Claim("c1")));
  (*server)->FailNext(2, 503);
  ASSERT_TRUE(client->Get(kClaims, "default", "c1"));
  (*server)->FailNext(1, 429, "3");
  ASSERT_TRUE(client->Get(kClaims, "default", "c1"));
  auto m = client->metrics();
  EXPECT_EQ(m.retries, 3);
  ASSERT_EQ(slept.size(), 3u);
  EXPECT_EQ(slept[0], 5ms);  // exponential backoff
  EXPECT_EQ(slept[1], 10ms);
  EXPECT_EQ(slept[2], 3000ms);  // Retry-After: 3

  (*server)->FailNext(100, 500);
  auto r = client->Get(kClaims, "default", "c1");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInternal);
  EXPECT_NE(r.error().message.find("injected failure 500"), std::string::npos);
}

TEST(KubeClientTest, RetriedCreateThatMeetsAlreadyExistsReturnsTheObject) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server);
  auto client = MakeClient(**server);
  // As if the first attempt was applied before its response was lost.
  ASSERT_TRUE((*server)->store().Create({"extensions.agents.x-k8s.io", "sandboxclaims", "default"},
                                        Claim("c1")));
  (*server)->FailNext(1, 503, "", "POST");
  auto r = client->Create(kClaims, "default", Claim("c1"));
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(FindString(*r, {"metadata", "name"}), "c1");
}

TEST(KubeClientTest, TokenBucketThrottles) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server);
  ClientOptions opts = FastOptions();
  opts.qps = 0.001;
  opts.burst = 2;
  std::vector<std::chrono::milliseconds> slept;
  opts.sleep = [&](std::chrono::milliseconds d) { slept.push_back(d); };
  auto client = MakeClient(**server, opts);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(client->List(kClaims, "default"));
  EXPECT_EQ(client->metrics().throttled_waits, 3);
  ASSERT_EQ(slept.size(), 3u);
  EXPECT_GT(slept[2], slept[0]);  // later requests wait longer
}

TEST(ApiStatusTest, ParsesStatusObjectsAndPlainBodies) {
  auto s = ParseApiStatus(
      404, R"({"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound",)"
           R"("message":"sandboxclaims \"x\" not found","code":404})");
  EXPECT_EQ(s.code, 404);
  EXPECT_EQ(s.reason, "NotFound");
  Error e = ApiStatusError(s, "GET /x");
  EXPECT_EQ(e.code, ErrorCode::kNotFound);
  EXPECT_EQ(e.message, R"(kubernetes API GET /x: 404 NotFound: sandboxclaims "x" not found)");
  auto plain = ParseApiStatus(503, "upstream connect error\n");
  EXPECT_EQ(plain.reason, "ServiceUnavailable");
  EXPECT_EQ(plain.message, "upstream connect error");
  EXPECT_EQ(ApiStatusError(plain, "GET /").code, ErrorCode::kUnavailable);
}

}  // namespace
}  // namespace deepbox::k8s
