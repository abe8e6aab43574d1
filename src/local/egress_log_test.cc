#include "local/egress_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

namespace deepbox::local {
namespace {

namespace fs = std::filesystem;

class EgressLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("egress_log_test." + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

EgressEvent Request(int i) {
  EgressEvent e;
  e.event = "request";
  e.verdict = "allowed";
  e.host = "api.example.com";
  e.port = 443;
  e.sni = "api.example.com";
  e.method = "GET";
  e.protocol = "h2";
  e.rule = "api.example.com";
  e.bytes_up = static_cast<uint64_t>(i);
  e.intercepted = true;
  e.secrets = {"GH_TOKEN"};
  return e;
}

TEST_F(EgressLogTest, RoundTripsEventsAsJsonLines) {
  auto log = EgressLog::Open(dir_ / "network.jsonl");
  ASSERT_TRUE(log) << log.error().message;
  (*log)->Append(Request(7));
  EgressEvent refused;
  refused.event = "connect";
  refused.verdict = "refused";
  refused.host = "evil.example.net";
  refused.port = 443;
  refused.rule = "evil.example.net:443 is not on this sandbox's allowlist";
  (*log)->Append(refused);
  EgressEvent policy;
  policy.event = "policy";
  policy.verdict = "allowed";
  policy.rule = "allow=pypi.org";
  (*log)->Append(policy);
  EXPECT_EQ(fs::status(dir_ / "network.jsonl").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);

  auto events = ReadEgressLog(dir_ / "network.jsonl");
  ASSERT_TRUE(events) << events.error().message;
  ASSERT_EQ(events->size(), 3u);
  const EgressEvent& r = (*events)[0];
  EXPECT_EQ(r.event, "request");
  EXPECT_EQ(r.host, "api.example.com");
  EXPECT_EQ(r.port, 443);
  EXPECT_EQ(r.bytes_up, 7u);
  EXPECT_TRUE(r.intercepted);
  EXPECT_EQ(r.secrets, std::vector<std::string>{"GH_TOKEN"});
  EXPECT_GT(r.unix_ms, 0);
  EXPECT_NE(r.ToText().find("secrets=GH_TOKEN"), std::string::npos) << r.ToText();
  EXPECT_NE((*events)[1].ToText().find("reason: evil.example.net:443 is not"), std::string::npos)
      << (*events)[1].ToText();
  EXPECT_NE((*events)[2].ToText().find("allow=pypi.org"), std::string::npos);
  auto last = ReadEgressLog(dir_ / "network.jsonl", 1);
  ASSERT_TRUE(last);
  ASSERT_EQ(last->size(), 1u);
  EXPECT_EQ((*last)[0].event, "policy");
}

TEST_F(EgressLogTest, RotationBoundsTheSizeAndKeepsTheNewest) {
  auto log = EgressLog::Open(dir_ / "network.jsonl", 4096);
  ASSERT_TRUE(log);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 250; ++i) (*log)->Append(Request(t * 1000 + i));
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ((*log)->write_failures(), 0u);
  EXPECT_LE(fs::file_size(dir_ / "network.jsonl"), 4096u);
  EXPECT_LE(fs::file_size(dir_ / "network.jsonl.1"), 4096u);
  // Every line is whole (each parses) with concurrent writers.
  auto events = ReadEgressLog(dir_ / "network.jsonl");
  ASSERT_TRUE(events);
  ASSERT_GT(events->size(), 10u);
  size_t lines = 0;
  for (const char* name : {"network.jsonl", "network.jsonl.1"}) {
    std::ifstream in(dir_ / name);
    for (std::string line; std::getline(in, line);) ++lines;
  }
  EXPECT_EQ(lines, events->size());
  // One writer: the newest events are kept, in order.
  for (int i = 0; i < 100; ++i) (*log)->Append(Request(5000 + i));
  events = ReadEgressLog(dir_ / "network.jsonl");
  ASSERT_TRUE(events);
  EXPECT_EQ(events->back().bytes_up, 5099u);
  for (size_t i = 1; i < events->size(); ++i) {
    EXPECT_EQ((*events)[i].bytes_up, (*events)[i - 1].bytes_up + 1);
  }
}

TEST_F(EgressLogTest, MissingLogIsEmptyAndGarbageIsSkipped) {
  auto none = ReadEgressLog(dir_ / "absent.jsonl");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  std::ofstream(dir_ / "g.jsonl")
      << "not json\n{\"event\":\"x\"}\n"
      << "{\"time\":\"2026-12-06T10:00:00.000Z\",\"event\":\"request\"}\n"
      << "{\"time\":\"2026-12-06T10:00:01";
  auto events = ReadEgressLog(dir_ / "g.jsonl");
  ASSERT_TRUE(events);
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].event, "request");
}

TEST_F(EgressLogTest, RefusesASymlinkedLog) {
  fs::create_symlink("/etc/passwd", dir_ / "link.jsonl");
  auto log = EgressLog::Open(dir_ / "link.jsonl");
  ASSERT_FALSE(log);
  EXPECT_NE(log.error().message.find("open"), std::string::npos);
}

}  // namespace
}  // namespace deepbox::local
