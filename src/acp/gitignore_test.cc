#include "acp/gitignore.h"

#include <gtest/gtest.h>

namespace deepbox::acp {
namespace {

TEST(IgnoreRulesTest, GitSemantics) {
  IgnoreRules r;
  r.AddFile("",
            "# comment\n\n*.log\n/build/\nnode_modules\ndocs/*.tmp\n!keep.log\n\\#hash\n"
            "secret.txt   \n**/gen/**\n");
  EXPECT_TRUE(r.Ignored("a.log", false));
  EXPECT_TRUE(r.Ignored("src/deep/b.log", false));
  EXPECT_FALSE(r.Ignored("keep.log", false));      // re-included
  EXPECT_TRUE(r.Ignored("build", true));           // anchored, directory
  EXPECT_FALSE(r.Ignored("src/build", true));      // anchored to the root
  EXPECT_FALSE(r.Ignored("build", false));         // a file named build: dir-only rule
  EXPECT_TRUE(r.Ignored("x/node_modules", true));  // any depth
  EXPECT_TRUE(r.Ignored("docs/a.tmp", false));
  EXPECT_FALSE(r.Ignored("docs/sub/a.tmp", false));  // * stays in one segment
  EXPECT_TRUE(r.Ignored("#hash", false));
  EXPECT_TRUE(r.Ignored("secret.txt", false));  // trailing spaces dropped
  EXPECT_TRUE(r.Ignored("a/gen/b/c.py", false));
  EXPECT_FALSE(r.Ignored("main.py", false));
}

TEST(IgnoreRulesTest, NestedFilesApplyBeneathTheirDirectoryAndWin) {
  IgnoreRules r;
  r.AddFile("", "*.txt\n");
  r.AddFile("sub", "!important.txt\n/local.py\n");
  EXPECT_TRUE(r.Ignored("a.txt", false));
  EXPECT_TRUE(r.Ignored("sub/a.txt", false));
  EXPECT_FALSE(r.Ignored("sub/important.txt", false));
  EXPECT_TRUE(r.Ignored("important.txt", false));  // the nested rule is sub's only
  EXPECT_TRUE(r.Ignored("sub/local.py", false));
  EXPECT_FALSE(r.Ignored("local.py", false));
  EXPECT_FALSE(r.Ignored("sub/x/local.py", false));
}

}  // namespace
}  // namespace deepbox::acp
