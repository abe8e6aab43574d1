// The retry policy shared by the HTTP model clients: exponential backoff with
// full jitter, server hints (retry-after, retry-after-ms, x-should-retry),
// and cancellation during the wait.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>

#include "agent/model/model.h"
#include "common/error.h"
#include "net/http.h"

namespace deepbox::agent {

struct RetryPolicy {
  int max_retries = 5;  // attempts = max_retries + 1
  std::chrono::milliseconds base_delay{500};
  std::chrono::milliseconds max_delay{30000};
  // A server hint longer than this is ignored in favour of the backoff.
  std::chrono::milliseconds max_retry_after{60000};
  // Waits `delay` unless *cancel becomes true; returns false when cancelled.
  // Empty = SleepUnlessCancelled. Tests install a recorder to observe the
  // delays without sleeping.
  std::function<bool(std::chrono::milliseconds delay, const std::atomic<bool>* cancel)> sleep{};
};

// Sleeps in short slices, returning false as soon as *cancel is true.
bool SleepUnlessCancelled(std::chrono::milliseconds delay, const std::atomic<bool>* cancel);

// Full jitter: uniform in [0, min(max_delay, base_delay * 2^retry)], with
// `unit` in [0, 1) the random draw. retry is 0 for the first retry.
std::chrono::milliseconds BackoffDelay(const RetryPolicy& policy, int retry, double unit);

// retry-after-ms (milliseconds), else retry-after (seconds or an HTTP date).
std::optional<std::chrono::milliseconds> ParseRetryAfter(const net::Headers& headers);

// 408, 409, 429, 5xx (529 included), unless the server's x-should-retry says otherwise.
bool IsRetryableStatus(int status, const net::Headers& headers);

// How one attempt failed.
struct AttemptError {
  Error error{};
  bool retryable = false;
  std::optional<std::chrono::milliseconds> retry_after{};  // the server's hint
};
using AttemptResult = tl::expected<ModelResponse, AttemptError>;

inline bool IsCancelled(const std::atomic<bool>* cancel) {
  return cancel != nullptr && cancel->load(std::memory_order_relaxed);
}
Error CancelledError();

// Runs `attempt` until it succeeds, fails for good, the policy's retries are
// spent (the error then says how many attempts were made), or *cancel is set
// (CANCELLED). on_retry, if set, runs before each backoff wait.
Result<ModelResponse> RunWithRetries(const RetryPolicy& policy, const std::atomic<bool>* cancel,
                                     const std::function<void(const RetryNotice&)>& on_retry,
                                     const std::function<AttemptResult()>& attempt);

}  // namespace deepbox::agent
