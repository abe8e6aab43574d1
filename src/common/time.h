// Wall-clock time and RFC 3339 text: the one parser and the formatters every
// record, log line and wire format uses.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"

namespace deepbox {

using SystemTime = std::chrono::system_clock::time_point;

// Wall clock, milliseconds since the epoch.
int64_t NowMs();

// CLOCK_MONOTONIC in nanoseconds: for deadlines and durations (async-signal-safe).
int64_t MonotonicNs();

// "2026-08-22T00:27:14Z", "2026-08-22T00:27:14.5+02:00" (fractions to the
// nanosecond; 't', 'z' and a space for 'T' too). Times a system_clock cannot
// hold (after 2261) are errors, not wrapped.
Result<SystemTime> ParseRfc3339(std::string_view text);
// The same, as milliseconds since the epoch (sub-millisecond digits dropped).
Result<int64_t> ParseRfc3339Ms(std::string_view text);

// "2026-08-22T00:27:14Z": whole seconds, UTC (the Kubernetes SDK's format).
std::string FormatRfc3339(SystemTime t);
// "2026-01-01T00:00:00.123Z": milliseconds, UTC (deepbox's own records).
std::string FormatRfc3339Ms(int64_t unix_ms);
// Python's datetime.now(UTC).isoformat(): "2026-08-22T00:27:14.123456+00:00".
std::string FormatIsoMicros(SystemTime t);

}  // namespace deepbox
