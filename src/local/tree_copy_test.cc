// CopyTree, as a property: random trees (modes, setuid bits, symlinks that
// dangle or point out of the tree, hard links, sparse and large files, empty
// directories, FIFOs, names that are not UTF-8) come out identical -- the
// same entries, bytes, link targets, hard-link groups, permission bits and
// modification times, holes still holes (local/testing/tree_compare.h) --
// and nothing is followed out of the source or written out of the
// destination.
#include "local/tree_copy.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"
#include "local/testing/tree_compare.h"

namespace deepbox::local {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using deepbox::testing::TempDir;

void WriteAt(const std::string& path, off_t offset, const std::string& data) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(pwrite(fd, data.data(), data.size(), offset), static_cast<ssize_t>(data.size()));
  close(fd);
}

// A random tree below `root`, from `seed`.
void MakeTree(const std::string& root, uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  std::vector<std::string> dirs = {root};
  std::vector<std::string> files;
  const std::vector<std::string> names = {
      "a",          "b.txt", "\xff\xfe-not-utf8",
      "with space", "-dash", "very_long_" + std::string(150, 'n'),
      "ü"};
  for (int i = 0; i < 60; ++i) {
    std::string parent = dirs[pick(static_cast<int>(dirs.size()))];
    std::string path =
        parent + "/" + names[pick(static_cast<int>(names.size()))] + "-" + std::to_string(i);
    switch (pick(7)) {
      case 0:  // directory, maybe empty, odd modes later
        ASSERT_EQ(mkdir(path.c_str(), 0755), 0) << path;
        dirs.push_back(path);
        break;
      case 1: {  // small file with arbitrary bytes
        std::string data;
        for (int k = pick(5000); k > 0; --k) data.push_back(static_cast<char>(rng()));
        WriteAt(path, 0, data);
        files.push_back(path);
        break;
      }
      case 2:  // sparse: data, a hole of megabytes, data, a trailing hole
        WriteAt(path, 0, "head");
        WriteAt(path, (1 + pick(8)) << 20, "middle");
        ASSERT_EQ(truncate(path.c_str(), 12 << 20), 0);
        files.push_back(path);
        break;
      case 3:  // symlinks: relative, dangling, and out of the tree
        ASSERT_EQ(symlink(pick(2) ? "/etc/passwd" : "../../../../outside", path.c_str()), 0);
        break;
      case 4:  // hard link to an earlier file
        if (!files.empty()) {
          ASSERT_EQ(link(files[pick(static_cast<int>(files.size()))].c_str(), path.c_str()), 0);
        }
        break;
      case 5:
        ASSERT_EQ(mkfifo(path.c_str(), 0640), 0);
        break;
      default: {  // a larger file of real data
        std::string data(static_cast<size_t>(256 << 10) + pick(4096), 'x');
        for (auto& c : data) c = static_cast<char>(rng());
        WriteAt(path, 0, data);
        files.push_back(path);
        break;
      }
    }
  }
  // Modes: setuid/setgid/sticky and unusual bits, including unreadable dirs
  // (root copies them anyway; others cannot, and skip this part).
  for (const auto& f : files) (void)chmod(f.c_str(), pick(2) ? 04755 : 0600);
  for (size_t i = 1; i < dirs.size(); ++i) {
    (void)chmod(dirs[i].c_str(), pick(3) == 0 ? 01777 : pick(2) ? 02750 : 0700);
  }
}

class TreeCopyTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(TreeCopyTest, RandomTreesComeOutIdentical) {
  TempDir tmp;
  std::string from = tmp.Path("from"), to = tmp.Path("to");
  ASSERT_EQ(mkdir(from.c_str(), 0750), 0);
  ASSERT_EQ(mkdir(to.c_str(), 0700), 0);
  MakeTree(from, GetParam());
  if (geteuid() != 0) GTEST_SKIP() << "the trees hold unreadable directories: root only";
  auto copied = CopyTree(from, to);
  ASSERT_TRUE(copied) << copied.error().ToString();
  EXPECT_TRUE(testing::SameTree(from, to, /*slack_blocks=*/16));
  struct stat root_from, root_to;
  ASSERT_EQ(stat(from.c_str(), &root_from), 0);
  ASSERT_EQ(stat(to.c_str(), &root_to), 0);
  EXPECT_EQ(root_to.st_mode & 07777, root_from.st_mode & 07777);
  EXPECT_GT(copied->files, 0u);
  EXPECT_LE(copied->bytes_written, copied->bytes);  // holes were not written
}

INSTANTIATE_TEST_SUITE_P(Seeds, TreeCopyTest, ::testing::Values(1u, 2u, 3u, 42u, 1234u));

TEST(TreeCopy, SymlinksAreCopiedNeverFollowed) {
  TempDir tmp;
  std::string from = tmp.Path("from"), to = tmp.Path("to"), outside = tmp.Path("o");
  ASSERT_EQ(mkdir(from.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(to.c_str(), 0700), 0);
  ASSERT_EQ(mkdir(outside.c_str(), 0755), 0);
  WriteAt(outside + "/secret", 0, "host secret");
  ASSERT_EQ(symlink(outside.c_str(), (from + "/dir-link").c_str()), 0);
  ASSERT_EQ(symlink((outside + "/secret").c_str(), (from + "/file-link").c_str()), 0);
  auto copied = CopyTree(from, to);
  ASSERT_TRUE(copied) << copied.error().ToString();
  EXPECT_EQ(copied->symlinks, 2u);
  EXPECT_EQ(copied->files, 0u);
  struct stat st;
  ASSERT_EQ(lstat((to + "/dir-link").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(fs::read_symlink(to + "/file-link").string(), outside + "/secret");
  // Nothing was written through a link: the outside is as it was.
  EXPECT_EQ(std::distance(fs::directory_iterator(outside), fs::directory_iterator()), 1);
}

TEST(TreeCopy, ADestinationThatIsNotEmptyIsRefused) {
  TempDir tmp;
  std::string from = tmp.Path("from"), to = tmp.Path("to");
  ASSERT_EQ(mkdir(from.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(to.c_str(), 0700), 0);
  WriteAt(to + "/x", 0, "x");
  auto copied = CopyTree(from, to);
  ASSERT_FALSE(copied);
  EXPECT_EQ(copied.error().code, ErrorCode::kConflict);
}

TEST(TreeCopy, TheByteLimitStopsACopyWithAClearError) {
  TempDir tmp;
  std::string from = tmp.Path("from"), to = tmp.Path("to");
  ASSERT_EQ(mkdir(from.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(to.c_str(), 0700), 0);
  WriteAt(from + "/big", 0, std::string(1 << 20, 'b'));
  auto copied = CopyTree(from, to, TreeCopyOptions{.max_bytes = 1000});
  ASSERT_FALSE(copied);
  EXPECT_EQ(copied.error().code, ErrorCode::kResourceExhausted);
  EXPECT_THAT(copied.error().message, HasSubstr("limit of 1000 bytes"));
}

TEST(TreeCopy, DiskUsageCountsHardLinksOnceAndHolesNot) {
  TempDir tmp;
  std::string dir = tmp.Path("d");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  WriteAt(dir + "/data", 0, std::string(1 << 20, 'd'));
  ASSERT_EQ(link((dir + "/data").c_str(), (dir + "/again").c_str()), 0);
  WriteAt(dir + "/sparse", 0, "x");
  ASSERT_EQ(truncate((dir + "/sparse").c_str(), 1LL << 30), 0);
  uint64_t used = TreeDiskUsage(dir);
  EXPECT_GE(used, 1u << 20);
  EXPECT_LT(used, 3u << 20);  // not 2 MiB for the link, not 1 GiB for the hole
}

}  // namespace
}  // namespace deepbox::local
