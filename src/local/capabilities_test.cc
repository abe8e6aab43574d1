#include "local/capabilities.h"

#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "local/testing/child_runner.h"

namespace deepbox::local {
namespace {

using testing::ExitCode;
using testing::RunInChild;

TEST(CapabilitiesTest, PlanReadsCapLastCap) {
  CapDropPlan plan = PlanCapDrop(1000, 1000, true);
  EXPECT_GE(plan.last_cap, 37);  // CAP_AUDIT_READ exists on every supported kernel
  EXPECT_LT(plan.last_cap, 64);
  EXPECT_EQ(plan.uid, 1000u);
}

TEST(CapabilitiesTest, ParsesProcStatus) {
  auto st = ParseProcStatus(
      "Name:\tsh\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nGroups:\t\n"
      "CapInh:\t0000000000000000\nCapPrm:\t0000000000000001\nCapEff:\t0000000000000000\n"
      "CapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n");
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->uid, 1000u);
  EXPECT_EQ(st->cap_prm, 1u);
  EXPECT_EQ(st->cap_bnd, 0x1ffffffffffULL);
  EXPECT_EQ(st->no_new_privs, 1);
  EXPECT_EQ(st->seccomp, 2);
  EXPECT_FALSE(ParseProcStatus("CapEff:\tzz\n").has_value());
}

TEST(CapabilitiesTest, DropsEverythingAndBecomesUid1000) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to change uid without a user namespace";
  int status = RunInChild([] {
    CapDropPlan plan = PlanCapDrop(1000, 1000, true);
    ChildCall call;
    if (DropPrivilegesRaw(plan, &call) != 0) return 10;
    auto st = ReadProcStatus();
    if (!st) return 11;
    if (st->cap_eff || st->cap_prm || st->cap_inh || st->cap_bnd || st->cap_amb) return 12;
    if (st->uid != 1000 || st->gid != 1000) return 13;
    if (!st->groups.empty()) return 14;
    // No way back: setuid(0) and raising a capability fail.
    if (syscall(SYS_setresuid, 0, 0, 0) == 0) return 15;
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, 0, 0, 0) == 0) return 16;
    // Securebits are locked.
    long bits = prctl(PR_GET_SECUREBITS);
    if (prctl(PR_SET_SECUREBITS, 0, 0, 0, 0) == 0) return 17;
    return bits > 0 ? 0 : 18;
  });
  EXPECT_EQ(ExitCode(status), 0);
}

TEST(CapabilitiesTest, TwoPhaseKeepsCapsUntilDrop) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  int status = RunInChild([] {
    CapDropPlan plan = PlanCapDrop(1000, 1000, true);
    ChildCall call;
    if (SwitchToSandboxIdsRaw(plan, &call) != 0) return 10;
    auto st = ReadProcStatus();
    if (!st || st->uid != 1000 || st->cap_eff == 0) return 11;  // NO_SETUID_FIXUP kept them
    if (DropCapabilitiesRaw(plan, &call) != 0) return 12;
    st = ReadProcStatus();
    return st && st->cap_eff == 0 && st->cap_bnd == 0 ? 0 : 13;
  });
  EXPECT_EQ(ExitCode(status), 0);
}

}  // namespace
}  // namespace deepbox::local
