#include "agent/model/retry.h"

#include <gtest/gtest.h>

#include "agent/model/model.h"
#include "agent/model/profiles.h"

namespace deepbox::agent {
namespace {

using std::chrono::milliseconds;

TEST(BackoffTest, FullJitterStaysUnderTheExponentialCeiling) {
  RetryPolicy p;
  p.base_delay = milliseconds(500);
  p.max_delay = milliseconds(30000);
  EXPECT_EQ(BackoffDelay(p, 0, 0.0), milliseconds(0));
  EXPECT_EQ(BackoffDelay(p, 0, 0.5), milliseconds(250));
  EXPECT_EQ(BackoffDelay(p, 1, 0.5), milliseconds(500));
  EXPECT_EQ(BackoffDelay(p, 3, 1.0), milliseconds(4000));
  EXPECT_EQ(BackoffDelay(p, 6, 1.0), milliseconds(30000));    // 32 s capped at 30 s
  EXPECT_EQ(BackoffDelay(p, 100, 0.5), milliseconds(15000));  // no overflow
}

TEST(RetryAfterTest, ParsesSecondsMillisecondsAndDates) {
  net::Headers h;
  EXPECT_FALSE(ParseRetryAfter(h));
  h.Set("retry-after", "7");
  EXPECT_EQ(ParseRetryAfter(h), milliseconds(7000));
  h.Set("retry-after", "1.5");
  EXPECT_EQ(ParseRetryAfter(h), milliseconds(1500));
  h.Set("retry-after-ms", "250");
  EXPECT_EQ(ParseRetryAfter(h), milliseconds(250));  // the ms header wins
  h.Remove("retry-after-ms");
  h.Set("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT");  // in the past
  EXPECT_EQ(ParseRetryAfter(h), milliseconds(0));
  h.Set("retry-after", "soon");
  EXPECT_FALSE(ParseRetryAfter(h));
  h.Set("retry-after", "-3");
  EXPECT_FALSE(ParseRetryAfter(h));
}

TEST(RetryAfterTest, HugeHintsAreCappedAtADay) {
  // Casting these to an integer count of milliseconds used to be undefined.
  const auto day = std::chrono::duration_cast<milliseconds>(std::chrono::hours(24));
  net::Headers h;
  h.Set("retry-after-ms", "1e300");
  EXPECT_EQ(ParseRetryAfter(h), day);
  h.Remove("retry-after-ms");
  h.Set("retry-after", "1e17");
  EXPECT_EQ(ParseRetryAfter(h), day);
  h.Set("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT");
  EXPECT_EQ(ParseRetryAfter(h), day);
  h.Set("retry-after", "1e400");  // not finite: no hint
  EXPECT_FALSE(ParseRetryAfter(h));
}

TEST(RetryableStatusTest, FollowsThePolicyAndTheServerHint) {
  net::Headers none;
  for (int s : {408, 409, 429, 500, 502, 503, 504, 529})
    EXPECT_TRUE(IsRetryableStatus(s, none)) << s;
  for (int s : {400, 401, 403, 404, 413, 422}) EXPECT_FALSE(IsRetryableStatus(s, none)) << s;
  net::Headers no;
  no.Set("x-should-retry", "false");
  EXPECT_FALSE(IsRetryableStatus(503, no));
  net::Headers yes;
  yes.Set("x-should-retry", "true");
  EXPECT_TRUE(IsRetryableStatus(400, yes));
}

TEST(RetryLoopTest, UsesTheServerHintThenBackoffAndCountsAttempts) {
  std::vector<milliseconds> delays;
  RetryPolicy p;
  p.max_retries = 3;
  p.base_delay = milliseconds(100);
  p.max_delay = milliseconds(1000);
  p.sleep = [&](milliseconds d, const std::atomic<bool>*) {
    delays.push_back(d);
    return true;
  };
  int calls = 0, retries = 0;
  std::vector<RetryNotice> notices;
  auto r = RunWithRetries(
      p, nullptr,
      [&](const RetryNotice& n) {
        ++retries;
        notices.push_back(n);
      },
      [&]() -> AttemptResult {
        ++calls;
        AttemptError e{Error(ErrorCode::kUnavailable, "busy"), true, std::nullopt};
        if (calls == 1) e.retry_after = milliseconds(4321);
        if (calls == 2) e.retry_after = milliseconds(999999);  // beyond max_retry_after: ignored
        return tl::unexpected(e);
      });
  ASSERT_FALSE(r);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(retries, 3);
  EXPECT_EQ(r.error().message, "busy (gave up after 4 attempts)");
  ASSERT_EQ(delays.size(), 3u);
  EXPECT_EQ(delays[0], milliseconds(4321));
  EXPECT_LE(delays[1], milliseconds(200));
  EXPECT_LE(delays[2], milliseconds(400));
  // Each retry is announced with what failed, the attempt and the wait.
  ASSERT_EQ(notices.size(), 3u);
  EXPECT_EQ(notices[0].attempt, 1);
  EXPECT_EQ(notices[2].attempt, 3);
  EXPECT_EQ(notices[0].max_attempts, 4);
  EXPECT_EQ(notices[0].delay, milliseconds(4321));
  EXPECT_EQ(notices[1].delay, delays[1]);
  EXPECT_EQ(notices[0].error.message, "busy");
}

TEST(RetryLoopTest, StopsAtOnceOnAFinalError) {
  RetryPolicy p;
  p.sleep = [](milliseconds, const std::atomic<bool>*) { return true; };
  int calls = 0;
  auto r = RunWithRetries(p, nullptr, nullptr, [&]() -> AttemptResult {
    ++calls;
    return tl::unexpected(AttemptError{Error(ErrorCode::kInvalidArgument, "bad"), false, {}});
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(r.error().message, "bad");
}

TEST(RetryLoopTest, CancellationDuringTheWaitEndsTheCall) {
  std::atomic<bool> cancel{false};
  RetryPolicy p;  // the real sleeper; a 1-hour hint
  int calls = 0;
  auto r = RunWithRetries(
      p, &cancel, [&](const RetryNotice&) { cancel = true; },
      [&]() -> AttemptResult {
        ++calls;
        return tl::unexpected(
            AttemptError{Error(ErrorCode::kUnavailable, "busy"), true, milliseconds(3600 * 1000)});
      });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kCancelled);
  EXPECT_EQ(calls, 1);
}

TEST(SleepTest, ReturnsFalseWhenCancelled) {
  std::atomic<bool> cancel{true};
  EXPECT_FALSE(SleepUnlessCancelled(milliseconds(3600 * 1000), &cancel));
  EXPECT_TRUE(SleepUnlessCancelled(milliseconds(1), nullptr));
}

TEST(ProfileTest, KnownModelsHavePricesAndUnknownOnesDoNot) {
  ModelProfile sonnet = AnthropicProfile("claude-sonnet-4-6");
  EXPECT_EQ(sonnet.max_input_tokens, 200000);
  EXPECT_DOUBLE_EQ(sonnet.usd_per_mtok_input, 3);
  EXPECT_DOUBLE_EQ(sonnet.usd_per_mtok_output, 15);
  EXPECT_DOUBLE_EQ(sonnet.usd_per_mtok_cache_read, 0.30);
  EXPECT_DOUBLE_EQ(sonnet.usd_per_mtok_cache_write, 3.75);
  EXPECT_DOUBLE_EQ(AnthropicProfile("claude-sonnet-4-5-20250929").usd_per_mtok_input, 3);
  EXPECT_DOUBLE_EQ(AnthropicProfile("claude-opus-4-1-20250805").usd_per_mtok_output, 75);
  EXPECT_DOUBLE_EQ(AnthropicProfile("claude-opus-4-6").usd_per_mtok_output, 25);
  EXPECT_DOUBLE_EQ(AnthropicProfile("claude-haiku-4-5").usd_per_mtok_input, 1);
  ModelProfile unknown = AnthropicProfile("claude-future-9");
  EXPECT_EQ(unknown.max_input_tokens, 200000);
  EXPECT_EQ(unknown.usd_per_mtok_input, 0);
  EXPECT_EQ(AnthropicDefaultMaxTokens("claude-sonnet-4-6"), 16000);
  EXPECT_DOUBLE_EQ(OpenAiProfile("gpt-4o-mini-2024-07-18").usd_per_mtok_input, 0.15);
  EXPECT_DOUBLE_EQ(OpenAiProfile("gpt-4o").usd_per_mtok_input, 2.5);
  EXPECT_EQ(OpenAiProfile("qwen2.5-coder").max_input_tokens, 0);

  Usage u{1'000'000, 100'000, 2'000'000, 10'000};
  // 3 + 1.5 + 0.6 + 0.0375
  EXPECT_NEAR(sonnet.CostUsd(u), 5.1375, 1e-9);
  Usage sum;
  sum += u;
  sum += u;
  EXPECT_EQ(sum.cache_read_tokens, 4'000'000);
}

TEST(MessageTest, FactoriesSetRoles) {
  Message t = Message::Tool("toolu_1", "ls", "oops", true);
  EXPECT_EQ(t.role, Role::kTool);
  EXPECT_EQ(t.tool_call_id, "toolu_1");
  EXPECT_TRUE(t.is_error);
  Message a = Message::Assistant("hi", {ToolCall{"toolu_2", "ls", {}, ""}});
  EXPECT_EQ(a.role, Role::kAssistant);
  EXPECT_EQ(a.tool_calls.size(), 1u);
  EXPECT_EQ(Message::User("q").role, Role::kUser);
}

}  // namespace
}  // namespace deepbox::agent
