#include "local/mounts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>

#include "local/testing/sandbox_fixture.h"

namespace deepbox::local {
namespace {

using ::testing::HasSubstr;
using Kind = MountOp::Kind;
namespace fs = std::filesystem;

MountSpec BaseSpec(const testing::TempDir& tmp) {
  MountSpec spec;
  spec.staging_dir = tmp.path() / "root";
  spec.workspace_dir = tmp.path();
  return spec;
}

const MountOp* Find(const MountPlan& plan, Kind kind, std::string_view display) {
  for (const auto& op : plan.ops) {
    if (op.kind == kind && op.display == display) return &op;
  }
  return nullptr;
}

TEST(MountsTest, RejectsRelativePaths) {
  MountSpec spec;
  spec.staging_dir = "relative";
  spec.workspace_dir = "/tmp";
  EXPECT_FALSE(BuildMountPlan(spec).has_value());
}

TEST(MountsTest, HostModePlan) {
  testing::TempDir tmp;
  auto plan = BuildMountPlan(BaseSpec(tmp));
  ASSERT_TRUE(plan.has_value()) << plan.error().ToString();
  // Prologue: private propagation, then the root tmpfs on the staging dir.
  ASSERT_EQ(plan->prologue.size(), 2u);
  EXPECT_EQ(plan->prologue[0].flags, static_cast<unsigned long>(MS_REC | MS_PRIVATE));
  EXPECT_EQ(plan->prologue[1].fstype, "tmpfs");
  // /usr is a recursive bind from an O_PATH source, then read-only + nosuid + nodev.
  const MountOp* usr = Find(*plan, Kind::kMount, "/usr");
  ASSERT_NE(usr, nullptr);
  EXPECT_EQ(usr->flags, static_cast<unsigned long>(MS_BIND | MS_REC));
  ASSERT_GE(usr->src_index, 0);
  EXPECT_EQ(plan->sources[static_cast<size_t>(usr->src_index)], "/usr");
  const MountOp* usr_ro = Find(*plan, Kind::kSetAttr, "/usr");
  ASSERT_NE(usr_ro, nullptr);
  EXPECT_TRUE(usr_ro->recursive);
  EXPECT_EQ(usr->dst, "usr");  // relative to the new root
  // Symlinked top dirs (usrmerge) become symlinks.
  struct stat st;
  if (lstat("/bin", &st) == 0 && S_ISLNK(st.st_mode)) {
    const MountOp* bin = Find(*plan, Kind::kSymlink, "/bin");
    ASSERT_NE(bin, nullptr);
    EXPECT_EQ(bin->src, "usr/bin");
  }
  // Generated /etc.
  const MountOp* passwd = Find(*plan, Kind::kWriteFile, "/etc/passwd");
  ASSERT_NE(passwd, nullptr);
  EXPECT_THAT(passwd->content, HasSubstr("sandbox:x:1000:1000"));
  // Fresh /proc, masks, /dev, /tmp, /workspace, pivot and final read-only root.
  EXPECT_NE(Find(*plan, Kind::kMount, "/proc"), nullptr);
  EXPECT_NE(Find(*plan, Kind::kMount, "/proc/sys"), nullptr);
  EXPECT_NE(Find(*plan, Kind::kMount, "/dev/pts"), nullptr);
  EXPECT_NE(Find(*plan, Kind::kMount, "/dev/null"), nullptr);
  EXPECT_NE(Find(*plan, Kind::kMount, "/tmp"), nullptr);
  EXPECT_NE(Find(*plan, Kind::kMount, "/workspace"), nullptr);
  EXPECT_EQ(plan->ops[plan->ops.size() - 2].kind, Kind::kPivotRoot);
  EXPECT_EQ(plan->ops.back().kind, Kind::kSetAttr);
  EXPECT_EQ(plan->ops.back().dst, "/");
}

TEST(MountsTest, TmpSizeAndSubsetPid) {
  testing::TempDir tmp;
  MountSpec spec = BaseSpec(tmp);
  spec.tmp_bytes = 1 << 20;
  spec.proc_subset_pid = true;
  auto plan = BuildMountPlan(spec);
  ASSERT_TRUE(plan.has_value());
  EXPECT_THAT(Find(*plan, Kind::kMount, "/tmp")->data, HasSubstr("size=1048576"));
  EXPECT_EQ(Find(*plan, Kind::kMount, "/proc")->data, "subset=pid");
  EXPECT_EQ(Find(*plan, Kind::kMount, "/proc/sys"), nullptr);
}

TEST(MountsTest, ResolvConfFromNameservers) {
  testing::TempDir tmp;
  MountSpec spec = BaseSpec(tmp);
  spec.nameservers = {"1.1.1.1", "9.9.9.9"};
  auto plan = BuildMountPlan(spec);
  ASSERT_TRUE(plan.has_value());
  EXPECT_THAT(Find(*plan, Kind::kWriteFile, "/etc/resolv.conf")->content,
              HasSubstr("nameserver 1.1.1.1\nnameserver 9.9.9.9\n"));
}

TEST(MountsTest, RootfsMode) {
  testing::TempDir tmp;
  auto rootfs = tmp.path() / "img";
  std::filesystem::create_directories(rootfs / "usr");
  std::filesystem::create_directories(rootfs / "etc");
  std::filesystem::create_directories(rootfs / "proc");  // skipped: the sandbox mounts its own
  std::filesystem::create_directory_symlink("usr/bin", rootfs / "bin");
  { std::ofstream(rootfs / "etc/passwd") << "x\n"; }
  MountSpec spec = BaseSpec(tmp);
  spec.rootfs = rootfs;
  auto plan = BuildMountPlan(spec);
  ASSERT_TRUE(plan.has_value()) << plan.error().ToString();
  EXPECT_NE(Find(*plan, Kind::kMount, "/usr"), nullptr);
  EXPECT_NE(Find(*plan, Kind::kSymlink, "/bin"), nullptr);
  EXPECT_EQ(Find(*plan, Kind::kMount, "/lib"), nullptr);  // not in the image, not from the host
  // Generated passwd is bound over the image's; hosts is not (the image has none).
  EXPECT_NE(Find(*plan, Kind::kMount, "/etc/passwd"), nullptr);
  EXPECT_EQ(Find(*plan, Kind::kMount, "/etc/hosts"), nullptr);
  for (const auto& src : plan->sources) EXPECT_NE(src, "/usr");

  spec.rootfs = tmp.path() / "missing";
  auto bad = BuildMountPlan(spec);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kNotFound);
}

TEST(MountsTest, DescribesFailures) {
  testing::TempDir tmp;
  auto plan = BuildMountPlan(BaseSpec(tmp));
  ASSERT_TRUE(plan.has_value());
  int usr = -1;
  for (size_t i = 0; i < plan->ops.size(); ++i) {
    if (plan->ops[i].kind == Kind::kMount && plan->ops[i].display == "/usr")
      usr = static_cast<int>(i);
  }
  ASSERT_GE(usr, 0);
  Error e = DescribeMountFailure(*plan, usr, ChildCall::kMount, EACCES);
  EXPECT_EQ(e.message, "mount(/usr): Permission denied (EACCES) during step 'bind system dirs'");
  EXPECT_EQ(e.code, ErrorCode::kPermissionDenied);
  e = DescribeMountFailure(*plan, kPrologueIndexBase + 1, ChildCall::kMount, EPERM);
  EXPECT_THAT(e.message, HasSubstr("during step 'mount root tmpfs'"));
  e = DescribeMountFailure(*plan, -2, ChildCall::kOpen, ENOENT);
  EXPECT_THAT(e.message, HasSubstr("during step 'open mount sources'"));
}

TEST(MountsTest, HostNameservers) {
  testing::TempDir tmp;
  auto path = tmp.path() / "resolv.conf";
  {
    std::ofstream(path) << "# c\nsearch x\nnameserver 10.0.0.2\nnameserver  8.8.8.8 \noptions a\n";
  }
  EXPECT_EQ(HostNameservers(path), (std::vector<std::string>{"10.0.0.2", "8.8.8.8"}));
}

TEST(MountsTest, PythonAliasLinksThePython3OfTheSandbox) {
  testing::TempDir tmp;
  // An image with python3 in /usr/local/bin (as the python images have).
  fs::create_directories(tmp.path() / "img/usr/local/bin");
  fs::create_directories(tmp.path() / "img/usr/bin");
  fs::create_symlink("python3.12", tmp.path() / "img/usr/local/bin/python3");
  MountSpec spec = BaseSpec(tmp);
  spec.rootfs = tmp.path() / "img";
  auto plan = BuildMountPlan(spec);
  ASSERT_TRUE(plan.has_value()) << plan.error().ToString();
  const MountOp* link = Find(*plan, Kind::kSymlink, "/.deepbox/bin/python");
  ASSERT_NE(link, nullptr);
  EXPECT_EQ(link->src, "/usr/local/bin/python3");
  ASSERT_NE(Find(*plan, Kind::kMkdir, "/.deepbox/bin"), nullptr);
  // Before the pivot, so the final read-only remount of the root covers it.
  auto index = [&](const MountOp* op) { return op - plan->ops.data(); };
  EXPECT_LT(index(link), index(&plan->ops[plan->ops.size() - 2]));

  // No python3: no link; switched off: no link.
  fs::remove(tmp.path() / "img/usr/local/bin/python3");
  plan = BuildMountPlan(spec);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(Find(*plan, Kind::kSymlink, "/.deepbox/bin/python"), nullptr);
  fs::create_symlink("python3.11", tmp.path() / "img/usr/bin/python3");
  spec.python_alias = false;
  plan = BuildMountPlan(spec);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(Find(*plan, Kind::kSymlink, "/.deepbox/bin/python"), nullptr);
  spec.python_alias = true;
  plan = BuildMountPlan(spec);
  ASSERT_TRUE(plan.has_value());
  link = Find(*plan, Kind::kSymlink, "/.deepbox/bin/python");
  ASSERT_NE(link, nullptr);
  EXPECT_EQ(link->src, "/usr/bin/python3");
}

}  // namespace
}  // namespace deepbox::local
