#include "sandboxd/fs/grep.h"

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "fs/testing/test_util.h"

extern char** environ;

namespace deepbox::sandboxd::fs {
namespace {

using deepbox::fs::Root;
using deepbox::fs::testing::Cat;
using deepbox::fs::testing::MakeDirRaw;
using deepbox::fs::testing::SymlinkRaw;
using deepbox::fs::testing::TempDir;
using deepbox::fs::testing::WriteRaw;

// (path relative to the root, line number, text)
using Hit = std::tuple<std::string, uint64_t, std::string>;

class GrepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.Path("root");
    MakeDirRaw(dir_);
  }
  void OpenRoot() {
    auto root = Root::Open(dir_);
    ASSERT_TRUE(root);
    root_.emplace(std::move(*root));
  }
  std::string Rel(const std::string& abs) const {
    EXPECT_EQ(abs.rfind(dir_ + "/", 0), 0u) << abs;
    return abs.substr(dir_.size() + 1);
  }
  std::vector<Hit> Content(std::string_view pattern, GrepOptions options = {}) {
    auto r = Grep(*root_, pattern, options);
    EXPECT_TRUE(r) << r.error().ToString();
    std::vector<Hit> out;
    if (!r) return out;
    for (const auto& m : r->matches) out.emplace_back(Rel(m.path), m.line_number, m.line);
    return out;
  }

  TempDir tmp_;
  std::string dir_;
  std::optional<Root> root_;
};

TEST_F(GrepTest, LiteralContent) {
  WriteRaw(dir_ + "/b.txt", "one needle\ntwo\nthree needle needle\r\n");
  WriteRaw(dir_ + "/a.txt", "needle first\nno\n\nlast needle");
  WriteRaw(dir_ + "/.hidden/c.txt", "hidden needle\n");
  WriteRaw(dir_ + "/sub/d.md", "nothing here\n");
  WriteRaw(dir_ + "/empty.txt", "");
  OpenRoot();
  EXPECT_EQ(Content("needle"), (std::vector<Hit>{{".hidden/c.txt", 1, "hidden needle"},
                                                 {"a.txt", 1, "needle first"},
                                                 {"a.txt", 4, "last needle"},
                                                 {"b.txt", 1, "one needle"},
                                                 {"b.txt", 3, "three needle needle"}}));
  EXPECT_EQ(Content("absent"), std::vector<Hit>{});
  // Regex metacharacters are literal unless regex is asked for.
  WriteRaw(dir_ + "/re.txt", "a.b(c\naxb(c\n");
  EXPECT_EQ(Content("a.b(c"), (std::vector<Hit>{{"re.txt", 1, "a.b(c"}}));
  auto r = Grep(*root_, "needle");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->files_searched, 6u);  // empty files count too
  EXPECT_FALSE(r->truncated);
}

TEST_F(GrepTest, OutputModes) {
  WriteRaw(dir_ + "/a.txt", "x\nx\ny\n");
  WriteRaw(dir_ + "/b/c.txt", "y\nx\n");
  WriteRaw(dir_ + "/d.txt", "none\n");
  OpenRoot();
  GrepOptions files;
  files.output_mode = GrepOutputMode::kFilesWithMatches;
  auto f = Grep(*root_, "x", files);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->files, (std::vector<std::string>{dir_ + "/a.txt", dir_ + "/b/c.txt"}));
  EXPECT_TRUE(f->matches.empty());
  GrepOptions count;
  count.output_mode = GrepOutputMode::kCount;
  auto c = Grep(*root_, "x", count);
  ASSERT_TRUE(c);
  ASSERT_EQ(c->counts.size(), 2u);
  EXPECT_EQ(c->counts[0].path, dir_ + "/a.txt");
  EXPECT_EQ(c->counts[0].count, 2u);
  EXPECT_EQ(c->counts[1].count, 1u);
}

TEST_F(GrepTest, RegexAndCase) {
  WriteRaw(dir_ + "/a.txt", "Foo bar\nfoo  baz\nfoo\nbar\nÉcole école\n");
  OpenRoot();
  GrepOptions re;
  re.regex = true;
  EXPECT_EQ(Content("^foo\\s+ba[rz]$", re), (std::vector<Hit>{{"a.txt", 2, "foo  baz"}}));
  // \s never crosses a line: "foo\nbar" is no match.
  EXPECT_EQ(Content("foo\\sbar", re), std::vector<Hit>{});
  EXPECT_EQ(Content("o$", re), (std::vector<Hit>{{"a.txt", 3, "foo"}}));
  re.case_insensitive = true;
  EXPECT_EQ(
      Content("^FOO", re),
      (std::vector<Hit>{{"a.txt", 1, "Foo bar"}, {"a.txt", 2, "foo  baz"}, {"a.txt", 3, "foo"}}));
  GrepOptions ci;
  ci.case_insensitive = true;
  EXPECT_EQ(Content("ÉCOLE", ci), (std::vector<Hit>{{"a.txt", 5, "École école"}}));
  EXPECT_EQ(Content("f.o", ci), std::vector<Hit>{});  // literal, case-insensitive
  auto bad = Grep(*root_, "(unclosed", re);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  auto nl = Grep(*root_, "a\nb");
  ASSERT_FALSE(nl);
  EXPECT_EQ(nl.error().code, ErrorCode::kInvalidArgument);
  // The empty pattern matches every line, like grep ''.
  EXPECT_EQ(Content("").size(), 5u);
}

TEST_F(GrepTest, BinaryFilesAreSkipped) {
  WriteRaw(dir_ + "/bin.dat", std::string("needle\0needle\n", 14));
  std::string late(9000, 'a');
  late += "\nneedle\n";
  late += '\0';
  WriteRaw(dir_ + "/late.txt", late);  // NUL after the first 8 KiB: text
  OpenRoot();
  auto r = Grep(*root_, "needle");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->matches.size(), 1u);
  EXPECT_EQ(Rel(r->matches[0].path), "late.txt");
  EXPECT_EQ(r->matches[0].line_number, 2u);
  EXPECT_EQ(r->binary_files_skipped, 1u);
}

TEST_F(GrepTest, SymlinksAreNotFollowedDuringTheWalk) {
  TempDir other;
  WriteRaw(other.Path("secret.txt"), "needle outside\n");
  WriteRaw(dir_ + "/real/f.txt", "needle inside\n");
  SymlinkRaw(other.path().string(), dir_ + "/outdir");
  SymlinkRaw(other.Path("secret.txt"), dir_ + "/outfile");
  SymlinkRaw("real", dir_ + "/indir");
  SymlinkRaw("real/f.txt", dir_ + "/infile");
  OpenRoot();
  EXPECT_EQ(Content("needle"), (std::vector<Hit>{{"real/f.txt", 1, "needle inside"}}));
  // A symlinked base is followed (inside the root only).
  GrepOptions base;
  base.path = "infile";
  EXPECT_EQ(Content("needle", base), (std::vector<Hit>{{"infile", 1, "needle inside"}}));
  base.path = "indir";
  EXPECT_EQ(Content("needle", base), (std::vector<Hit>{{"indir/f.txt", 1, "needle inside"}}));
  base.path = "outfile";
  auto out = Grep(*root_, "needle", base);
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::kPermissionDenied);
  base.path = "/etc";
  EXPECT_EQ(Grep(*root_, "needle", base).error().code, ErrorCode::kPermissionDenied);
  base.path = "missing";
  EXPECT_EQ(Grep(*root_, "needle", base).error().code, ErrorCode::kNotFound);
}

TEST_F(GrepTest, GlobFilter) {
  WriteRaw(dir_ + "/a.py", "hit\n");
  WriteRaw(dir_ + "/a.txt", "hit\n");
  WriteRaw(dir_ + "/src/b.py", "hit\n");
  WriteRaw(dir_ + "/src/deep/c.py", "hit\n");
  WriteRaw(dir_ + "/.venv/d.py", "hit\n");
  OpenRoot();
  GrepOptions g;
  g.glob = "*.py";
  g.output_mode = GrepOutputMode::kFilesWithMatches;
  auto r = Grep(*root_, "hit", g);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->files, (std::vector<std::string>{dir_ + "/.venv/d.py", dir_ + "/a.py",
                                                dir_ + "/src/b.py", dir_ + "/src/deep/c.py"}));
  g.glob = "src/**/*.py";
  r = Grep(*root_, "hit", g);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->files, (std::vector<std::string>{dir_ + "/src/b.py", dir_ + "/src/deep/c.py"}));
  g.glob = "*.py";
  g.path = "src";
  r = Grep(*root_, "hit", g);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->files.size(), 2u);
  g.path = "a.txt";  // a file base: the glob applies to its name
  r = Grep(*root_, "hit", g);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->files.empty());
  g.glob = "../*";
  EXPECT_EQ(Grep(*root_, "hit", g).error().code, ErrorCode::kInvalidArgument);
}

TEST_F(GrepTest, MaxCountKeepsTheFirstEntriesInOrder) {
  for (int i = 0; i < 40; ++i) {
    WriteRaw(dir_ + "/f" + std::to_string(100 + i) + ".txt", "m\nm\nm\n");
  }
  OpenRoot();
  for (int threads : {1, 2, 4}) {
    GrepOptions o;
    o.threads = threads;
    o.max_count = 7;
    auto r = Grep(*root_, "m", o);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->matches.size(), 7u);
    EXPECT_TRUE(r->truncated);
    EXPECT_EQ(Rel(r->matches[0].path), "f100.txt");
    EXPECT_EQ(Rel(r->matches[6].path), "f102.txt");
    EXPECT_EQ(r->matches[6].line_number, 1u);
    o.max_count = 120;  // exactly all
    r = Grep(*root_, "m", o);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->matches.size(), 120u);
    EXPECT_FALSE(r->truncated);
    o.output_mode = GrepOutputMode::kFilesWithMatches;
    o.max_count = 3;
    r = Grep(*root_, "m", o);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->files, (std::vector<std::string>{dir_ + "/f100.txt", dir_ + "/f101.txt",
                                                  dir_ + "/f102.txt"}));
    EXPECT_TRUE(r->truncated);
  }
}

TEST_F(GrepTest, LongLines) {
  std::string long_line(100000, 'a');
  long_line.replace(50000, 6, "needle");
  std::string text = "short needle\n" + long_line + "\nafter needle\n";
  // A long line with the needle straddling each possible 4 KiB window edge.
  std::string tail_line(20000, 'b');
  tail_line.replace(4093, 6, "needle");
  text += tail_line + "\n" + std::string(30000, 'c') + "\nlast needle";
  WriteRaw(dir_ + "/long.txt", text);
  OpenRoot();
  for (size_t buffer : {size_t{16} << 20, size_t{4096}}) {
    GrepOptions o;
    o.max_buffer_bytes = buffer;
    o.max_line_bytes = 100;
    auto r = Grep(*root_, "needle", o);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->matches.size(), 5u) << buffer;
    EXPECT_EQ(r->matches[0].line_number, 1u);
    EXPECT_FALSE(r->matches[0].line_truncated);
    EXPECT_EQ(r->matches[1].line_number, 2u);
    EXPECT_TRUE(r->matches[1].line_truncated);
    EXPECT_EQ(r->matches[1].line, std::string(100, 'a'));
    EXPECT_EQ(r->matches[2].line_number, 3u);
    EXPECT_EQ(r->matches[2].line, "after needle");
    EXPECT_EQ(r->matches[3].line_number, 4u);
    EXPECT_EQ(r->matches[4].line_number, 6u);
    EXPECT_EQ(r->matches[4].line, "last needle");
    o.output_mode = GrepOutputMode::kCount;
    auto c = Grep(*root_, "needle", o);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->counts[0].count, 5u);
  }
  // Truncation never splits a UTF-8 character.
  WriteRaw(dir_ + "/u.txt", Cat("needle ", std::string(3000, 'x'), "\n\xC3\xA9\xC3\xA9needle\n"));
  GrepOptions o;
  o.path = "u.txt";
  o.max_line_bytes = 3;
  auto u = Grep(*root_, "needle", o);
  ASSERT_TRUE(u);
  ASSERT_EQ(u->matches.size(), 2u);
  EXPECT_EQ(u->matches[1].line, "\xC3\xA9");
  EXPECT_TRUE(u->matches[1].line_truncated);
}

// Randomized check of the search core against a naive line-by-line search,
// with tiny buffers so that every boundary case (lines across reads, long
// lines in windows, the memchr-to-memmem switch) occurs.
TEST_F(GrepTest, AgreesWithNaiveSearch) {
  std::mt19937 rng(12345);
  const std::string alphabet = "aaaaaaabbc\n\n e";
  std::vector<std::string> texts;
  for (int f = 0; f < 60; ++f) {
    std::string t;
    size_t n = rng() % 20000;
    for (size_t i = 0; i < n; ++i) t += alphabet[rng() % alphabet.size()];
    if (f % 7 == 0) t += std::string(9000, 'a') + "aab" + std::string(5000, 'a');
    texts.push_back(t);
    WriteRaw(dir_ + "/t" + std::to_string(1000 + f), t);
  }
  OpenRoot();
  for (std::string needle : {"a", "aab", "aaaaaaaaab", "ba", "c", "e a", "aaaa"}) {
    for (size_t buffer : {size_t{4096}, size_t{1} << 20}) {
      GrepOptions o;
      o.max_buffer_bytes = buffer;
      o.max_count = 1u << 30;
      o.max_line_bytes = 1u << 20;
      auto r = Grep(*root_, needle, o);
      ASSERT_TRUE(r);
      std::vector<Hit> want;
      for (size_t f = 0; f < texts.size(); ++f) {
        uint64_t line = 1;
        size_t start = 0;
        const std::string& t = texts[f];
        while (start < t.size()) {
          size_t end = t.find('\n', start);
          if (end == std::string::npos) end = t.size();
          std::string_view l(t.data() + start, end - start);
          if (l.find(needle) != std::string_view::npos) {
            want.emplace_back(Cat("t", std::to_string(1000 + f)), line, std::string(l));
          }
          ++line;
          start = end + 1;
        }
      }
      std::vector<Hit> got;
      for (const auto& m : r->matches) got.emplace_back(Rel(m.path), m.line_number, m.line);
      // Lines longer than the buffer are reported by their head only.
      ASSERT_EQ(got.size(), want.size()) << needle << " " << buffer;
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(std::get<0>(got[i]), std::get<0>(want[i])) << needle;
        ASSERT_EQ(std::get<1>(got[i]), std::get<1>(want[i])) << needle;
        const std::string& g = std::get<2>(got[i]);
        ASSERT_EQ(std::get<2>(want[i]).compare(0, g.size(), g), 0) << needle;
        if (!r->matches[i].line_truncated) {
          ASSERT_EQ(g, std::get<2>(want[i]));
        }
      }
    }
  }
}

TEST(RequiredLiteralTest, IsConservative) {
  EXPECT_EQ(RequiredLiteral("foo"), "foo");
  EXPECT_EQ(RequiredLiteral("fn\\s+[a-z_]+_test"), "_test");
  EXPECT_EQ(RequiredLiteral("fo+ ba[rz]"), " ba");
  EXPECT_EQ(RequiredLiteral("^needle$"), "needle");
  EXPECT_EQ(RequiredLiteral("\\.txt$"), ".txt");
  EXPECT_EQ(RequiredLiteral("abc?d"), "ab");
  EXPECT_EQ(RequiredLiteral("xab+cd"), "xab");
  EXPECT_EQ(RequiredLiteral("ab{2,3}cd"), "cd");
  EXPECT_EQ(RequiredLiteral("(x|y)abc(d|e)"), "abc");
  EXPECT_EQ(RequiredLiteral("[]ab]cd[^]x]yz"), "cd");
  EXPECT_EQ(RequiredLiteral("[[:alpha:]]+end"), "end");
  EXPECT_EQ(RequiredLiteral("\\bword\\b"), "word");
  // Nothing is certain: give up.
  for (const char* re : {"a|bc", "ab|cd", "(?i)abc", "\\x41bc", "\\pLabc", "a{b", "a*b*", "(ab",
                         "\\Qab\\E", "(?P<n>ab)", ".*"}) {
    EXPECT_EQ(RequiredLiteral(re), "") << re;
  }
}

// --- Differential test against ripgrep ------------------------------------

std::string FindRg() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"}) {
    std::string p = std::string(dir) + "/rg";
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// Runs argv, returns its stdout.
std::string RunCapture(const std::vector<std::string>& args) {
  int fds[2];
  if (::pipe(fds) != 0) return "";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  std::string out;
  if (rc == 0) {
    char buf[65536];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    int status;
    ::waitpid(pid, &status, 0);
  }
  ::close(fds[0]);
  return out;
}

TEST_F(GrepTest, DifferentialAgainstRipgrep) {
  const std::string rg = FindRg();
  if (rg.empty()) GTEST_SKIP() << "rg not installed";
  std::mt19937 rng(42);
  const std::vector<std::string> words = {
      "alpha",  "beta",  "needle", "haystack", "foo",   "bar",     "baz",
      "Straße", "école", "ÉCOLE",  "日本語",   "naïve", "x",       "fo",
      "ba",     "{}",    "a.b",    "(paren",   "tab\t", "needles", "NEEDLE"};
  auto random_line = [&](size_t max_words) {
    std::string l;
    size_t n = rng() % max_words;
    for (size_t i = 0; i < n; ++i) {
      if (i) l += ' ';
      l += words[rng() % words.size()];
    }
    return l;
  };
  size_t total = 0;
  for (int f = 0; f < 300; ++f) {
    std::string dir = (f % 5 == 0) ? "/.dot" : (f % 3 == 0) ? "/a/b" : (f % 2 ? "/c" : "");
    std::string name = dir_ + dir + "/file" + std::to_string(f) + ".txt";
    std::string text;
    const bool crlf = f % 11 == 0;
    size_t lines = rng() % 400;
    for (size_t i = 0; i < lines; ++i) {
      text += (rng() % 50 == 0) ? random_line(2000) : random_line(15);  // some long lines
      if (rng() % 97 == 0) text += "caf\xE9";                           // invalid UTF-8: still text
      text += crlf ? "\r\n" : "\n";
    }
    if (f % 13 == 0) text += random_line(10);             // no final newline
    if (f % 17 == 0) text = std::string(1, '\0') + text;  // binary: skipped by both
    total += text.size();
    WriteRaw(name, text);
  }
  ASSERT_GT(total, 1000000u);
  OpenRoot();

  struct Case {
    std::string pattern;
    bool regex;
    bool ci;
    std::string rg_pattern;  // when rg needs other syntax
  };
  const std::vector<Case> cases = {
      {"needle", false, false, ""},      {"Straße", false, false, ""},
      {"a.b", false, false, ""},         {"(paren", false, false, ""},
      {"x", false, false, ""},           {"日本", false, false, ""},
      {"absent-word", false, false, ""}, {"o b", false, false, ""},
      {"needle", false, true, ""},       {"école", false, true, ""},
      {"fo+ ba[rz]", true, false, ""},   {"^needle", true, false, ""},
      {"haystack$", true, false, ""},    {"needles?$", true, true, ""},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {
        rg,       "--no-config", "-j1",         "--no-heading",  "-n",
        "--null", "--hidden",    "--no-ignore", "--no-messages", "--color=never"};
    if (!c.regex) args.push_back("-F");
    if (c.ci) args.push_back("-i");
    args.push_back("-e");
    args.push_back(c.rg_pattern.empty() ? c.pattern : c.rg_pattern);
    args.push_back(dir_);
    std::string out = RunCapture(args);
    std::vector<Hit> want;
    size_t pos = 0;
    while (pos < out.size()) {
      size_t nul = out.find('\0', pos);
      size_t colon = out.find(':', nul);
      size_t eol = out.find('\n', colon);
      ASSERT_NE(eol, std::string::npos);
      std::string text = out.substr(colon + 1, eol - colon - 1);
      if (!text.empty() && text.back() == '\r') text.pop_back();
      want.emplace_back(Rel(out.substr(pos, nul - pos)),
                        std::stoull(out.substr(nul + 1, colon - nul - 1)), text);
      pos = eol + 1;
    }
    std::sort(want.begin(), want.end());
    GrepOptions o;
    o.regex = c.regex;
    o.case_insensitive = c.ci;
    o.max_count = 1u << 30;
    auto got = Content(c.pattern, o);
    ASSERT_EQ(got.size(), want.size()) << c.pattern;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(std::get<0>(got[i]), std::get<0>(want[i])) << c.pattern;
      ASSERT_EQ(std::get<1>(got[i]), std::get<1>(want[i])) << c.pattern;
      // Lines over max_line_bytes come back cut: compare the prefix.
      const std::string& g = std::get<2>(got[i]);
      ASSERT_EQ(std::get<2>(want[i]).compare(0, g.size(), g), 0) << c.pattern;
      if (g.size() < 1990) {
        ASSERT_EQ(g, std::get<2>(want[i])) << c.pattern;
      }
    }
    if (c.pattern != "absent-word") {
      EXPECT_FALSE(want.empty()) << c.pattern;
    }
  }
}

}  // namespace
}  // namespace deepbox::sandboxd::fs
