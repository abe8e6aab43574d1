#include "common/time.h"

#include <gtest/gtest.h>

namespace deepbox {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

TEST(TimeTest, MillisecondRecordsRoundTrip) {
  int64_t t = 1767225600123;  // 2026-01-01T00:00:00.123Z
  EXPECT_EQ(FormatRfc3339Ms(t), "2026-01-01T00:00:00.123Z");
  EXPECT_EQ(ParseRfc3339Ms("2026-01-01T00:00:00.123Z").value(), t);
  EXPECT_EQ(ParseRfc3339Ms("2026-01-01T00:00:00Z").value(), t - 123);
  EXPECT_EQ(ParseRfc3339Ms("2026-01-01T00:00:00.1239Z").value(), t);  // below 1 ms: dropped
  EXPECT_EQ(ParseRfc3339Ms("2026-01-01T02:00:00.123+02:00").value(), t);
  EXPECT_FALSE(ParseRfc3339Ms("2026-01-01 00:00:00").has_value());  // no zone
  EXPECT_EQ(FormatRfc3339Ms(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatRfc3339Ms(-1), "1969-12-31T23:59:59.999Z");
  for (int64_t ms : {int64_t{0}, int64_t{1}, int64_t{999}, t, NowMs()}) {
    EXPECT_EQ(ParseRfc3339Ms(FormatRfc3339Ms(ms)).value(), ms) << ms;
  }
}

TEST(TimeTest, ParsesZonesAndFractions) {
  SystemTime epoch{};
  EXPECT_EQ(ParseRfc3339("1970-01-01T00:00:00Z").value(), epoch);
  EXPECT_EQ(ParseRfc3339("1970-01-01t01:00:00+01:00").value(), epoch);
  EXPECT_EQ(ParseRfc3339("1969-12-31T23:00:00.5-01:00").value(),
            epoch + std::chrono::duration_cast<SystemTime::duration>(milliseconds(500)));
  EXPECT_EQ(ParseRfc3339("1970-01-01T00:00:00.000000001z").value(),
            epoch + std::chrono::duration_cast<SystemTime::duration>(nanoseconds(1)));
  for (const char* bad :
       {"", "1970-01-01", "1970-01-01T00:00:00", "1970-13-01T00:00:00Z", "1970-01-01T24:00:00Z",
        "1970-01-01T00:00:00.Z", "1970-01-01T00:00:00+1:00", "1970-01-01T00:00:00Z ",
        "9999-12-31T23:59:59Z"}) {
    EXPECT_FALSE(ParseRfc3339(bad).has_value()) << bad;
  }
}

TEST(TimeTest, FormatsTheWireFormats) {
  SystemTime t = SystemTime{} + seconds(1755822434) + milliseconds(123);
  EXPECT_EQ(FormatRfc3339(t), "2025-08-22T00:27:14Z");
  EXPECT_EQ(FormatIsoMicros(t), "2025-08-22T00:27:14.123000+00:00");
  EXPECT_EQ(ParseRfc3339(FormatRfc3339(t)).value(), SystemTime{} + seconds(1755822434));
}

}  // namespace
}  // namespace deepbox
