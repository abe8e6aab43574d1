#include "fs/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>

#include "fs/testing/root_fixture.h"
#include "fs/testing/test_util.h"

namespace deepbox::fs {
namespace {

using testing::Exists;
using testing::MakeDirRaw;
using testing::ReadRaw;
using testing::SymlinkRaw;
using testing::WriteRaw;

int CountEntries(const std::string& dir) {
  int n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++n;
  }
  return n;
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// Both resolvers (openat2, and the walk of kernels without it).
class AtomicFileTest : public deepbox::fs::testing::RootOnBothResolvers {};

TEST_P(AtomicFileTest, StreamsAndAborts) {
  WriteRaw(P("up.bin"), "old");
  {
    auto w = AtomicFileWriter::Create(*root_, "up.bin");
    ASSERT_TRUE(w) << w.error().ToString();
    ASSERT_TRUE(w->Append("part1-"));
    ASSERT_TRUE(w->Append("part2"));
    EXPECT_EQ(ReadRaw(P("up.bin")), "old");  // invisible until Commit
    EXPECT_EQ(CountEntries(dir_), 2);        // the file and its temporary
  }                                          // destroyed without Commit: aborted
  EXPECT_EQ(ReadRaw(P("up.bin")), "old");
  EXPECT_EQ(CountEntries(dir_), 1);

  auto w = AtomicFileWriter::Create(*root_, "up.bin");
  ASSERT_TRUE(w);
  ASSERT_TRUE(w->Append(std::string(1 << 20, 'z')));
  auto moved = std::move(*w);  // movable: the move target owns the temp
  auto done = moved.Commit();
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(done->bytes, 1u << 20);
  EXPECT_FALSE(done->created);
  EXPECT_EQ(ReadRaw(P("up.bin")), std::string(1 << 20, 'z'));
  EXPECT_EQ(CountEntries(dir_), 1);
  EXPECT_FALSE(moved.Append("more"));  // committed
}

TEST_P(AtomicFileTest, CreateAtReplacesASymlinkAndRefusesADirectory) {
  SymlinkRaw(outside_ + "/secret.txt", P("link"));
  auto loc = root_->OpenParent("link");
  ASSERT_TRUE(loc) << loc.error().ToString();
  auto w = AtomicFileWriter::CreateAt(std::move(*loc), "shown/link", WriteOptions{.mode = 0750});
  ASSERT_TRUE(w) << w.error().ToString();
  ASSERT_TRUE(w->Append("mine"));
  auto done = w->Commit();
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(done->path, "shown/link");
  EXPECT_FALSE(done->created);
  struct stat st;
  ASSERT_EQ(::lstat(P("link").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));  // the link itself was replaced
  EXPECT_EQ(ModeOf(P("link")), 0750u);
  EXPECT_EQ(ReadRaw(outside_ + "/secret.txt"), "outside");

  MakeDirRaw(P("dir"));
  auto dir_loc = root_->OpenParent("dir");
  ASSERT_TRUE(dir_loc);
  auto on_dir = AtomicFileWriter::CreateAt(std::move(*dir_loc), "shown/dir", WriteOptions{});
  ASSERT_FALSE(on_dir);
  EXPECT_EQ(on_dir.error().code, ErrorCode::kIsDirectory);
  EXPECT_EQ(on_dir.error().sys_errno, EISDIR);
  EXPECT_EQ(CountEntries(P("dir")), 0);
}

TEST_P(AtomicFileTest, SymlinksAreReplacedAtomicallyNeverFollowed) {
  SymlinkRaw(outside_ + "/secret.txt", P("l"));
  auto loc = root_->OpenParent("l");
  ASSERT_TRUE(loc);
  ASSERT_TRUE(CreateSymlinkAt(*loc, "target-a", /*overwrite=*/true, P("l")));
  EXPECT_EQ(std::filesystem::read_symlink(P("l")).string(), "target-a");
  EXPECT_EQ(ReadRaw(outside_ + "/secret.txt"), "outside");

  auto refused = CreateSymlinkAt(*loc, "target-b", /*overwrite=*/false, P("l"));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kConflict);
  EXPECT_EQ(std::filesystem::read_symlink(P("l")).string(), "target-a");
  EXPECT_EQ(CountEntries(dir_), 1);  // no temporary left

  auto fresh = root_->OpenParent("new");
  ASSERT_TRUE(fresh);
  ASSERT_TRUE(CreateSymlinkAt(*fresh, "/absolute/is/just/text", /*overwrite=*/false, P("new")));
  EXPECT_EQ(std::filesystem::read_symlink(P("new")).string(), "/absolute/is/just/text");
  EXPECT_FALSE(Exists(P(".new.deepbox-tmp")));
  EXPECT_EQ(CountEntries(dir_), 2);
}

INSTANTIATE_TEST_SUITE_P(Modes, AtomicFileTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Fallback" : "Openat2"; });

}  // namespace
}  // namespace deepbox::fs
