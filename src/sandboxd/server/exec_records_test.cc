#include "sandboxd/server/exec_records.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <thread>
#include <vector>

namespace deepbox::sandboxd {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> FollowAll(ExecRecord& r, uint64_t from, uint64_t* gap = nullptr) {
  std::vector<std::string> got;
  bool ok = r.Follow(
      from,
      [&](std::string_view l) {
        got.emplace_back(l);
        return true;
      },
      [&](uint64_t, uint64_t dropped) {
        if (gap != nullptr) *gap = dropped;
      },
      [] { return true; }, 10ms);
  EXPECT_TRUE(ok);
  return got;
}

TEST(ExecRecordsTest, TheSameIdAttachesInsteadOfRunningAgain) {
  ExecRecords records;
  bool existed = true;
  auto a = records.Begin("exec-0123456789", &existed);
  ASSERT_TRUE(a);
  EXPECT_FALSE(existed);
  auto b = records.Begin("exec-0123456789", &existed);
  ASSERT_TRUE(b);
  EXPECT_TRUE(existed);
  EXPECT_EQ(a->get(), b->get());
  EXPECT_FALSE(records.Begin("short", &existed));
  EXPECT_FALSE(records.Begin("bad id with spaces", &existed));
  EXPECT_FALSE(records.Find("exec-unknown-000"));
}

TEST(ExecRecordsTest, CancelMakesTheCancelFdReadable) {
  ExecRecords records;
  auto r = *records.Begin("exec-cancel-0001", nullptr);
  ASSERT_GE(r->cancel_fd(), 0);
  pollfd p{r->cancel_fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0);  // not before
  r->Cancel();
  EXPECT_TRUE(r->cancelled());
  EXPECT_EQ(::poll(&p, 1, 0), 1);  // the runner's poll wakes at once
  r->Cancel();                     // twice is harmless
  EXPECT_EQ(::poll(&p, 1, 0), 1);
}

TEST(ExecRecordsTest, ReattachGetsTheRestAndTheExitWhileAndAfterRunning) {
  ExecRecords records;
  auto r = *records.Begin("exec-abcdefgh", nullptr);
  r->Append("e0\n");
  r->Append("e1\n");
  std::vector<std::string> live;
  std::thread follower([&] { live = FollowAll(*r, 1); });
  std::this_thread::sleep_for(20ms);
  r->Append("e2\n");
  r->Finish("exit\n");
  follower.join();
  EXPECT_EQ(live, (std::vector<std::string>{"e1\n", "e2\n", "exit\n"}));
  // After the end: from any point, then nothing more to wait for.
  EXPECT_EQ(FollowAll(*r, 0).size(), 4u);
  EXPECT_EQ(FollowAll(*r, 4).size(), 0u);
  EXPECT_EQ(FollowAll(*r, 99).size(), 0u);
  EXPECT_TRUE(records.Find("exec-abcdefgh"));
}

TEST(ExecRecordsTest, TheByteBudgetDropsTheOldestAndSaysSo) {
  ExecRecordsOptions o;
  o.max_bytes_per_exec = 10;
  ExecRecords records(o);
  auto r = *records.Begin("exec-budget-1", nullptr);
  for (int i = 0; i < 5; ++i) r->Append("abcd\n");  // 5 bytes each: 2 fit
  r->Finish("x\n");
  uint64_t gap = 0;
  auto got = FollowAll(*r, 0, &gap);
  EXPECT_EQ(gap, 4u);
  EXPECT_EQ(got, (std::vector<std::string>{"abcd\n", "x\n"}));
  EXPECT_EQ(r->events(), 6u);
}

TEST(ExecRecordsTest, FinishedRecordsExpireAndMakeRoom) {
  ExecRecordsOptions o;
  o.max_records = 2;
  o.keep_after_exit = 50ms;
  ExecRecords records(o);
  auto a = *records.Begin("exec-aaaaaaaa", nullptr);
  auto b = *records.Begin("exec-bbbbbbbb", nullptr);
  // Both running: no room.
  EXPECT_EQ(records.Begin("exec-cccccccc", nullptr).error().code, ErrorCode::kResourceExhausted);
  a->Finish("exit\n");
  ASSERT_TRUE(records.Begin("exec-cccccccc", nullptr));  // a made room
  EXPECT_FALSE(records.Find("exec-aaaaaaaa"));
  b->Finish("exit\n");
  std::this_thread::sleep_for(80ms);
  EXPECT_FALSE(records.Find("exec-bbbbbbbb"));  // expired
}

// The records the map alone holds expire in one sweep (the daemon crash of
// 2026-12-03: the record was freed while the sweep's guard held its mutex).
// With no retention every finished record expires at the next Begin or Find;
// the debug build aborts if a record is destroyed while locked.
TEST(ExecRecordsTest, RecordsOnlyTheMapHoldsExpireTogetherWithoutRetention) {
  ExecRecordsOptions o;
  o.keep_after_exit = 0ms;
  ExecRecords records(o);
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < 5; ++i) {
      auto r = records.Begin(fmt::format("exec-{:04d}-{}", round, i), nullptr);
      ASSERT_TRUE(r) << r.error().ToString();
      (*r)->Append("e\n");
      (*r)->Finish("exit\n");
    }  // the map holds the only reference now
    auto running = records.Begin(fmt::format("exec-{:04d}-running", round), nullptr);
    ASSERT_TRUE(running);
    EXPECT_FALSE(records.Find(fmt::format("exec-{:04d}-0", round)));  // swept, with the others
    EXPECT_EQ(records.size(), 1u + static_cast<size_t>(round));       // the running ones stay
  }
}

TEST(ExecRecordsTest, AFollowerStopsWhenAskedOrWhenItsSinkFails) {
  ExecRecords records;
  auto r = *records.Begin("exec-stopping", nullptr);
  std::atomic<int> polls{0};
  bool ok = r->Follow(
      0, [](std::string_view) { return true; }, nullptr, [&] { return ++polls < 3; }, 5ms);
  EXPECT_FALSE(ok);
  r->Append("e0\n");
  EXPECT_FALSE(r->Follow(
      0, [](std::string_view) { return false; }, nullptr, [] { return true; }, 5ms));
}

}  // namespace
}  // namespace deepbox::sandboxd
