#include "cli/run_egress.h"

#include <gtest/gtest.h>

namespace deepbox::run {
namespace {

std::string Line(int i) {
  return "{\"time\":\"2026-12-06T10:00:0" + std::to_string(i) +
         ".000Z\",\"event\":\"connect\",\"verdict\":\"refused\",\"host\":\"h" + std::to_string(i) +
         ".test\"}";
}

TEST(RunEgressTest, EmitsEachLineOnceAsEgressEvents) {
  std::vector<json::object> got;
  auto emit = [&](const json::object& o) { got.push_back(o); };
  std::string last = EmitNewEgressLines({Line(1), Line(2)}, "", emit);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].at("type").as_string(), "egress");
  EXPECT_EQ(got[1].at("host").as_string(), "h2.test");
  EXPECT_EQ(last, Line(2));
  // The next poll: only what came after the last line emitted.
  last = EmitNewEgressLines({Line(1), Line(2), Line(3)}, last, emit);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2].at("host").as_string(), "h3.test");
  last = EmitNewEgressLines({Line(1), Line(2), Line(3)}, last, emit);
  EXPECT_EQ(got.size(), 3u);
  // Rotated (the last line emitted is gone): everything there is.
  last = EmitNewEgressLines({Line(4), Line(5)}, last, emit);
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(last, Line(5));
  // A malformed line is skipped, not fatal.
  EmitNewEgressLines({Line(5), "not json", Line(6)}, last, emit);
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got[5].at("host").as_string(), "h6.test");
}

}  // namespace
}  // namespace deepbox::run
