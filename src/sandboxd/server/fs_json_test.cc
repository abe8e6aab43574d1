#include "sandboxd/server/fs_json.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <string>
#include <vector>

#include "fs/testing/test_util.h"
#include "sandboxd/fs/fs_util.h"

namespace deepbox::sandboxd {
namespace {

using deepbox::fs::testing::Cat;
using deepbox::fs::testing::TempDir;

// What the daemon sent before ListJson: Boost.JSON objects, serialized.
std::string DomListJson(const fs::ListResult& list) {
  json::array entries;
  for (const auto& e : list.entries) entries.emplace_back(FileInfoJson(e));
  json::object o;
  o["path"] = JsonString(list.path);
  o["entries"] = std::move(entries);
  o["truncated"] = list.truncated;
  return ToJson(o);
}

std::string Serialized(std::string_view text) {
  std::string out;
  AppendJsonString(out, text);
  return out;
}

TEST(FsJsonTest, StringEscapingMatchesBoostJson) {
  for (int c = 0; c < 256; ++c) {
    std::string s(1, static_cast<char>(c));
    EXPECT_EQ(Serialized(s), ToJson(JsonString(s))) << "byte " << c;
    std::string mixed = Cat("a", s, "b\xc3\xa9", s, s, "\xe2\x82\xac");
    EXPECT_EQ(Serialized(mixed), ToJson(JsonString(mixed))) << "byte " << c;
  }
  for (std::string_view s :
       {std::string_view(""), std::string_view("\xff\xfe"), std::string_view("ok\xc3"),
        std::string_view("\xed\xa0\x80 surrogate"), std::string_view("a\"b\\c\x01\x1f\x7f\t\n"),
        std::string_view("nul\0byte", 8), std::string_view("\xf0\x9f\x98\x80 emoji")}) {
    EXPECT_EQ(Serialized(s), ToJson(JsonString(s)));
  }
}

class FsJsonListTest : public ::testing::Test {
 protected:
  void SetUp() override {
    deepbox::fs::testing::WriteRaw(dir_.Path("plain.txt"), "hello");
    deepbox::fs::testing::WriteRaw(dir_.Path("sub/inner"), "x");
    deepbox::fs::testing::SymlinkRaw("plain.txt", dir_.Path("link"));
    deepbox::fs::testing::SymlinkRaw("sub", dir_.Path("dirlink"));
    deepbox::fs::testing::SymlinkRaw("nowhere", dir_.Path("dangling"));
    deepbox::fs::testing::SymlinkRaw("/etc/passwd", dir_.Path("escape"));
    deepbox::fs::testing::SymlinkRaw("bad\xff\x01target\"", dir_.Path("oddlink"));
    deepbox::fs::testing::WriteRaw(dir_.Path("unreadable"), "secret");
    ::chmod(dir_.Path("unreadable").c_str(), 0);
    deepbox::fs::testing::MakeDirRaw(dir_.Path("closed"));
    ::chmod(dir_.Path("closed").c_str(), 0);
    ASSERT_EQ(::mkfifo(dir_.Path("fifo").c_str(), 0640), 0);
    deepbox::fs::testing::WriteRaw(dir_.Path("bad\xff\xfename"), "");
    deepbox::fs::testing::WriteRaw(dir_.Path("ctl\x01\x1f\t\"q\\"), "");
    deepbox::fs::testing::WriteRaw(dir_.Path("caf\xc3\xa9"), "");
    ::chmod(dir_.Path("plain.txt").c_str(), 04751);
  }
  void TearDown() override { ::chmod(dir_.Path("closed").c_str(), 0755); }

  TempDir dir_;
};

TEST_F(FsJsonListTest, SameBytesAsBoostJsonForEveryKindOfEntry) {
  auto root = deepbox::fs::Root::Open(dir_.path().string());
  ASSERT_TRUE(root) << root.error().message;
  for (std::string_view path : {".", "sub", "dirlink", "/"}) {
    std::string api = path == "/" ? dir_.path().string() : std::string(path);
    auto list = fs::List(*root, api);
    ASSERT_TRUE(list) << list.error().message;
    if (path == ".") {
      ASSERT_EQ(list->entries.size(), 13u);
    }
    auto rel = root->ToRelative(api);
    ASSERT_TRUE(rel);
    for (const auto& e : list->entries) {
      EXPECT_EQ(e.path, root->ToAbsolute(deepbox::fs::JoinRelative(*rel, e.name)));
    }
    std::string fast = ListJson(*list);
    EXPECT_EQ(fast, DomListJson(*list)) << "listing '" << path << "'";
    auto parsed = ParseJsonObject(fast);
    ASSERT_TRUE(parsed) << parsed.error().message;
  }
}

TEST_F(FsJsonListTest, SameBytesWhenTruncatedOrEmpty) {
  auto root = deepbox::fs::Root::Open(dir_.path().string());
  ASSERT_TRUE(root) << root.error().message;
  fs::ListOptions opts;
  opts.max_entries = 3;
  auto list = fs::List(*root, ".", opts);
  ASSERT_TRUE(list) << list.error().message;
  EXPECT_TRUE(list->truncated);
  EXPECT_EQ(ListJson(*list), DomListJson(*list));
  deepbox::fs::testing::MakeDirRaw(dir_.Path("empty"));
  auto empty = fs::List(*root, "empty");
  ASSERT_TRUE(empty) << empty.error().message;
  EXPECT_EQ(ListJson(*empty), DomListJson(*empty));
}

TEST_F(FsJsonListTest, WithoutStatEveryEntryIsPathNameAndTypeOnly) {
  auto root = deepbox::fs::Root::Open(dir_.path().string());
  ASSERT_TRUE(root) << root.error().message;
  fs::ListOptions opts;
  opts.stat = false;
  auto list = fs::List(*root, ".", opts);
  ASSERT_TRUE(list) << list.error().message;
  ASSERT_EQ(list->entries.size(), 13u);
  std::string fast = ListJson(*list);
  json::array entries;
  for (const auto& e : list->entries) {
    json::object o;
    o["path"] = JsonString(e.path);
    o["name"] = JsonString(e.name);
    o["type"] = std::string(fs::FileTypeName(e.type));
    entries.emplace_back(std::move(o));
  }
  json::object want;
  want["path"] = JsonString(list->path);
  want["entries"] = std::move(entries);
  want["truncated"] = false;
  EXPECT_EQ(fast, ToJson(want));
  EXPECT_EQ(fast.find("\"size\""), std::string::npos);
  EXPECT_EQ(fast.find("link_target"), std::string::npos);
}

// fs/tree's answer: the bytes Boost.JSON writes for the same arrays, for
// every kind of name (invalid UTF-8, control characters, quotes).
TEST_F(FsJsonListTest, TreeSameBytesAsBoostJson) {
  auto root = deepbox::fs::Root::Open(dir_.path().string());
  ASSERT_TRUE(root) << root.error().message;
  auto tree = fs::Tree(*root);
  ASSERT_TRUE(tree) << tree.error().message;
  ASSERT_GE(tree->entries.size(), 8u);
  tree->entries.push_back(fs::TreeEntry{"neg", false, 0, -5, 0});  // before 1970
  for (bool flag : {false, true}) {
    tree->truncated = flag;
    tree->unreadable = !flag;
    json::array entries;
    for (const auto& e : tree->entries) {
      entries.emplace_back(
          json::array{JsonString(e.path), e.size, e.mtime_ns, e.mode, e.symlink ? "l" : "f"});
    }
    json::object o;
    o["entries"] = std::move(entries);
    o["truncated"] = tree->truncated;
    o["unreadable"] = tree->unreadable;
    EXPECT_EQ(TreeJson(*tree), ToJson(o));
  }
  EXPECT_EQ(TreeJson(fs::TreeResult{}), R"({"entries":[],"truncated":false,"unreadable":false})");
}

TEST(FsJsonTest, EntryPathsUnderASlashRoot) {
  auto root = deepbox::fs::Root::Open("/");
  ASSERT_TRUE(root) << root.error().message;
  auto list = fs::List(*root, "/");
  ASSERT_TRUE(list) << list.error().message;
  ASSERT_FALSE(list->entries.empty());
  for (const auto& e : list->entries) EXPECT_EQ(e.path, "/" + e.name);
}

TEST(FsJsonTest, Rfc3339MatchesStrftime) {
  for (time_t t :
       {time_t{0}, time_t{-1}, time_t{951782400}, time_t{1700000000}, time_t{253402300799},
        time_t{253402300800}, time_t{-62167219200}, time_t{-62167219201}, time_t{4102444800},
        time_t{-30610224000}, time_t{-30610224001}, time_t{-59011459200}}) {
    struct tm tm;
    ASSERT_NE(gmtime_r(&t, &tm), nullptr);
    char buf[64];
    size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    struct timespec ts = {t, 123};
    EXPECT_EQ(fs::FormatRfc3339(ts), std::string(buf, n)) << t;
  }
}

TEST(FsJsonTest, ModeAndSizeFormatting) {
  fs::ListResult list;
  list.path = "/w";
  for (uint32_t mode : {0u, 7u, 0644u, 01777u, 07777u}) {
    fs::FileInfo f;
    f.path = "/w/x";
    f.name = "x";
    f.type = fs::FileType::kOther;
    f.mode = mode;
    f.size = mode == 0 ? UINT64_MAX : mode;
    f.mtime = "2024-01-02T03:04:05Z";
    list.entries.push_back(f);
  }
  EXPECT_EQ(ListJson(list), DomListJson(list));
}

}  // namespace
}  // namespace deepbox::sandboxd
