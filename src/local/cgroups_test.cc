#include "local/cgroups.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "local/testing/sandbox_fixture.h"

namespace deepbox::local {
namespace {

using ::testing::HasSubstr;

Limits LimitsWith(std::optional<uint64_t> Limits::*field, uint64_t value) {
  Limits l;
  l.*field = value;
  return l;
}

constexpr char kHybridMountinfo[] =
    "25 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
    "30 29 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "34 30 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "37 30 0:33 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "36 30 0:32 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n"
    "38 30 0:34 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "39 30 0:35 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
constexpr char kHybridSelf[] =
    "9:name=systemd:/\n8:pids:/\n6:freezer:/\n4:memory:/process_api/abc\n1:cpu:/\n0::/\n";

TEST(CgroupsTest, ParsesHybrid) {
  CgroupHostInfo info = ParseCgroupHostInfo(kHybridMountinfo, kHybridSelf);
  EXPECT_EQ(info.layout, CgroupLayout::kHybrid);
  EXPECT_EQ(info.v2_mount, "/sys/fs/cgroup/unified");
  EXPECT_EQ(info.v2_self, "/");
  EXPECT_EQ(info.v1_mounts.at("memory"), "/sys/fs/cgroup/memory");
  EXPECT_EQ(info.v1_self.at("memory"), "/process_api/abc");
  EXPECT_EQ(info.v1_mounts.count("name=systemd"), 0u);
  EXPECT_EQ(info.v1_mounts.count("systemd"), 0u);
}

TEST(CgroupsTest, ParsesUnifiedAndNone) {
  CgroupHostInfo info = ParseCgroupHostInfo(
      "40 30 0:35 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n", "0::/user.slice/x\n");
  EXPECT_EQ(info.layout, CgroupLayout::kUnified);
  EXPECT_EQ(info.v2_self, "/user.slice/x");
  EXPECT_EQ(ParseCgroupHostInfo("", "").layout, CgroupLayout::kNone);
}

class CgroupLiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto info = DetectCgroups();
    ASSERT_TRUE(info.has_value());
    host_ = *info;
    if (host_.layout == CgroupLayout::kNone) GTEST_SKIP() << "no cgroups on this host";
    if (geteuid() != 0) GTEST_SKIP() << "creating cgroups needs root here";
  }
  // A child that sleeps until killed.
  pid_t Sleeper() {
    pid_t p = fork();
    if (p == 0) {
      for (;;) pause();
    }
    return p;
  }
  CgroupHostInfo host_;
};

TEST_F(CgroupLiveTest, CreatesWritesAndRemoves) {
  Limits l;
  l.memory_bytes = 64ULL << 20;
  l.max_processes = 16;
  l.cpu_cores = 0.5;
  std::vector<std::string> dirs;
  {
    auto cg = SandboxCgroup::Create(host_, testing::UniqueId("cg"), l);
    ASSERT_TRUE(cg.has_value()) << cg.error().ToString();
    dirs = cg->dirs();
    EXPECT_FALSE(dirs.empty());
    const LimitSupport& s = cg->support();
    std::cerr << s.Describe();
    if (s.memory.enforced) {
      EXPECT_NE(s.memory.mechanism, Mechanism::kNone);
    }
    if (s.processes.enforced) {
      EXPECT_NE(s.processes.mechanism, Mechanism::kNone);
    }
    EXPECT_TRUE(s.kill_all.enforced);
    for (const auto& d : dirs) EXPECT_TRUE(std::filesystem::is_directory(d)) << d;
    if (s.memory.mechanism == Mechanism::kCgroupV1) {
      bool found = false;
      for (const auto& d : dirs) {
        std::ifstream in(d + "/memory.limit_in_bytes");
        uint64_t v = 0;
        if (in >> v) {
          EXPECT_EQ(v, 64ULL << 20);
          found = true;
        }
      }
      EXPECT_TRUE(found);
    }
  }
  for (const auto& d : dirs) EXPECT_FALSE(std::filesystem::exists(d)) << d;
}

TEST_F(CgroupLiveTest, KillAllAndPids) {
  auto cg =
      SandboxCgroup::Create(host_, testing::UniqueId("cg"), LimitsWith(&Limits::max_processes, 50));
  ASSERT_TRUE(cg.has_value()) << cg.error().ToString();
  pid_t a = Sleeper(), b = Sleeper();
  ASSERT_TRUE(cg->AttachAll(a).has_value());
  ASSERT_TRUE(cg->AttachAll(b).has_value());
  auto pids = cg->Pids();
  ASSERT_TRUE(pids.has_value());
  EXPECT_EQ(pids->size(), 2u);
  ASSERT_TRUE(cg->KillAll().has_value());
  int status = 0;
  ASSERT_EQ(waitpid(a, &status, 0), a);
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  ASSERT_EQ(waitpid(b, &status, 0), b);
  EXPECT_TRUE(cg->Pids()->empty());
  EXPECT_TRUE(cg->Remove().has_value());
}

TEST_F(CgroupLiveTest, PidsLimitIsEnforced) {
  auto cg =
      SandboxCgroup::Create(host_, testing::UniqueId("cg"), LimitsWith(&Limits::max_processes, 4));
  ASSERT_TRUE(cg.has_value());
  if (!cg->support().processes.enforced) GTEST_SKIP() << "no pids controller";
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  pid_t p = fork();
  if (p == 0) {
    char c;
    read(go[0], &c, 1);
    int made = 0;
    for (int i = 0; i < 10; ++i) {
      pid_t q = fork();
      if (q == 0) {
        pause();
        _exit(0);
      }
      if (q > 0) ++made;
    }
    _exit(made);
  }
  ASSERT_TRUE(cg->AttachAll(p).has_value());
  ASSERT_EQ(write(go[1], "g", 1), 1);
  int status = 0;
  waitpid(p, &status, 0);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);  // 4 tasks in total, the parent included
  EXPECT_TRUE(cg->KillAll().has_value());
}

TEST_F(CgroupLiveTest, MemoryLimitIsEnforced) {
  auto cg = SandboxCgroup::Create(host_, testing::UniqueId("cg"),
                                  LimitsWith(&Limits::memory_bytes, 32ULL << 20));
  ASSERT_TRUE(cg.has_value());
  if (!cg->support().memory.enforced) GTEST_SKIP() << "no memory controller";
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  pid_t p = fork();
  if (p == 0) {
    char c;
    read(go[0], &c, 1);
    size_t size = 128ULL << 20;
    void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(m, 1, size);
    _exit(0);
  }
  ASSERT_TRUE(cg->AttachAll(p).has_value());
  ASSERT_EQ(write(go[1], "g", 1), 1);
  int status = 0;
  waitpid(p, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);  // the OOM killer, within the cgroup
}

TEST_F(CgroupLiveTest, ProbeReportsHonestly) {
  LimitSupport s = ProbeCgroupSupport(host_);
  std::string d = s.Describe();
  EXPECT_THAT(d, HasSubstr("cgroup layout"));
  EXPECT_TRUE(s.kill_all.enforced);
}

TEST(CgroupsTest, RejectsBadIds) {
  CgroupHostInfo none;
  EXPECT_FALSE(SandboxCgroup::Create(none, "../x", {}).has_value());
  EXPECT_FALSE(SandboxCgroup::Create(none, "", {}).has_value());
}

}  // namespace
}  // namespace deepbox::local
