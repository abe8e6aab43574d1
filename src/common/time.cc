#include "common/time.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <ctime>

namespace deepbox {

namespace {

bool ParseInt(std::string_view s, int& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t MonotonicNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

Result<SystemTime> ParseRfc3339(std::string_view text) {
  auto bad = [&] {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("'{}' is not an RFC 3339 timestamp", text));
  };
  if (text.size() < 20 || text[4] != '-' || text[7] != '-' ||
      (text[10] != 'T' && text[10] != 't' && text[10] != ' ') || text[13] != ':' ||
      text[16] != ':') {
    return bad();
  }
  std::tm tm{};
  int year, mon, day, hour, min, sec;
  if (!ParseInt(text.substr(0, 4), year) || !ParseInt(text.substr(5, 2), mon) ||
      !ParseInt(text.substr(8, 2), day) || !ParseInt(text.substr(11, 2), hour) ||
      !ParseInt(text.substr(14, 2), min) || !ParseInt(text.substr(17, 2), sec)) {
    return bad();
  }
  if (mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60) {
    return bad();
  }
  size_t i = 19;
  std::chrono::nanoseconds frac{0};
  if (i < text.size() && text[i] == '.') {
    ++i;
    int64_t value = 0;
    int digits = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      if (digits < 9) {
        value = value * 10 + (text[i] - '0');
        ++digits;
      }
      ++i;
    }
    if (digits == 0) return bad();
    while (digits++ < 9) value *= 10;
    frac = std::chrono::nanoseconds(value);
  }
  if (i >= text.size()) return bad();
  int offset_seconds = 0;
  if (text[i] == 'Z' || text[i] == 'z') {
    ++i;
  } else if (text[i] == '+' || text[i] == '-') {
    int sign = text[i] == '-' ? -1 : 1;
    int oh, om;
    if (i + 6 != text.size() || text[i + 3] != ':' || !ParseInt(text.substr(i + 1, 2), oh) ||
        !ParseInt(text.substr(i + 4, 2), om) || oh > 23 || om > 59) {
      return bad();
    }
    offset_seconds = sign * (oh * 3600 + om * 60);
    i += 6;
  } else {
    return bad();
  }
  if (i != text.size()) return bad();
  tm.tm_year = year - 1900;
  tm.tm_mon = mon - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = min;
  tm.tm_sec = sec;
  time_t t = ::timegm(&tm) - offset_seconds;
  // system_clock counts nanoseconds in 64 bits (years 1678..2261): a date
  // beyond that (a server may send 9999-12-31) would overflow the conversion.
  using Duration = std::chrono::system_clock::duration;
  constexpr int64_t kLimit =
      std::chrono::duration_cast<std::chrono::seconds>(Duration::max()).count() - 1;
  if (t > kLimit || t < -kLimit) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("'{}' is outside the representable range of times", text));
  }
  return std::chrono::system_clock::from_time_t(t) + std::chrono::duration_cast<Duration>(frac);
}

Result<int64_t> ParseRfc3339Ms(std::string_view text) {
  auto t = ParseRfc3339(text);
  if (!t) return tl::unexpected(t.error());
  return std::chrono::floor<std::chrono::milliseconds>(*t).time_since_epoch().count();
}

std::string FormatRfc3339(SystemTime t) {
  time_t tt =
      std::chrono::system_clock::to_time_t(std::chrono::time_point_cast<std::chrono::seconds>(t));
  std::tm tm{};
  ::gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string FormatRfc3339Ms(int64_t unix_ms) {
  const int64_t secs = unix_ms >= 0 ? unix_ms / 1000 : (unix_ms - 999) / 1000;  // floor
  const time_t tt = static_cast<time_t>(secs);
  std::tm tm{};
  ::gmtime_r(&tt, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, unix_ms - secs * 1000);
}

std::string FormatIsoMicros(SystemTime t) {
  auto secs = std::chrono::floor<std::chrono::seconds>(t);
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(t - secs).count();
  time_t tt = std::chrono::system_clock::to_time_t(secs);
  std::tm tm{};
  ::gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:06d}+00:00", buf, micros);
}

}  // namespace deepbox
