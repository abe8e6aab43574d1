// Python repr, path validation, glob matching, permissions, tool argument
// validation.
#include <gtest/gtest.h>

#include "agent/glob_match.h"
#include "agent/paths.h"
#include "agent/permissions.h"
#include "agent/py_repr.h"
#include "agent/text.h"
#include "agent/tool.h"

namespace deepbox::agent {
namespace {

TEST(PyRepr, Strings) {
  EXPECT_EQ(PyRepr("abc"), "'abc'");
  EXPECT_EQ(PyRepr("it's"), "\"it's\"");
  EXPECT_EQ(PyRepr("say \"hi\" it's"), "'say \"hi\" it\\'s'");
  EXPECT_EQ(PyRepr("a\\b\tc\nd\re"), "'a\\\\b\\tc\\nd\\re'");
  EXPECT_EQ(PyRepr(std::string("\x01\x7f", 2)), "'\\x01\\x7f'");
  EXPECT_EQ(PyRepr("café ☕ 日本"), "'café ☕ 日本'");
  EXPECT_EQ(PyRepr("\xc2\xa0"), "'\\xa0'");        // NBSP is not printable
  EXPECT_EQ(PyRepr("\xe2\x80\xa8"), "'\\u2028'");  // line separator
  EXPECT_EQ(PyRepr(""), "''");
}

TEST(PyRepr, ListsAndJson) {
  EXPECT_EQ(PyReprList({}), "[]");
  EXPECT_EQ(PyReprList({"/a", "/b c"}), "['/a', '/b c']");
  auto v = ParseJson(R"([{"content":"Write fib.py","status":"in_progress"},)"
                     R"({"content":"Run it","status":"pending"}])");
  ASSERT_TRUE(v);
  EXPECT_EQ(PyReprJson(*v),
            "[{'content': 'Write fib.py', 'status': 'in_progress'}, {'content': 'Run it', "
            "'status': 'pending'}]");
  auto w = ParseJson(R"({"a":true,"b":null,"c":1,"d":1.5,"e":[]})");
  ASSERT_TRUE(w);
  EXPECT_EQ(PyReprJson(*w), "{'a': True, 'b': None, 'c': 1, 'd': 1.5, 'e': []}");
}

TEST(ValidatePath, TraversalAndNormalization) {
  EXPECT_EQ(*ValidatePath("/a//b/./c/"), "/a/b/c");
  EXPECT_EQ(*ValidatePath("foo/bar"), "/foo/bar");
  EXPECT_EQ(*ValidatePath("/foo..bar.txt"), "/foo..bar.txt");
  auto t = ValidatePath("../etc/passwd");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().message, "Path traversal not allowed: ../etc/passwd");
  EXPECT_EQ(ValidatePath("/workspace/../etc").error().message,
            "Path traversal not allowed: /workspace/../etc");
  EXPECT_EQ(ValidatePath("~/x").error().message, "Path traversal not allowed: ~/x");
  EXPECT_EQ(ValidatePath("a\\..\\b").error().message, "Path traversal not allowed: a\\..\\b");
  EXPECT_EQ(ValidatePath("C:\\Users\\f.txt").error().message,
            "Windows absolute paths are not supported: C:\\Users\\f.txt. Please use virtual "
            "paths starting with / (e.g., /workspace/file.txt)");
}

TEST(ValidatePath, RelativePathsResolveAgainstRoot) {
  EXPECT_EQ(*ResolveToolPath("fib.py", "/workspace"), "/workspace/fib.py");
  EXPECT_EQ(*ResolveToolPath("./src//a.py", "/workspace"), "/workspace/src/a.py");
  EXPECT_EQ(*ResolveToolPath("/workspace/fib.py", "/workspace"), "/workspace/fib.py");
  EXPECT_EQ(*ResolveToolPath("/etc/hosts", "/workspace"), "/etc/hosts");
  EXPECT_FALSE(ResolveToolPath("../x", "/workspace"));
  EXPECT_EQ(SanitizeToolCallId("call.1/2\\3"), "call_1_2_3");
  EXPECT_TRUE(PathIsWithin("/w/a/b", "/w/a"));
  EXPECT_TRUE(PathIsWithin("/w/a", "/w/a/"));
  EXPECT_FALSE(PathIsWithin("/w/ab", "/w/a"));
}

TEST(GlobMatch, DeepagentsSemantics) {
  EXPECT_TRUE(GlobMatch("/secrets/key.pem", "/secrets/**"));
  EXPECT_TRUE(GlobMatch("/secrets/a/b/c", "/secrets/**"));
  EXPECT_TRUE(GlobMatch("/secrets", "/secrets/**"));
  EXPECT_FALSE(GlobMatch("/secretsx/a", "/secrets/**"));
  EXPECT_TRUE(GlobMatch("/w/a.py", "/w/*.py"));
  EXPECT_FALSE(GlobMatch("/w/sub/a.py", "/w/*.py"));
  EXPECT_TRUE(GlobMatch("/w/sub/deep/a.py", "/w/**/*.py"));
  EXPECT_TRUE(GlobMatch("/w/a.py", "/w/**/*.py"));
  EXPECT_FALSE(GlobMatch("/w/.hidden.py", "/w/*.py"));
  EXPECT_TRUE(GlobMatch("/w/.hidden.py", "/w/.*.py"));
  EXPECT_FALSE(GlobMatch("/w/.git/config", "/w/**/config"));
  EXPECT_TRUE(GlobMatch("/w/a.yml", "/w/*.{yml,yaml}"));
  EXPECT_TRUE(GlobMatch("/w/a.yaml", "/w/*.{yml,yaml}"));
  EXPECT_TRUE(GlobMatch("/w/b.py", "/w/[!a].py"));
  EXPECT_TRUE(GlobMatch("/w/b.py", "/w/[^a].py"));
  EXPECT_FALSE(GlobMatch("/w/a.py", "/w/[!a].py"));
  EXPECT_TRUE(GlobMatch("/w/x.py", "/w/?.py"));
  EXPECT_EQ(ExpandBraces("a{b,c{d,e}}f"), (std::vector<std::string>{"abf", "acdf", "acef"}));
  EXPECT_EQ(GlobAnchor("/secrets/**"), "/secrets");
  EXPECT_EQ(GlobAnchor("/a/*/b"), "/a");
  EXPECT_EQ(GlobAnchor("/**/x"), "/");
}

TEST(Permissions, FirstMatchWins) {
  auto p = PermissionSet::Create({
      {{FsOperation::kRead, FsOperation::kWrite}, {"/w/public/**"}, PermissionMode::kAllow},
      {{FsOperation::kWrite}, {"/w/**"}, PermissionMode::kDeny},
      {{FsOperation::kRead}, {"/w/secrets/**"}, PermissionMode::kAsk},
  });
  ASSERT_TRUE(p);
  EXPECT_EQ(p->Check(FsOperation::kWrite, "/w/public/a"), PermissionMode::kAllow);
  EXPECT_EQ(p->Check(FsOperation::kWrite, "/w/a"), PermissionMode::kDeny);
  EXPECT_EQ(p->Check(FsOperation::kRead, "/w/a"), PermissionMode::kAllow);
  EXPECT_EQ(p->Check(FsOperation::kRead, "/w/secrets/k"), PermissionMode::kAsk);
  EXPECT_TRUE(p->SubtreeMayAsk(FsOperation::kRead, "/w"));
  EXPECT_FALSE(p->SubtreeMayAsk(FsOperation::kRead, "/w/public"));
  EXPECT_EQ(PermissionDeniedMessage(FsOperation::kRead, "/w/x"),
            "Error: permission denied for read on /w/x");
}

TEST(Permissions, Validation) {
  EXPECT_EQ(PermissionSet::Create({{{FsOperation::kRead}, {"w/x"}, PermissionMode::kDeny}})
                .error()
                .message,
            "Permission path must start with '/': 'w/x'");
  EXPECT_FALSE(PermissionSet::Create({{{FsOperation::kRead}, {"/w/../x"}, PermissionMode::kDeny}}));
}

TEST(Permissions, RecursiveDelete) {
  auto p = PermissionSet::Create({{{FsOperation::kWrite}, {"/w/keep/**"}, PermissionMode::kDeny},
                                  {{FsOperation::kWrite}, {"/w/*.log"}, PermissionMode::kDeny}});
  ASSERT_TRUE(p);
  // Deleting an ancestor of a protected subtree is blocked.
  EXPECT_EQ(p->DeleteDenyPatterns("/w", true),
            (std::vector<std::string>{"/w/keep/**", "/w/*.log"}));
  // A sibling that cannot contain matches is fine.
  EXPECT_TRUE(p->DeleteDenyPatterns("/w/notes.txt", false).empty());
  EXPECT_EQ(p->DeleteDenyPatterns("/w/app.log", false), (std::vector<std::string>{"/w/*.log"}));
  EXPECT_TRUE(p->DeleteDenyPatterns("/w/other", true).empty());
}

TEST(ToolArgs, PydanticStyleValidation) {
  ToolSpec spec;
  spec.name = "read_file";
  spec.input_schema = SchemaObject({{"file_path", SchemaString("p")},
                                    {"offset", SchemaInteger("o", 0)},
                                    {"flag", SchemaBoolean("f", false)}},
                                   {"file_path"});
  json::object ok;
  ok["file_path"] = "/a";
  ok["offset"] = "5";  // lax: numeric strings are integers
  ok["flag"] = "true";
  EXPECT_FALSE(ValidateToolArgs(spec, ok));
  EXPECT_EQ(ArgOptInt(ok, "offset"), 5);
  json::object bad;
  bad["offset"] = "x";
  auto err = ValidateToolArgs(spec, bad);
  ASSERT_TRUE(err);
  EXPECT_EQ(*err,
            "Error invoking tool 'read_file' with kwargs {'offset': 'x'} with error:\n"
            " file_path: Field required\n offset: Input should be a valid integer\n"
            " Please fix the error and try again.");
}

TEST(ToolArgs, OutOfRangeIntegersAreInvalidNotWrapped) {
  // 2^64-1 used to wrap to -1; an overlong numeric string saturated silently.
  json::object args;
  args["offset"] = json::value(uint64_t{18446744073709551615u});
  EXPECT_FALSE(ArgOptInt(args, "offset"));
  args["offset"] = "99999999999999999999";
  EXPECT_FALSE(ArgOptInt(args, "offset"));
  args["offset"] = 1e300;
  EXPECT_FALSE(ArgOptInt(args, "offset"));
  args["offset"] = " +12 ";
  EXPECT_EQ(ArgOptInt(args, "offset"), 12);
  args["offset"] = "-3";
  EXPECT_EQ(ArgOptInt(args, "offset"), -3);
}

TEST(Text, Helpers) {
  EXPECT_EQ(CodePointCount("é日"), 2u);
  EXPECT_EQ(CodePointPrefix("é日x", 2), "é日");
  EXPECT_EQ(IsoNowUtc().size(), 32u);
}

}  // namespace
}  // namespace deepbox::agent
