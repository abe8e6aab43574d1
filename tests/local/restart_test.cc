// What a local sandbox's supervisor does when things die under it (issue 29):
// a daemon killed from the host is restarted over the same /workspace, the
// request in flight says so, restarts are bounded (then the sandbox is kept,
// broken, with its files), a removed state directory ends its sandboxes,
// unclaimed warm sandboxes expire, and an OOM kill is reported as one. All
// with the real `deepbox` binary, supervisors, namespaces and deepbox-sandboxd.
#include <dirent.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "agent/testing/tool_runner.h"
#include "agent/tools_execute.h"
#include "cli_fixture.h"
#include "common/json.h"
#include "local/launcher.h"
#include "local/lifecycle/provider.h"
#include "local/lifecycle/supervisor.h"

namespace deepbox::local::lifecycle {
namespace {

using namespace std::chrono_literals;
using testing::Eventually;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using testing::ReadFile;

class RestartTest : public testing::LocalCliTest {
 protected:
  // A TTL is the safety net should this test crash before its TearDown.
  std::string CreateCli(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"sandbox", "create",    "--cold", "--ttl",
                                     "900",     "--network", "none"};
    args.insert(args.end(), extra.begin(), extra.end());
    return CreatedId(Cli(args));
  }

  // Kills the daemon (the sandbox's init) from the host, as a crash would,
  // and waits until the supervisor has restarted it `restarts` times in all.
  ::testing::AssertionResult KillAndAwaitRestart(const std::string& id, int restarts) {
    SandboxMeta before = Meta(id);
    if (kill(before.init.pid, SIGKILL) != 0) {
      return ::testing::AssertionFailure() << "kill(" << before.init.pid << "): " << errno;
    }
    bool ok = Eventually(
        [&] {
          auto m = provider_->store().Read(id);
          return m && m->ready && m->restarts == restarts && m->init.pid != before.init.pid &&
                 ProcessAlive(m->init);
        },
        120s);
    if (!ok) {
      return ::testing::AssertionFailure()
             << "not restarted; record: "
             << (provider_->store().Read(id) ? ToJson(Meta(id).ToJson()) : "gone")
             << "\nlog: " << ReadFile(state_ / "sandboxes" / id / "supervisor.log");
    }
    return ::testing::AssertionSuccess();
  }

  fs::path HostWorkspace(const std::string& id) { return state_ / "sandboxes" / id / "workspace"; }
};

TEST_F(RestartTest, AKilledDaemonIsRestartedAndTheFilesStay) {
  std::string id = CreateCli();
  auto r = Cli({"sandbox", "exec", id, "--", "sh", "-c", "echo precious > /workspace/work.txt"});
  ASSERT_EQ(r.code, 0) << r.err;
  SandboxMeta first = Meta(id);

  ASSERT_TRUE(KillAndAwaitRestart(id, 1));
  SandboxMeta after = Meta(id);
  EXPECT_FALSE(ProcessAlive(first.init));
  EXPECT_EQ(after.supervisor.pid, first.supervisor.pid);
  EXPECT_EQ(after.socket, first.socket);
  EXPECT_EQ(after.network, first.network);
  EXPECT_EQ(after.limits, first.limits);
  EXPECT_THAT(after.broken, IsEmpty());
  // The files are there, and the sandbox answers again.
  r = Cli({"sandbox", "exec", id, "--", "cat", "/workspace/work.txt"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "precious\n");
  r = Cli({"sandbox", "exec", id, "--", "sh", "-c", "echo again >> work.txt && cat work.txt"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "precious\nagain\n");
  EXPECT_THAT(ReadFile(state_ / "sandboxes" / id / "supervisor.log"),
              HasSubstr("killed by signal 9 (Killed): restarting it over the same /workspace "
                        "(restart 1;"));
  // Only rm deletes it, and it leaves nothing.
  r = Cli({"sandbox", "rm", id});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Eventually([&] { return Leftovers(after).empty(); })) << Leftovers(after);
  EXPECT_FALSE(fs::exists(state_ / "sandboxes" / id));
}

TEST_F(RestartTest, TheRequestInFlightSaysTheDaemonRestarted) {
  std::string id = CreateCli();
  // `sandbox exec` streaming a command (with an exec id, re-attached after a cut).
  fs::path out = state_ / "io" / "inflight.out", err = state_ / "io" / "inflight.err";
  pid_t cli =
      Spawn({"sandbox", "exec", id, "--", "sh", "-c", "echo started; exec sleep 600"}, out, err);
  ASSERT_GT(cli, 0);
  ASSERT_TRUE(Eventually([&] { return ReadFile(out) == "started\n"; })) << ReadFile(err);
  ASSERT_TRUE(KillAndAwaitRestart(id, 1));
  int status = 0;
  ASSERT_EQ(waitpid(cli, &status, 0), cli);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  std::string said = ReadFile(err);
  EXPECT_THAT(said, HasSubstr("its daemon (deepbox-sandboxd) restarted"));
  EXPECT_THAT(said, HasSubstr("may not have completed"));
  EXPECT_EQ(std::count(said.begin(), said.end(), '\n'), 1) << "one message: " << said;

  // A long-lived client (an agent's, MCP's): its request in flight gets the
  // same error; its next request reaches the restarted daemon.
  auto client = provider_->Connect(id);
  ASSERT_TRUE(client.has_value()) << client.error().ToString();
  std::optional<Result<ExecResult>> got;
  std::thread t([&] {
    ExecRequest req;
    req.shell = "touch /workspace/started; exec sleep 600";
    got = (*client)->Exec(req);
  });
  bool started = Eventually([&] { return fs::exists(HostWorkspace(id) / "started"); });
  EXPECT_TRUE(started);
  EXPECT_TRUE(KillAndAwaitRestart(id, 2));
  t.join();
  ASSERT_TRUE(got.has_value());
  ASSERT_FALSE(got->has_value()) << "the command cannot have finished";
  EXPECT_EQ(got->error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(got->error().message, HasSubstr("its daemon (deepbox-sandboxd) restarted"));
  EXPECT_THAT(got->error().message, HasSubstr("may not have completed"));
  ExecRequest again;
  again.shell = "test -f /workspace/started && echo kept";
  auto next = (*client)->Exec(again);
  ASSERT_TRUE(next.has_value()) << next.error().ToString();
  EXPECT_EQ(next->stdout_data, "kept\n");
}

TEST_F(RestartTest, ExhaustedRestartsKeepTheSandboxBrokenWithItsFiles) {
  std::string id = CreateCli();
  auto r = Cli({"sandbox", "exec", id, "--", "sh", "-c", "echo precious > /workspace/work.txt"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (int i = 1; i <= kMaxDaemonRestarts; ++i) ASSERT_TRUE(KillAndAwaitRestart(id, i)) << i;
  // One death too many within the window: no restart, and nothing deleted.
  SandboxMeta last = Meta(id);
  ASSERT_EQ(kill(last.init.pid, SIGKILL), 0);
  ASSERT_TRUE(Eventually([&] { return !Meta(id).broken.empty(); }, 60s))
      << ReadFile(state_ / "sandboxes" / id / "supervisor.log");
  SandboxMeta broken = Meta(id);
  EXPECT_THAT(broken.broken,
              HasSubstr(fmt::format("died {} times within", kMaxDaemonRestarts + 1)));
  EXPECT_FALSE(broken.ready);
  EXPECT_TRUE(ProcessAlive(broken.supervisor));
  EXPECT_TRUE(Eventually([&] { return !ProcessAlive(last.init); }));
  for (const auto& cg : broken.cgroups) EXPECT_FALSE(fs::exists(cg)) << cg;
  EXPECT_EQ(ReadFile(HostWorkspace(id) / "work.txt"), "precious\n");
  EXPECT_THAT(ReadFile(state_ / "sandboxes" / id / "supervisor.log"),
              HasSubstr("not restarting it again; the sandbox is kept, broken"));

  r = Cli({"sandbox", "exec", id, "--", "true"});
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("is broken"));
  EXPECT_THAT(r.err, HasSubstr("files are kept in " + HostWorkspace(id).string()));
  // Still listed; still there a moment later; only rm deletes it.
  r = Cli({"sandbox", "ls"});
  EXPECT_THAT(r.out, ::testing::ContainsRegex(id + " +broken "));
  EXPECT_EQ(ReadFile(HostWorkspace(id) / "work.txt"), "precious\n");
  r = Cli({"sandbox", "rm", id});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Eventually([&] { return Leftovers(broken).empty(); })) << Leftovers(broken);
  EXPECT_FALSE(fs::exists(state_ / "sandboxes" / id));
}

// Issue 29, item 13: a sandbox nothing could list, reach or delete any more
// ends by itself, with its processes, cgroups, mounts and loop devices.
TEST_F(RestartTest, ARemovedRecordOrStateDirEndsItsSandbox) {
  std::string a = CreateCli();
  std::string b = CreateCli();
  SandboxMeta ma = Meta(a), mb = Meta(b);
  ASSERT_TRUE(ProcessAlive(ma.supervisor));
  ASSERT_TRUE(ProcessAlive(mb.supervisor));

  // Its record only.
  ASSERT_EQ(unlink((state_ / "sandboxes" / a / "meta.json").c_str()), 0);
  EXPECT_TRUE(Eventually([&] { return Leftovers(ma).empty(); })) << Leftovers(ma);
  EXPECT_FALSE(fs::exists(state_ / "sandboxes" / a));
  EXPECT_TRUE(ProcessAlive(mb.supervisor)) << "another sandbox ended too";

  // The whole state directory, as a test's TearDown removes it (the mounted
  // /workspace disk, where there is one, cannot be removed meanwhile).
  (void)RemoveTree(state_);
  EXPECT_TRUE(Eventually([&] { return Leftovers(mb).empty(); })) << Leftovers(mb);
  EXPECT_TRUE(Eventually([&] { return !fs::exists(state_ / "sandboxes" / b); }));
}

TEST_F(RestartTest, UnclaimedWarmSandboxesExpireAndOneWhoseDaemonDiesGoes) {
  StartPool("w", 1);
  ASSERT_TRUE(Eventually([&] { return WarmOf("w").size() == 1; }, 120s)) << PoolLog("w");
  SandboxMeta warm = WarmOf("w").front();
  ASSERT_TRUE(warm.expires_at_ms.has_value()) << "a warm sandbox without a TTL backstop";
  const int64_t lifetime =
      std::chrono::duration_cast<std::chrono::milliseconds>(kWarmLifetime).count();
  EXPECT_EQ(*warm.expires_at_ms, warm.created_at_ms + lifetime);

  // Its daemon dies: nobody's files are in it, so it goes; the pool makes another.
  ASSERT_EQ(kill(warm.init.pid, SIGKILL), 0);
  EXPECT_TRUE(Eventually([&] { return Leftovers(warm).empty(); })) << Leftovers(warm);
  ASSERT_TRUE(Eventually(
      [&] {
        auto w = WarmOf("w");
        return w.size() == 1 && w.front().id != warm.id;
      },
      120s))
      << PoolLog("w");

  // A claim without a TTL takes the backstop away.
  auto claimer = Provider("w");
  ASSERT_NE(claimer, nullptr);
  ClaimOptions o;
  o.network = "none";
  auto claimed = claimer->CreateSandbox(o);
  ASSERT_TRUE(claimed.has_value()) << claimed.error().ToString();
  EXPECT_EQ(claimed->pool, "w");
  EXPECT_FALSE(claimed->expires_at_ms.has_value());
  EXPECT_FALSE(Meta(claimed->id).expires_at_ms.has_value());
}

// Issue 29, item 9.
TEST_F(RestartTest, AnOomKillSaysSo) {
  LimitSupport host = ProbeHostLimitSupport();
  if (!host.memory.enforced) {
    GTEST_SKIP() << "no memory cgroup here (" << host.memory.detail << "): no OOM kill to report";
  }
  std::string id = CreateCli({"--memory", "64M"});
  if (Meta(id).limits_note.find("memory") != std::string::npos) {
    GTEST_SKIP() << "the memory limit is not enforced here: " << Meta(id).limits_note;
  }
  // `tail` keeps a line that never ends: it grows until the kernel kills it.
  auto r = Cli({"sandbox", "exec", id, "--", "sh", "-c", "tail /dev/zero"});
  EXPECT_EQ(r.code, 137) << r.err;
  EXPECT_THAT(r.err, HasSubstr("killed at the sandbox's memory limit (64 MiB)"));
  // A SIGKILL that is not the kernel's says nothing of the kind.
  r = Cli({"sandbox", "exec", id, "--", "sh", "-c", "kill -9 $$"});
  EXPECT_EQ(r.code, 137) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("memory limit")));

  // The typed field, and the execute tool's result (what a model reads).
  auto client = provider_->Connect(id);
  ASSERT_TRUE(client.has_value()) << client.error().ToString();
  ExecRequest req;
  req.shell = "exec tail /dev/zero";
  auto got = (*client)->Exec(req);
  ASSERT_TRUE(got.has_value()) << got.error().ToString();
  EXPECT_TRUE(got->oom_killed);
  EXPECT_EQ(got->memory_limit_bytes, 64u << 20);
  agent::testing::ToolRunner run(**client, {agent::MakeExecuteTool()});
  json::object args;
  args["command"] = "tail /dev/zero";
  EXPECT_THAT(run.Run("execute", args).text,
              HasSubstr("Command killed at the sandbox's memory limit (64 MiB)"));
  args["command"] = "kill -9 $$";
  EXPECT_THAT(run.Run("execute", args).text, Not(HasSubstr("memory limit")));
}

}  // namespace
}  // namespace deepbox::local::lifecycle
