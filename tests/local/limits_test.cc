// Limits of local sandboxes end to end (issue 17): the real `deepbox` binary,
// supervisors, cgroups, the /workspace loop disk, and warm pools. Every claim
// must get the limits it asked for, from a warm pool or not.
#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "cli_fixture.h"
#include "common/json.h"
#include "common/strings.h"
#include "local/lifecycle/provider.h"
#include "local/namespaces.h"
#include "local/workspace_disk.h"

extern char** environ;

namespace deepbox::local::lifecycle {
namespace {

using namespace std::chrono_literals;
using testing::Eventually;
using ::testing::HasSubstr;
using testing::kDeepbox;
using ::testing::Not;
using testing::ReadFile;

class LimitsTest : public testing::LocalCliTest {
 protected:
  // `sandbox create --json` (a TTL is the safety net should this test crash).
  SandboxMeta Create(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"sandbox", "create",    "--json", "--ttl",
                                     "900",     "--network", "none"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = Cli(args);
    EXPECT_EQ(r.code, 0) << r.err;
    auto obj = ParseJsonObject(r.out);
    EXPECT_TRUE(obj.has_value()) << r.out << r.err;
    if (!obj) return {};
    auto meta = SandboxMeta::FromJson(*obj);
    EXPECT_TRUE(meta.has_value());
    return meta ? *meta : SandboxMeta{};
  }

  bool OneWarm(const std::string& pool) {
    auto list = provider_->ListMeta();
    if (!list) return false;
    int n = 0;
    for (const auto& m : *list) {
      n += m.pool == pool && m.state == "warm" && m.ready &&
           fs::exists(state_ / "sandboxes" / m.id / "warm");
    }
    return n == 1;
  }

  // The first of `files` found in the sandbox's cgroup dirs (v1 name, v2 name).
  std::string CgroupValue(const SandboxMeta& m, std::initializer_list<const char*> files) {
    for (const auto& dir : m.cgroups) {
      for (const char* f : files) {
        fs::path p = fs::path(dir) / f;
        if (fs::exists(p)) return std::string(TrimRight(ReadFile(p)));
      }
    }
    return "(no cgroup file)";
  }

  // Checks that `m` really runs with memory 64M and 20 processes, by the
  // cgroup files and by what a workload can do.
  void ExpectSmallLimitsEnforced(const SandboxMeta& m) {
    EXPECT_EQ(CgroupValue(m, {"memory.limit_in_bytes", "memory.max"}), "67108864");
    EXPECT_EQ(CgroupValue(m, {"pids.max"}), "20");
    auto r = Cli({"sandbox", "exec", m.id, "--", "python3", "-c",
                  "b = bytearray(200 * 1024 * 1024); print('allocated')"});
    EXPECT_EQ(r.code, 137) << "a 200 MB allocation ran under a 64M limit: " << r.out << r.err;
    EXPECT_THAT(r.out, Not(HasSubstr("allocated")));
    r = Cli({"sandbox", "exec", m.id, "--", "sh", "-c",
             "i=0; while [ $i -lt 40 ]; do sleep 60 & i=$((i+1)); done; echo forked 40"});
    EXPECT_NE(r.code, 0) << "40 processes ran under a limit of 20";
    EXPECT_THAT(r.out, Not(HasSubstr("forked 40")));
  }
};

TEST_F(LimitsTest, CreateTakesDockerStyleSizesAndEnforcesThem) {
  SandboxMeta m = Create({"--cold", "--memory", "64M", "--max-processes", "20", "--cpus", "0.5"});
  ASSERT_TRUE(Store::ValidId(m.id));
  EXPECT_EQ(m.limits.memory_bytes, 64ULL << 20);
  EXPECT_EQ(m.limits.max_processes, 20u);
  EXPECT_EQ(m.limits.cpu_cores, 0.5);
  EXPECT_EQ(CgroupValue(m, {"cpu.cfs_quota_us"}) + "/" + CgroupValue(m, {"cpu.cfs_period_us"}),
            "50000/100000");
  ExpectSmallLimitsEnforced(m);
  // Other spellings docker accepts.
  for (const char* mem : {"64m", "64MiB", "65536k", "67108864"}) {
    auto r = Cli({"sandbox", "create", "--cold", "--ttl", "900", "--network", "none", "--memory",
                  mem, "--disk", "0"});
    EXPECT_EQ(r.code, 0) << mem << ": " << r.err;
    auto meta = provider_->store().Read(std::string(TrimRight(r.out)));
    ASSERT_TRUE(meta.has_value()) << mem;
    EXPECT_EQ(meta->limits.memory_bytes, 64ULL << 20) << mem;
    EXPECT_FALSE(meta->limits.workspace_bytes.has_value());
    (void)provider_->Delete(meta->id);
  }
}

TEST_F(LimitsTest, CreateHasSafeDefaultLimitsAndATtl) {
  SandboxMeta m = Create({"--cold"});
  ASSERT_TRUE(Store::ValidId(m.id));
  EXPECT_EQ(m.limits, DefaultSandboxLimits());
  EXPECT_EQ(CgroupValue(m, {"memory.limit_in_bytes", "memory.max"}),
            std::to_string(kDefaultMemoryBytes));
  EXPECT_EQ(CgroupValue(m, {"pids.max"}), std::to_string(kDefaultMaxProcesses));
  if (WorkspaceDiskSupported()) {
    EXPECT_EQ(m.limits_note, "");
    // /workspace is its own 10G filesystem, not the host's disk.
    auto r = Cli({"sandbox", "exec", m.id, "--", "sh", "-c",
                  "test \"$(stat -c %d /workspace)\" != \"$(stat -c %d /tmp)\" && "
                  "df -k /workspace | tail -1"});
    ASSERT_EQ(r.code, 0) << r.err;
    std::istringstream in(r.out);
    std::string dev;
    uint64_t kb = 0;
    in >> dev >> kb;
    EXPECT_GT(kb, 9ULL << 20) << r.out;
    EXPECT_LE(kb, 10ULL << 20) << r.out;
  } else {
    EXPECT_THAT(m.limits_note, HasSubstr("/workspace disk"));
  }

  // The default TTL is finite (as `deepbox run`'s); 0 means none, with a warning.
  auto r = Cli({"sandbox", "create", "--cold", "--network", "none", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto meta = SandboxMeta::FromJson(ParseJsonObject(r.out).value());
  ASSERT_TRUE(meta.has_value());
  ASSERT_TRUE(meta->expires_at_ms.has_value());
  int64_t ttl_ms = *meta->expires_at_ms - meta->created_at_ms;
  EXPECT_GE(ttl_ms, 3599000);
  EXPECT_LE(ttl_ms, 3601000);
  EXPECT_THAT(r.err, Not(HasSubstr("warning")));
  r = Cli({"sandbox", "create", "--cold", "--network", "none", "--ttl", "0"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("warning: --ttl 0"));
  EXPECT_THAT(r.err, HasSubstr("never deleted automatically"));
  EXPECT_FALSE(provider_->store().Read(std::string(TrimRight(r.out)))->expires_at_ms.has_value());
  r = Cli({"sandbox", "create", "--help"});
  EXPECT_THAT(r.out, HasSubstr("3600"));
}

TEST_F(LimitsTest, DiskLimitBoundsTheWorkspace) {
  if (!WorkspaceDiskSupported()) GTEST_SKIP() << "no loop devices / mkfs.ext4 / root here";
  SandboxMeta m = Create({"--cold", "--disk", "32M"});
  ASSERT_TRUE(Store::ValidId(m.id));
  EXPECT_EQ(m.limits.workspace_bytes, 32ULL << 20);
  auto r = Cli({"sandbox", "exec", m.id, "--", "sh", "-c",
                "head -c 48000000 /dev/zero > big; echo status $?"});
  EXPECT_THAT(r.out, HasSubstr("status 1")) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("No space left on device"));
  auto st = provider_->Delete(m.id);
  ASSERT_TRUE(st.has_value()) << st.error().ToString();
  EXPECT_THAT(ReadFile("/proc/self/mountinfo"), Not(HasSubstr(m.id)));
}

TEST_F(LimitsTest, BadLimitsAndOptionsAreUsageErrors) {
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string message;
  } cases[] = {
      // Used to reach cpu.cfs_quota_us as 18446744073709451616 (exit 1).
      {{"--cpus", "-1"}, 2, "--cpus -1: CPU limit -1 is out of range"},
      {{"--cpus", "abc"}, 2, "expected a number of CPU cores"},
      // Used to start a sandbox whose daemon was killed by signal 9.
      {{"--memory", "1000"}, 2, "too small: a sandbox needs at least 16 MiB"},
      // Used to be "Could not convert".
      {{"--memory", "64Q"}, 2, "expected a size such as 512M"},
      {{"--max-processes", "2"}, 2, "process limit 2 is too small"},
      {{"--disk", "1M"}, 2, "/workspace disk limit 1 MiB is too small"},
      // Used to be 3, "no such sandbox".
      {{"--rootfs", "/nonexistent"}, 2, "rootfs /nonexistent"},
      {{"--rootfs", "/etc/passwd"}, 2, "is not a directory"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"sandbox", "create", "--cold", "--ttl", "900"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    auto r = Cli(args);
    EXPECT_EQ(r.code, c.code) << c.args[0] << " " << c.args[1] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.args[0] << " " << c.args[1];
    EXPECT_THAT(r.err, Not(HasSubstr("ERANGE")));
  }
  EXPECT_TRUE(provider_->store().Ids()->empty()) << "a refused create left a sandbox";
  // pool serve validates the same way, before creating anything.
  auto r = Cli({"pool", "serve", "--replicas", "1", "--memory", "1k"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("too small"));
}

// An explicit --network public never silently becomes none: it is public, or
// the create fails with exit 4 and the reason. Only the default falls back.
TEST_F(LimitsTest, ExplicitPublicNetworkIsPublicOrFails) {
  auto r = Cli({"sandbox", "create", "--cold", "--ttl", "900", "--network", "public", "--json"});
  if (r.code == 0) {
    auto obj = ParseJsonObject(r.out);
    ASSERT_TRUE(obj.has_value()) << r.out;
    EXPECT_EQ(obj->at("network").as_string(), "public") << "asked for public, got: " << r.out;
  } else {
    EXPECT_EQ(r.code, 4) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("network 'public' was requested but is not available"));
    EXPECT_EQ(r.out, "");
    EXPECT_TRUE(Eventually([&] { return provider_->store().Ids()->empty(); }, 120s))
        << "the refused sandbox was not deleted";
  }
  // The default may fall back to none, and then says so.
  r = Cli({"sandbox", "create", "--cold", "--ttl", "900", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto obj = ParseJsonObject(r.out);
  ASSERT_TRUE(obj.has_value()) << r.out;
  if (obj->at("network").as_string() == "none") {
    EXPECT_THAT(r.err, HasSubstr("using 'none'"));
  } else {
    EXPECT_THAT(r.err, Not(HasSubstr("using 'none'")));
  }
}

// Issue 17, High #1: a create that asks for limits used to take a warm
// sandbox made with others (none at all) and run without them.
TEST_F(LimitsTest, WarmSandboxWithOtherLimitsIsNotClaimed) {
  StartPool("p", 1);
  ASSERT_TRUE(Eventually([&] { return OneWarm("p"); }, 120s));
  SandboxMeta m = Create({"--pool", "p", "--memory", "67108864", "--max-processes", "20"});
  ASSERT_TRUE(Store::ValidId(m.id));
  EXPECT_EQ(m.pool, "") << "a warm sandbox with other limits was claimed";
  ExpectSmallLimitsEnforced(m);
  EXPECT_TRUE(OneWarm("p")) << "the warm sandbox should still be waiting";
  // A claimer asking for the pool's limits (the defaults) takes it.
  SandboxMeta d = Create({"--pool", "p"});
  EXPECT_EQ(d.pool, "p");
  EXPECT_EQ(d.limits, DefaultSandboxLimits());
  // So does one asking for none from a pool serving none.
  StartPool("open", 1, {"--memory", "0", "--max-processes", "0", "--cpus", "0", "--disk", "0"});
  ASSERT_TRUE(Eventually([&] { return OneWarm("open"); }, 120s));
  EXPECT_EQ(Create({"--pool", "open"}).pool, "");
  SandboxMeta open = Create({"--pool", "open", "--memory", "0", "--max-processes", "none", "--cpus",
                             "0", "--disk", "unlimited"});
  EXPECT_EQ(open.pool, "open");
  EXPECT_EQ(open.limits, SandboxLimits{});
}

TEST_F(LimitsTest, WarmSandboxWithTheSameLimitsIsClaimedAndEnforced) {
  StartPool("small", 1, {"--memory", "64M", "--max-processes", "20"});
  ASSERT_TRUE(Eventually([&] { return OneWarm("small"); }, 120s));
  // Another spelling of the same limits matches.
  SandboxMeta m = Create({"--pool", "small", "--memory", "65536K", "--max-processes", "20"});
  ASSERT_TRUE(Store::ValidId(m.id));
  EXPECT_EQ(m.pool, "small") << "the matching warm sandbox was not claimed";
  EXPECT_EQ(m.state, "claimed");
  EXPECT_EQ(m.limits.memory_bytes, 64ULL << 20);
  ExpectSmallLimitsEnforced(m);
  EXPECT_THAT(PoolLog("small"),
              HasSubstr("warm sandboxes get memory 64 MiB, processes 20, CPUs 2"));
  // The pool refills; a claimer with the defaults does not take its sandboxes.
  ASSERT_TRUE(Eventually([&] { return OneWarm("small"); }, 120s));
  SandboxMeta d = Create({"--pool", "small"});
  EXPECT_EQ(d.pool, "");
  EXPECT_EQ(d.limits, DefaultSandboxLimits());
}

// The C++ API: the provider's limits decide what it may claim.
TEST_F(LimitsTest, ProviderClaimWarmMatchesLimitsExactly) {
  StartPool("api", 1, {"--memory", "64M"});
  ASSERT_TRUE(Eventually([&] { return OneWarm("api"); }, 120s));
  LocalProviderOptions o = provider_->options();
  o.pool = "api";
  auto defaults = LocalSandboxProvider::Create(o);
  ASSERT_TRUE(defaults.has_value());
  auto none = (*defaults)->ClaimWarm("api", ClaimOptions{});
  ASSERT_TRUE(none.has_value()) << none.error().ToString();
  EXPECT_FALSE(none->has_value()) << "claimed a 64M sandbox asking for the defaults (2G)";
  o.limits.memory_bytes = 64ULL << 20;
  auto small = LocalSandboxProvider::Create(o);
  ASSERT_TRUE(small.has_value());
  auto got = (*small)->ClaimWarm("api", ClaimOptions{});
  ASSERT_TRUE(got.has_value()) << got.error().ToString();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->limits.memory_bytes, 64ULL << 20);
}

}  // namespace
}  // namespace deepbox::local::lifecycle
