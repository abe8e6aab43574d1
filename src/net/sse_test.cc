#include "net/sse.h"

#include <gtest/gtest.h>

#include <vector>

namespace deepbox::net {
namespace {

TEST(SseTest, ParsesEventsSplitAnywhere) {
  std::string stream =
      "event: message_start\ndata: {\"a\":1}\n\n: keepalive\n\r\n"
      "data: line1\r\ndata: line2\r\n\r\nevent: done\ndata: x\n\n";
  for (size_t split = 1; split < stream.size(); ++split) {
    std::vector<SseEvent> got;
    SseParser p([&](const SseEvent& e) {
      got.push_back(e);
      return true;
    });
    ASSERT_TRUE(p.Feed(stream.substr(0, split)));
    ASSERT_TRUE(p.Feed(stream.substr(split)));
    ASSERT_TRUE(p.Finish());
    ASSERT_EQ(got.size(), 3u) << "split at " << split;
    EXPECT_EQ(got[0].event, "message_start");
    EXPECT_EQ(got[0].data, "{\"a\":1}");
    EXPECT_EQ(got[1].event, "message");
    EXPECT_EQ(got[1].data, "line1\nline2");
    EXPECT_EQ(got[2].event, "done");
  }
}

TEST(SseTest, ReportsIdAndRetry) {
  std::vector<SseEvent> got;
  SseParser p([&](const SseEvent& e) {
    got.push_back(e);
    return true;
  });
  ASSERT_TRUE(p.Feed("id: event-1\nretry: 500\ndata: \n\nretry: soon\ndata: x\n\n"));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].id, "event-1");
  EXPECT_EQ(got[0].retry_ms, 500);
  EXPECT_EQ(got[0].data, "");
  EXPECT_EQ(got[1].retry_ms, -1);  // not digits: ignored
}

TEST(SseTest, CallbackCanStop) {
  int n = 0;
  SseParser p([&](const SseEvent&) { return ++n < 1; });
  EXPECT_FALSE(p.Feed("data: a\n\ndata: b\n\n"));
  EXPECT_EQ(n, 1);
}

TEST(SseTest, FinishFlushesUnterminatedEvent) {
  std::vector<std::string> data;
  SseParser p([&](const SseEvent& e) {
    data.push_back(e.data);
    return true;
  });
  p.Feed("data: tail");
  p.Finish();
  ASSERT_EQ(data.size(), 1u);
  EXPECT_EQ(data[0], "tail");
}

// Found by fuzz/sse_fuzz.cc (corpus/sse/regress-trailing-cr-in-event-name): a
// stream ending in CR kept the CR in the last line's value.
TEST(SseTest, TrailingCrEndsTheLastLine) {
  std::vector<SseEvent> got;
  SseParser p([&](const SseEvent& e) {
    got.push_back(e);
    return true;
  });
  ASSERT_TRUE(p.Feed("data: x\nevent: done\r"));
  ASSERT_TRUE(p.Finish());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].event, "done");
  EXPECT_EQ(got[0].data, "x");
}

}  // namespace
}  // namespace deepbox::net
