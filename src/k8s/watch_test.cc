#include "k8s/watch.h"

#include <gtest/gtest.h>

#include <thread>

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
using testing::WatchRecorder;
using namespace std::chrono_literals;

// ------------------------------------------------------------------ against the fake API server

TEST(WatchObjectsTest, DeliversEventsAndBookmarks) {
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

TEST(WatchObjectsTest, BookmarkAdvancesTheResumeVersion) {
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

TEST(WatchObjectsTest, RelistsAfter410ErrorEvent) {
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

TEST(WatchObjectsTest, RelistsAfterHttp410AndReportsDeletionsMissedMeanwhile) {
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

TEST(WatchObjectsTest, ResumesAfterApiserverRestartAndDroppedConnections) {
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

TEST(WatchObjectsTest, StopsAtTheDeadline) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server);
  auto client = MakeClient(**server);
  WatchOptions wo;
  wo.resource_version = "0";
  wo.deadline = std::chrono::steady_clock::now() + 300ms;
  auto r = WatchObjects(*client, kClaims, "default", wo, [](const WatchEvent&) { return true; });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kTimeout);
}

}  // namespace
}  // namespace deepbox::k8s
