#include "agent/model/retry.h"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <random>
#include <string>
#include <thread>

namespace deepbox::agent {

using std::chrono::milliseconds;

bool SleepUnlessCancelled(milliseconds delay, const std::atomic<bool>* cancel) {
  auto end = std::chrono::steady_clock::now() + delay;
  for (;;) {
    if (IsCancelled(cancel)) return false;
    auto now = std::chrono::steady_clock::now();
    if (now >= end) return true;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(end - now, milliseconds(20)));
  }
}

milliseconds BackoffDelay(const RetryPolicy& policy, int retry, double unit) {
  double ceiling =
      static_cast<double>(policy.base_delay.count()) * std::ldexp(1.0, std::clamp(retry, 0, 60));
  ceiling = std::min(ceiling, static_cast<double>(policy.max_delay.count()));
  unit = std::clamp(unit, 0.0, 1.0);
  return milliseconds(static_cast<int64_t>(ceiling * unit));
}

namespace {

std::optional<double> ParseNumber(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  if (text.empty()) return std::nullopt;
  // std::from_chars for double is in libstdc++ 11+.
  double v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

// A server's hint, capped at a day: casting a huge double to an integer is
// undefined behaviour, and no caller waits that long anyway.
milliseconds HintMs(double ms) {
  constexpr double kMaxMs = 24.0 * 3600 * 1000;
  return milliseconds(static_cast<int64_t>(std::clamp(ms, 0.0, kMaxMs)));
}

}  // namespace

std::optional<milliseconds> ParseRetryAfter(const net::Headers& headers) {
  if (auto ms = headers.Get("retry-after-ms")) {
    if (auto v = ParseNumber(*ms); v && *v >= 0) return HintMs(*v);
  }
  auto ra = headers.Get("retry-after");
  if (!ra) return std::nullopt;
  if (auto v = ParseNumber(*ra)) {
    if (*v < 0) return std::nullopt;
    return HintMs(*v * 1000);
  }
  struct tm tm {};
  const char* end = ::strptime(ra->c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (end == nullptr) return std::nullopt;
  time_t when = ::timegm(&tm);
  time_t now = ::time(nullptr);
  return HintMs(static_cast<double>(when - now) * 1000);
}

bool IsRetryableStatus(int status, const net::Headers& headers) {
  if (auto hint = headers.Get("x-should-retry")) {
    if (*hint == "true") return true;
    if (*hint == "false") return false;
  }
  return status == 408 || status == 409 || status == 429 || status >= 500;
}

Error CancelledError() { return Error(ErrorCode::kCancelled, "model call cancelled"); }

Result<ModelResponse> RunWithRetries(const RetryPolicy& policy, const std::atomic<bool>* cancel,
                                     const std::function<void(const RetryNotice&)>& on_retry,
                                     const std::function<AttemptResult()>& attempt) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int max_retries = std::max(0, policy.max_retries);
  for (int retry = 0;; ++retry) {
    if (IsCancelled(cancel)) return tl::unexpected(CancelledError());
    AttemptResult r = attempt();
    if (r) return std::move(*r);
    if (IsCancelled(cancel) || r.error().error.code == ErrorCode::kCancelled) {
      return tl::unexpected(CancelledError());
    }
    if (!r.error().retryable || retry >= max_retries) {
      Error e = std::move(r.error().error);
      if (retry > 0) e.message += fmt::format(" (gave up after {} attempts)", retry + 1);
      return tl::unexpected(std::move(e));
    }
    milliseconds delay = BackoffDelay(policy, retry, unit(rng));
    if (auto hint = r.error().retry_after; hint && *hint <= policy.max_retry_after) delay = *hint;
    if (on_retry) {
      RetryNotice notice;
      notice.attempt = retry + 1;
      notice.max_attempts = max_retries + 1;
      notice.delay = delay;
      notice.error = r.error().error;
      on_retry(notice);
    }
    bool slept = policy.sleep ? policy.sleep(delay, cancel) : SleepUnlessCancelled(delay, cancel);
    if (!slept) return tl::unexpected(CancelledError());
  }
}

}  // namespace deepbox::agent
