#include "local/lifecycle/state.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <iterator>

#include "common/testing/temp_dir.h"
#include "local/cgroups.h"
#include "local/network.h"

namespace deepbox::local::lifecycle {
namespace {

std::string ReadFileText(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

using deepbox::testing::TempDir;

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

// --- Trust (issue 21, H2): what deepbox believes of the state dir and records.

using ::testing::HasSubstr;

// A child that sleeps until killed; reaped by Gone().
pid_t Sleeper() {
  pid_t p = fork();
  if (p == 0) {
    for (;;) pause();
  }
  return p;
}
// True once `pid` (our child) has died; reaps it then.
bool Gone(pid_t pid) {
  int status = 0;
  return waitpid(pid, &status, WNOHANG) == pid;
}
void Stop(pid_t pid) {
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
}

ProcessRef RefOf(pid_t pid) { return ProcessRef{pid, ProcessStartTime(pid).value_or(0)}; }

SandboxMeta Record(const std::string& id) {
  SandboxMeta m;
  m.id = id;
  m.created_at_ms = NowMs();
  m.network = "none";
  return m;
}

// Runs `fn` in a child in a network namespace of its own (as root), so the
// nft/ip deletions a reap runs cannot touch this host's. Returns its exit code.
int InOwnNetns(const std::function<int()>& fn) {
  pid_t p = fork();
  if (p == 0) {
    if (geteuid() == 0 && unshare(CLONE_NEWNET) != 0) _exit(3);
    _exit(fn());
  }
  int status = 0;
  waitpid(p, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

TEST(StateTrustTest, InitRefusesAStateDirOthersCanWrite) {
  TempDir tmp;
  fs::path root = tmp.path() / "state";
  ASSERT_EQ(mkdir(root.c_str(), 0700), 0);
  ASSERT_EQ(chmod(root.c_str(), 0777), 0);
  auto st = Store(root).Init();
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(st.error().code, ErrorCode::kPermissionDenied);
  EXPECT_THAT(st.error().message, HasSubstr(root.string()));
  EXPECT_THAT(st.error().message, HasSubstr("mode 0777"));
  EXPECT_THAT(st.error().message, HasSubstr("chmod go-w"));
  EXPECT_FALSE(fs::exists(root / "sandboxes"));  // refused before anything was made in it
  ASSERT_EQ(chmod(root.c_str(), 0755), 0);       // readable by others is fine
  ASSERT_TRUE(Store(root).Init().has_value());
  struct stat sb;
  ASSERT_EQ(stat((root / "sandboxes").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0700u);
  // Every subdirectory too.
  for (const char* sub : {"sandboxes", "trash", "tombstones", "pools", "net", "disk-templates"}) {
    ASSERT_EQ(chmod((root / sub).c_str(), 0770), 0);
    st = Store(root).Init();
    ASSERT_FALSE(st.has_value()) << sub;
    EXPECT_THAT(st.error().message, HasSubstr((root / sub).string()));
    EXPECT_THAT(st.error().message, HasSubstr("mode 0770"));
    ASSERT_EQ(chmod((root / sub).c_str(), 0700), 0);
  }
  EXPECT_TRUE(Store(root).Init().has_value());
}

TEST(StateTrustTest, InitRefusesSymlinks) {
  TempDir tmp;
  fs::path real = tmp.path() / "real";
  ASSERT_TRUE(Store(real).Init().has_value());
  fs::create_directory_symlink(real, tmp.path() / "link");
  auto st = Store(tmp.path() / "link").Init();
  ASSERT_FALSE(st.has_value());
  EXPECT_THAT(st.error().message, HasSubstr("symbolic link"));
  EXPECT_THAT(st.error().message, HasSubstr((tmp.path() / "link").string()));
  // A subdirectory replaced by a symlink (to a directory that passes every check).
  fs::path other = tmp.path() / "other";
  ASSERT_EQ(mkdir(other.c_str(), 0700), 0);
  fs::remove(real / "trash");
  fs::create_directory_symlink(other, real / "trash");
  st = Store(real).Init();
  ASSERT_FALSE(st.has_value());
  EXPECT_THAT(st.error().message, HasSubstr((real / "trash").string()));
  EXPECT_THAT(st.error().message, HasSubstr("symbolic link"));
}

TEST(StateTrustTest, InitRefusesParentsOthersCanChange) {
  TempDir tmp;
  fs::path open = tmp.path() / "open";
  ASSERT_EQ(mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(chmod(open.c_str(), 0777), 0);
  auto st = Store(open / "state").Init();
  ASSERT_FALSE(st.has_value());
  EXPECT_THAT(st.error().message, HasSubstr("inside " + open.string()));
  EXPECT_FALSE(fs::exists(open / "state"));
  ASSERT_EQ(chmod(open.c_str(), 01777), 0);  // sticky, like /tmp: others cannot rename ours
  EXPECT_TRUE(Store(open / "state").Init().has_value());
  // Missing parents are made, and 0700.
  ASSERT_TRUE(Store(tmp.path() / "a" / "b" / "state").Init().has_value());
  struct stat sb;
  ASSERT_EQ(stat((tmp.path() / "a").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0700u);
}

TEST(StateTrustTest, InitAndReadRefuseAForeignOwner) {
  if (geteuid() != 0) GTEST_SKIP() << "chown to another uid needs root";
  TempDir tmp;
  fs::path root = tmp.path() / "state";
  Store store(root);
  ASSERT_TRUE(store.Init().has_value());
  SandboxMeta m = Record("sb-0123456789ab");
  fs::path dir = store.Paths(m.id).dir;
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_TRUE(store.Write(m).has_value());
  ASSERT_TRUE(store.Read(m.id).has_value());
  // A sandbox dir, then its record, then the state dir, owned by uid 65534.
  ASSERT_EQ(chown(dir.c_str(), 65534, 65534), 0);
  auto r = store.Read(m.id);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  EXPECT_THAT(r.error().message, HasSubstr("uid 65534"));
  EXPECT_THAT(r.error().message, HasSubstr(dir.string()));
  ASSERT_EQ(chown(dir.c_str(), 0, 0), 0);
  ASSERT_EQ(chown(store.Paths(m.id).meta.c_str(), 65534, 65534), 0);
  r = store.Read(m.id);
  ASSERT_FALSE(r.has_value());
  EXPECT_THAT(r.error().message, HasSubstr(store.Paths(m.id).meta.string()));
  EXPECT_FALSE(store.Update(m.id, [](SandboxMeta&) { return Status{}; }).has_value());
  ASSERT_EQ(chown(root.c_str(), 65534, 65534), 0);
  auto st = store.Init();
  ASSERT_FALSE(st.has_value());
  EXPECT_THAT(st.error().message, HasSubstr("owned by uid 65534"));
  EXPECT_THAT(st.error().message, HasSubstr("Someone else made it"));
  ASSERT_EQ(chown(root.c_str(), 0, 0), 0);
}

TEST(StateTrustTest, ReadRefusesRecordsOthersCouldWrite) {
  TempDir tmp;
  Store store(tmp.path() / "state");
  ASSERT_TRUE(store.Init().has_value());
  SandboxMeta m = Record("sb-0123456789ab");
  SandboxPaths p = store.Paths(m.id);
  ASSERT_EQ(mkdir(p.dir.c_str(), 0700), 0);
  ASSERT_TRUE(store.Write(m).has_value());
  ASSERT_TRUE(store.Read(m.id).has_value());
  ASSERT_EQ(chmod(p.dir.c_str(), 0777), 0);
  auto r = store.Read(m.id);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  EXPECT_THAT(r.error().message, HasSubstr("mode 0777"));
  ASSERT_EQ(chmod(p.dir.c_str(), 0700), 0);
  ASSERT_EQ(chmod(p.meta.c_str(), 0666), 0);
  r = store.Read(m.id);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  ASSERT_EQ(chmod(p.meta.c_str(), 0600), 0);
  fs::rename(p.meta, tmp.path() / "meta.json");  // a record that is a symlink to one
  fs::create_symlink(tmp.path() / "meta.json", p.meta);
  r = store.Read(m.id);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  EXPECT_THAT(r.error().message, HasSubstr("symbolic link"));
  fs::remove(p.meta);
  fs::rename(tmp.path() / "meta.json", p.meta);
  ASSERT_TRUE(store.Read(m.id).has_value());
  // A sandbox dir that is a symlink to a good-looking record elsewhere.
  fs::path elsewhere = tmp.path() / "elsewhere";
  ASSERT_EQ(mkdir(elsewhere.c_str(), 0700), 0);
  SandboxMeta n = Record("sb-00000000000f");
  std::ofstream(elsewhere / "meta.json") << ToJson(n.ToJson());
  fs::create_directory_symlink(elsewhere, store.Paths(n.id).dir);
  r = store.Read(n.id);
  ASSERT_FALSE(r.has_value());
  EXPECT_THAT(r.error().message, HasSubstr("symbolic link"));
  // A record that names another sandbox.
  std::ofstream(p.meta, std::ios::trunc) << ToJson(n.ToJson());
  r = store.Read(m.id);
  ASSERT_FALSE(r.has_value());
  EXPECT_THAT(r.error().message, HasSubstr("record of 'sb-00000000000f'"));
}

// The audit's reproduction in miniature: a record naming a process of ours as
// its init and a "cgroup" whose cgroup.procs lists it; the reap removes the
// record and touches neither.
TEST(StateTrustTest, ReapKillsNothingTheRecordMerelyNames) {
  TempDir tmp;
  Store store(tmp.path() / "state");
  ASSERT_TRUE(store.Init().has_value());
  pid_t victim = Sleeper();
  ASSERT_GT(victim, 0);
  fs::path fake = tmp.path() / "victim-cgroup";
  ASSERT_EQ(mkdir(fake.c_str(), 0700), 0);
  std::ofstream(fake / "cgroup.procs") << victim << "\n";
  std::ofstream(fake / "cgroup.kill") << "0";
  SandboxMeta m = Record("sb-0123456789ab");
  m.supervisor = ProcessRef{4000000, 1};  // dead
  m.init = RefOf(victim);
  m.cgroups = {fake.string()};
  ASSERT_EQ(mkdir(store.Paths(m.id).dir.c_str(), 0700), 0);
  ASSERT_TRUE(store.Write(m).has_value());
  for (bool given : {false, true}) {
    if (given) {
      ASSERT_EQ(mkdir(store.Paths(m.id).dir.c_str(), 0700), 0);
      ASSERT_TRUE(store.Write(m).has_value());
    }
    auto reaped = store.Reap(m.id, given ? std::optional<SandboxMeta>(m) : std::nullopt);
    ASSERT_FALSE(reaped.has_value()) << "the foreign cgroup must be reported";
    EXPECT_THAT(reaped.error().message, HasSubstr("not touching cgroup " + fake.string()));
    EXPECT_FALSE(fs::exists(store.Paths(m.id).dir));  // the record went all the same
    EXPECT_TRUE(fs::is_empty(tmp.path() / "state" / "trash"));
    EXPECT_FALSE(Gone(victim)) << "the reap killed the process the record named as init";
    EXPECT_TRUE(fs::exists(fake / "cgroup.procs"));
    EXPECT_EQ(ReadFileText(fake / "cgroup.kill"), "0");
  }
  Stop(victim);
}

// What a real sandbox leaves when its supervisor dies is still cleaned up:
// its init in its own cgroup is killed and the cgroup removed.
TEST(StateTrustTest, ReapStillKillsTheInitInItsOwnCgroup) {
  if (geteuid() != 0) GTEST_SKIP() << "creating cgroups needs root here";
  auto host = DetectCgroups();
  ASSERT_TRUE(host.has_value());
  if (host->layout == CgroupLayout::kNone) GTEST_SKIP() << "no cgroups on this host";
  TempDir tmp;
  Store store(tmp.path() / "state");
  ASSERT_TRUE(store.Init().has_value());
  SandboxMeta m = Record(Store::NewId());
  auto cg = SandboxCgroup::Create(*host, m.id, Limits{});
  ASSERT_TRUE(cg.has_value()) << cg.error().ToString();
  pid_t init = Sleeper();
  ASSERT_TRUE(cg->AttachAll(init).has_value());
  m.supervisor = ProcessRef{4000000, 1};
  m.init = RefOf(init);
  m.cgroups = cg->dirs();
  ASSERT_EQ(mkdir(store.Paths(m.id).dir.c_str(), 0700), 0);
  ASSERT_TRUE(store.Write(m).has_value());
  auto reaped = store.Reap(m.id, std::nullopt);
  ASSERT_TRUE(reaped.has_value()) << reaped.error().ToString();
  EXPECT_TRUE(*reaped);
  int status = 0;
  ASSERT_EQ(waitpid(init, &status, 0), init);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  for (const auto& d : m.cgroups) EXPECT_FALSE(fs::exists(d)) << d;
}

TEST(StateTrustTest, ReapDeletesOnlyItsOwnNetSlot) {
  TempDir tmp;
  Store store(tmp.path() / "state");
  ASSERT_TRUE(store.Init().has_value());
  const uint32_t theirs = 16380, mine = 16381;  // in a private netns below: nothing real
  ASSERT_TRUE(store.ReserveNetSlot("sb-aaaaaaaaaaaa").has_value());
  fs::rename(tmp.path() / "state" / "net" / "slot-0", tmp.path() / "state" / "net" / "slot-16380");
  SandboxMeta m = Record("sb-0123456789ab");
  m.net_slot = theirs;
  ASSERT_EQ(mkdir(store.Paths(m.id).dir.c_str(), 0700), 0);
  ASSERT_TRUE(store.Write(m).has_value());
  EXPECT_EQ(InOwnNetns([&] { return store.Reap(m.id, std::nullopt).value_or(false) ? 0 : 1; }), 0);
  fs::path net = tmp.path() / "state" / "net";
  EXPECT_TRUE(fs::exists(net / "slot-16380")) << "another sandbox's slot was released";
  // Its own slot is released.
  ASSERT_TRUE(store.ReserveNetSlot(m.id).has_value());
  fs::rename(tmp.path() / "state" / "net" / "slot-0", tmp.path() / "state" / "net" / "slot-16381");
  m.net_slot = mine;
  ASSERT_EQ(mkdir(store.Paths(m.id).dir.c_str(), 0700), 0);
  ASSERT_TRUE(store.Write(m).has_value());
  EXPECT_EQ(InOwnNetns([&] { return store.Reap(m.id, std::nullopt).value_or(false) ? 0 : 1; }), 0);
  EXPECT_FALSE(fs::exists(net / "slot-16381")) << "its own slot was not released";
}

TEST(StateTrustTest, NetSlotOwnerIsTheReservationsId) {
  TempDir tmp;
  Store store(tmp.path());
  ASSERT_TRUE(store.Init().has_value());
  auto slot = store.ReserveNetSlot("sb-aaaaaaaaaaaa");
  ASSERT_TRUE(slot.has_value());
  EXPECT_EQ(store.NetSlotOwner(*slot), "sb-aaaaaaaaaaaa");
  EXPECT_EQ(store.NetSlotOwner(*slot + 1), "");
  EXPECT_EQ(store.NetSlotOwner(kMaxPublicSlots), "");
  fs::path p = tmp.path() / "net" / fmt::format("slot-{}", *slot);
  ASSERT_EQ(chmod(p.c_str(), 0666), 0);  // a reservation others could have rewritten
  EXPECT_EQ(store.NetSlotOwner(*slot), "");
}

TEST(StateTrustTest, SupervisorIsRecognisedByWhatItRuns) {
  const std::string id = "sb-0123456789ab";
  EXPECT_FALSE(IsSupervisorOf(*SelfRef(), id));  // alive, ours, but not a supervisor
  EXPECT_FALSE(IsSupervisorOf(ProcessRef{}, id));
  // A process whose command line is a supervisor's: `sh __supervise --request {...}`
  // (sh runs the script `__supervise`, keeping that command line).
  TempDir tmp;
  std::ofstream(tmp.path() / "__supervise") << "sleep 1000; true\n";
  std::string request = fmt::format(R"({{"id":"{}","state_dir":"/x"}})", id);
  int exec_pipe[2];
  ASSERT_EQ(pipe2(exec_pipe, O_CLOEXEC), 0);
  pid_t p = fork();
  if (p == 0) {
    setpgid(0, 0);  // its `sleep` dies with it
    if (chdir(tmp.path().c_str()) != 0) _exit(127);
    execl("/bin/sh", "/bin/sh", "__supervise", "--ready-fd", "3", "--request", request.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(p, 0);
  close(exec_pipe[1]);
  char c;
  ASSERT_EQ(read(exec_pipe[0], &c, 1), 0);  // EOF: the exec happened (close-on-exec)
  close(exec_pipe[0]);
  ProcessRef ref = RefOf(p);
  EXPECT_TRUE(IsSupervisorOf(ref, id));
  EXPECT_FALSE(IsSupervisorOf(ref, "sb-111111111111"));
  EXPECT_FALSE(IsSupervisorOf(ProcessRef{ref.pid, ref.start_time + 1}, id));
  kill(-p, SIGKILL);
  Stop(p);
  EXPECT_FALSE(IsSupervisorOf(ref, id));
}

}  // namespace
}  // namespace deepbox::local::lifecycle
