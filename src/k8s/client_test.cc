#include "k8s/client.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <thread>

#include "k8s/testing/fake_api_server.h"
#include "k8s/util.h"

namespace deepbox::k8s {
namespace {

using testing::FakeApiServer;
using testing::FakeApiServerOptions;
using namespace std::chrono_literals;

const ResourceType kClaims{"extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims",
                           "SandboxClaim"};

json::object Claim(const std::string& name, std::map<std::string, std::string> labels = {}) {
  json::object obj;
  obj["apiVersion"] = kClaims.ApiVersion();
  obj["kind"] = "SandboxClaim";
  json::object meta;
  meta["name"] = name;
  json::object l;
  for (auto& [k, v] : labels) l[k] = v;
  meta["labels"] = std::move(l);
  obj["metadata"] = std::move(meta);
  json::object spec;
  json::object ref;
  ref["name"] = "pool";
  spec["warmPoolRef"] = std::move(ref);
  obj["spec"] = std::move(spec);
  return obj;
}

ClientOptions FastOptions() {
  ClientOptions o;
  o.initial_backoff = 5ms;
  o.max_backoff = 50ms;
  return o;
}

std::unique_ptr<KubeClient> MakeClient(const FakeApiServer& server,
                                       ClientOptions options = FastOptions()) {
  auto c = KubeClient::Create(server.ClientConfig(), std::move(options));
  EXPECT_TRUE(c) << c.error().ToString();
  return std::move(*c);
}

// Collects watch events on a background thread.
class WatchRecorder {
 public:
  WatchRecorder(KubeClient& client, WatchOptions options, std::string stop_on_name = "")
      : stop_on_(std::move(stop_on_name)) {
    thread_ = std::thread([this, &client, options] {
      result_ = client.Watch(kClaims, "default", options, [this](const WatchEvent& e) {
        std::lock_guard lock(mu_);
        events_.push_back(e);
        cv_.notify_all();
        return !(e.type != WatchEventType::kBookmark &&
                 FindString(e.object, {"metadata", "name"}) == stop_on_ && e.type == stop_type_);
      });
      std::lock_guard lock(mu_);
      done_ = true;
      cv_.notify_all();
    });
  }
  ~WatchRecorder() {
    if (thread_.joinable()) thread_.join();
  }
  void StopOn(std::string name, WatchEventType type) {
    std::lock_guard lock(mu_);
    stop_on_ = std::move(name);
    stop_type_ = type;
  }
  // Waits until an event of `type` for `name` arrived (false after 30 s).
  bool WaitFor(const std::string& name, WatchEventType type) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 30s, [&] {
      for (const auto& e : events_) {
        if (e.type == type && FindString(e.object, {"metadata", "name"}) == name) return true;
      }
      return false;
    });
  }
  Result<WatchStats> Join() {
    thread_.join();
    return result_;
  }
  std::vector<WatchEvent> events() {
    std::lock_guard lock(mu_);
    return events_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<WatchEvent> events_;
  std::string stop_on_;
  WatchEventType stop_type_ = WatchEventType::kAdded;
  bool done_ = false;
  Result<WatchStats> result_;
  std::thread thread_;
};

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
  char tmpl[] = "/tmp/deepbox-exec-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
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
  std::filesystem::remove_all(dir);
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

TEST(KubeClientTest, WatchDeliversEventsAndBookmarks) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server);
  auto client = MakeClient(**server);
  auto first = client->Create(kClaims, "default", Claim("before"));
  ASSERT_TRUE(first);
  WatchOptions wo;
  wo.resource_version = FindString(*first, {"metadata", "resourceVersion"});
  WatchRecorder rec(*client, wo, "stop");
  ASSERT_TRUE((*server)->WaitForWatches(1));
  (*server)->SendBookmarks();
  ASSERT_TRUE(client->Create(kClaims, "default", Claim("after")));
  ASSERT_TRUE(rec.WaitFor("after", WatchEventType::kAdded));
  ASSERT_TRUE(client->Delete(kClaims, "default", "after"));
  ASSERT_TRUE(rec.WaitFor("after", WatchEventType::kDeleted));
  ASSERT_TRUE(client->Create(kClaims, "default", Claim("stop")));
  auto stats = rec.Join();
  ASSERT_TRUE(stats) << stats.error().ToString();
  EXPECT_EQ(stats->bookmarks, 1);
  EXPECT_EQ(stats->relists, 0);
  bool saw_before = false;
  int bookmarks = 0;
  for (const auto& e : rec.events()) {
    if (FindString(e.object, {"metadata", "name"}) == "before") saw_before = true;
    if (e.type == WatchEventType::kBookmark) ++bookmarks;
  }
  EXPECT_FALSE(saw_before);  // the watch started after it
  EXPECT_EQ(bookmarks, 1);
  auto reqs = (*server)->requests();
  auto it = std::find_if(reqs.begin(), reqs.end(),
                         [](const auto& r) { return !r.Query("watch").empty(); });
  ASSERT_NE(it, reqs.end());
  EXPECT_EQ(it->Query("allowWatchBookmarks"), "true");
  EXPECT_EQ(it->Query("resourceVersion"), wo.resource_version);
  EXPECT_FALSE(it->Query("timeoutSeconds").empty());
}

TEST(KubeClientTest, WatchBookmarkAdvancesTheResumeVersion) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server);
  auto client = MakeClient(**server);
  WatchOptions wo;
  wo.resource_version = std::to_string((*server)->store().resource_version());
  WatchRecorder rec(*client, wo, "stop");
  ASSERT_TRUE((*server)->WaitForWatches(1));
  // Unrelated traffic elsewhere moves the version; the bookmark reports it.
  ASSERT_TRUE(client->Create(kClaims, "other-ns", Claim("x")));
  std::string bumped = std::to_string((*server)->store().resource_version());
  (*server)->SendBookmarks();
  {
    // Wait for the bookmark to land before cutting the connection.
    for (int i = 0; i < 600; ++i) {
      bool got = false;
      for (const auto& e : rec.events()) got |= e.type == WatchEventType::kBookmark;
      if (got) break;
      std::this_thread::sleep_for(50ms);
    }
  }
  (*server)->DropWatches();
  ASSERT_TRUE((*server)->WaitForWatchesOpened(2));
  ASSERT_TRUE(client->Create(kClaims, "default", Claim("stop")));
  auto stats = rec.Join();
  ASSERT_TRUE(stats) << stats.error().ToString();
  auto reqs = (*server)->requests();
  std::vector<std::string> versions;
  for (const auto& r : reqs) {
    if (!r.Query("watch").empty()) versions.push_back(r.Query("resourceVersion"));
  }
  ASSERT_EQ(versions.size(), 2u);
  EXPECT_EQ(versions[1], bumped);  // resumed from the bookmark's version
}

TEST(KubeClientTest, WatchRelistsAfter410ErrorEvent) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server);
  auto client = MakeClient(**server);
  ASSERT_TRUE(client->Create(kClaims, "default", Claim("a")));
  WatchRecorder rec(*client, WatchOptions{}, "b");  // "" = list first
  ASSERT_TRUE(rec.WaitFor("a", WatchEventType::kAdded));
  ASSERT_TRUE((*server)->WaitForWatches(1));
  (*server)->ExpireWatches();  // ERROR {code: 410} on the stream
  ASSERT_TRUE(client->Create(kClaims, "default", Claim("b")));
  auto stats = rec.Join();
  ASSERT_TRUE(stats) << stats.error().ToString();
  EXPECT_EQ(stats->relists, 2);  // the initial list and the one after 410
}

TEST(KubeClientTest, WatchRelistsAfterHttp410AndReportsDeletionsMissedMeanwhile) {
  FakeApiServerOptions opts;
  opts.gone_as_http_status = true;
  auto server = FakeApiServer::Start(opts);
  ASSERT_TRUE(server);
  auto client = MakeClient(**server);
  ASSERT_TRUE(client->Create(kClaims, "default", Claim("a")));
  ASSERT_TRUE(client->Create(kClaims, "default", Claim("keep")));
  WatchRecorder rec(*client, WatchOptions{});
  rec.StopOn("a", WatchEventType::kDeleted);
  ASSERT_TRUE(rec.WaitFor("a", WatchEventType::kAdded));
  ASSERT_TRUE((*server)->WaitForWatches(1));
  // The apiserver goes away; while it is down "a" is deleted and history is
  // compacted, so the resumed watch gets 410 and must re-list.
  (*server)->Stop();
  ASSERT_TRUE(
      (*server)->store().Delete({"extensions.agents.x-k8s.io", "sandboxclaims", "default"}, "a"));
  (*server)->Compact();
  ASSERT_TRUE((*server)->Resume());
  auto stats = rec.Join();
  ASSERT_TRUE(stats) << stats.error().ToString();
  EXPECT_EQ(stats->relists, 2);
  auto events = rec.events();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().type, WatchEventType::kDeleted);
  EXPECT_TRUE(events.back().synthetic);
}

TEST(KubeClientTest, WatchResumesAfterApiserverRestartAndDroppedConnections) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server);
  auto client = MakeClient(**server);
  WatchOptions wo;
  wo.resource_version = "0";
  WatchRecorder rec(*client, wo, "c3");
  ASSERT_TRUE((*server)->WaitForWatches(1));
  ASSERT_TRUE(client->Create(kClaims, "default", Claim("c1")));
  ASSERT_TRUE(rec.WaitFor("c1", WatchEventType::kAdded));
  (*server)->DropWatches();  // connection cut mid-stream
  ASSERT_TRUE((*server)->WaitForWatchesOpened(2));
  (*server)->Stop();  // apiserver restart: c2 is created while it is down
  ASSERT_TRUE((*server)->store().Create({"extensions.agents.x-k8s.io", "sandboxclaims", "default"},
                                        Claim("c2")));
  ASSERT_TRUE((*server)->Resume());
  ASSERT_TRUE(rec.WaitFor("c2", WatchEventType::kAdded));
  size_t opened = (*server)->watches_opened();
  (*server)->EndWatches();  // server-side timeout: a clean end of the stream
  ASSERT_TRUE((*server)->WaitForWatchesOpened(opened + 1));
  ASSERT_TRUE(client->Create(kClaims, "default", Claim("c3")));
  auto stats = rec.Join();
  ASSERT_TRUE(stats) << stats.error().ToString();
  EXPECT_EQ(stats->relists, 0);  // history was intact: no re-list needed
  EXPECT_GE(stats->reconnects, 3);
  int c2 = 0;
  for (const auto& e : rec.events()) c2 += FindString(e.object, {"metadata", "name"}) == "c2";
  EXPECT_EQ(c2, 1);  // seen exactly once
}

TEST(KubeClientTest, WatchStopsAtTheDeadline) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server);
  auto client = MakeClient(**server);
  WatchOptions wo;
  wo.resource_version = "0";
  wo.deadline = std::chrono::steady_clock::now() + 300ms;
  auto r = client->Watch(kClaims, "default", wo, [](const WatchEvent&) { return true; });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kTimeout);
}

// What Suspend/Resume send: a merge patch of spec.operatingMode. The fake
// server applies it as the real one does a CRD with a status subresource:
// the rest of spec and all of status stay, a spec change is a new
// generation, the CRD's enum holds.
TEST(SandboxApiTest, PatchSandboxMergesIntoSpecOnly) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server) << server.error().ToString();
  auto sb = ParseJsonObject(R"({"metadata":{"name":"sb-1","labels":{"a":"1"}},
    "spec":{"podTemplate":{"spec":{"containers":[{"name":"c"}]}}},
    "status":{"conditions":[{"type":"Ready","status":"True"}]}})");
  ASSERT_TRUE(sb);
  ASSERT_TRUE((*server)->store().Create({"agents.x-k8s.io", "sandboxes", "default"}, *sb));
  auto client = MakeClient(**server);
  SandboxApi api(*client);
  auto patch = [](std::string_view text) { return *ParseJsonObject(text); };
  auto patched =
      api.PatchSandbox("default", "sb-1",
                       patch(R"({"spec":{"operatingMode":"Suspended"},"status":{"conditions":[]},)"
                             R"("metadata":{"uid":"forged","labels":{"b":"2"}}})"));
  ASSERT_TRUE(patched) << patched.error().ToString();
  EXPECT_EQ(FindString(*patched, {"spec", "operatingMode"}), "Suspended");
  EXPECT_NE(Find(*patched, {"spec", "podTemplate", "spec", "containers"}), nullptr);
  EXPECT_EQ(ToJson(*Find(*patched, {"status", "conditions"})),
            R"([{"type":"Ready","status":"True"}])");
  EXPECT_EQ(FindString(*patched, {"metadata", "labels", "a"}), "1");
  EXPECT_EQ(FindString(*patched, {"metadata", "labels", "b"}), "2");
  EXPECT_NE(FindString(*patched, {"metadata", "uid"}), "forged");
  EXPECT_EQ(*Find(*patched, {"metadata", "generation"}), json::value(2));
  // The same patch again: nothing changes, not even the generation.
  patched = api.PatchSandbox("default", "sb-1", patch(R"({"spec":{"operatingMode":"Suspended"}})"));
  ASSERT_TRUE(patched);
  EXPECT_EQ(*Find(*patched, {"metadata", "generation"}), json::value(2));
  // The enum, and a missing object.
  auto bad = api.PatchSandbox("default", "sb-1", patch(R"({"spec":{"operatingMode":"Paused"}})"));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("Unsupported value"), std::string::npos)
      << bad.error().message;
  auto missing = api.PatchSandbox("default", "sb-2", patch(R"({"spec":{}})"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_EQ((*server)->CountRequests("PATCH", "/sandboxes/sb-1"), 3);
}

TEST(SandboxApiTest, DiscoveryPicksV1beta1OrFallsBackToV1alpha1) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server);
  auto client = MakeClient(**server);
  SandboxApi api(*client);
  auto t = api.ClaimType();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->ApiVersion(), "extensions.agents.x-k8s.io/v1beta1");

  FakeApiServerOptions old;
  old.extension_versions = {"v1alpha1"};
  old.sandbox_versions = {"v1alpha1"};
  auto old_server = FakeApiServer::Start(old);
  ASSERT_TRUE(old_server);
  auto old_client = MakeClient(**old_server);
  SandboxApi old_api(*old_client);
  t = old_api.ClaimType();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->version, "v1alpha1");
  EXPECT_EQ(old_api.SandboxType()->version, "v1alpha1");

  FakeApiServerOptions none;
  none.extension_versions = {};
  auto bare = FakeApiServer::Start(none);
  ASSERT_TRUE(bare);
  auto bare_client = MakeClient(**bare);
  SandboxApi bare_api(*bare_client);
  auto missing = bare_api.ClaimType();
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("with its extensions"), std::string::npos);

  FakeApiServerOptions forbidden;
  forbidden.discovery_forbidden = true;
  auto locked = FakeApiServer::Start(forbidden);
  ASSERT_TRUE(locked);
  auto locked_client = MakeClient(**locked);
  SandboxApi locked_api(*locked_client);
  EXPECT_EQ(locked_api.ClaimType()->version, "v1beta1");  // assumed
  locked_api.FallBackToV1alpha1();
  EXPECT_EQ(locked_api.ClaimType()->version, "v1alpha1");
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
