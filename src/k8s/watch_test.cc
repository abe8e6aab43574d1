#include "k8s/watch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "k8s/testing/client_fixtures.h"
#include "k8s/testing/fake_api_server.h"

namespace deepbox::k8s {
namespace {

using testing::Claim;
using testing::FakeApiServer;
using testing::FakeApiServerOptions;
using testing::FastOptions;
using ::testing::HasSubstr;
using testing::kClaims;
using testing::MakeClient;
using testing::WatchRecorder;
using namespace std::chrono_literals;
using State = WatchMachine::State;

// ------------------------------------------------------------------ step by step, without HTTP

const std::string kPath = kClaims.Path("default");

WatchRetryPolicy TestPolicy() {
  WatchRetryPolicy p;
  p.initial_backoff = 100ms;
  p.max_backoff = 1000ms;
  p.max_failures = 3;
  return p;
}

json::object Object(const std::string& name, const std::string& version) {
  json::object meta;
  meta["name"] = name;
  meta["resourceVersion"] = version;
  json::object obj;
  obj["metadata"] = std::move(meta);
  return obj;
}

// One line of a watch stream.
std::string Line(std::string_view type, const json::object& object) {
  json::object event;
  event["type"] = type;
  event["object"] = object;
  return ToJson(event);
}

std::string GoneLine() {
  return Line("ERROR", *ParseJsonObject(R"({"kind":"Status","code":410,"reason":"Expired"})"));
}

ObjectList Listed(std::string version, std::vector<json::object> items) {
  return ObjectList{std::move(version), std::move(items)};
}

// "ADDED a, DELETED b (listed)": what the caller is told.
std::string Describe(const std::vector<WatchEvent>& events) {
  std::string out;
  for (const auto& e : events) {
    if (!out.empty()) out += ", ";
    out += std::string(WatchEventTypeName(e.type)) + " " +
           FindString(e.object, {"metadata", "name"}) + (e.synthetic ? " (listed)" : "");
  }
  return out;
}

WatchOptions FromVersion(std::string version) {
  WatchOptions o;
  o.resource_version = std::move(version);
  return o;
}

const auto kNow = std::chrono::steady_clock::now();

TEST(WatchMachineTest, ListsFirstThenWatchesFromTheListsVersion) {
  WatchMachine m(kPath, WatchOptions{}, TestPolicy());
  EXPECT_EQ(m.state(), State::kListing);
  EXPECT_EQ(m.resource_version(), "");
  auto events = m.OnListed(Listed("10", {Object("a", "3"), Object("b", "7")}));
  EXPECT_EQ(Describe(events), "ADDED a (listed), ADDED b (listed)");
  EXPECT_EQ(m.state(), State::kWatching);
  EXPECT_EQ(m.resource_version(), "10");
  EXPECT_EQ(m.stats().relists, 1);
  EXPECT_EQ(m.stats().resource_version, "10");
  auto request = m.NextRequest(300s, kNow);
  EXPECT_EQ(request.target,
            kPath + "?watch=1&allowWatchBookmarks=true&resourceVersion=10&timeoutSeconds=300");
  EXPECT_EQ(request.timeout, 300s);
}

TEST(WatchMachineTest, AGivenVersionIsWatchedWithoutAList) {
  WatchOptions o = FromVersion("42");
  o.label_selector = "app=x";
  o.field_selector = "metadata.name=a";
  o.allow_bookmarks = false;
  WatchMachine m(kPath, o, TestPolicy());
  EXPECT_EQ(m.state(), State::kWatching);
  EXPECT_EQ(m.NextRequest(300s, kNow).target,
            kPath +
                "?watch=1&resourceVersion=42&timeoutSeconds=300&labelSelector=app%3Dx"
                "&fieldSelector=metadata.name%3Da");
}

TEST(WatchMachineTest, EventsAndBookmarksMoveTheResumeVersion) {
  WatchMachine m(kPath, FromVersion("10"), TestPolicy());
  m.OnRequestSent();
  auto added = m.OnLine(Line("ADDED", Object("a", "11")));
  ASSERT_TRUE(added);
  EXPECT_EQ(Describe({*added}), "ADDED a");
  EXPECT_EQ(m.resource_version(), "11");
  EXPECT_FALSE(m.OnLine(" \r"));  // blank lines are skipped
  auto bookmark = m.OnLine(Line("BOOKMARK", Object("", "15")) + "\r");
  ASSERT_TRUE(bookmark);
  EXPECT_EQ(bookmark->type, WatchEventType::kBookmark);
  EXPECT_EQ(m.state(), State::kWatching);
  EXPECT_EQ(m.resource_version(), "15");
  EXPECT_EQ(m.stats().bookmarks, 1);
  EXPECT_EQ(m.stats().resource_version, "15");
  EXPECT_THAT(m.NextRequest(300s, kNow).target, HasSubstr("&resourceVersion=15&"));
}

TEST(WatchMachineTest, GoneRelistsWithoutAVersionAndReportsWhatChangedMeanwhile) {
  WatchOptions o = FromVersion("5");
  o.known_objects = {Object("same", "1"), Object("changed", "2"), Object("deleted", "3")};
  WatchMachine m(kPath, o, TestPolicy());
  m.OnRequestSent();
  EXPECT_FALSE(m.OnLine(GoneLine()));
  EXPECT_EQ(m.state(), State::kListing);
  EXPECT_EQ(m.resource_version(), "");  // too old to resume from
  auto events =
      m.OnListed(Listed("20", {Object("same", "1"), Object("changed", "9"), Object("new", "4")}));
  EXPECT_EQ(Describe(events),
            "MODIFIED changed (listed), ADDED new (listed), DELETED deleted (listed)");
  EXPECT_EQ(m.state(), State::kWatching);
  EXPECT_EQ(m.resource_version(), "20");

  // What the stream told it counts too: "new" deleted, then gone from a list.
  m.OnRequestSent();
  EXPECT_TRUE(m.OnLine(Line("ADDED", Object("streamed", "21"))));
  EXPECT_TRUE(m.OnLine(Line("DELETED", Object("new", "22"))));
  m.OnHttpError(410, R"({"kind":"Status","code":410,"reason":"Gone"})");
  EXPECT_EQ(m.state(), State::kListing);
  events = m.OnListed(Listed("30", {Object("same", "1"), Object("changed", "9")}));
  EXPECT_EQ(Describe(events), "DELETED streamed (listed)");
  EXPECT_EQ(m.stats().relists, 2);
}

TEST(WatchMachineTest, AGoneStatusInAnyErrorAnswerRelists) {
  WatchMachine m(kPath, FromVersion("5"), TestPolicy());
  m.OnRequestSent();
  m.OnHttpError(500, R"({"kind":"Status","code":410,"reason":"Expired"})");
  EXPECT_EQ(m.state(), State::kListing);
}

TEST(WatchMachineTest, ADroppedConnectionResumesFromTheLastVersion) {
  WatchMachine m(kPath, FromVersion("5"), TestPolicy());
  m.OnRequestSent();
  ASSERT_TRUE(m.OnLine(Line("ADDED", Object("a", "6"))));
  m.OnStreamDropped();
  EXPECT_EQ(m.state(), State::kWatching);  // the stream was working: at once
  EXPECT_EQ(m.stats().reconnects, 1);
  EXPECT_THAT(m.NextRequest(300s, kNow).target, HasSubstr("&resourceVersion=6&"));

  // Refused connections back off, longer each time...
  std::vector<std::chrono::milliseconds> backoffs;
  for (int i = 0; i < 5; ++i) {
    m.OnRequestSent();
    m.OnStreamDropped();
    ASSERT_EQ(m.state(), State::kBackingOff);
    backoffs.push_back(m.backoff());
    m.OnBackoffDone();
    ASSERT_EQ(m.state(), State::kWatching);
  }
  EXPECT_EQ(backoffs, (std::vector<std::chrono::milliseconds>{100ms, 200ms, 400ms, 800ms, 1000ms}));
  EXPECT_EQ(m.resource_version(), "6");
  // ...until a stream delivers again.
  m.OnRequestSent();
  ASSERT_TRUE(m.OnLine(Line("MODIFIED", Object("a", "7"))));
  m.OnStreamDropped();
  EXPECT_EQ(m.state(), State::kWatching);
  m.OnRequestSent();
  m.OnStreamDropped();
  EXPECT_EQ(m.backoff(), 100ms);
  EXPECT_EQ(m.stats().reconnects, 8);
  EXPECT_EQ(m.stats().watch_requests, 8);
}

TEST(WatchMachineTest, TheServerEndingTheStreamResumesAtOnce) {
  WatchMachine m(kPath, FromVersion("5"), TestPolicy());
  m.OnRequestSent();
  m.OnHttpError(503, "");
  EXPECT_EQ(m.backoff(), 100ms);
  m.OnBackoffDone();
  m.OnRequestSent();
  m.OnStreamEnded();  // timeoutSeconds: a clean end, and progress
  EXPECT_EQ(m.state(), State::kWatching);
  EXPECT_EQ(m.resource_version(), "5");
  m.OnRequestSent();
  m.OnHttpError(503, "");
  EXPECT_EQ(m.backoff(), 100ms);
  EXPECT_EQ(m.stats().reconnects, 3);
}

TEST(WatchMachineTest, RetryableAnswersBackOffUntilTheBudgetIsSpent) {
  WatchMachine m(kPath, FromVersion("5"), TestPolicy());
  for (auto expected : {100ms, 200ms, 400ms}) {
    m.OnRequestSent();
    m.OnHttpError(503, "");
    ASSERT_EQ(m.state(), State::kBackingOff);
    EXPECT_EQ(m.backoff(), expected);
    m.OnBackoffDone();
  }
  m.OnRequestSent();
  m.OnHttpError(429, "");
  ASSERT_EQ(m.state(), State::kFailed);
  EXPECT_EQ(m.error().code, ErrorCode::kResourceExhausted);
  EXPECT_EQ(m.error().message, "kubernetes API watch " + kPath + ": 429 TooManyRequests");

  WatchMachine forbidden(kPath, FromVersion("5"), TestPolicy());
  forbidden.OnRequestSent();
  forbidden.OnHttpError(403, R"({"kind":"Status","code":403,"message":"no"})");
  ASSERT_EQ(forbidden.state(), State::kFailed);  // at once
  EXPECT_EQ(forbidden.error().code, ErrorCode::kPermissionDenied);
}

TEST(WatchMachineTest, A401RefreshesTheCredentialsOnce) {
  WatchRetryPolicy policy = TestPolicy();
  policy.can_refresh_credentials = true;
  WatchMachine m(kPath, FromVersion("5"), policy);
  m.OnRequestSent();
  m.OnHttpError(401, "");
  ASSERT_EQ(m.state(), State::kRefreshingCredentials);
  m.OnCredentialsRefreshed();
  ASSERT_EQ(m.state(), State::kWatching);
  m.OnRequestSent();
  m.OnHttpError(401, "");
  ASSERT_EQ(m.state(), State::kFailed);
  EXPECT_EQ(m.error().code, ErrorCode::kUnauthenticated);

  WatchMachine fixed_token(kPath, FromVersion("5"), TestPolicy());
  fixed_token.OnRequestSent();
  fixed_token.OnHttpError(401, "");
  EXPECT_EQ(fixed_token.state(), State::kFailed);
}

TEST(WatchMachineTest, AFailedListBacksOffWhenTransientAndFailsOtherwise) {
  WatchMachine m(kPath, WatchOptions{}, TestPolicy());
  EXPECT_TRUE(m.OnListed(MakeError(ErrorCode::kUnavailable, "refused")).empty());
  ASSERT_EQ(m.state(), State::kBackingOff);
  EXPECT_EQ(m.backoff(), 100ms);
  EXPECT_EQ(m.stats().reconnects, 1);
  m.OnBackoffDone();
  ASSERT_EQ(m.state(), State::kListing);
  m.OnListed(MakeError(ErrorCode::kPermissionDenied, "GET ...: 403 Forbidden"));
  ASSERT_EQ(m.state(), State::kFailed);
  EXPECT_EQ(m.error().message, "GET ...: 403 Forbidden");
  EXPECT_EQ(m.stats().relists, 0);
}

TEST(WatchMachineTest, ErrorEventsOtherThanGoneFail) {
  WatchMachine m(kPath, FromVersion("5"), TestPolicy());
  m.OnRequestSent();
  EXPECT_FALSE(m.OnLine(Line(
      "ERROR",
      *ParseJsonObject(R"({"kind":"Status","code":403,"reason":"Forbidden","message":"no"})"))));
  ASSERT_EQ(m.state(), State::kFailed);
  EXPECT_EQ(m.error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(m.error().message, "kubernetes API watch " + kPath + ": 403 Forbidden: no");
}

TEST(WatchMachineTest, MalformedStreamsFail) {
  for (std::string line : {std::string("not json"), std::string(R"({"type":"ADDED","object":"x"})"),
                           std::string(R"({"type":"EXPLODED","object":{}})")}) {
    WatchMachine m(kPath, FromVersion("5"), TestPolicy());
    m.OnRequestSent();
    EXPECT_FALSE(m.OnLine(line)) << line;
    ASSERT_EQ(m.state(), State::kFailed) << line;
    EXPECT_EQ(m.error().code, ErrorCode::kInternal) << line;
  }
  WatchMachine m(kPath, FromVersion("5"), TestPolicy());
  m.OnRequestSent();
  m.OnLineTooLong(64);
  ASSERT_EQ(m.state(), State::kFailed);
  EXPECT_EQ(m.error().code, ErrorCode::kResourceExhausted);
  EXPECT_EQ(m.error().message, "kubernetes API watch " + kPath + ": event larger than 64 bytes");
}

TEST(WatchMachineTest, TheDeadlineBoundsTheServersTimeoutAndEndsTheWatch) {
  WatchOptions o = FromVersion("5");
  o.deadline = kNow + 2500ms;
  WatchMachine m(kPath, o, TestPolicy());
  auto request = m.NextRequest(300s, kNow);
  EXPECT_EQ(request.timeout, 3s);  // rounded up: not before the deadline
  EXPECT_THAT(request.target, HasSubstr("&timeoutSeconds=3"));
  EXPECT_EQ(m.NextRequest(2s, kNow).timeout, 2s);
  EXPECT_EQ(m.NextRequest(300s, kNow + 10s).timeout, 1s);
  m.OnDeadlinePassed();
  ASSERT_EQ(m.state(), State::kFailed);
  EXPECT_EQ(m.error().code, ErrorCode::kTimeout);
  EXPECT_EQ(m.error().message, "kubernetes API watch " + kPath + ": deadline passed");
}

TEST(WatchMachineTest, TheCallerStopsOrCancels) {
  WatchMachine m(kPath, FromVersion("5"), TestPolicy());
  m.OnRequestSent();
  ASSERT_TRUE(m.OnLine(Line("ADDED", Object("a", "6"))));
  m.OnCallerStopped();
  EXPECT_EQ(m.state(), State::kStopped);
  EXPECT_TRUE(m.done());
  EXPECT_EQ(m.stats().resource_version, "6");

  WatchMachine cancelled(kPath, FromVersion("5"), TestPolicy());
  cancelled.OnCancelled();
  EXPECT_TRUE(cancelled.done());
  EXPECT_EQ(cancelled.error().code, ErrorCode::kCancelled);
}

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

TEST(WatchObjectsTest, WaitsWithTheClientsSleeper) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server);
  std::mutex mu;
  std::vector<std::chrono::milliseconds> slept;
  ClientOptions opts = FastOptions();
  opts.sleep = [&](std::chrono::milliseconds d) {
    std::lock_guard lock(mu);
    slept.push_back(d);
  };
  auto client = MakeClient(**server, opts);
  (*server)->FailNext(2, 503, "", "GET");
  WatchRecorder rec(*client, FromVersion("0"), "stop");
  ASSERT_TRUE((*server)->WaitForWatches(1));
  ASSERT_TRUE(client->Create(kClaims, "default", Claim("stop")));
  auto stats = rec.Join();
  ASSERT_TRUE(stats) << stats.error().ToString();
  EXPECT_EQ(stats->reconnects, 2);
  std::lock_guard lock(mu);
  EXPECT_EQ(slept, (std::vector<std::chrono::milliseconds>{5ms, 10ms}));
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
