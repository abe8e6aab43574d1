#include "common/testing/temp_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <optional>

namespace deepbox::testing {
namespace {

namespace fs = std::filesystem;

TEST(TempDirTest, TheDirectoryAndEverythingInItGoWithTheTempDir) {
  fs::path where;
  {
    TempDir dir("deepbox-tempdir");
    where = dir.path();
    EXPECT_TRUE(fs::is_directory(where));
    EXPECT_EQ(where.filename().string().rfind("deepbox-tempdir-", 0), 0u);
    fs::create_directories(dir.Path("a/b"));
    std::ofstream(dir.Path("a/b/f")) << "x";
    ::chmod(dir.Path("a").c_str(), 0);  // unreadable: removed all the same
  }
  EXPECT_FALSE(fs::exists(where));
}

TEST(TempDirTest, MakeReportsFailureInsteadOfAborting) {
  auto made = TempDir::Make("deepbox-tempdir");
  ASSERT_TRUE(made.has_value()) << made.error().ToString();
  EXPECT_TRUE(fs::is_directory(made->path()));

  TempDir base("deepbox-tempdir");
  const char* old = std::getenv("TMPDIR");
  std::string saved = old != nullptr ? old : "";
  ::setenv("TMPDIR", base.Path("missing").c_str(), 1);
  auto failed = TempDir::Make("deepbox-tempdir");
  if (old != nullptr) {
    ::setenv("TMPDIR", saved.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
  ASSERT_FALSE(failed.has_value());
  EXPECT_NE(failed.error().message.find("mkdtemp("), std::string::npos) << failed.error().message;
  EXPECT_NE(failed.error().message.find("ENOENT"), std::string::npos) << failed.error().message;
}

TEST(TempDirTest, AParentGivenReplacesTmpdir) {
  TempDir parent("deepbox-tempdir");
  TempDir child("x", parent.path().string());
  EXPECT_EQ(child.path().parent_path(), parent.path());
  EXPECT_EQ(child.path().filename().string().size(), 8u);  // x-XXXXXX
}

TEST(TempDirTest, AMovedTempDirRemovesItsDirectoryOnce) {
  std::optional<TempDir> holder;
  fs::path where;
  {
    auto made = TempDir::Make("deepbox-tempdir");
    ASSERT_TRUE(made.has_value());
    where = made->path();
    holder.emplace(std::move(*made));
    EXPECT_TRUE(made->path().empty());
  }
  EXPECT_TRUE(fs::is_directory(where));  // the moved-from one left it alone
  EXPECT_EQ(holder->path(), where);

  TempDir other("deepbox-tempdir");
  fs::path replaced = other.path();
  other = std::move(*holder);  // the old directory goes, the new one stays
  EXPECT_FALSE(fs::exists(replaced));
  EXPECT_EQ(other.path(), where);
  holder.reset();
  EXPECT_TRUE(fs::is_directory(where));
}

TEST(TempDirTest, AReleasedDirectoryIsKept) {
  fs::path kept;
  {
    TempDir dir("deepbox-tempdir");
    kept = dir.Release();
    EXPECT_TRUE(dir.path().empty());
  }
  EXPECT_TRUE(fs::is_directory(kept));
  fs::remove_all(kept);
}

}  // namespace
}  // namespace deepbox::testing
