// The deepagents sandbox standard tests (langchain-tests SandboxIntegrationTests,
// reference §5) with deepagents 0.7 semantics (write overwrites; glob returns
// absolute file paths), run through deepbox's tools against the real
// deepbox-sandboxd daemon. Each test works in <root>/<test name>, like the
// suite's /tmp/test_sandbox_ops/<test>.
#include <gtest/gtest.h>

#include <set>

#include "agent/format.h"
#include "agent/testing/test_sandbox.h"
#include "agent/testing/tool_runner.h"
#include "agent/text.h"
#include "agent/tools_execute.h"
#include "agent/tools_fs.h"
#include "common/base64.h"
#include "common/strings.h"

namespace deepbox::agent {
namespace {

using testing::Args;
using testing::ToolRunner;

class Conformance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { daemon_ = testing::StartSandbox(&why_).release(); }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override {
    if (!daemon_) GTEST_SKIP() << "real sandbox daemon unavailable: " << why_;
    sb_ = &daemon_->client();
    base_ = sb_->root() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_TRUE(sb_->Mkdir(base_, true));
    auto tools = MakeFilesystemTools();
    tools.push_back(MakeExecuteTool());
    run_ = std::make_unique<ToolRunner>(*sb_, tools);
  }

  std::string P(const std::string& rel) const { return base_ + "/" + rel; }
  void Put(const std::string& rel, const std::string& content) {
    ASSERT_TRUE(sb_->Upload(P(rel), content));
  }
  std::string Get(const std::string& rel) {
    auto d = sb_->Download(P(rel));
    EXPECT_TRUE(d) << rel;
    return d ? *d : "";
  }
  std::string Write(const std::string& path, const std::string& content) {
    return run_->Ok("write_file", Args({{"file_path", path}, {"content", content}}));
  }
  std::string Read(const std::string& path, std::optional<int64_t> offset = std::nullopt,
                   std::optional<int64_t> limit = std::nullopt) {
    auto a = Args({{"file_path", path}});
    if (offset) a["offset"] = *offset;
    if (limit) a["limit"] = *limit;
    return run_->Run("read_file", a).text;
  }
  std::string Glob(const std::string& pattern) {
    return run_->Ok("glob", Args({{"pattern", pattern}, {"path", base_}}));
  }
  std::string List(const std::vector<std::string>& rels) {
    std::vector<std::string> abs;
    for (const auto& r : rels) abs.push_back(P(r));
    return FormatFilePaths(abs);
  }

  static deepbox::testing::ScopedSandboxd* daemon_;
  static std::string why_;
  Sandbox* sb_ = nullptr;
  std::string base_;
  std::unique_ptr<ToolRunner> run_;
};

deepbox::testing::ScopedSandboxd* Conformance::daemon_ = nullptr;
std::string Conformance::why_;

// ------------------------------------------------------------------ write

TEST_F(Conformance, write_new_file) {
  EXPECT_EQ(Write(P("new.txt"), "hello"), "Updated file " + P("new.txt"));
  EXPECT_EQ(Get("new.txt"), "hello");
}

TEST_F(Conformance, write_creates_parent_dirs) {
  Write(P("a/b/c/file.txt"), "deep");
  EXPECT_EQ(Get("a/b/c/file.txt"), "deep");
}

TEST_F(Conformance, write_existing_file_overwrites) {
  Write(P("f.txt"), "one");
  EXPECT_EQ(Write(P("f.txt"), "two"), "Updated file " + P("f.txt"));
  EXPECT_EQ(Get("f.txt"), "two");
}

TEST_F(Conformance, write_special_characters) {
  std::string s = "quotes ' \" backtick ` dollar $HOME $(whoami) backslash \\ percent %s\n";
  Write(P("special.txt"), s);
  EXPECT_EQ(Get("special.txt"), s);
}

TEST_F(Conformance, write_empty_file) {
  Write(P("empty.txt"), "");
  EXPECT_EQ(Get("empty.txt"), "");
  EXPECT_EQ(Read(P("empty.txt")), "@@ lines 1-1 @@\n" + std::string(kEmptyContentWarning));
}

TEST_F(Conformance, write_path_with_spaces) {
  Write(P("dir with spaces/file name.txt"), "x");
  EXPECT_EQ(Get("dir with spaces/file name.txt"), "x");
}

TEST_F(Conformance, write_unicode_content) {
  std::string s = "Hello 世界 🌍 café naïve\n";
  Write(P("u.txt"), s);
  EXPECT_EQ(Get("u.txt"), s);
}

TEST_F(Conformance, write_consecutive_slashes_in_path) {
  EXPECT_EQ(Write(base_ + "//sub///file.txt", "x"), "Updated file " + P("sub/file.txt"));
  EXPECT_EQ(Get("sub/file.txt"), "x");
}

TEST_F(Conformance, write_very_long_content) {
  std::string s;
  for (int i = 0; i < 20000; ++i) s += "line " + std::to_string(i) + "\n";
  Write(P("long.txt"), s);
  EXPECT_EQ(Get("long.txt"), s);
}

TEST_F(Conformance, write_content_with_only_newlines) {
  Write(P("nl.txt"), "\n\n\n\n\n");
  std::string out = run_->Ok("execute", Args({{"command", "wc -l < '" + P("nl.txt") + "'"}}));
  EXPECT_EQ(out, "5\n\n[Command succeeded with exit code 0]");
}

// ------------------------------------------------------------------ read

TEST_F(Conformance, read_basic_file) {
  Put("r.txt", "line1\nline2\nline3");
  EXPECT_EQ(Read(P("r.txt")), "@@ lines 1-3 of 3 @@\nline1\nline2\nline3");
}

TEST_F(Conformance, read_binary_file) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  Put("bin.png", bytes);
  auto r = run_->Run("read_file", Args({{"file_path", P("bin.png")}}));
  ASSERT_FALSE(r.is_error) << r.text;
  ASSERT_EQ(r.images.size(), 1u);
  EXPECT_EQ(r.images[0].media_type, "image/png");
  EXPECT_EQ(Base64Decode(r.images[0].base64_data), bytes);
}

TEST_F(Conformance, read_binary_without_image_extension) {
  std::string bytes("\x00\x01\x02\xff\xfe", 5);
  Put("blob.bin", bytes);
  auto r = run_->Run("read_file", Args({{"file_path", P("blob.bin")}}));
  EXPECT_FALSE(r.is_error);
  EXPECT_TRUE(r.text.starts_with("Binary file '" + P("blob.bin") + "' (5 bytes"));
}

TEST_F(Conformance, read_binary_too_large) {
  Put("big.png", std::string(600 * 1024, 'x'));
  EXPECT_EQ(run_->Err("read_file", Args({{"file_path", P("big.png")}})),
            "Error: File '" + P("big.png") +
                "': Binary file exceeds maximum preview size of 512000 bytes");
}

TEST_F(Conformance, read_nonexistent_file) {
  EXPECT_EQ(run_->Err("read_file", Args({{"file_path", P("nope.txt")}})),
            "Error: File '" + P("nope.txt") + "': file_not_found");
}

TEST_F(Conformance, read_directory_path) {
  ASSERT_TRUE(sb_->Mkdir(P("d"), true));
  EXPECT_EQ(run_->Err("read_file", Args({{"file_path", P("d")}})),
            "Error: File '" + P("d") + "': not_a_file");
}

TEST_F(Conformance, read_empty_file) {
  Put("e.txt", "");
  // deepagents 0.7.32 shows its reminder as a one-line window.
  EXPECT_EQ(Read(P("e.txt")),
            "@@ lines 1-1 @@\nSystem reminder: File exists but has empty contents");
}

TEST_F(Conformance, read_with_offset) {
  Put("o.txt", "line1\nline2\nline3\nline4\nline5\n");
  EXPECT_EQ(Read(P("o.txt"), 2), "@@ lines 3-5 of 5 @@\nline3\nline4\nline5");
}

TEST_F(Conformance, read_with_limit) {
  Put("l.txt", "line1\nline2\nline3\nline4\nline5\n");
  EXPECT_EQ(Read(P("l.txt"), std::nullopt, 2),
            "@@ lines 1-2 of 5 | next offset 2 @@\nline1\nline2");
}

TEST_F(Conformance, read_with_offset_and_limit) {
  Put("ol.txt", "line1\nline2\nline3\nline4\nline5");
  EXPECT_EQ(Read(P("ol.txt"), 1, 2), "@@ lines 2-3 of 5 | next offset 3 @@\nline2\nline3");
}

TEST_F(Conformance, read_unicode_content) {
  Put("u.txt", "héllo\n世界\n🌍\n");
  EXPECT_EQ(Read(P("u.txt")), "@@ lines 1-3 of 3 @@\nhéllo\n世界\n🌍");
}

TEST_F(Conformance, read_file_with_very_long_lines) {
  Put("long.txt", "short\n" + std::string(12000, 'x') + "\nend\n");
  // Lines are verbatim (no line-number gutter, no continuation rows).
  EXPECT_EQ(Read(P("long.txt")),
            "@@ lines 1-3 of 3 @@\nshort\n" + std::string(12000, 'x') + "\nend");
}

TEST_F(Conformance, read_with_zero_limit) {
  Put("z.txt", "a\nb\n");
  EXPECT_EQ(Read(P("z.txt"), std::nullopt, 0), NoLinesRequestedWarning(0));
  // The empty-file reminder wins over the zero-limit one.
  Put("z0.txt", "");
  EXPECT_EQ(Read(P("z0.txt"), std::nullopt, 0),
            "@@ lines 1-1 @@\n" + std::string(kEmptyContentWarning));
}

TEST_F(Conformance, read_offset_beyond_file_length) {
  Put("s.txt", "a\nb\nc\n");
  EXPECT_EQ(run_->Err("read_file", Args({{"file_path", P("s.txt")}, {"offset", 10}})),
            "Error: File '" + P("s.txt") + "': Line offset 10 exceeds file length (3 lines)");
}

TEST_F(Conformance, read_offset_at_exact_file_length) {
  Put("s.txt", "a\nb\nc");
  EXPECT_EQ(run_->Err("read_file", Args({{"file_path", P("s.txt")}, {"offset", 3}})),
            "Error: File '" + P("s.txt") + "': Line offset 3 exceeds file length (3 lines)");
}

TEST_F(Conformance, read_negative_offset_is_clamped) {
  Put("n.txt", "a\nb\n");
  EXPECT_EQ(Read(P("n.txt"), -1),
            "[Requested offset -1 is before the start of the file; read from line 1 instead.]\n"
            "@@ lines 1-2 of 2 @@\na\nb");
}

TEST_F(Conformance, read_empty_line_window) {
  Put("blank.txt", "x\n\ny\n");
  // A blank window of a file with content elsewhere shows its (blank) row.
  EXPECT_EQ(Read(P("blank.txt"), 1, 1), "@@ lines 2-2 of 3 | next offset 2 @@\n");
  // Only when the blank window is the whole file is it an empty file.
  Put("blank2.txt", "\n \n\t\n");
  EXPECT_EQ(Read(P("blank2.txt")), kEmptyContentWarning);
  Put("crlf.txt", "a\r\nb\r\n");
  EXPECT_EQ(Read(P("crlf.txt")), "@@ lines 1-2 of 2 @@\na\nb");
}

TEST_F(Conformance, read_very_large_file_in_chunks) {
  std::string s;
  for (int i = 1; i <= 2500; ++i) s += "line " + std::to_string(i) + "\n";
  Put("big.txt", s);
  for (int page = 0; page < 25; ++page) {
    std::string out = Read(P("big.txt"), page * 100, 100);
    auto rows = Split(out, '\n');
    int first = page * 100 + 1;
    int last = first + 99;
    std::string header = "@@ lines " + std::to_string(first) + "-" + std::to_string(last) +
                         " of 2500" + (page == 24 ? "" : " | next offset " + std::to_string(last)) +
                         " @@";
    ASSERT_EQ(rows.size(), 101u);
    EXPECT_EQ(rows[0], header);
    EXPECT_EQ(rows[1], "line " + std::to_string(first));
    EXPECT_EQ(rows[100], "line " + std::to_string(last)) << "page " << page;
  }
}

TEST_F(Conformance, read_large_file_budget) {
  std::string s;
  for (int i = 0; i < 300; ++i) s += std::string(999, 'a' + i % 26) + "\n";
  Put("wide.txt", s);
  std::string out = Read(P("wide.txt"), 0, 300);
  EXPECT_LE(CodePointCount(out), 80000u);
  EXPECT_NE(out.find("[Output was truncated due to size limits. The file content is very large."),
            std::string::npos);
  EXPECT_NE(out.find(" | truncated due to size @@"), std::string::npos);
}

TEST_F(Conformance, read_path_is_sanitized) {
  EXPECT_EQ(run_->Err("read_file", Args({{"file_path", "../etc/passwd"}})),
            "Error: Path traversal not allowed: ../etc/passwd");
  EXPECT_EQ(run_->Err("read_file", Args({{"file_path", "~/.ssh/id_rsa"}})),
            "Error: Path traversal not allowed: ~/.ssh/id_rsa");
  // Shell metacharacters are just file-name characters.
  std::string evil = P("x'; touch pwned; echo '");
  EXPECT_EQ(run_->Err("read_file", Args({{"file_path", evil}})),
            "Error: File '" + evil + "': file_not_found");
  EXPECT_FALSE(sb_->Stat(P("pwned")));
}

// ------------------------------------------------------------------ edit

TEST_F(Conformance, edit_single_occurrence) {
  Put("e.txt", "hello world\n");
  EXPECT_EQ(
      run_->Ok("edit_file",
               Args({{"file_path", P("e.txt")}, {"old_string", "world"}, {"new_string", "there"}})),
      "Successfully replaced 1 instance(s) of the string in '" + P("e.txt") + "'");
  EXPECT_EQ(Get("e.txt"), "hello there\n");
}

TEST_F(Conformance, edit_multiple_occurrences_without_replace_all) {
  Put("m.txt", "x x x");
  EXPECT_EQ(run_->Err("edit_file",
                      Args({{"file_path", P("m.txt")}, {"old_string", "x"}, {"new_string", "y"}})),
            "Error: String 'x' appears multiple times. Use replace_all=True to replace all "
            "occurrences.");
  EXPECT_EQ(Get("m.txt"), "x x x");
}

TEST_F(Conformance, edit_multiple_occurrences_with_replace_all) {
  Put("m.txt", "x x x");
  EXPECT_EQ(run_->Ok("edit_file", Args({{"file_path", P("m.txt")},
                                        {"old_string", "x"},
                                        {"new_string", "y"},
                                        {"replace_all", true}})),
            "Successfully replaced 3 instance(s) of the string in '" + P("m.txt") + "'");
  EXPECT_EQ(Get("m.txt"), "y y y");
}

TEST_F(Conformance, edit_string_not_found) {
  Put("n.txt", "abc");
  EXPECT_EQ(
      run_->Err("edit_file",
                Args({{"file_path", P("n.txt")}, {"old_string", "zzz"}, {"new_string", "y"}})),
      "Error: String not found in file: 'zzz'");
}

TEST_F(Conformance, edit_nonexistent_file) {
  EXPECT_EQ(
      run_->Err("edit_file",
                Args({{"file_path", P("missing.txt")}, {"old_string", "a"}, {"new_string", "b"}})),
      "Error: File '" + P("missing.txt") + "' not found");
}

TEST_F(Conformance, edit_special_characters) {
  Put("s.txt", "price: $100.00 pattern: [a-z]* end");
  run_->Ok("edit_file",
           Args({{"file_path", P("s.txt")}, {"old_string", "$100.00"}, {"new_string", "$200.00"}}));
  run_->Ok("edit_file",
           Args({{"file_path", P("s.txt")}, {"old_string", "[a-z]*"}, {"new_string", "[0-9]+"}}));
  EXPECT_EQ(Get("s.txt"), "price: $200.00 pattern: [0-9]+ end");
}

TEST_F(Conformance, edit_multiline_support) {
  Put("ml.txt", "def f():\n    return 1\n\nprint(f())\n");
  run_->Ok("edit_file", Args({{"file_path", P("ml.txt")},
                              {"old_string", "def f():\n    return 1\n"},
                              {"new_string", "def f():\n    return 2\n"}}));
  EXPECT_EQ(Get("ml.txt"), "def f():\n    return 2\n\nprint(f())\n");
}

TEST_F(Conformance, edit_crlf_file_with_lf_strings) {
  Put("c.txt", "a\r\nb\r\nc\r\n");
  run_->Ok("edit_file",
           Args({{"file_path", P("c.txt")}, {"old_string", "a\nb\n"}, {"new_string", "A\nB\n"}}));
  EXPECT_EQ(Get("c.txt"), "A\r\nB\r\nc\r\n");
}

TEST_F(Conformance, edit_directory_and_binary) {
  ASSERT_TRUE(sb_->Mkdir(P("dir"), true));
  EXPECT_EQ(run_->Err("edit_file",
                      Args({{"file_path", P("dir")}, {"old_string", "a"}, {"new_string", "b"}})),
            "Error: '" + P("dir") + "' is not a regular file");
  Put("b.bin", std::string("a\x00\xff", 3));
  EXPECT_EQ(run_->Err("edit_file",
                      Args({{"file_path", P("b.bin")}, {"old_string", "a"}, {"new_string", "b"}})),
            "Error: File '" + P("b.bin") + "' is not a text file");
}

// ------------------------------------------------------------------ ls

TEST_F(Conformance, ls_lists_files) {
  Put("b.txt", "b");
  Put("a.txt", "a");
  EXPECT_EQ(run_->Ok("ls", Args({{"path", base_}})), List({"a.txt", "b.txt"}));
}

TEST_F(Conformance, ls_lists_nested_directories) {
  Put("top.txt", "t");
  Put("sub/inner.txt", "i");
  EXPECT_EQ(run_->Ok("ls", Args({{"path", base_}})), List({"sub", "top.txt"}));
  EXPECT_EQ(run_->Ok("ls", Args({{"path", P("sub")}})), List({"sub/inner.txt"}));
}

TEST_F(Conformance, ls_unicode_filenames) {
  Put("日本.txt", "x");
  Put("café.md", "x");
  std::string out = run_->Ok("ls", Args({{"path", base_}}));
  EXPECT_NE(out.find("'" + P("日本.txt") + "'"), std::string::npos);
  EXPECT_NE(out.find("'" + P("café.md") + "'"), std::string::npos);
}

TEST_F(Conformance, ls_large_directory) {
  for (int i = 0; i < 50; ++i) Put("f" + std::to_string(100 + i) + ".txt", "x");
  std::string out = run_->Ok("ls", Args({{"path", base_}}));
  size_t n = 0;
  for (size_t pos = 0; (pos = out.find(".txt'", pos)) != std::string::npos; ++pos) ++n;
  EXPECT_EQ(n, 50u);
}

TEST_F(Conformance, ls_path_with_trailing_slash) {
  Put("a.txt", "a");
  EXPECT_EQ(run_->Ok("ls", Args({{"path", base_ + "/"}})), List({"a.txt"}));
}

TEST_F(Conformance, ls_special_characters_in_filenames) {
  Put("file with spaces.txt", "x");
  Put("it's.txt", "x");
  EXPECT_EQ(run_->Ok("ls", Args({{"path", base_}})),
            "['" + P("file with spaces.txt") + "', \"" + P("it's.txt") + "\"]");
}

TEST_F(Conformance, ls_path_is_sanitized) {
  EXPECT_EQ(run_->Err("ls", Args({{"path", base_ + "/../.."}})),
            "Error: Path traversal not allowed: " + base_ + "/../..");
}

TEST_F(Conformance, ls_nonexistent_and_empty) {
  EXPECT_EQ(run_->Err("ls", Args({{"path", P("nope")}})),
            "Error: Path '" + P("nope") + "': path_not_found");
  ASSERT_TRUE(sb_->Mkdir(P("empty"), true));
  EXPECT_EQ(run_->Ok("ls", Args({{"path", P("empty")}})), "No files found");
  Put("file.txt", "x");
  EXPECT_EQ(run_->Err("ls", Args({{"path", P("file.txt")}})),
            "Error: Path '" + P("file.txt") + "': not_a_directory");
}

// ------------------------------------------------------------------ grep

std::string GrepContent(ToolRunner& r, const std::string& pattern, const std::string& path,
                        const std::string& glob = "") {
  auto a = Args({{"pattern", pattern}, {"path", path}, {"output_mode", "content"}});
  if (!glob.empty()) a["glob"] = glob;
  return r.Ok("grep", a);
}

TEST_F(Conformance, grep_literal) {
  Put("t.py", "def f(x: str | int):\n    pass\nstr or int\n");
  EXPECT_EQ(GrepContent(*run_, "str | int", base_), P("t.py") + ":\n  1: def f(x: str | int):");
}

TEST_F(Conformance, grep_basic_search) {
  Put("a.txt", "needle here\n");
  Put("b.txt", "nothing\n");
  Put("c.txt", "another needle\n");
  EXPECT_EQ(run_->Ok("grep", Args({{"pattern", "needle"}, {"path", base_}})),
            P("a.txt") + "\n" + P("c.txt"));
}

TEST_F(Conformance, grep_with_glob_pattern) {
  Put("code.py", "import os\n");
  Put("notes.txt", "import os\n");
  EXPECT_EQ(GrepContent(*run_, "import", base_, "*.py"), P("code.py") + ":\n  1: import os");
}

TEST_F(Conformance, grep_no_matches) {
  Put("a.txt", "hello\n");
  EXPECT_EQ(run_->Ok("grep", Args({{"pattern", "absent"}, {"path", base_}})), "No matches found");
}

TEST_F(Conformance, grep_multiple_matches_per_file) {
  Put("m.txt", "hit\nmiss\nhit\nmiss\nhit\n");
  EXPECT_EQ(GrepContent(*run_, "hit", base_), P("m.txt") + ":\n  1: hit\n  3: hit\n  5: hit");
  EXPECT_EQ(run_->Ok("grep", Args({{"pattern", "hit"}, {"path", base_}, {"output_mode", "count"}})),
            P("m.txt") + ": 3");
}

TEST_F(Conformance, grep_literal_string_matching) {
  Put("l.txt", "axb\na.b\n");
  EXPECT_EQ(GrepContent(*run_, "a.b", base_), P("l.txt") + ":\n  2: a.b");
  EXPECT_EQ(run_->Ok("grep", Args({{"pattern", "x|y"}, {"path", base_}})),
            "No matches found\n\n" + std::string(kRegexLiteralHint));
}

TEST_F(Conformance, grep_unicode_pattern) {
  Put("u.txt", "hello 世界\nbye\n");
  EXPECT_EQ(GrepContent(*run_, "世界", base_), P("u.txt") + ":\n  1: hello 世界");
}

TEST_F(Conformance, grep_case_sensitivity) {
  Put("c.txt", "Hello\nhello\n");
  EXPECT_EQ(GrepContent(*run_, "Hello", base_), P("c.txt") + ":\n  1: Hello");
}

TEST_F(Conformance, grep_with_special_characters) {
  Put("s.txt", "cost $var\n[x] (a) {b} ^c$ \\d\n");
  EXPECT_EQ(GrepContent(*run_, "$var", base_), P("s.txt") + ":\n  1: cost $var");
  EXPECT_EQ(GrepContent(*run_, "[x] (a)", base_), P("s.txt") + ":\n  2: [x] (a) {b} ^c$ \\d");
}

TEST_F(Conformance, grep_empty_directory) {
  ASSERT_TRUE(sb_->Mkdir(P("empty"), true));
  EXPECT_EQ(run_->Ok("grep", Args({{"pattern", "x"}, {"path", P("empty")}})), "No matches found");
}

TEST_F(Conformance, grep_across_nested_directories) {
  Put("a/one.txt", "target\n");
  Put("a/b/two.txt", "target\n");
  Put("a/b/c/three.txt", "target\n");
  EXPECT_EQ(run_->Ok("grep", Args({{"pattern", "target"}, {"path", base_}})),
            P("a/b/c/three.txt") + "\n" + P("a/b/two.txt") + "\n" + P("a/one.txt"));
}

TEST_F(Conformance, grep_with_globstar_include_pattern) {
  Put("src/app/main.py", "TODO\n");
  Put("src/util.py", "TODO\n");
  Put("docs/readme.md", "TODO\n");
  EXPECT_EQ(run_->Ok("grep", Args({{"pattern", "TODO"}, {"path", base_}, {"glob", "src/**/*.py"}})),
            P("src/app/main.py") + "\n" + P("src/util.py"));
}

TEST_F(Conformance, grep_reports_correct_line_numbers) {
  std::string s;
  for (int i = 1; i <= 100; ++i) s += (i == 42 || i == 99 ? "match\n" : "other\n");
  Put("n.txt", s);
  EXPECT_EQ(GrepContent(*run_, "match", base_), P("n.txt") + ":\n  42: match\n  99: match");
}

TEST_F(Conformance, grep_max_count_truncates) {
  Put("many.txt", "x\nx\nx\nx\nx\n");
  EXPECT_EQ(
      run_->Ok(
          "grep",
          Args({{"pattern", "x"}, {"path", base_}, {"output_mode", "content"}, {"max_count", 2}})),
      P("many.txt") + ":\n  1: x\n  2: x\n\n" + std::string(kGrepTruncationNote));
  // Exactly at the cap is complete.
  EXPECT_EQ(run_->Ok("grep", Args({{"pattern", "x"}, {"path", base_}, {"max_count", 5}})),
            P("many.txt"));
  EXPECT_TRUE((run_->Err("grep", Args({{"pattern", "x"}, {"path", base_}, {"max_count", 0}})))
                  .starts_with("Error invoking tool 'grep'"));
}

// ------------------------------------------------------------------ glob

TEST_F(Conformance, glob_basic_pattern) {
  Put("a.txt", "");
  Put("b.txt", "");
  Put("c.md", "");
  EXPECT_EQ(Glob("*.txt"), List({"a.txt", "b.txt"}));
}

TEST_F(Conformance, glob_recursive_pattern) {
  Put("top.txt", "");
  Put("d/mid.txt", "");
  Put("d/e/low.txt", "");
  EXPECT_EQ(Glob("**/*.txt"), List({"d/e/low.txt", "d/mid.txt", "top.txt"}));
}

TEST_F(Conformance, glob_no_matches) {
  Put("a.txt", "");
  EXPECT_EQ(Glob("*.xyz"), "No files found");
}

TEST_F(Conformance, glob_with_directories) {
  Put("dir1/f.txt", "");
  ASSERT_TRUE(sb_->Mkdir(P("dir2"), true));
  EXPECT_EQ(Glob("*"), List({"dir1/f.txt"}));  // files only
}

TEST_F(Conformance, glob_hidden_files_explicitly) {
  Put(".hidden", "");
  Put("visible", "");
  EXPECT_EQ(Glob(".*"), List({".hidden"}));
  EXPECT_EQ(Glob("*"), List({"visible"}));
}

TEST_F(Conformance, glob_with_character_class) {
  Put("a.txt", "");
  Put("b.txt", "");
  Put("c.txt", "");
  EXPECT_EQ(Glob("[ab].txt"), List({"a.txt", "b.txt"}));
}

TEST_F(Conformance, glob_with_question_mark) {
  Put("f1.txt", "");
  Put("f2.txt", "");
  Put("f10.txt", "");
  EXPECT_EQ(Glob("f?.txt"), List({"f1.txt", "f2.txt"}));
}

// deepagents tests/unit_tests/backends/test_glob_semantics.py
TEST_F(Conformance, glob_semantics_matrix) {
  for (const char* f : {"a.py", "sub/b.py", "sub/nested/c.py", "readme.md", ".hidden.py",
                        ".hidden/x.py", ".github/workflows/ci.yml"}) {
    Put(f, "");
  }
  EXPECT_EQ(Glob("*.py"), List({".hidden/x.py", "a.py", "sub/b.py", "sub/nested/c.py"}));
  EXPECT_EQ(Glob("**/*.py"), List({"a.py", "sub/b.py", "sub/nested/c.py"}));
  EXPECT_EQ(Glob("sub/**/*.py"), List({"sub/b.py", "sub/nested/c.py"}));
  EXPECT_EQ(Glob("/*.py"), List({"a.py"}));
  EXPECT_EQ(Glob("a.py/**"), "No files found");
  EXPECT_EQ(Glob("*.yml"), List({".github/workflows/ci.yml"}));
  EXPECT_EQ(Glob("**/*.yml"), "No files found");
  EXPECT_EQ(Glob(".*.py"), List({".hidden.py"}));
  EXPECT_EQ(Glob("*"), List({".github/workflows/ci.yml", ".hidden/x.py", "a.py", "readme.md",
                             "sub/b.py", "sub/nested/c.py"}));
  EXPECT_EQ(Glob("?.py"), Glob("*.py"));
  EXPECT_EQ(Glob("[^a].py"), Glob("[!a].py"));
}

// ------------------------------------------------------------------ transfer

TEST_F(Conformance, transfer_upload_download_roundtrip) {
  std::string data("text\n\t\r\x00 end", 13);
  ASSERT_TRUE(sb_->Upload(P("t.bin"), data));
  EXPECT_EQ(Get("t.bin"), data);
}

TEST_F(Conformance, transfer_binary_content_roundtrip) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(255 - i));
  ASSERT_TRUE(sb_->Upload(P("b.bin"), bytes));
  EXPECT_EQ(Get("b.bin"), bytes);
}

TEST_F(Conformance, transfer_large_file_reports_expected_size) {
  std::string big(10 * 1024 * 1024, 'L');
  ASSERT_TRUE(sb_->Upload(P("large.bin"), big));
  auto st = sb_->Stat(P("large.bin"));
  ASSERT_TRUE(st);
  EXPECT_EQ(st->size, static_cast<int64_t>(big.size()));
  EXPECT_EQ(Get("large.bin").size(), big.size());
}

TEST_F(Conformance, transfer_download_errors) {
  auto missing = sb_->Download(P("missing"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  ASSERT_TRUE(sb_->Mkdir(P("dir"), true));
  auto dir = sb_->Download(P("dir"));
  ASSERT_FALSE(dir);
  EXPECT_TRUE(dir.error().code == ErrorCode::kIsDirectory ||
              dir.error().code == ErrorCode::kInvalidArgument)
      << dir.error().ToString();
  auto outside = sb_->Download("/etc/passwd");
  ASSERT_FALSE(outside);
  EXPECT_EQ(outside.error().code, ErrorCode::kPermissionDenied);
}

TEST_F(Conformance, transfer_upload_missing_parent_dir) {
  ASSERT_TRUE(sb_->Upload(P("new/parent/f.txt"), "x"));
  EXPECT_EQ(Get("new/parent/f.txt"), "x");
}

}  // namespace
}  // namespace deepbox::agent
