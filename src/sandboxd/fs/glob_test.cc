#include "sandboxd/fs/glob.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fs/testing/test_util.h"

namespace deepbox::sandboxd::fs {
namespace {

using deepbox::fs::Root;
using deepbox::fs::testing::MakeDirRaw;
using deepbox::fs::testing::SymlinkRaw;
using deepbox::fs::testing::TempDir;
using deepbox::fs::testing::WriteRaw;
using Paths = std::vector<std::string>;

class GlobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.Path("root");
    for (const char* f : {"a.py", "sub/b.py", "sub/nested/c.py", "readme.md", ".hidden.py",
                          ".hidden/x.py", ".github/workflows/ci.yml"}) {
      WriteRaw(dir_ + "/" + f, "x");
    }
    auto root = Root::Open(dir_);
    ASSERT_TRUE(root);
    root_.emplace(std::move(*root));
  }

  // Results relative to the root, for readable expectations.
  Paths G(std::string_view pattern, GlobOptions options = {}) {
    auto r = Glob(*root_, pattern, options);
    EXPECT_TRUE(r) << pattern << ": " << r.error().ToString();
    if (!r) return {};
    Paths out;
    for (const auto& p : r->paths) {
      EXPECT_EQ(p.rfind(dir_ + "/", 0), 0u) << p;
      out.push_back(p.substr(dir_.size() + 1));
    }
    return out;
  }

  TempDir tmp_;
  std::string dir_;
  std::optional<Root> root_;
};

// The reference matrix of deepagents' glob semantics.
TEST_F(GlobTest, ReferenceMatrix) {
  EXPECT_EQ(G("*.py"), (Paths{".hidden/x.py", "a.py", "sub/b.py", "sub/nested/c.py"}));
  EXPECT_EQ(G("**/*.py"), (Paths{"a.py", "sub/b.py", "sub/nested/c.py"}));
  EXPECT_EQ(G("sub/**/*.py"), (Paths{"sub/b.py", "sub/nested/c.py"}));
  EXPECT_EQ(G("/*.py"), (Paths{"a.py"}));
  EXPECT_EQ(G("a.py/**"), Paths{});
  EXPECT_EQ(G("*.yml"), (Paths{".github/workflows/ci.yml"}));
  EXPECT_EQ(G("**/*.yml"), Paths{});
  EXPECT_EQ(G(".*.py"), (Paths{".hidden.py"}));
  EXPECT_EQ(G("*"), (Paths{".github/workflows/ci.yml", ".hidden/x.py", "a.py", "readme.md",
                           "sub/b.py", "sub/nested/c.py"}));
  EXPECT_EQ(G("?.py"), (Paths{".hidden/x.py", "a.py", "sub/b.py", "sub/nested/c.py"}));
  EXPECT_EQ(G("[^a].py"), (Paths{".hidden/x.py", "sub/b.py", "sub/nested/c.py"}));
  EXPECT_EQ(G("[!a].py"), G("[^a].py"));
}

TEST_F(GlobTest, PathPatterns) {
  EXPECT_EQ(G("sub/*.py"), (Paths{"sub/b.py"}));
  EXPECT_EQ(G("sub/**"), (Paths{"sub/b.py", "sub/nested/c.py"}));
  EXPECT_EQ(G("**/c.py"), (Paths{"sub/nested/c.py"}));
  EXPECT_EQ(G("**/**/c.py"), (Paths{"sub/nested/c.py"}));
  EXPECT_EQ(G("./sub/b.py"), (Paths{"sub/b.py"}));
  EXPECT_EQ(G(".github/**/*.yml"), (Paths{".github/workflows/ci.yml"}));
  EXPECT_EQ(G(".*/*/*.yml"), (Paths{".github/workflows/ci.yml"}));
  EXPECT_EQ(G("*/*.py"), (Paths{"sub/b.py"}));  // "*" does not enter .hidden
  EXPECT_EQ(G("sub/"), Paths{});                // directories never match
  EXPECT_EQ(G("sub"), Paths{});
  EXPECT_EQ(G("**"), G("*"));  // no "/": a basename pattern like "*"
}

TEST_F(GlobTest, BracesClassesEscapes) {
  EXPECT_EQ(G("*.{py,md}"),
            (Paths{".hidden/x.py", "a.py", "readme.md", "sub/b.py", "sub/nested/c.py"}));
  EXPECT_EQ(G("{sub/nested,sub}/*.py"), (Paths{"sub/b.py", "sub/nested/c.py"}));
  EXPECT_EQ(G("{a,{b,c}}.py"), (Paths{"a.py", "sub/b.py", "sub/nested/c.py"}));
  EXPECT_EQ(G("[a-b].py"), (Paths{"a.py", "sub/b.py"}));
  WriteRaw(dir_ + "/lit/{x}.txt", "");
  WriteRaw(dir_ + "/lit/*.txt", "");
  WriteRaw(dir_ + "/lit/[q.txt", "");
  WriteRaw(dir_ + "/lit/\xC3\xA9.txt", "");
  EXPECT_EQ(G("{x}.txt"), (Paths{"lit/{x}.txt"}));
  EXPECT_EQ(G("\\*.txt"), (Paths{"lit/*.txt"}));
  EXPECT_EQ(G("[q.txt"), (Paths{"lit/[q.txt"}));
  EXPECT_EQ(G("?.txt"), (Paths{"lit/*.txt", "lit/\xC3\xA9.txt"}));  // é is one character
  EXPECT_EQ(G("{a.py"), Paths{});
}

TEST_F(GlobTest, InvalidPatterns) {
  for (std::string bad : {std::string(""), std::string("../*.py"), std::string("sub/../*"),
                          std::string("{a,..}/x")}) {
    auto r = Glob(*root_, bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << bad;
  }
  std::string broad;
  for (int i = 0; i < 10; ++i) broad += "{a,b}";  // 1024 expansions
  auto r = Glob(*root_, broad);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("pattern too broad"), std::string::npos);
  std::string ok;
  for (int i = 0; i < 9; ++i) ok += "{a,b}";  // 512
  EXPECT_TRUE(Glob(*root_, ok));
}

TEST_F(GlobTest, BaseAndLimits) {
  GlobOptions in_sub;
  in_sub.path = "sub";
  EXPECT_EQ(G("*.py", in_sub), (Paths{"sub/b.py", "sub/nested/c.py"}));
  EXPECT_EQ(G("/*.py", in_sub), (Paths{"sub/b.py"}));
  in_sub.path = dir_ + "/sub/nested";
  EXPECT_EQ(G("*", in_sub), (Paths{"sub/nested/c.py"}));

  GlobOptions capped;
  capped.max_results = 2;
  auto r = Glob(*root_, "*.py", capped);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->paths.size(), 2u);
  EXPECT_TRUE(r->truncated);
  capped.max_results = 4;
  r = Glob(*root_, "*.py", capped);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->paths.size(), 4u);
  EXPECT_FALSE(r->truncated);

  for (int i = 0; i < 200; ++i) WriteRaw(dir_ + "/many/f" + std::to_string(i), "");
  GlobOptions no_time;
  no_time.time_budget = std::chrono::milliseconds(0);
  r = Glob(*root_, "*", no_time);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->truncated);
  EXPECT_LT(r->paths.size(), 206u);

  GlobOptions file_base;
  file_base.path = "a.py";
  auto nd = Glob(*root_, "*", file_base);
  ASSERT_FALSE(nd);
  EXPECT_EQ(nd.error().code, ErrorCode::kNotDirectory);
  GlobOptions outside;
  outside.path = "/etc";
  EXPECT_EQ(Glob(*root_, "*", outside).error().code, ErrorCode::kPermissionDenied);
}

TEST_F(GlobTest, Symlinks) {
  TempDir other;
  WriteRaw(other.Path("out.py"), "x");
  SymlinkRaw("a.py", dir_ + "/link.py");                  // file inside: reported
  SymlinkRaw(other.Path("out.py"), dir_ + "/escape.py");  // outside: not reported
  SymlinkRaw("missing.py", dir_ + "/dangling.py");        // dangling: not reported
  SymlinkRaw("sub", dir_ + "/subdir_link");               // directory: not entered
  SymlinkRaw(other.path().string(), dir_ + "/outdir");
  EXPECT_EQ(G("*.py"), (Paths{".hidden/x.py", "a.py", "link.py", "sub/b.py", "sub/nested/c.py"}));
  EXPECT_EQ(G("subdir_link/*.py"), Paths{});
  EXPECT_EQ(G("outdir/*"), Paths{});
  // Searched from a subdirectory, a link to a file of the root outside it is
  // not one of its files (as deepagents' glob: the target must lie beneath
  // the search base); one to a file inside it is.
  SymlinkRaw("../a.py", dir_ + "/sub/up.py");
  SymlinkRaw("b.py", dir_ + "/sub/same.py");
  GlobOptions in_sub;
  in_sub.path = "sub";
  auto r = Glob(*root_, "*.py", in_sub);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->paths, (std::vector<std::string>{dir_ + "/sub/b.py", dir_ + "/sub/nested/c.py",
                                                dir_ + "/sub/same.py"}));
  EXPECT_FALSE(r->unreadable);
}

TEST(GlobMatcherTest, MatchesPaths) {
  auto m = GlobMatcher::Compile("*.py");
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->Matches("a.py"));
  EXPECT_TRUE(m->Matches("x/.y/z.py"));
  EXPECT_FALSE(m->Matches(".a.py"));
  EXPECT_FALSE(m->Matches("a.pyc"));
  auto p = GlobMatcher::Compile("src/**/test_*.cc");
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->Matches("src/test_a.cc"));
  EXPECT_TRUE(p->Matches("src/x/y/test_a.cc"));
  EXPECT_FALSE(p->Matches("src/.x/test_a.cc"));
  EXPECT_FALSE(p->Matches("lib/test_a.cc"));
  EXPECT_FALSE(p->Matches("src/x/atest_a.cc"));
  auto q = GlobMatcher::Compile("*a*b*c");
  ASSERT_TRUE(q);
  EXPECT_TRUE(q->Matches("xxaxxbxxbcxc"));
  EXPECT_FALSE(q->Matches("xxaxxcxxb"));
  auto r = GlobMatcher::Compile("[a-c-]?[!0-9]");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->Matches("-zz"));
  EXPECT_TRUE(
      r->Matches("b\xE2\x82\xAC"
                 "x"));  // € is one character
  EXPECT_FALSE(r->Matches("d1x"));
  EXPECT_FALSE(r->Matches("a19"));
}

// Braces without a partner are literal; a group without a top-level comma is
// literal while the groups inside it still expand.
TEST(GlobMatcherTest, UnmatchedAndLiteralBraces) {
  auto m = [](std::string_view pattern, std::string_view path) {
    auto g = GlobMatcher::Compile(pattern);
    EXPECT_TRUE(g) << pattern;
    return g && g->Matches(path);
  };
  EXPECT_TRUE(m("{{a,b}", "{a"));
  EXPECT_TRUE(m("{{a,b}", "{b"));
  EXPECT_FALSE(m("{{a,b}", "a"));
  EXPECT_TRUE(m("{a,b}}", "b}"));
  EXPECT_TRUE(m("{x{a,b}y}", "{xby}"));
  EXPECT_FALSE(m("{x{a,b}y}", "xby"));
  EXPECT_TRUE(m("{a,{b,c}d}", "cd"));
  EXPECT_TRUE(m("a{,b", "a{,b"));
  EXPECT_TRUE(m("\\{a,b}", "{a,b}"));
  // Thousands of them: literal, and (fuzzing found) no longer one rescan of
  // the pattern and one recursion per brace.
  std::string opens(4000, '{');
  EXPECT_TRUE(m(opens, opens));
  std::string nested = std::string(1000, '{') + "{a,b}" + std::string(1000, '}');
  EXPECT_TRUE(m(nested, std::string(1000, '{') + "b" + std::string(1000, '}')));
}

}  // namespace
}  // namespace deepbox::sandboxd::fs
