#include "fs/dir_entries.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "fs/testing/test_util.h"

namespace deepbox::fs {
namespace {

using testing::MakeDirRaw;
using testing::SymlinkRaw;
using testing::TempDir;
using testing::WriteRaw;

TEST(DirEntriesTest, ReadDirListsEveryEntryButDotAndDotDot) {
  TempDir tmp;
  WriteRaw(tmp.Path("file"), "x");
  MakeDirRaw(tmp.Path("dir"));
  SymlinkRaw("file", tmp.Path("link"));
  for (int i = 0; i < 2000; ++i) WriteRaw(tmp.Path("many/" + std::to_string(i)), "");
  UniqueFd fd(::open(tmp.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(fd);
  auto entries = ReadDir(fd.get(), "tmp");
  ASSERT_TRUE(entries) << entries.error().ToString();
  std::sort(entries->begin(), entries->end(),
            [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  ASSERT_EQ(entries->size(), 4u);
  EXPECT_EQ((*entries)[0].name, "dir");
  EXPECT_EQ((*entries)[0].type, DT_DIR);
  EXPECT_EQ((*entries)[1].name, "file");
  EXPECT_EQ((*entries)[1].type, DT_REG);
  EXPECT_EQ((*entries)[2].name, "link");
  EXPECT_EQ((*entries)[2].type, DT_LNK);
  EXPECT_EQ((*entries)[3].name, "many");

  // More entries than one getdents64 buffer holds.
  UniqueFd many(::open(tmp.Path("many").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(many);
  auto all = ReadDir(many.get(), "many");
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), 2000u);

  auto not_dir = ReadDir(-1, "bad fd");
  ASSERT_FALSE(not_dir);
  EXPECT_EQ(not_dir.error().sys_errno, EBADF);
  EXPECT_NE(not_dir.error().message.find("getdents64(bad fd)"), std::string::npos);
}

TEST(DirEntriesTest, ReadLinkAtReadsTargetsVerbatim) {
  TempDir tmp;
  WriteRaw(tmp.Path("file"), "x");
  SymlinkRaw("../odd\x01target", tmp.Path("link"));
  UniqueFd dir(::open(tmp.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(dir);
  int err = 0;
  auto target = ReadLinkAt(dir.get(), "link", &err);
  ASSERT_TRUE(target);
  EXPECT_EQ(*target, "../odd\x01target");

  EXPECT_FALSE(ReadLinkAt(dir.get(), "file", &err));
  EXPECT_EQ(err, EINVAL);  // not a symlink
  EXPECT_FALSE(ReadLinkAt(dir.get(), "missing", &err));
  EXPECT_EQ(err, ENOENT);

  // An empty name reads the link an O_PATH|O_NOFOLLOW fd refers to.
  UniqueFd link(::openat(dir.get(), "link", O_PATH | O_NOFOLLOW | O_CLOEXEC));
  ASSERT_TRUE(link);
  auto same = ReadLinkAt(link.get(), "", &err);
  ASSERT_TRUE(same);
  EXPECT_EQ(*same, "../odd\x01target");
}

}  // namespace
}  // namespace deepbox::fs
