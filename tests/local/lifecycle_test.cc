// Lifecycle integration tests of local sandboxes: the real `deepbox` binary,
// real supervisors, namespaces and deepbox-sandboxd. Each test has its own
// state directory, so tests (and other users of this machine) do not meet.
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "cli_fixture.h"
#include "common/json.h"
#include "local/lifecycle/provider.h"
#include "local/namespaces.h"

extern char** environ;

namespace deepbox::local::lifecycle {
namespace {

using namespace std::chrono_literals;
using testing::Eventually;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::kBinDir;
using testing::kDeepbox;
using ::testing::Not;
using testing::ReadFile;

class LifecycleTest : public testing::LocalCliTest {
 protected:
  // A TTL is the safety net should this test crash before its TearDown.
  std::string CreateCli(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"sandbox", "create", "--cold", "--ttl", "900"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = Cli(args);
    EXPECT_EQ(r.code, 0) << r.err;
    std::string id = r.out;
    while (!id.empty() && id.back() == '\n') id.pop_back();
    EXPECT_TRUE(Store::ValidId(id)) << "'" << id << "' " << r.err;
    return id;
  }

  // Everything a sandbox could leave behind; empty when it left nothing.
  std::string Leftovers(const SandboxMeta& m) {
    std::string out;
    if (ProcessAlive(m.supervisor)) out += fmt::format("supervisor {} alive; ", m.supervisor.pid);
    if (ProcessAlive(m.init)) out += fmt::format("init {} alive; ", m.init.pid);
    for (const auto& cg : m.cgroups) {
      if (fs::exists(cg)) out += "cgroup " + cg + "; ";
    }
    if (!m.socket.empty() && fs::exists(m.socket)) out += "socket " + m.socket + "; ";
    fs::path dir = state_ / "sandboxes" / m.id;
    if (fs::exists(dir)) out += "state dir " + dir.string() + "; ";
    std::string mounts = ReadFile("/proc/self/mountinfo");
    if (mounts.find(m.id) != std::string::npos) out += "a mount naming " + m.id + "; ";
    // Any process in the sandbox's cgroup or naming it on its command line.
    DIR* d = opendir("/proc");
    while (dirent* ent = d ? readdir(d) : nullptr) {
      if (!std::isdigit(static_cast<unsigned char>(ent->d_name[0]))) continue;
      std::string cg = ReadFile(fmt::format("/proc/{}/cgroup", ent->d_name));
      std::string cmd = ReadFile(fmt::format("/proc/{}/cmdline", ent->d_name));
      std::string stat = ReadFile(fmt::format("/proc/{}/stat", ent->d_name));
      bool zombie = stat.find(") Z") != std::string::npos;
      if (!zombie && (cg.find("/deepbox/" + m.id) != std::string::npos ||
                      cmd.find(m.id) != std::string::npos)) {
        out += fmt::format("process {} ({}); ", ent->d_name, cmd.substr(0, 60));
      }
    }
    if (d) closedir(d);
    return out;
  }

  std::string TrashLeft() {
    std::string out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(state_ / "trash", ec)) {
      out += e.path().filename().string() + " ";
    }
    return out;
  }
};

TEST_F(LifecycleTest, CreateExecRmLeavesNothing) {
  setenv("ANTHROPIC_API_KEY", "sk-test-secret", 1);  // must reach neither supervisor nor sandbox
  std::string id = CreateCli({"--label", "app=test", "--network", "none"});
  unsetenv("ANTHROPIC_API_KEY");
  auto meta = provider_->Get(id);
  ASSERT_TRUE(meta.has_value()) << meta.error().ToString();
  EXPECT_TRUE(meta->ready);
  EXPECT_EQ(meta->labels.at("app"), "test");
  EXPECT_TRUE(ProcessAlive(meta->supervisor));
  EXPECT_TRUE(ProcessAlive(meta->init));
  EXPECT_TRUE(fs::exists(meta->socket));
  EXPECT_TRUE(meta->timings.contains("daemon ready")) << ToJson(meta->timings);
  EXPECT_THAT(ReadFile(fmt::format("/proc/{}/environ", meta->supervisor.pid)),
              Not(HasSubstr("sk-test-secret")));

  setenv("ANTHROPIC_API_KEY", "sk-test-secret", 1);
  auto r = Cli({"sandbox", "exec", id, "--", "env"});
  unsetenv("ANTHROPIC_API_KEY");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("sk-test-secret")));
  r = Cli({"sandbox", "exec", id, "--", "sh", "-c", "echo out; echo err >&2; id -u; hostname"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "out\n1000\n" + id + "\n");
  EXPECT_EQ(r.err, "err\n");

  r = Cli({"sandbox", "rm", id});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, id + "\n");
  EXPECT_THAT(Leftovers(*meta), IsEmpty());
  EXPECT_THAT(TrashLeft(), IsEmpty());
  r = Cli({"sandbox", "rm", id});
  EXPECT_EQ(r.code, 3);
  EXPECT_THAT(r.err, HasSubstr("no sandbox '" + id + "' (see: deepbox sandbox ls)"));
}

TEST_F(LifecycleTest, ExecPropagatesStatus) {
  std::string id = CreateCli({"--network", "none"});
  EXPECT_EQ(Cli({"sandbox", "exec", id, "--", "sh", "-c", "exit 7"}).code, 7);
  EXPECT_EQ(Cli({"sandbox", "exec", id, "--", "sh", "-c", "kill -TERM $$"}).code, 128 + 15);
  auto r = Cli({"sandbox", "exec", "--timeout", "1", id, "--", "sleep", "30"});
  EXPECT_EQ(r.code, 124) << r.err;
  EXPECT_THAT(r.err, HasSubstr("timed out"));
  r = Cli({"sandbox", "exec", id, "--", "/no/such/command"});
  EXPECT_EQ(r.code, 127) << r.err;
  ASSERT_EQ(Cli({"sandbox", "exec", id, "--", "mkdir", "d"}).code, 0);
  r = Cli({"sandbox", "exec", "--cwd", "d", "-e", "X=42", "-e", "Y=7", id, "--", "sh", "-c",
           "pwd; echo $X $Y"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "/workspace/d\n42 7\n");
  r = Cli({"sandbox", "exec", id, "sh", "-c", "echo no dashes needed --x; exit 5"});
  EXPECT_EQ(r.code, 5) << r.err;
  EXPECT_EQ(r.out, "no dashes needed --x\n");
  r = Cli({"sandbox", "exec", "-i", id, "--", "wc", "-c"}, "12345");
  EXPECT_EQ(r.out, "5\n");
  r = Cli({"sandbox", "exec", "sb-000000000000", "--", "true"});
  EXPECT_EQ(r.code, 3);
  EXPECT_THAT(r.err, HasSubstr("no sandbox 'sb-000000000000' (see: deepbox sandbox ls)"));
  // A word that could be a name (sandbox create --name) is looked up as one.
  r = Cli({"sandbox", "exec", "not-an-id", "--", "true"});
  EXPECT_EQ(r.code, 3);
  EXPECT_THAT(r.err, HasSubstr("no sandbox named 'not-an-id' (ids look like sb-"));
  r = Cli({"sandbox", "exec", "not an id!", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("is not a sandbox id or name"));
}

TEST_F(LifecycleTest, TtlExpiryDeletes) {
  ClaimOptions o;
  o.ttl = 1s;
  o.network = "none";
  auto meta = provider_->CreateSandbox(o, false);
  ASSERT_TRUE(meta.has_value()) << meta.error().ToString();
  ASSERT_TRUE(meta->expires_at_ms.has_value());
  EXPECT_TRUE(Eventually([&] { return !fs::exists(state_ / "sandboxes" / meta->id); }));
  EXPECT_TRUE(Eventually([&] { return Leftovers(*meta).empty(); })) << Leftovers(*meta);
  auto got = provider_->Get(meta->id);
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(got.error().message, HasSubstr("expired"));
  auto r = Cli({"sandbox", "exec", meta->id, "--", "true"});
  EXPECT_EQ(r.code, 3);
  EXPECT_THAT(r.err, HasSubstr("expired"));
}

TEST_F(LifecycleTest, SigkilledCreatorStillGetsTtlReaped) {
  int n = counter_++;
  pid_t creator = Spawn({"sandbox", "create", "--cold", "--ttl", "2", "--network", "none"},
                        state_ / fmt::format("o{}", n), state_ / fmt::format("e{}", n));
  // Kill the creator as soon as its sandbox exists (mid-creation).
  std::string id;
  ASSERT_TRUE(Eventually([&] {
    auto ids = provider_->store().Ids();
    if (ids && !ids->empty()) id = ids->front();
    return !id.empty();
  }));
  kill(creator, SIGKILL);
  int status = 0;
  waitpid(creator, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status));
  // The supervisor finishes the creation on its own...
  SandboxMeta meta;
  ASSERT_TRUE(Eventually([&] {
    auto m = provider_->store().Read(id);
    if (m && m->ready) meta = *m;
    return meta.ready || !fs::exists(state_ / "sandboxes" / id);
  }));
  ASSERT_TRUE(meta.ready) << "the sandbox never became ready without its creator";
  EXPECT_TRUE(ProcessAlive(meta.supervisor));
  // ...and deletes it when the TTL runs out.
  EXPECT_TRUE(Eventually([&] { return !fs::exists(state_ / "sandboxes" / id); }));
  EXPECT_TRUE(Eventually([&] { return Leftovers(meta).empty(); })) << Leftovers(meta);
  EXPECT_EQ(provider_->store().ReadTombstone(id)->reason, "expired");
}

TEST_F(LifecycleTest, LabelsAndSelectors) {
  std::string a = CreateCli({"-l", "app=x", "-l", "tier=dev", "--network", "none"});
  std::string b = CreateCli({"-l", "app=x", "-l", "tier=prod", "--network", "none"});
  std::string c = CreateCli({"-l", "app=y", "--network", "none"});
  auto ids = [&](const std::string& selector) {
    auto r = Cli({"sandbox", "ls", "-q", "--selector", selector});
    EXPECT_EQ(r.code, 0) << r.err;
    std::set<std::string> out;
    std::istringstream in(r.out);
    for (std::string l; std::getline(in, l);) out.insert(l);
    return out;
  };
  EXPECT_EQ(ids("app=x"), (std::set<std::string>{a, b}));
  EXPECT_EQ(ids("app=x,tier!=prod"), (std::set<std::string>{a}));
  EXPECT_EQ(ids("tier"), (std::set<std::string>{a, b}));
  EXPECT_EQ(ids("!tier"), (std::set<std::string>{c}));
  EXPECT_EQ(ids("app=z"), (std::set<std::string>{}));

  auto r = Cli({"sandbox", "ls", "--json", "--selector", "app=y"});
  auto arr = ParseJson(r.out);
  ASSERT_TRUE(arr && arr->is_array()) << r.out;
  ASSERT_EQ(arr->as_array().size(), 1u);
  EXPECT_EQ(arr->as_array()[0].as_object().at("id").as_string(), c);
  r = Cli({"sandbox", "ls"});
  EXPECT_THAT(r.out, HasSubstr("app=x,tier=dev"));

  r = Cli({"sandbox", "ls", "--selector", "a=b=c"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("bad selector"));
  r = Cli({"sandbox", "create", "--label", "bad label=1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("bad label key"));
  r = Cli({"sandbox", "rm", "--selector", "tier=prod"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, b + "\n");
  EXPECT_EQ(ids("app"), (std::set<std::string>{a, c}));
  r = Cli({"sandbox", "rm", "--selector", "app"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ids(""), (std::set<std::string>{}));
}

// Issue 28: `sandbox inspect` shows one sandbox, by id or name; --json is its
// `ls --json` record plus the fields every provider's inspect has (the
// daemon's socket; no url, no token for a local daemon).
TEST_F(LifecycleTest, InspectShowsOneSandboxAndItsDaemon) {
  auto created = Cli({"sandbox", "create", "-l", "app=x", "--name", "inspected", "--network",
                      "none", "--ttl", "600"});
  std::string id = CreatedId(created);
  for (const std::string& which : {id, std::string("inspected")}) {
    auto r = Cli({"sandbox", "inspect", "--json", which});
    ASSERT_EQ(r.code, 0) << r.err;
    auto rec = ParseJsonObject(r.out);
    ASSERT_TRUE(rec) << r.out;
    EXPECT_EQ(FindString(*rec, {"id"}), id);
    EXPECT_EQ(FindString(*rec, {"provider"}), "local");
    EXPECT_EQ(FindString(*rec, {"name"}), "inspected");
    EXPECT_EQ(FindString(*rec, {"state"}), "claimed");
    EXPECT_EQ(FindString(*rec, {"status"}), "claimed");
    EXPECT_EQ(FindString(*rec, {"labels", "app"}), "x");
    EXPECT_EQ(FindString(*rec, {"socket"}), Meta(id).socket);
    EXPECT_TRUE(fs::exists(FindString(*rec, {"socket"})));
    EXPECT_TRUE(Find(*rec, {"url"})->is_null());
    EXPECT_TRUE(Find(*rec, {"token"})->is_null());
    EXPECT_TRUE(Find(*rec, {"owner"})->as_bool());
    EXPECT_TRUE(Find(*rec, {"limits"})->is_object());
    const json::value* ttl = Find(*rec, {"ttl_remaining_seconds"});
    ASSERT_TRUE(ttl != nullptr && ttl->is_int64()) << r.out;
    EXPECT_GT(ttl->as_int64(), 500);
  }
  auto r = Cli({"sandbox", "inspect", id});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("ID:        " + id));
  EXPECT_THAT(r.out, HasSubstr("Provider:  local"));
  EXPECT_THAT(r.out, HasSubstr("Labels:    app=x"));
  EXPECT_THAT(r.out, HasSubstr("Daemon:    unix:" + Meta(id).socket));
  // Unknown ids and names: 3, nothing on stdout; a claim id is not local.
  r = Cli({"sandbox", "inspect", "--json", "sb-0123456789ab"});
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_EQ(r.out, "");
  r = Cli({"sandbox", "inspect", "no-such-name"});
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--provider k8s no-such-name"));
  r = Cli({"sandbox", "inspect", "--provider", "k8s", id});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("local sandbox's id"));
  r = Cli({"sandbox", "inspect", "Not/A/Sandbox"});
  EXPECT_EQ(r.code, 2) << r.err;
  r = Cli({"sandbox", "rm", id});
  EXPECT_EQ(r.code, 0) << r.err;
  r = Cli({"sandbox", "inspect", id});
  EXPECT_EQ(r.code, 3) << r.err;
}

TEST_F(LifecycleTest, WarmPoolClaimRefillAndTtl) {
  StartPool("p", 2);
  ASSERT_TRUE(Eventually([&] { return WarmOf("p").size() == 2; }));
  auto claimer = Provider("p");
  ClaimOptions o;
  o.labels = {{"deepagents.example/claim", "true"}};
  o.ttl = 2s;
  auto lease = claimer->Claim(o);
  ASSERT_TRUE(lease.has_value()) << lease.error().ToString();
  std::string id = (*lease)->sandbox().id();
  auto meta = provider_->store().Read(id);
  ASSERT_TRUE(meta.has_value());
  EXPECT_EQ(meta->pool, "p") << "the claim did not come from the pool";
  EXPECT_EQ(meta->state, "claimed");
  EXPECT_EQ(meta->labels, (Labels{{"deepagents.example/claim", "true"}}));
  ASSERT_TRUE(meta->expires_at_ms.has_value());
  auto r = (*lease)->sandbox().Exec(ExecRequest{.argv = {"echo", "warm"}});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->stdout_data, "warm\n");
  (*lease)->Keep();
  lease->reset();
  // The pool refills, and the claimed one is deleted by its TTL, like a cold one.
  EXPECT_TRUE(Eventually([&] { return WarmOf("p").size() == 2; }));
  EXPECT_TRUE(Eventually([&] { return !fs::exists(state_ / "sandboxes" / id); }));
  EXPECT_TRUE(Eventually([&] { return Leftovers(*meta).empty(); })) << Leftovers(*meta);
  EXPECT_EQ(provider_->store().ReadTombstone(id)->reason, "expired");
}

TEST_F(LifecycleTest, ConcurrentClaimersNeverShareASandbox) {
  constexpr int kWarm = 6;
  pid_t pool = StartPool("race", kWarm);
  ASSERT_TRUE(Eventually([&] { return WarmOf("race").size() == kWarm; }, 120s));
  StopDaemon(pool, SIGTERM);  // no refills: exactly kWarm can be won
  std::set<std::string> warm_ids;
  for (const auto& m : WarmOf("race")) warm_ids.insert(m.id);

  // Threads (in-process claimers)...
  std::mutex mu;
  std::vector<std::string> won;
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto p = Provider("race");
      ClaimOptions o;
      o.labels = {{"claimer", std::to_string(i)}};
      auto m = p->ClaimWarm("race", o);
      ASSERT_TRUE(m.has_value()) << m.error().ToString();
      if (*m) {
        std::lock_guard<std::mutex> g(mu);
        won.push_back((*m)->id);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::string> unique(won.begin(), won.end());
  EXPECT_EQ(unique.size(), won.size()) << "two claimers got the same sandbox";
  EXPECT_EQ(won.size(), static_cast<size_t>(kWarm));
  for (const auto& id : won) EXPECT_TRUE(warm_ids.count(id));
  for (const auto& id : won) {
    auto m = provider_->store().Read(id);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->state, "claimed");
    EXPECT_EQ(m->labels.size(), 1u);
  }
  EXPECT_THAT(WarmOf("race"), IsEmpty());

  // ...and processes (the CLI) racing for a fresh batch of 3.
  pool = StartPool("race", 3);
  ASSERT_TRUE(Eventually([&] { return WarmOf("race").size() == 3; }, 120s));
  StopDaemon(pool, SIGTERM);
  std::vector<pid_t> pids;
  std::vector<fs::path> outs;
  for (int i = 0; i < 5; ++i) {
    outs.push_back(state_ / fmt::format("race-{}", i));
    pids.push_back(Spawn({"sandbox", "create", "--json", "--pool", "race", "--network", "none"},
                         outs.back(), state_ / fmt::format("race-err-{}", i)));
  }
  std::vector<std::string> from_pool;
  std::set<std::string> all;
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    waitpid(pids[i], &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    auto obj = ParseJsonObject(ReadFile(outs[i]));
    ASSERT_TRUE(obj.has_value());
    std::string id(obj->at("id").as_string());
    all.insert(id);
    if (obj->at("pool").as_string() == "race") from_pool.push_back(id);
  }
  EXPECT_EQ(all.size(), 5u);
  EXPECT_EQ(from_pool.size(), 3u);  // the other two were created cold
}

TEST_F(LifecycleTest, PoolDaemonKilledMidClaimThenRestartedAdopts) {
  pid_t pool = StartPool("k", 3);
  ASSERT_TRUE(Eventually([&] { return WarmOf("k").size() == 3; }, 120s));
  std::set<std::string> before;
  for (const auto& m : WarmOf("k")) before.insert(m.id);
  // Claim (which wakes the daemon to refill) and SIGKILL the daemon right away.
  auto claimer = Provider("k");
  auto claimed = claimer->ClaimWarm("k", ClaimOptions{});
  ASSERT_TRUE(claimed.has_value() && claimed->has_value());
  StopDaemon(pool, SIGKILL);
  // Nothing was lost: the claim holds, warm ones keep running, and a refill
  // that was under way finishes under its own supervisor.
  auto client = provider_->Connect((*claimed)->id);
  ASSERT_TRUE(client.has_value()) << client.error().ToString();
  auto remaining = WarmOf("k");
  EXPECT_GE(remaining.size(), 2u);
  for (const auto& m : remaining) {
    if (before.count(m.id)) {
      EXPECT_TRUE(ProcessAlive(m.supervisor));
    }
  }
  // A restarted daemon adopts them and tops up to exactly 3.
  StartPool("k", 3);
  ASSERT_TRUE(Eventually([&] { return WarmOf("k").size() == 3; }, 120s));
  auto after = WarmOf("k");
  int adopted = 0;
  for (const auto& m : after) adopted += before.count(m.id);
  EXPECT_EQ(adopted, 2) << "the warm sandboxes of the killed daemon were not adopted";
  std::this_thread::sleep_for(300ms);  // a wrong refill would show up as a 4th one
  int members = 0;
  auto list = provider_->ListMeta();
  ASSERT_TRUE(list.has_value());
  for (const auto& m : *list) members += m.pool == "k" && m.state == "warm";
  EXPECT_EQ(members, 3);
  auto r = Cli({"sandbox", "rm", "--selector", "deepbox.dev/pool=k"});
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(LifecycleTest, HundredCreateDeleteCyclesLeaveNothing) {
  int fds_before = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) (void)e, ++fds_before;
  std::vector<SandboxMeta> metas;
  ClaimOptions o;
  o.network = "none";
  for (int i = 0; i < 100; ++i) {
    auto m = provider_->CreateSandbox(o, false);
    ASSERT_TRUE(m.has_value()) << "cycle " << i << ": " << m.error().ToString();
    if (i % 10 == 0) {
      auto c = provider_->Connect(*m);
      ASSERT_TRUE(c.has_value()) << c.error().ToString();
      auto r = (*c)->Exec(ExecRequest{.argv = {"true"}});
      ASSERT_TRUE(r.has_value());
      EXPECT_EQ(r->exit_code, 0);
    }
    auto st = provider_->Delete(m->id);
    ASSERT_TRUE(st.has_value()) << "cycle " << i << ": " << st.error().ToString();
    metas.push_back(*m);
  }
  for (const auto& m : metas) EXPECT_THAT(Leftovers(m), IsEmpty()) << m.id;
  EXPECT_THAT(provider_->store().Ids().value(), IsEmpty());
  EXPECT_THAT(TrashLeft(), IsEmpty());
  int fds_after = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) (void)e, ++fds_after;
  EXPECT_EQ(fds_after, fds_before) << "file descriptors leaked";
}

TEST_F(LifecycleTest, DeadSupervisorIsReapedByNextLs) {
  std::string id = CreateCli({"--network", "none"});
  auto meta = provider_->store().Read(id);
  ASSERT_TRUE(meta.has_value());
  ASSERT_EQ(kill(meta->supervisor.pid, SIGKILL), 0);
  ASSERT_TRUE(Eventually([&] { return !ProcessAlive(meta->supervisor); }));
  auto r = Cli({"sandbox", "ls", "-q"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr(id)));
  EXPECT_TRUE(Eventually([&] { return Leftovers(*meta).empty(); })) << Leftovers(*meta);
  EXPECT_THAT(TrashLeft(), IsEmpty());
  r = Cli({"sandbox", "exec", id, "--", "true"});
  EXPECT_EQ(r.code, 3);
  EXPECT_THAT(r.err, HasSubstr("supervisor process died"));
}

// A daemon's death no longer deletes its sandbox: restart_test.cc.

TEST_F(LifecycleTest, CopyFilesAndDirectoriesBothWays) {
  std::string id = CreateCli({"--network", "none"});
  fs::path host = state_ / "host";
  fs::create_directories(host / "tree" / "sub" / "deeper");
  std::ofstream(host / "file.txt") << "hello file\n";
  std::ofstream(host / "tree" / "a.txt") << "A";
  std::ofstream(host / "tree" / "sub" / "b.txt") << "B";
  std::ofstream(host / "tree" / "sub" / "deeper" / "c.sh") << "#!/bin/sh\necho C\n";
  fs::permissions(host / "tree" / "sub" / "deeper" / "c.sh", fs::perms::owner_all);

  auto r = Cli({"sandbox", "cp", (host / "file.txt").string(), id + ":/workspace/in.txt"});
  EXPECT_EQ(r.code, 0) << r.err;
  r = Cli({"sandbox", "cp", (host / "tree").string(), id + ":/workspace/"});
  EXPECT_EQ(r.code, 0) << r.err;
  r = Cli({"sandbox", "exec", id, "--", "sh", "-c",
           "cat in.txt tree/a.txt tree/sub/b.txt; echo; tree/sub/deeper/c.sh"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "hello file\nAB\nC\n");

  r = Cli({"sandbox", "exec", id, "--", "sh", "-c",
           "mkdir -p out/x && echo one > out/1.txt && echo two > out/x/2.txt"});
  ASSERT_EQ(r.code, 0) << r.err;
  r = Cli({"sandbox", "cp", id + ":in.txt", (host / "back.txt").string()});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ReadFile(host / "back.txt"), "hello file\n");
  r = Cli({"sandbox", "cp", id + ":/workspace/out", (host / "outdir").string()});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ReadFile(host / "outdir" / "1.txt"), "one\n");
  EXPECT_EQ(ReadFile(host / "outdir" / "x" / "2.txt"), "two\n");
  // Into an existing directory: copied beneath it.
  r = Cli({"sandbox", "cp", id + ":/workspace/out", (host / "outdir").string()});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ReadFile(host / "outdir" / "out" / "x" / "2.txt"), "two\n");

  r = Cli({"sandbox", "cp", "a", "b"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("ID:PATH"));
  r = Cli({"sandbox", "cp", "bad id!:/x", "b"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("is not a sandbox id"));
  // Documented: 1 when the copy fails (a missing file on either side), 3 only
  // for a missing sandbox.
  r = Cli({"sandbox", "cp", id + ":/workspace/missing", (host / "m").string()});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_FALSE(fs::exists(host / "m"));
  r = Cli({"sandbox", "cp", (host / "missing").string(), id + ":/workspace/"});
  EXPECT_EQ(r.code, 1) << r.err;
  r = Cli({"sandbox", "cp", id + ":in.txt", (host / "no" / "such" / "dir/").string()});
  EXPECT_EQ(r.code, 1) << r.err;
  r = Cli({"sandbox", "cp", "sb-000000000000:/x", (host / "m").string()});
  EXPECT_EQ(r.code, 3) << r.err;
  // The message says what an id looks like (sb-xxxx is neither form).
  r = Cli({"sandbox", "cp", "sb-xxxx:/x", (host / "m").string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("sb- and 12 hex digits"));
  // No kubeconfig is a failed command (1), not "no such sandbox" (3).
  r = Cli(
      {"sandbox", "ls", "--provider", "k8s", "--kubeconfig", (host / "no-kubeconfig").string()});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("does not exist"));
}

// Issue 16: the daemon's socket is the host's (never visible inside), and the
// sandbox cannot stop its daemon to answer in its place; the same for a
// sandbox claimed from a warm pool.
TEST_F(LifecycleTest, TheSandboxCannotReachOrStopItsDaemon) {
  StartPool("sec", 1);
  ASSERT_TRUE(Eventually([&] { return WarmOf("sec").size() == 1; }));
  auto claimer = Provider("sec");
  auto lease = claimer->Claim(ClaimOptions{});
  ASSERT_TRUE(lease.has_value()) << lease.error().ToString();
  const std::string warm_id = (*lease)->sandbox().id();
  (*lease)->Keep();
  lease->reset();
  for (const std::string& id : {CreateCli({"--network", "none"}), warm_id}) {
    SCOPED_TRACE(id);
    auto meta = provider_->store().Read(id);
    ASSERT_TRUE(meta.has_value());
    struct stat st {};
    ASSERT_EQ(stat(fs::path(meta->socket).parent_path().c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, geteuid());
    EXPECT_EQ(st.st_mode & 07777, 0700u);
    auto r = Cli({"sandbox", "exec", id, "--", "sh", "-c",
                  "test -e /.deepbox/run && echo socket-dir-visible; "
                  "grep -c sandboxd.sock /proc/net/unix; "
                  "kill -TERM 1; kill -INT 1; kill -SEGV 1; kill -KILL 1; sleep 0.3; echo alive"});
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, "0\nalive\n");
    r = Cli({"sandbox", "exec", id, "--", "echo", "still here"});
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, "still here\n");
  }
}

TEST_F(LifecycleTest, LeaseReleaseAndKeep) {
  ClaimOptions o;
  o.network = "none";
  o.labels = {{"lease", "yes"}};
  std::string released_id, kept_id;
  {
    auto lease = provider_->Claim(o);
    ASSERT_TRUE(lease.has_value()) << lease.error().ToString();
    released_id = (*lease)->sandbox().id();
    auto w = (*lease)->sandbox().Write("f.txt", "x");
    EXPECT_TRUE(w.has_value());
  }
  EXPECT_FALSE(fs::exists(state_ / "sandboxes" / released_id));
  {
    auto lease = provider_->Claim(o);
    ASSERT_TRUE(lease.has_value());
    kept_id = (*lease)->sandbox().id();
    (*lease)->Keep();
    EXPECT_THAT((*lease)->Describe(), HasSubstr("deepbox sandbox rm " + kept_id));
  }
  EXPECT_TRUE(provider_->Get(kept_id).has_value());
  EXPECT_TRUE(provider_->Delete(kept_id).has_value());
  EXPECT_EQ(provider_->Delete(kept_id).error().code, ErrorCode::kNotFound);
}

TEST_F(LifecycleTest, DoctorReportsHonestly) {
  auto r = Cli({"doctor"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("user namespaces:  yes"));
  EXPECT_THAT(r.out, HasSubstr("memory:"));
  EXPECT_THAT(r.out, HasSubstr("network public:"));
  r = Cli({"doctor", "--json"});
  auto obj = ParseJsonObject(r.out);
  ASSERT_TRUE(obj.has_value()) << r.out;
  EXPECT_TRUE(obj->at("sandboxes_can_run").as_bool());
  // Never claims public networking where the probe says it is impossible.
  if (!obj->at("public_network").as_bool()) {
    EXPECT_EQ(obj->at("default_network").as_string(), "none");
    std::string id = CreateCli({});
    EXPECT_EQ(provider_->store().Read(id)->network, "none");
  }
}

// The operator's reopened ranges are shown, and a bad value is named before
// a sandbox fails on it.
TEST_F(LifecycleTest, DoctorShowsTheReopenedCidrs) {
  auto r = Cli({"doctor"});
  EXPECT_THAT(r.out, Not(HasSubstr("reopened CIDRs")));
  setenv("DEEPBOX_NETWORK_ALLOW_CIDRS", "198.51.100.0/24, 203.0.113.7", 1);
  r = Cli({"doctor"});
  auto j = Cli({"doctor", "--json"});
  setenv("DEEPBOX_NETWORK_ALLOW_CIDRS", "127.0.0.0/8", 1);
  auto bad = Cli({"doctor"});
  unsetenv("DEEPBOX_NETWORK_ALLOW_CIDRS");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("reopened CIDRs: 198.51.100.0/24, 203.0.113.7 "
                               "(DEEPBOX_NETWORK_ALLOW_CIDRS)"));
  auto obj = ParseJsonObject(j.out);
  ASSERT_TRUE(obj.has_value()) << j.out;
  ASSERT_TRUE(obj->at("network_allow_cidrs").is_array());
  EXPECT_EQ(obj->at("network_allow_cidrs").as_array().size(), 2u);
  EXPECT_THAT(bad.out, HasSubstr("reopened CIDRs: INVALID - DEEPBOX_NETWORK_ALLOW_CIDRS: "
                                 "'127.0.0.0/8' overlaps"));
}

TEST_F(LifecycleTest, HelpDocumentsFlagsAndExitCodes) {
  auto r = Cli({"sandbox", "create", "--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* flag : {"--label", "--ttl", "--network", "--rootfs", "--json"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
  r = Cli({"sandbox", "exec", "--help"});
  EXPECT_THAT(r.out, HasSubstr("124"));
  r = Cli({"sandbox", "bogus"});
  EXPECT_EQ(r.code, 2);
}

}  // namespace
}  // namespace deepbox::local::lifecycle
