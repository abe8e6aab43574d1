#include "common/make_dirs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/testing/temp_dir.h"

namespace deepbox {
namespace {

namespace fs = std::filesystem;

class MakeDirsTest : public ::testing::Test {
 protected:
  deepbox::testing::TempDir tmp_{"make-dirs-test"};
  const fs::path& root_ = tmp_.path();
};

TEST_F(MakeDirsTest, CreatesEveryMissingParentWithTheMode) {
  const mode_t old = umask(0);
  auto st = MakeDirs((root_ / "a" / "b" / "c").string(), 0700);
  umask(old);
  ASSERT_TRUE(st) << st.error().message;
  for (const fs::path& d : {root_ / "a", root_ / "a" / "b", root_ / "a" / "b" / "c"}) {
    struct stat s {};
    ASSERT_EQ(stat(d.c_str(), &s), 0) << d;
    EXPECT_TRUE(S_ISDIR(s.st_mode)) << d;
    EXPECT_EQ(s.st_mode & 07777, 0700u) << d;
  }
}

TEST_F(MakeDirsTest, ExistingDirectoriesDoublesAndTrailingSlashesAreFine) {
  ASSERT_TRUE(MakeDirs((root_ / "x").string(), 0755));
  EXPECT_TRUE(MakeDirs(root_.string() + "//x///y/", 0755));
  EXPECT_TRUE(fs::is_directory(root_ / "x" / "y"));
  EXPECT_TRUE(MakeDirs(root_.string(), 0755));  // all there already
}

TEST_F(MakeDirsTest, RelativePathsAreBelowTheWorkingDirectory) {
  const fs::path cwd = fs::current_path();
  fs::current_path(root_);
  auto st = MakeDirs("rel/sub", 0755);
  fs::current_path(cwd);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_TRUE(fs::is_directory(root_ / "rel" / "sub"));
}

TEST_F(MakeDirsTest, AFileInTheWayNamesTheCallAndThePath) {
  std::ofstream(root_ / "file") << "x";
  auto st = MakeDirs((root_ / "file" / "sub").string(), 0700);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("mkdir"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find((root_ / "file" / "sub").string()), std::string::npos)
      << st.error().message;
}

TEST_F(MakeDirsTest, EmptyIsAnError) { EXPECT_FALSE(MakeDirs("", 0700)); }

}  // namespace
}  // namespace deepbox
