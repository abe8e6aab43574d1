#include "local/namespaces.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

namespace deepbox::local {
namespace {

TEST(NamespacesTest, CloneFlags) {
  NamespaceOptions all;
  uint64_t f = CloneFlags(all);
  for (uint64_t bit : {CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUTS,
                       CLONE_NEWNET, CLONE_NEWCGROUP}) {
    EXPECT_TRUE(f & bit) << bit;
  }
  NamespaceOptions none{false, false, false, false, false, false, false};
  EXPECT_EQ(CloneFlags(none), 0u);
}

TEST(NamespacesTest, IdMapPlan) {
  IdMapPlan plan = PlanIdMap();
  EXPECT_EQ(plan.sandbox_uid, 1000u);
  if (geteuid() == 0) {
    EXPECT_EQ(plan.host_uid, kDefaultRootHostId);
    EXPECT_EQ(plan.uid_map, "1000 1001000 1\n");
    EXPECT_FALSE(plan.deny_setgroups);
    EXPECT_TRUE(plan.clear_groups);
    EXPECT_EQ(PlanIdMap(123456).gid_map, "1000 123456 1\n");
  } else {
    EXPECT_EQ(plan.host_uid, geteuid());
    EXPECT_TRUE(plan.deny_setgroups);
  }
}

TEST(NamespacesTest, CloneIntoNewNamespacesWithMaps) {
  if (!UserNamespacesAvailable()) GTEST_SKIP() << "user namespaces unavailable";
  int sync[2], result[2];
  ASSERT_EQ(pipe2(sync, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(result, O_CLOEXEC), 0);
  auto child = CloneWithFlags(CloneFlags(NamespaceOptions{}));
  ASSERT_TRUE(child.has_value()) << child.error().ToString();
  if (child->pid == 0) {
    // Child: async-signal-safe only.
    close(sync[1]);
    char c;
    if (read(sync[0], &c, 1) != 1) syscall(SYS_exit_group, 20);
    int code = 0;
    if (getpid() != 1) code |= 1;
    if (getuid() != 1000 && syscall(SYS_setresuid, 1000, 1000, 1000) != 0) code |= 2;
    if (getuid() != 1000) code |= 4;
    if (SetHostnameRaw("ns-test") != 0) code |= 8;
    struct utsname u;
    uname(&u);
    if (u.nodename[0] != 'n' || u.nodename[1] != 's') code |= 16;
    write(result[1], &code, sizeof(code));
    syscall(SYS_exit_group, 0);
  }
  close(sync[0]);
  close(result[1]);
  IdMapPlan plan = PlanIdMap();
  auto st = WriteIdMaps(child->pid, plan);
  ASSERT_TRUE(st.has_value()) << st.error().ToString();
  std::ifstream in("/proc/" + std::to_string(child->pid) + "/uid_map");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find("1000"), std::string::npos);
  ASSERT_EQ(write(sync[1], "g", 1), 1);
  close(sync[1]);
  int code = -1;
  EXPECT_EQ(read(result[0], &code, sizeof(code)), static_cast<ssize_t>(sizeof(code)));
  close(result[0]);
  EXPECT_EQ(code, 0);
  int status = 0;
  waitpid(child->pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status));
  // The host's hostname is unchanged.
  struct utsname u;
  uname(&u);
  EXPECT_STRNE(u.nodename, "ns-test");
}

TEST(NamespacesTest, PidfdIsReturned) {
  auto child = CloneWithFlags(0);
  ASSERT_TRUE(child.has_value());
  if (child->pid == 0) syscall(SYS_exit_group, 3);
  EXPECT_TRUE(child->pidfd.valid());
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PIDFD, static_cast<id_t>(child->pidfd.get()), &info, WEXITED), 0);
  EXPECT_EQ(info.si_status, 3);
}

}  // namespace
}  // namespace deepbox::local
