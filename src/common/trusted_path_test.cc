#include "common/trusted_path.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"

namespace deepbox {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const TrustedPath kUse{"the test directory", "DEEPBOX_TEST_DIR", "chooses what the test does"};

class TrustedPathTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = tmp_.path(); }
  Status Check(const fs::path& p, bool want_dir = true) {
    UniqueFd fd(open(p.c_str(), O_RDONLY | O_CLOEXEC));
    EXPECT_TRUE(fd) << p;
    return CheckOwnedByUs(fd.get(), p, kUse, want_dir);
  }
  deepbox::testing::TempDir tmp_{"dbx-trusted"};
  fs::path dir_;
};

TEST_F(TrustedPathTest, OursAloneIsTrustedAnythingElseSaysWhatToDo) {
  EXPECT_TRUE(Check(dir_));
  ASSERT_EQ(chmod(dir_.c_str(), 0770), 0);
  auto group = Check(dir_);
  ASSERT_FALSE(group);
  EXPECT_EQ(group.error().code, ErrorCode::kPermissionDenied);
  EXPECT_THAT(group.error().message,
              HasSubstr("refusing to use the test directory " + dir_.string()));
  EXPECT_THAT(group.error().message, HasSubstr("mode 0770"));
  EXPECT_THAT(group.error().message, HasSubstr("whoever can write it chooses what the test does"));
  EXPECT_THAT(group.error().message, HasSubstr("chmod go-w"));
  ASSERT_EQ(chmod(dir_.c_str(), 0700), 0);
  fs::path file = dir_ / "f";
  { UniqueFd f(open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600)); }
  EXPECT_TRUE(Check(file, /*want_dir=*/false));
  auto not_dir = Check(file, /*want_dir=*/true);
  ASSERT_FALSE(not_dir);
  EXPECT_THAT(not_dir.error().message, HasSubstr("is not a directory"));
  if (geteuid() == 0) {
    ASSERT_EQ(chown(file.c_str(), 4242, 4242), 0);
    auto foreign = Check(file, false);
    ASSERT_FALSE(foreign);
    EXPECT_THAT(foreign.error().message, HasSubstr("uid 4242"));
    EXPECT_THAT(foreign.error().message, HasSubstr("point DEEPBOX_TEST_DIR at a new directory"));
  }
}

TEST_F(TrustedPathTest, AParentOthersCanChangeIsRefused) {
  fs::path inside = dir_ / "open" / "target";
  fs::create_directories(inside);
  EXPECT_TRUE(CheckAncestorsCannotSwap(dir_ / "open", inside, kUse));
  ASSERT_EQ(chmod((dir_ / "open").c_str(), 0777), 0);
  auto open_parent = CheckAncestorsCannotSwap(dir_ / "open", inside, kUse);
  ASSERT_FALSE(open_parent);
  EXPECT_THAT(open_parent.error().message, HasSubstr("other users could change"));
  EXPECT_THAT(open_parent.error().message, HasSubstr("Point DEEPBOX_TEST_DIR"));
  ASSERT_EQ(chmod((dir_ / "open").c_str(), 01777), 0);  // sticky, like /tmp: fine
  EXPECT_TRUE(CheckAncestorsCannotSwap(dir_ / "open", inside, kUse));
}

}  // namespace
}  // namespace deepbox
