// Pause, suspend and resume of local sandboxes (issue 22), with the real
// `deepbox` binary, supervisors, namespaces, cgroups and deepbox-sandboxd:
// a paused sandbox's processes are frozen (the kernel says so) and carry
// on where they were; a suspended one has no process, cgroup or socket left
// and comes back with fresh processes on the same files; use (exec) wakes
// either; the TTL keeps counting, and a delete or an expiry of a paused or
// suspended sandbox leaves nothing behind. A suspended sandbox outlives its
// supervisor (SIGKILL, or a host restart that also lost the mount of its
// workspace disk): its next use adopts it, files intact.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "cli_fixture.h"
#include "common/json.h"
#include "local/lifecycle/provider.h"
#include "sandbox/sandbox.h"

namespace deepbox::local::lifecycle {
namespace {

using namespace std::chrono_literals;
using testing::Eventually;
using ::testing::HasSubstr;
using testing::ReadFile;

class ModeTest : public testing::LocalCliTest {
 protected:
  void SetUp() override {
    LocalCliTest::SetUp();
    if (IsSkipped()) return;
    if (geteuid() != 0) GTEST_SKIP() << "sandboxes have cgroups (and a freezer) only as root";
  }

  // The TTL is the safety net should this test crash before its TearDown.
  std::string CreateCli(const std::string& ttl = "900", const std::string& idle = "0") {
    auto r = Cli({"sandbox", "create", "--cold", "--ttl", ttl, "--network", "none", "-l", "team=x",
                  "--idle-suspend", idle});
    return CreatedId(r);
  }

  // The sandbox's v2 cgroup (the freezer used where there is one), "" if none.
  static std::string V2Cgroup(const SandboxMeta& m) {
    for (const auto& cg : m.cgroups) {
      if (fs::exists(cg + "/cgroup.freeze")) return cg;
    }
    return "";
  }
  // Whether the kernel reports the sandbox's processes frozen.
  static bool KernelSaysFrozen(const SandboxMeta& m) {
    std::string v2 = V2Cgroup(m);
    if (!v2.empty()) return ReadFile(v2 + "/cgroup.events").find("frozen 1") != std::string::npos;
    for (const auto& cg : m.cgroups) {
      if (fs::exists(cg + "/freezer.state")) {
        return ReadFile(cg + "/freezer.state").find("FROZEN") != std::string::npos;
      }
    }
    return false;
  }
  // The STATE column of `sandbox ls` for sandbox `id`.
  static std::string LsState(const std::string& ls_out, const std::string& id) {
    for (size_t at = ls_out.find(id); at != std::string::npos;) {
      size_t end = ls_out.find('\n', at);
      std::string line = ls_out.substr(at, end - at);
      std::vector<std::string> cols;
      for (size_t p = 0; p < line.size();) {
        size_t q = line.find(' ', p);
        if (q == std::string::npos) q = line.size();
        if (q > p) cols.push_back(line.substr(p, q - p));
        p = q + 1;
      }
      return cols.size() > 1 ? cols[1] : "";
    }
    return "";
  }
};

TEST_F(ModeTest, PausedProcessesAreFrozenAndCarryOnWhereTheyWere) {
  std::string id = CreateCli();
  // A process that counts while it runs, started in the background.
  auto started = Cli({"sandbox", "exec", id, "--", "sh", "-c",
                      "(i=0; while :; do i=$((i+1)); echo $i > /workspace/count; "
                      "sleep 0.02; done) >/dev/null 2>&1 & echo started"});
  ASSERT_EQ(started.code, 0) << started.err;
  ASSERT_TRUE(Eventually(
      [&] { return fs::exists(state_ / "sandboxes" / id / "workspace" / "count"); }, 30s));
  SandboxMeta before = Meta(id);
  if (V2Cgroup(before).empty()) {
    bool v1 = false;
    for (const auto& cg : before.cgroups) v1 = v1 || fs::exists(cg + "/freezer.state");
    if (!v1) GTEST_SKIP() << "this host gives sandboxes no cgroup freezer";
  }
  auto paused = Cli({"sandbox", "pause", id});
  ASSERT_EQ(paused.code, 0) << paused.err;
  EXPECT_EQ(paused.out, "paused " + id + "\n");
  SandboxMeta m = Meta(id);
  EXPECT_EQ(m.mode, "paused");
  EXPECT_TRUE(m.mode_since_ms.has_value());
  EXPECT_TRUE(KernelSaysFrozen(m));
  EXPECT_EQ(m.init.pid, before.init.pid);  // the same processes, frozen
  EXPECT_TRUE(ProcessAlive(m.init));
  fs::path count = state_ / "sandboxes" / id / "workspace" / "count";
  std::string frozen_at = ReadFile(count);
  std::this_thread::sleep_for(300ms);  // ~15 ticks if it were running
  EXPECT_EQ(ReadFile(count), frozen_at) << "a paused sandbox's process kept running";
  auto ls = Cli({"sandbox", "ls"});
  EXPECT_EQ(LsState(ls.out, id), "paused") << ls.out;
  EXPECT_EQ(Cli({"sandbox", "pause", id}).code, 0);  // idempotent
  // Use wakes it: the command runs, and so does the counter again.
  auto woke = Cli({"sandbox", "exec", id, "--", "cat", "/workspace/count"});
  ASSERT_EQ(woke.code, 0) << woke.err;
  m = Meta(id);
  EXPECT_EQ(m.mode, "running");
  EXPECT_FALSE(KernelSaysFrozen(m));
  EXPECT_EQ(m.init.pid, before.init.pid);
  EXPECT_TRUE(Eventually([&] { return ReadFile(count) != frozen_at; }, 30s));
  EXPECT_EQ(m.labels.at("team"), "x");
  EXPECT_EQ(m.expires_at_ms, before.expires_at_ms);
}

TEST_F(ModeTest, SuspendEndsEveryProcessAndResumeKeepsTheFiles) {
  std::string id = CreateCli();
  ASSERT_EQ(Cli({"sandbox", "exec", id, "--", "sh", "-c",
                 "printf 'kept\\0bytes' > /workspace/data && mkdir -p /workspace/d/e"})
                .code,
            0);
  SandboxMeta before = Meta(id);
  ASSERT_TRUE(ProcessAlive(before.init));
  auto suspended = Cli({"sandbox", "suspend", id});
  ASSERT_EQ(suspended.code, 0) << suspended.err;
  EXPECT_EQ(suspended.out, "suspended " + id + "\n");
  SandboxMeta m = Meta(id);
  EXPECT_EQ(m.mode, "suspended");
  EXPECT_FALSE(m.ready);
  // Nothing of it runs any more: no init, no cgroup (memory and CPU freed).
  EXPECT_FALSE(ProcessAlive(before.init));
  for (const auto& cg : before.cgroups) EXPECT_FALSE(fs::exists(cg)) << cg;
  EXPECT_TRUE(ProcessAlive(m.supervisor));  // which keeps its TTL
  auto ls = Cli({"sandbox", "ls"});
  EXPECT_EQ(LsState(ls.out, id), "suspended") << ls.out;
  // Pausing needs the memory a suspended sandbox no longer has.
  auto pause = Cli({"sandbox", "pause", id});
  EXPECT_NE(pause.code, 0);
  EXPECT_THAT(pause.err, HasSubstr("suspended (resume it first)"));
  auto resumed = Cli({"sandbox", "resume", id});
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  m = Meta(id);
  EXPECT_EQ(m.mode, "running");
  EXPECT_TRUE(m.ready);
  EXPECT_NE(m.init.pid, before.init.pid);  // fresh processes
  EXPECT_TRUE(ProcessAlive(m.init));
  EXPECT_EQ(m.restarts, 0);  // a resume is no crash
  auto read = Cli({"sandbox", "exec", id, "--", "sh", "-c", "cat /workspace/data; ls -d d/e"});
  ASSERT_EQ(read.code, 0) << read.err;
  EXPECT_EQ(read.out, std::string("kept\0bytes", 10) + "d/e\n");
  EXPECT_EQ(m.labels.at("team"), "x");
  EXPECT_EQ(m.expires_at_ms, before.expires_at_ms);
  EXPECT_EQ(Cli({"sandbox", "resume", id}).code, 0);  // idempotent
}

TEST_F(ModeTest, UseWakesASuspendedSandbox) {
  std::string id = CreateCli();
  ASSERT_EQ(Cli({"sandbox", "exec", id, "--", "sh", "-c", "echo hi > /workspace/f"}).code, 0);
  ASSERT_EQ(Cli({"sandbox", "suspend", id}).code, 0);
  auto r = Cli({"sandbox", "exec", id, "--", "cat", "/workspace/f"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "hi\n");
  EXPECT_EQ(Meta(id).mode, "running");
}

TEST_F(ModeTest, AClientKeptAcrossASuspendWakesTheSandbox) {
  std::string id = CreateCli();
  auto connected = provider_->Connect(id);
  ASSERT_TRUE(connected) << connected.error().ToString();
  Sandbox& client = **connected;
  ASSERT_TRUE(client.Write("a.txt", "before"));
  ASSERT_EQ(Cli({"sandbox", "suspend", id}).code, 0);  // another process
  auto read = client.Read("a.txt", {});  // the same client: it resumes the sandbox first
  ASSERT_TRUE(read) << read.error().ToString();
  EXPECT_EQ(read->content, "before");
  EXPECT_EQ(Meta(id).mode, "running");
  if (Cli({"sandbox", "pause", id}).code != 0) return;  // no freezer here
  ExecRequest req;
  req.shell = "echo thawed";
  auto r = client.Exec(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->stdout_data, "thawed\n");
}

TEST_F(ModeTest, IdleSuspendWaitsForRunningCommandsThenSuspends) {
  std::string id = CreateCli("900", "2");
  EXPECT_EQ(Meta(id).idle_suspend_seconds, 2);
  // A command that outlives the idle time: it runs to its end, unharmed.
  auto r = Cli({"sandbox", "exec", id, "--", "sh", "-c", "sleep 5; echo done > /workspace/f"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ReadFile(state_ / "sandboxes" / id / "workspace" / "f"), "done\n");
  // Then, unused, it is suspended by its supervisor.
  ASSERT_TRUE(Eventually([&] { return Meta(id).mode == "suspended"; }, 60s))
      << ReadFile(state_ / "sandboxes" / id / "supervisor.log");
  EXPECT_THAT(ReadFile(state_ / "sandboxes" / id / "supervisor.log"),
              HasSubstr("unused for 2 s (--idle-suspend): suspending"));
  // The next use resumes it, files intact; the idle timer starts again.
  auto again = Cli({"sandbox", "exec", id, "--", "cat", "/workspace/f"});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.out, "done\n");
  EXPECT_TRUE(Eventually([&] { return Meta(id).mode == "suspended"; }, 60s));
}

TEST_F(ModeTest, DeleteOrExpiryOfAPausedOrSuspendedSandboxLeavesNothing) {
  std::string paused = CreateCli();
  std::string suspended = CreateCli();
  std::string expiring = CreateCli("4");
  ASSERT_EQ(Cli({"sandbox", "suspend", suspended}).code, 0);
  SandboxMeta pm = Meta(paused);
  if (Cli({"sandbox", "pause", paused}).code != 0) GTEST_SKIP() << "no cgroup freezer here";
  ASSERT_EQ(Cli({"sandbox", "pause", expiring}).code, 0);
  SandboxMeta sm = Meta(suspended), em = Meta(expiring);
  auto rm = Cli({"sandbox", "rm", paused, suspended});
  ASSERT_EQ(rm.code, 0) << rm.err;
  // (A loop device is freed by the kernel just after its unmount.)
  EXPECT_TRUE(Eventually([&] { return Leftovers(pm).empty(); }, 30s)) << Leftovers(pm);
  EXPECT_TRUE(Eventually([&] { return Leftovers(sm).empty(); }, 30s)) << Leftovers(sm);
  EXPECT_FALSE(fs::exists(state_ / "sandboxes" / paused));
  EXPECT_FALSE(fs::exists(state_ / "sandboxes" / suspended));
  // The TTL kept counting while it was paused.
  ASSERT_TRUE(Eventually([&] { return !fs::exists(state_ / "sandboxes" / expiring); }, 60s));
  // Its supervisor exits once it has removed what it moved to the trash.
  EXPECT_TRUE(Eventually([&] { return Leftovers(em).empty(); }, 30s)) << Leftovers(em);
  auto gone = Cli({"sandbox", "resume", expiring});
  EXPECT_EQ(gone.code, 3) << gone.err;  // no such sandbox
  EXPECT_THAT(gone.err, HasSubstr("expired"));
}

// A supervisor's SIGHUP (sent by every claim of a warm sandbox and by pause,
// suspend and resume) reaches its signalfd, never a thread of the launch that
// left it unblocked: a public sandbox's uplink watcher is one.
TEST_F(ModeTest, SighupNeverKillsTheSupervisorOfAPublicSandbox) {
  auto r = Cli({"sandbox", "create", "--cold", "--ttl", "900", "--network", "public", "--json"});
  if (r.code == 4) GTEST_SKIP() << "no public network on this host: " << r.err;
  ASSERT_EQ(r.code, 0) << r.err;
  auto record = ParseJsonObject(r.out);
  ASSERT_TRUE(record) << r.out;
  std::string id(record->at("id").as_string());
  SandboxMeta m = Meta(id);
  if (m.network != "public") GTEST_SKIP() << "public fell back to " << m.network;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(kill(m.supervisor.pid, SIGHUP), 0);
    auto exec = Cli({"sandbox", "exec", id, "--", "true"});
    ASSERT_EQ(exec.code, 0) << exec.err;
  }
  EXPECT_TRUE(ProcessAlive(m.supervisor));
  EXPECT_TRUE(Eventually([&] {
    return ReadFile(state_ / "sandboxes" / id / "supervisor.log").find("meta.json re-read") !=
           std::string::npos;
  }));
  ASSERT_EQ(Cli({"sandbox", "pause", id}).code, 0);
  ASSERT_EQ(Cli({"sandbox", "resume", id}).code, 0);
  EXPECT_TRUE(ProcessAlive(m.supervisor));
}

// SIGKILLs sandbox `id`'s supervisor and waits until it is gone.
void KillSupervisor(const SandboxMeta& m) {
  ASSERT_EQ(kill(m.supervisor.pid, SIGKILL), 0);
  ASSERT_TRUE(Eventually([&] { return !ProcessAlive(m.supervisor); }, 30s));
}

TEST_F(ModeTest, ASuspendedSandboxOutlivesItsSupervisor) {
  for (bool host_restarted : {false, true}) {
    SCOPED_TRACE(host_restarted ? "the mount of its disk gone too" : "its supervisor killed");
    std::string id = CreateCli();
    ASSERT_EQ(Cli({"sandbox", "exec", id, "--", "sh", "-c",
                   "printf 'kept\\0bytes' > /workspace/data && mkdir -p /workspace/d/e && "
                   "ln -s data /workspace/d/link"})
                  .code,
              0);
    ASSERT_EQ(Cli({"sandbox", "suspend", id}).code, 0);
    SandboxMeta before = Meta(id);
    KillSupervisor(before);
    fs::path workspace = state_ / "sandboxes" / id / "workspace";
    const bool disk = fs::exists(state_ / "sandboxes" / id / "rt" / "workspace.img");
    if (host_restarted) {
      if (!disk) GTEST_SKIP() << "no workspace disk here (its files are a plain dir)";
      // What a reboot leaves: the image, no mount, no loop device.
      ASSERT_EQ(umount2(workspace.c_str(), 0), 0) << strerror(errno);
    }
    // Listed (not cleaned up as a dead supervisor's sandbox would be): suspended.
    auto ls = Cli({"sandbox", "ls"});
    EXPECT_EQ(LsState(ls.out, id), "suspended") << ls.out;
    ASSERT_TRUE(fs::exists(state_ / "sandboxes" / id));
    // Use adopts it: a new supervisor, fresh processes, the same files.
    auto read = Cli({"sandbox", "exec", id, "--", "sh", "-c",
                     "cat /workspace/data; readlink d/link; ls -d d/e"});
    ASSERT_EQ(read.code, 0) << read.err << ReadFile(state_ / "sandboxes" / id / "supervisor.log");
    EXPECT_EQ(read.out, std::string("kept\0bytes", 10) + "data\nd/e\n");
    SandboxMeta after = Meta(id);
    EXPECT_NE(after.supervisor.pid, before.supervisor.pid);
    EXPECT_TRUE(ProcessAlive(after.supervisor));
    EXPECT_EQ(after.mode, "running");
    EXPECT_EQ(after.labels.at("team"), "x");
    EXPECT_EQ(after.expires_at_ms, before.expires_at_ms);
    EXPECT_THAT(ReadFile(state_ / "sandboxes" / id / "supervisor.log"),
                HasSubstr("adopting this suspended sandbox"));
    // It is a sandbox like any other again: suspend, resume, delete.
    ASSERT_EQ(Cli({"sandbox", "suspend", id}).code, 0);
    ASSERT_EQ(Cli({"sandbox", "resume", id}).code, 0);
    SandboxMeta last = Meta(id);
    ASSERT_EQ(Cli({"sandbox", "rm", id}).code, 0);
    EXPECT_TRUE(Eventually([&] { return Leftovers(last).empty(); }, 30s)) << Leftovers(last);
    EXPECT_FALSE(fs::exists(state_ / "sandboxes" / id));
  }
}

TEST_F(ModeTest, TheTtlEndsASuspendedSandboxWithOrWithoutItsSupervisor) {
  std::string supervised = CreateCli("4");
  std::string orphaned = CreateCli("4");
  ASSERT_EQ(Cli({"sandbox", "suspend", supervised}).code, 0);
  ASSERT_EQ(Cli({"sandbox", "suspend", orphaned}).code, 0);
  SandboxMeta sm = Meta(supervised), om = Meta(orphaned);
  KillSupervisor(om);
  // The supervisor's timer ends the first; the second goes at the first
  // look after its TTL (a list, or any use).
  ASSERT_TRUE(Eventually([&] { return !fs::exists(state_ / "sandboxes" / supervised); }, 60s));
  EXPECT_TRUE(Eventually([&] { return Leftovers(sm).empty(); }, 30s)) << Leftovers(sm);
  std::this_thread::sleep_for(
      std::chrono::milliseconds(std::max<int64_t>(0, *om.expires_at_ms - NowMs() + 100)));
  auto resumed = Cli({"sandbox", "resume", orphaned});
  EXPECT_EQ(resumed.code, 3) << resumed.err;  // gone
  EXPECT_THAT(resumed.err, HasSubstr("while it was suspended"));
  EXPECT_FALSE(fs::exists(state_ / "sandboxes" / orphaned));
  EXPECT_TRUE(Eventually([&] { return Leftovers(om).empty(); }, 30s)) << Leftovers(om);
}

TEST_F(ModeTest, ResumingADeletedSandboxSaysItIsGone) {
  std::string id = CreateCli();
  ASSERT_EQ(Cli({"sandbox", "suspend", id}).code, 0);
  ASSERT_EQ(Cli({"sandbox", "rm", id}).code, 0);
  auto resumed = Cli({"sandbox", "resume", id});
  EXPECT_EQ(resumed.code, 3) << resumed.err;
  EXPECT_THAT(resumed.err, HasSubstr(id));
  EXPECT_THAT(resumed.err, ::testing::AnyOf(HasSubstr("gone"), HasSubstr("no sandbox")));
}

// `sandbox ls` IDLE: what the daemon says for a running sandbox ("busy"
// while a command runs), the time since it was suspended otherwise.
TEST_F(ModeTest, LsShowsHowLongEachSandboxWasUnused) {
  std::string id = CreateCli();
  auto idle_of = [&]() -> int64_t {
    auto r = Cli({"sandbox", "ls", "--json"});
    auto list = ParseJson(r.out);
    if (!list || !list->is_array()) return -2;
    for (const auto& v : list->as_array()) {
      const auto& o = v.as_object();
      if (o.at("id").as_string() == id) {
        auto it = o.find("idle_ms");
        return it == o.end() ? -1 : it->value().as_int64();
      }
    }
    return -3;
  };
  ASSERT_EQ(Cli({"sandbox", "exec", id, "--", "true"}).code, 0);
  std::this_thread::sleep_for(1100ms);
  EXPECT_GE(idle_of(), 1000);
  std::thread busy([&] { (void)Cli({"sandbox", "exec", id, "--", "sleep", "3"}); });
  EXPECT_TRUE(Eventually([&] { return idle_of() == 0; }, 10s));
  auto ls = Cli({"sandbox", "ls"});
  EXPECT_THAT(ls.out, HasSubstr("IDLE"));
  EXPECT_THAT(ls.out, ::testing::ContainsRegex(id + " +claimed +[0-9]+s +busy "));
  busy.join();
  ASSERT_EQ(Cli({"sandbox", "suspend", id}).code, 0);
  std::this_thread::sleep_for(1100ms);
  EXPECT_GE(idle_of(), 1000);             // suspended that long
  EXPECT_EQ(Meta(id).mode, "suspended");  // asking did not wake it
}

TEST_F(ModeTest, BadIdsAndWarmSandboxesAreRefused) {
  auto bad = Cli({"sandbox", "suspend", "../x"});
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("is no sandbox id"));
  auto missing = Cli({"sandbox", "pause", "sb-0123456789ab"});
  EXPECT_EQ(missing.code, 3) << missing.err;
  StartPool("modes", 1);
  ASSERT_TRUE(Eventually([&] { return !WarmOf("modes").empty(); }, 60s)) << PoolLog("modes");
  std::string warm = WarmOf("modes")[0].id;
  auto refused = Cli({"sandbox", "suspend", warm});
  EXPECT_NE(refused.code, 0);
  EXPECT_THAT(refused.err, HasSubstr("warm pool's, not claimed"));
}

}  // namespace
}  // namespace deepbox::local::lifecycle
