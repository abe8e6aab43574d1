#include "local/cgroups.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "common/testing/temp_dir.h"
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

// A host-side reaper touches a recorded cgroup dir only if it has the shape
// SandboxCgroup::Create gives them (issue 21, H2: a planted record listed
// /sys/fs/cgroup/pids/victim and the reaper killed it).
TEST(CgroupsTest, SandboxCgroupPathsHaveOneShape) {
  CgroupHostInfo host = ParseCgroupHostInfo(kHybridMountinfo, kHybridSelf);
  const std::string id = "sb-0123456789ab";
  for (const char* ok : {"/sys/fs/cgroup/unified/deepbox/sb-0123456789ab",
                         "/sys/fs/cgroup/pids/deepbox/sb-0123456789ab",
                         "/sys/fs/cgroup/memory/process_api/abc/deepbox/sb-0123456789ab"}) {
    EXPECT_TRUE(IsSandboxCgroupPath(host, id, ok)) << ok;
  }
  for (const char* bad : {
           "/sys/fs/cgroup/pids/victim",                                // not deepbox/<id>
           "/sys/fs/cgroup/pids",                                       // a whole hierarchy
           "/sys/fs/cgroup/unified",                                    //
           "/sys/fs/cgroup/pids/deepbox/sb-111111111111",               // another sandbox
           "/sys/fs/cgroup/pids/deepbox/sb-0123456789ab/",              // trailing slash
           "/sys/fs/cgroup/pids//deepbox/sb-0123456789ab",              // empty component
           "/sys/fs/cgroup/pids/x/../deepbox/sb-0123456789ab",          // ..
           "/sys/fs/cgroup/pids/./deepbox/sb-0123456789ab",             // .
           "/sys/fs/cgroup/pids/deepbox/sb-0123456789ab/../../victim",  // .. at the end
           "/sys/fs/cgroup/systemd/deepbox/sb-0123456789ab",            // no controller: unused
           "/sys/fs/cgroup/deepbox/sb-0123456789ab",                    // the tmpfs, no hierarchy
           "/tmp/deepbox/sb-0123456789ab",                              // not a cgroup at all
           "sys/fs/cgroup/pids/deepbox/sb-0123456789ab",                // relative
           "",
       }) {
    EXPECT_FALSE(IsSandboxCgroupPath(host, id, bad)) << bad;
  }
  EXPECT_FALSE(IsSandboxCgroupPath(host, "../x", "/sys/fs/cgroup/pids/deepbox/../x"));
  EXPECT_FALSE(IsSandboxCgroupPath(CgroupHostInfo{}, id, "/deepbox/sb-0123456789ab"));
}

// The right shape is not enough: the dir must be on cgroupfs, reached without
// a symlink, and ours.
TEST(CgroupsTest, SandboxCgroupDirIsCheckedOnDisk) {
  deepbox::testing::TempDir tmp("deepbox-cgcheck");
  const std::string root = tmp.path().string();
  const std::string id = "sb-0123456789ab";
  CgroupHostInfo host;
  host.v2_mount = root + "/mnt";  // a "hierarchy" that is a plain directory
  std::filesystem::create_directories(root + "/mnt/deepbox/" + id);
  std::filesystem::create_directories(root + "/elsewhere/deepbox/" + id);
  std::filesystem::create_directories(root + "/mnt/link");
  std::filesystem::create_directory_symlink(root + "/elsewhere/deepbox",
                                            root + "/mnt/link/deepbox");
  auto st = CheckSandboxCgroupDir(host, id, root + "/mnt/deepbox/" + id);
  ASSERT_FALSE(st.has_value());
  EXPECT_THAT(st.error().message, HasSubstr("not on a cgroup file system"));
  st = CheckSandboxCgroupDir(host, id, root + "/mnt/link/deepbox/" + id);
  ASSERT_FALSE(st.has_value());
  EXPECT_THAT(st.error().message, HasSubstr("symbolic link"));
  st = CheckSandboxCgroupDir(host, id, root + "/mnt/deepbox/sb-111111111111");
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(st.error().code, ErrorCode::kPermissionDenied);  // wrong id: the shape check
  st = CheckSandboxCgroupDir(host, "sb-111111111111", root + "/mnt/deepbox/sb-111111111111");
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(st.error().code, ErrorCode::kNotFound);
}

TEST_F(CgroupLiveTest, RealSandboxCgroupsPassTheCheckAndProcessesAreFound) {
  const std::string id = "sb-" + std::string("cafe") + fmt::format("{:08x}", getpid() & 0xffffffff);
  auto cg = SandboxCgroup::Create(host_, id, LimitsWith(&Limits::max_processes, 50));
  ASSERT_TRUE(cg.has_value()) << cg.error().ToString();
  for (const auto& d : cg->dirs()) {
    auto st = CheckSandboxCgroupDir(host_, id, d);
    EXPECT_TRUE(st.has_value()) << d << ": " << st.error().ToString();
    EXPECT_FALSE(CheckSandboxCgroupDir(host_, "sb-111111111111", d).has_value()) << d;
  }
  pid_t a = Sleeper();
  ASSERT_TRUE(cg->AttachAll(a).has_value());
  auto dirs = ProcessCgroupDirs(a);
  ASSERT_TRUE(dirs.has_value()) << dirs.error().ToString();
  for (const auto& d : cg->dirs()) EXPECT_THAT(*dirs, ::testing::Contains(d));
  auto mine = ProcessCgroupDirs(getpid());
  ASSERT_TRUE(mine.has_value());
  for (const auto& d : cg->dirs()) EXPECT_THAT(*mine, ::testing::Not(::testing::Contains(d)));
  ASSERT_TRUE(cg->KillAll().has_value());
  int status = 0;
  ASSERT_EQ(waitpid(a, &status, 0), a);
}

TEST(CgroupsTest, RejectsBadIds) {
  CgroupHostInfo none;
  EXPECT_FALSE(SandboxCgroup::Create(none, "../x", {}).has_value());
  EXPECT_FALSE(SandboxCgroup::Create(none, "", {}).has_value());
}

// A child moves itself into the sandbox's v1 cgroups through the tasks files
// the parent opened (what a sandbox's init does between clone and exec); the
// parent stays where it was.
TEST_F(CgroupLiveTest, AChildMovesItselfThroughTheTasksFilesAndTheParentStays) {
  Limits limits;
  limits.memory_bytes = 64ULL << 20;
  limits.max_processes = 64;
  auto cg = SandboxCgroup::Create(host_, fmt::format("t-self-{}", getpid()), limits);
  ASSERT_TRUE(cg) << cg.error().ToString();
  auto tasks = cg->OpenV1Tasks();
  ASSERT_TRUE(tasks) << tasks.error().ToString();
  if (tasks->empty()) GTEST_SKIP() << "no limit of this test is in a v1 hierarchy here";
  std::vector<int> fds;
  for (const auto& t : *tasks) {
    EXPECT_TRUE(t.dir.ends_with(fmt::format("/deepbox/t-self-{}", getpid()))) << t.dir;
    fds.push_back(t.fd.get());
  }
  auto before = ProcessCgroupDirs(getpid());
  ASSERT_TRUE(before) << before.error().ToString();
  int result[2];
  ASSERT_EQ(pipe(result), 0);
  pid_t child = fork();
  if (child == 0) {
    int failed = -1;
    int err = MoveSelfIntoCgroupsRaw(fds.data(), fds.size(), &failed);
    (void)!write(result[1], &err, sizeof(err));
    for (;;) pause();
  }
  ASSERT_GT(child, 0);
  close(result[1]);
  int err = -1;
  ASSERT_EQ(read(result[0], &err, sizeof(err)), static_cast<ssize_t>(sizeof(err)));
  close(result[0]);
  EXPECT_EQ(err, 0) << strerror(err);
  auto in = ProcessCgroupDirs(child);
  ASSERT_TRUE(in) << in.error().ToString();
  for (const auto& t : *tasks) EXPECT_THAT(*in, ::testing::Contains(t.dir));
  auto after = ProcessCgroupDirs(getpid());
  ASSERT_TRUE(after) << after.error().ToString();
  EXPECT_EQ(*after, *before);
  ASSERT_TRUE(cg->KillAll());
  (void)waitpid(child, nullptr, 0);
  ASSERT_TRUE(cg->Remove());
}

// A write that fails names its position and errno; nothing after it is tried.
TEST(CgroupsTest, MoveSelfReportsTheFirstFailedWrite) {
  int dev_null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(dev_null, 0);
  int read_only = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(read_only, 0);
  int fds[] = {dev_null, read_only, dev_null};
  int failed = -1;
  EXPECT_EQ(MoveSelfIntoCgroupsRaw(fds, 3, &failed), EBADF);
  EXPECT_EQ(failed, 1);
  failed = -1;
  EXPECT_EQ(MoveSelfIntoCgroupsRaw(fds, 1, &failed), 0);
  EXPECT_EQ(failed, -1);
  EXPECT_EQ(MoveSelfIntoCgroupsRaw(nullptr, 0, &failed), 0);
  close(dev_null);
  close(read_only);
}

}  // namespace
}  // namespace deepbox::local
