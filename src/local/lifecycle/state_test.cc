#include "local/lifecycle/state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

namespace deepbox::local::lifecycle {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/deepbox-state-test-XXXXXX";
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { (void)RemoveTree(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(StateTest, TimeRoundTrips) {
  int64_t t = 1767225600123;  // 2026-01-01T00:00:00.123Z
  EXPECT_EQ(FormatTime(t), "2026-01-01T00:00:00.123Z");
  EXPECT_EQ(ParseTime("2026-01-01T00:00:00.123Z").value(), t);
  EXPECT_EQ(ParseTime("2026-01-01T00:00:00Z").value(), t - 123);
  EXPECT_FALSE(ParseTime("2026-01-01 00:00:00").has_value());
  EXPECT_FALSE(ParseTime("2026-01-01T00:00:00+02:00").has_value());
}

TEST(StateTest, IdsAreValidAndDistinct) {
  std::string a = Store::NewId(), b = Store::NewId();
  EXPECT_TRUE(Store::ValidId(a)) << a;
  EXPECT_NE(a, b);
  EXPECT_FALSE(Store::ValidId("sb-12"));
  EXPECT_FALSE(Store::ValidId("sb-0123456789AB"));
  EXPECT_FALSE(Store::ValidId("../etc/passwd00"));
}

TEST(StateTest, ProcessRefDetectsLiveness) {
  auto self = SelfRef();
  ASSERT_TRUE(self.has_value());
  EXPECT_TRUE(ProcessAlive(*self));
  ProcessRef reused = *self;
  reused.start_time += 1;  // same pid, another process
  EXPECT_FALSE(ProcessAlive(reused));
  EXPECT_FALSE(ProcessAlive(ProcessRef{}));
}

TEST(StateTest, MetaRoundTripsAndUpdatesAtomically) {
  TempDir tmp;
  Store store(tmp.path() / "state");
  ASSERT_TRUE(store.Init().has_value());
  struct stat st;
  ASSERT_EQ(stat((tmp.path() / "state").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  SandboxMeta m;
  m.id = Store::NewId();
  m.labels = {{"a", "1"}};
  m.created_at_ms = NowMs();
  m.expires_at_ms = m.created_at_ms + 5000;
  m.network = "none";
  m.net_slot = 7;
  m.supervisor = *SelfRef();
  m.cgroups = {"/sys/fs/cgroup/x"};
  m.timings["launch"] = 1.5;
  ASSERT_EQ(mkdir(store.Paths(m.id).dir.c_str(), 0700), 0);
  ASSERT_TRUE(store.Write(m).has_value());
  auto back = store.Read(m.id);
  ASSERT_TRUE(back.has_value()) << back.error().ToString();
  EXPECT_EQ(back->labels, m.labels);
  EXPECT_EQ(back->expires_at_ms, m.expires_at_ms);
  EXPECT_EQ(back->net_slot, 7u);
  EXPECT_EQ(back->supervisor.start_time, m.supervisor.start_time);
  EXPECT_EQ(back->cgroups, m.cgroups);
  auto up = store.Update(m.id, [](SandboxMeta& x) {
    x.labels["b"] = "2";
    return Status{};
  });
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(store.Read(m.id)->labels.size(), 2u);
  EXPECT_EQ(store.Ids().value(), std::vector<std::string>{m.id});
  // Reap removes everything, once.
  EXPECT_TRUE(store.Reap(m.id, std::nullopt).value());
  EXPECT_FALSE(store.Reap(m.id, std::nullopt).value());
  EXPECT_FALSE(fs::exists(store.Paths(m.id).dir));
  EXPECT_TRUE(fs::is_empty(tmp.path() / "state" / "trash"));
  EXPECT_EQ(store.Read(m.id).error().code, ErrorCode::kNotFound);
}

// meta.json is parsed defensively: out-of-range numbers never wrap into a
// pid or a network slot that belongs to something else.
TEST(StateTest, MetaWithHostileNumbersReadsAsAbsent) {
  auto o = ParseJsonObject(
      R"({"id":"sb-0123456789ab","created_at":"2026-01-01T00:00:00.000Z",)"
      R"("net_slot":4294967301,"supervisor":{"pid":1099511627776,"start_time":1e400},)"
      R"("init":{"pid":-5,"start_time":18446744073709551615}})");
  ASSERT_TRUE(o.has_value());
  auto m = SandboxMeta::FromJson(*o);
  ASSERT_TRUE(m.has_value()) << m.error().ToString();
  EXPECT_FALSE(m->net_slot.has_value());
  EXPECT_FALSE(m->supervisor.valid());
  EXPECT_EQ(m->supervisor.start_time, 0u);
  EXPECT_FALSE(m->init.valid());
  EXPECT_EQ(m->init.start_time, 0u);
  o = ParseJsonObject(
      R"({"id":"sb-0123456789ab","created_at":"2026-01-01T00:00:00.000Z","net_slot":-1,)"
      R"("supervisor":{"pid":"12"}})");
  ASSERT_TRUE(o.has_value());
  m = SandboxMeta::FromJson(*o);
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->net_slot.has_value());
  EXPECT_FALSE(m->supervisor.valid());
  o = ParseJsonObject(
      R"({"id":"sb-0123456789ab","created_at":"2026-01-01T00:00:00.000Z","net_slot":0,)"
      R"("supervisor":{"pid":42,"start_time":7}})");
  ASSERT_TRUE(o.has_value());
  m = SandboxMeta::FromJson(*o);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->net_slot, 0u);
  EXPECT_EQ(m->supervisor.pid, 42);
  EXPECT_EQ(m->supervisor.start_time, 7u);
}

TEST(StateTest, RemoveTreeCopesWithLockedDirs) {
  TempDir tmp;
  fs::path d = tmp.path() / "t";
  fs::create_directories(d / "a" / "b");
  std::ofstream(d / "a" / "b" / "f") << "x";
  fs::create_symlink("/etc", d / "a" / "link");
  chmod((d / "a" / "b").c_str(), 0);
  chmod((d / "a").c_str(), 0500);
  ASSERT_TRUE(RemoveTree(d).has_value());
  EXPECT_FALSE(fs::exists(d));
  EXPECT_TRUE(fs::exists("/etc/passwd"));  // the symlink was not followed
}

TEST(StateTest, NetSlotsAreExclusive) {
  TempDir tmp;
  Store store(tmp.path());
  ASSERT_TRUE(store.Init().has_value());
  auto a = store.ReserveNetSlot("sb-000000000001");
  auto b = store.ReserveNetSlot("sb-000000000002");
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  store.ReleaseNetSlot(*a);
  EXPECT_EQ(store.ReserveNetSlot("sb-000000000003").value(), *a);
}

TEST(StateTest, Tombstones) {
  TempDir tmp;
  Store store(tmp.path());
  ASSERT_TRUE(store.Init().has_value());
  ASSERT_TRUE(store.WriteTombstone({"sb-000000000001", "expired", "ttl", NowMs()}).has_value());
  auto t = store.ReadTombstone("sb-000000000001");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->reason, "expired");
  EXPECT_FALSE(store.ReadTombstone("sb-000000000002").has_value());
}

}  // namespace
}  // namespace deepbox::local::lifecycle
