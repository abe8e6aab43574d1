#include "sandboxd/fs/tree.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "fs/testing/root_fixture.h"
#include "fs/testing/test_util.h"

namespace deepbox::sandboxd::fs {
namespace {

using deepbox::fs::testing::SymlinkRaw;
using deepbox::fs::testing::WriteRaw;
using Paths = std::vector<std::string>;

// On both resolvers (openat2 and the fallback walk): the walk opens each
// directory beneath its parent through the root.
class TreeTest : public deepbox::fs::testing::RootOnBothResolvers {
 protected:
  void SetUp() override {
    RootOnBothResolvers::SetUp();
    for (const char* f : {"a.txt", "sub/b.txt", "sub/deep/c.txt", ".git/HEAD", ".env"}) {
      WriteRaw(P(f), "hello");
    }
  }

  Paths Names(const TreeResult& r) {
    Paths out;
    for (const auto& e : r.entries) out.push_back(e.path);
    return out;
  }
};

TEST_P(TreeTest, ListsEveryFileSortedWithItsSizeTimeAndMode) {
  ASSERT_EQ(::chmod((P("a.txt")).c_str(), 0755), 0);
  auto r = Tree(*root_);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(Names(*r), (Paths{".env", ".git/HEAD", "a.txt", "sub/b.txt", "sub/deep/c.txt"}));
  EXPECT_FALSE(r->truncated);
  EXPECT_FALSE(r->unreadable);
  struct stat st;
  ASSERT_EQ(::stat((P("a.txt")).c_str(), &st), 0);
  const TreeEntry& a = r->entries[2];
  EXPECT_EQ(a.size, 5u);
  EXPECT_EQ(a.mode, 0755u);
  EXPECT_FALSE(a.symlink);
  EXPECT_EQ(a.mtime_ns, st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec);
}

TEST_P(TreeTest, AChangeShowsInSizeOrTime) {
  auto before = Tree(*root_);
  ASSERT_TRUE(before);
  struct timespec times[2] = {{0, UTIME_OMIT}, {1'000'000'000, 7}};
  WriteRaw(P("sub/b.txt"), "hellO");  // same size
  ASSERT_EQ(::utimensat(AT_FDCWD, P("sub/b.txt").c_str(), times, 0), 0);
  auto after = Tree(*root_);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->entries[3].path, "sub/b.txt");
  EXPECT_EQ(after->entries[3].mtime_ns, 1'000'000'000'000'000'007LL);
  EXPECT_NE(after->entries[3].mtime_ns, before->entries[3].mtime_ns);
}

TEST_P(TreeTest, SkipsNamedDirectoriesAtAnyDepth) {
  WriteRaw(P("sub/node_modules/x.js"), "x");
  TreeOptions o;
  o.skip_dirs = {".git", "node_modules"};
  auto r = Tree(*root_, o);
  ASSERT_TRUE(r);
  EXPECT_EQ(Names(*r), (Paths{".env", "a.txt", "sub/b.txt", "sub/deep/c.txt"}));
}

TEST_P(TreeTest, ListsSymlinksAsThemselvesAndNeverEntersThem) {
  SymlinkRaw(outside_, P("out"));
  SymlinkRaw("a.txt", P("link"));
  auto r = Tree(*root_);
  ASSERT_TRUE(r);
  EXPECT_EQ(Names(*r),
            (Paths{".env", ".git/HEAD", "a.txt", "link", "out", "sub/b.txt", "sub/deep/c.txt"}));
  EXPECT_TRUE(r->entries[3].symlink);
  EXPECT_EQ(r->entries[3].size, 5u);  // "a.txt"
  EXPECT_TRUE(r->entries[4].symlink);
}

TEST_P(TreeTest, LeavesOutSpecialFiles) {
  ASSERT_EQ(::mkfifo(P("fifo").c_str(), 0644), 0);
  auto r = Tree(*root_, TreeOptions{.path = "sub"});
  ASSERT_TRUE(r);
  EXPECT_EQ(Names(*r), (Paths{"b.txt", "deep/c.txt"}));
  r = Tree(*root_);
  ASSERT_TRUE(r);
  Paths all = Names(*r);
  EXPECT_EQ(std::count(all.begin(), all.end(), "fifo"), 0);
}

TEST_P(TreeTest, StopsAtMaxEntriesAndSaysSo) {
  auto r = Tree(*root_, TreeOptions{.max_entries = 2});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->entries.size(), 2u);
  EXPECT_TRUE(r->truncated);
}

TEST_P(TreeTest, RefusesABaseOutsideTheRootOrNotADirectory) {
  EXPECT_FALSE(Tree(*root_, TreeOptions{.path = "../.."}));
  SymlinkRaw(outside_, P("up"));
  EXPECT_FALSE(Tree(*root_, TreeOptions{.path = "up"}));
  EXPECT_FALSE(Tree(*root_, TreeOptions{.path = "a.txt"}));
}

INSTANTIATE_TEST_SUITE_P(Modes, TreeTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("Fallback") : std::string("Openat2");
                         });

}  // namespace
}  // namespace deepbox::sandboxd::fs
