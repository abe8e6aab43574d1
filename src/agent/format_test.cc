// Every notice and error string of the tools, against deepagents 0.7's
// formats (libs/deepagents/tests/unit_tests/test_middleware.py and
// backends/utils.py).
#include "agent/format.h"

#include <gtest/gtest.h>

#include "agent/text.h"
#include "common/strings.h"

namespace deepbox::agent {
namespace {

std::vector<std::string> Rows(const std::string& s) {
  std::vector<std::string> out;
  for (auto r : Split(s, '\n')) out.emplace_back(r);
  return out;
}

TEST(FormatLineNumbers, RightAlignsMarkersWithTwoSpaces) {
  std::string content;
  for (int i = 0; i < 10; ++i) content += "line" + std::to_string(i) + "\n";
  auto rows = Rows(FormatContentWithLineNumbers(content, 1));
  ASSERT_EQ(rows.size(), 10u);
  EXPECT_EQ(rows[0], " 1  line0");
  EXPECT_EQ(rows[8], " 9  line8");
  EXPECT_EQ(rows[9], "10  line9");
}

TEST(FormatLineNumbers, StartLineAndBlankLines) {
  EXPECT_EQ(FormatContentWithLineNumbers("a\n\nc", 99), " 99  a\n100  \n101  c");
  EXPECT_EQ(FormatContentWithLineNumbers("", 1), "");
  EXPECT_EQ(FormatContentWithLineNumbers("\n", 1), "1  ");
}

TEST(FormatLineNumbers, SplitsLongLinesIntoContinuationRows) {
  std::string long_line(12000, 'x');
  auto rows = Rows(FormatContentWithLineNumbers("short\n" + long_line + "\nend", 1));
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0], "  1  short");
  EXPECT_EQ(rows[1], "  2  " + std::string(5000, 'x'));
  EXPECT_EQ(rows[2].substr(0, 5), "2.1  ");
  EXPECT_EQ(rows[2].size(), 5u + 5000u);
  EXPECT_EQ(rows[3], "2.2  " + std::string(2000, 'x'));
  EXPECT_EQ(rows[4], "  3  end");
}

TEST(FormatLineNumbers, SplitsByCharactersNotBytes) {
  std::string line;
  for (int i = 0; i < 5001; ++i) line += "é";  // 2 bytes each
  auto rows = Rows(FormatContentWithLineNumbers(line, 1));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(CodePointCount(rows[0]), 5000u + 5u);
  EXPECT_EQ(rows[1], "1.1  é");
}

TEST(ReadHeader, Fields) {
  EXPECT_EQ(ReadHeaderFields({1, 2, 2, 5}),
            (std::vector<std::string>{"lines 1-2 of 5", "next offset 2"}));
  EXPECT_EQ(ReadHeaderFields({1, 100, 100, std::nullopt}),
            (std::vector<std::string>{"lines 1-100", "next offset 100"}));
  EXPECT_EQ(ReadHeaderFields({1, 5, std::nullopt, 5}),
            (std::vector<std::string>{"lines 1-5 of 5"}));
  EXPECT_EQ(ReadHeaderFields({1, 5, 5, 5}), (std::vector<std::string>{"lines 1-5 of 5"}));
  EXPECT_TRUE(ReadHeaderFields({std::nullopt, std::nullopt, std::nullopt, std::nullopt}).empty());
}

TEST(ReadNotices, ClampedOffsetAndReminders) {
  EXPECT_EQ(ClampedOffsetNotice(-1),
            "[Requested offset -1 is before the start of the file; read from line 1 instead.]");
  EXPECT_EQ(ClampedOffsetNotice(0), "");
  EXPECT_EQ(std::string(kEmptyContentWarning),
            "System reminder: File exists but has empty contents");
  EXPECT_EQ(NoLinesRequestedWarning(0),
            "System reminder: no lines were read because `limit` was 0. The file was not "
            "inspected and may have contents; retry with `limit` >= 1 to read it.");
  EXPECT_EQ(NoLinesRequestedWarning(-3).substr(0, 60),
            "System reminder: no lines were read because `limit` was -3. ");
}

TEST(ReadBudget, UnderBudgetIsHeaderAndBody) {
  EXPECT_EQ(TruncatePaginatedRead("a\nb", "/w/f", {1, 2, 2, 5}, 80000),
            "@@ lines 1-2 of 5 | next offset 2 @@\na\nb");
  EXPECT_EQ(TruncatePaginatedRead("a\nb", "/w/f", {1, 100, 100, std::nullopt}, 80000),
            "@@ lines 1-100 | next offset 100 @@\na\nb");
  EXPECT_EQ(TruncatePaginatedRead("a\nb", "/w/f", {1, 2, std::nullopt, 2}, 80000,
                                  {ClampedOffsetNotice(-1)}),
            "[Requested offset -1 is before the start of the file; read from line 1 instead.]\n"
            "@@ lines 1-2 of 2 @@\na\nb");
}

TEST(ReadBudget, CutsAtLastWholeLineAndAdjustsTheHeader) {
  // 100 lines of 1 000 chars: ~100 KB, over the 80 000-char budget.
  std::string body;
  for (int i = 0; i < 100; ++i) {
    if (i) body += "\n";
    body += std::string(1000, static_cast<char>('a' + (i % 26)));
  }
  std::string out = TruncatePaginatedRead(body, "/w/big.json", {1, 100, std::nullopt, 100}, 80000);
  // What deepagents 0.7.32 gives for the same window.
  EXPECT_EQ(CodePointCount(out), 79468u);
  std::string msg = ReadFileTruncationMessage("/w/big.json");
  EXPECT_TRUE(out.starts_with(msg + "\n@@ lines 1-79 of 100 | next offset 79 | truncated due to "
                                    "size @@\naaaa"));
  EXPECT_NE(msg.find("execute(command='jq . /w/big.json')"), std::string::npos);
  EXPECT_TRUE(out.ends_with(std::string(1000, static_cast<char>('a' + 78 % 26))));
}

TEST(ReadBudget, SingleHugeLineIsCutMidLine) {
  std::string out =
      TruncatePaginatedRead(std::string(200000, 'z'), "/w/x", {1, 1, std::nullopt, 1}, 80000);
  EXPECT_EQ(CodePointCount(out), 79999u);
  EXPECT_TRUE(out.starts_with(ReadFileTruncationMessage("/w/x") +
                              "\n@@ lines 1-1 of 1 | truncated mid-line | 79615 of 200000 "
                              "chars @@\nzzz"));
}

TEST(FilePaths, PythonListRepr) {
  EXPECT_EQ(FormatFilePaths({}), "No files found");
  EXPECT_EQ(FormatFilePaths({"/a", "/b"}), "['/a', '/b']");
  EXPECT_EQ(FormatFilePaths({"/it's"}), "[\"/it's\"]");
  EXPECT_EQ(FormatGlobResult({"/a.py"}, GlobTruncation::kNone), "['/a.py']");
  EXPECT_EQ(FormatGlobResult({"/a.py"}, GlobTruncation::kBudget),
            "['/a.py']\n\n" + std::string(kGlobTruncationNote));
  EXPECT_EQ(FormatGlobResult({"/a.py"}, GlobTruncation::kUnreadable),
            "['/a.py']\n\n" + std::string(kGlobUnreadableNote));
  EXPECT_EQ(GlobTimeoutMessage(),
            "Error: glob timed out after 10.0s. Try a more specific pattern or a narrower path.");
}

TEST(FilePaths, LongListsKeepWhatFitsTheBudget) {
  std::vector<std::string> paths(2000, "/" + std::string(99, 'p'));  // 200 000 chars
  std::string out = FormatFilePaths(paths);
  EXPECT_NE(out.find(kTruncationGuidance), std::string::npos);
  // Each item costs its repr (102) plus ", ": 768 fit, then the guidance.
  auto kept = TruncateIfTooLong(paths);
  EXPECT_EQ(kept.size(), 769u);
  EXPECT_EQ(kept.back(), kTruncationGuidance);
}

TEST(Grep, OutputModes) {
  std::vector<GrepLine> m = {
      {"/w/b.py", 3, "x = 1"}, {"/w/a.py", 1, "x = 2"}, {"/w/b.py", 7, "y = x"}};
  EXPECT_EQ(FormatGrepMatches(m, GrepMode::kFilesWithMatches), "/w/a.py\n/w/b.py");
  EXPECT_EQ(FormatGrepMatches(m, GrepMode::kContent),
            "/w/a.py:\n  1: x = 2\n/w/b.py:\n  3: x = 1\n  7: y = x");
  EXPECT_EQ(FormatGrepMatches(m, GrepMode::kCount), "/w/a.py: 1\n/w/b.py: 2");
  EXPECT_EQ(FormatGrepMatches({}, GrepMode::kContent), "No matches found");
}

TEST(Grep, TruncationNoteAndRegexHint) {
  std::vector<GrepLine> m = {{"/w/a", 1, "t"}};
  EXPECT_EQ(FormatGrepToolResult(m, GrepMode::kFilesWithMatches, "t", true, true),
            "/w/a\n\n" + std::string(kGrepTruncationNote));
  EXPECT_EQ(FormatGrepToolResult({}, GrepMode::kFilesWithMatches, "foo|bar", false, false),
            "No matches found\n\n" + std::string(kRegexLiteralHint));
  // Matches existed but were all filtered out by permissions: no hint.
  EXPECT_EQ(FormatGrepToolResult({}, GrepMode::kFilesWithMatches, "foo|bar", false, true),
            "No matches found");
  EXPECT_EQ(FormatGrepToolResult({}, GrepMode::kFilesWithMatches, "self.tools", false, false),
            "No matches found");
  EXPECT_TRUE(LooksLikeRegex("a.*b"));
  EXPECT_TRUE(LooksLikeRegex("a.+b"));
  EXPECT_TRUE(LooksLikeRegex("\\d+"));
  EXPECT_TRUE(LooksLikeRegex("foo\\.bar"));
  EXPECT_FALSE(LooksLikeRegex("def __init__(self):"));
  EXPECT_FALSE(LooksLikeRegex("arr[0]"));
  EXPECT_EQ(std::string(kRegexLiteralHint),
            "Note: grep matches literal text, not regex, so characters like `|`, `.*`, and `\\.` "
            "are searched verbatim. Search for the literal text you need instead; for `|` "
            "alternation, run a separate search per alternative.");
}

TEST(Grep, BodyCappedAt80000Chars) {
  std::vector<GrepLine> m;
  for (int i = 0; i < 1000; ++i) m.push_back({"/w/f", i + 1, std::string(100, 'q')});
  std::string out = FormatGrepToolResult(m, GrepMode::kContent, "q", false, true);
  EXPECT_TRUE(out.ends_with(std::string("\n") + kTruncationGuidance));
  EXPECT_EQ(CodePointCount(out), 80000u);
}

TEST(Truncate, StringOverLimit) {
  EXPECT_EQ(TruncateIfTooLong(std::string(80000, 'a')), std::string(80000, 'a'));
  EXPECT_EQ(TruncateIfTooLong(std::string(80001, 'a')),
            std::string(80000 - 1 - CodePointCount(kTruncationGuidance), 'a') +
                "\n... [results truncated, try being more specific with "
                "your parameters]");
}

TEST(Eviction, PreviewHeadAndTail) {
  std::string content;
  for (int i = 1; i <= 20; ++i) content += "row" + std::to_string(i) + "\n";
  ContentPreview p = CreateContentPreview(content);
  EXPECT_EQ(p.text,
            "1  row1\n2  row2\n3  row3\n4  row4\n5  row5\n... [10 lines truncated] ...\n"
            "16  row16\n17  row17\n18  row18\n19  row19\n20  row20");
  EXPECT_TRUE(p.lines_omitted);
  EXPECT_FALSE(p.lines_clipped);
  p = CreateContentPreview("a\nb");
  EXPECT_EQ(p.text, "1  a\n2  b");
  EXPECT_FALSE(p.lines_omitted);
  p = CreateContentPreview(std::string(3000, 'w'));
  EXPECT_EQ(p.text, "1  " + std::string(1000, 'w'));
  EXPECT_TRUE(p.lines_clipped);
  EXPECT_EQ(PreviewNote(p, "result"),
            "Here is a preview of the result (the output contains lines longer than 1000 "
            "characters; this preview shows only their first 1000 characters):");
}

TEST(Eviction, TooLargeMessage) {
  EXPECT_EQ(TooLargeToolMessage("toolu_1", "/workspace/large_tool_results/toolu_1",
                                CreateContentPreview("a")),
            "Tool result too large, the result of this tool call toolu_1 was saved in the "
            "filesystem at this path: /workspace/large_tool_results/toolu_1\n\nYou can read the "
            "result from the filesystem by using the read_file tool, but make sure to only read "
            "part of the result at a time.\n\nYou can do this by specifying an offset and limit "
            "in the read_file tool call. For example, to read the first 100 lines, you can use "
            "the read_file tool with offset=0 and limit=100.\n\nHere is a preview of the "
            "result:\n\n1  a\n");
  std::string content;
  for (int i = 1; i <= 20; ++i) content += "row" + std::to_string(i) + "\n";
  std::string msg = TooLargeToolMessage(std::string(40, 'x'), "/p", CreateContentPreview(content));
  EXPECT_TRUE(msg.starts_with("Tool result too large, the result of this tool call " +
                              std::string(32, 'x') + "... was saved"));
  EXPECT_NE(msg.find("Here is a preview showing the head and tail of the result (lines of the "
                     "form `... [N lines truncated] ...` indicate omitted lines in the middle of "
                     "the content):\n\n1  row1\n"),
            std::string::npos);
}

TEST(Execute, StatusLines) {
  EXPECT_EQ(FormatExecuteOutput("hi\n", 0, false), "hi\n\n[Command succeeded with exit code 0]");
  EXPECT_EQ(FormatExecuteOutput("boom", 2, true),
            "boom\n[Command failed with exit code 2]\n[Output was truncated due to size "
            "limits]");
  EXPECT_EQ(FormatExecuteOutput("x", std::nullopt, false), "x");
}

TEST(Messages, ExactStrings) {
  EXPECT_EQ(DanglingToolCallMessage("write_file", "toolu_9"),
            "Tool call write_file with id toolu_9 was cancelled - another message came in "
            "before it could be completed.");
  EXPECT_EQ(UnknownSubagentMessage("coder", {"general-purpose", "researcher"}),
            "We cannot invoke subagent coder because it does not exist, the only allowed types "
            "are `general-purpose`, `researcher`");
  EXPECT_EQ(DefaultRejectMessage("execute", "1"),
            "User rejected the tool call for `execute` with id 1. The tool was not executed. "
            "Do not retry this tool call unless the user explicitly requests it.");
  EXPECT_EQ(SummaryMessageText("S", std::string("/w/conversation_history/t.md")),
            "You are in the middle of a conversation that has been summarized.\n\nThe full "
            "conversation history has been saved to /w/conversation_history/t.md should you "
            "need to refer back to it for details.\n\nA condensed summary follows:\n\n"
            "<summary>\nS\n</summary>");
  EXPECT_EQ(SummaryMessageText("S", std::nullopt),
            "Here is a summary of the conversation to date:\n\nS");
  EXPECT_EQ(TooLargeHumanMessage("/w/conversation_history/m.md", CreateContentPreview("a")),
            "Message content too large and was saved to the filesystem at: "
            "/w/conversation_history/m.md\n\nYou can read the full content using the read_file "
            "tool with pagination (offset and limit parameters).\n\nHere is a preview of the "
            "content:\n\n1  a\n");
  EXPECT_EQ(InvalidToolMessage("nope", {"ls", "read_file"}),
            "Error: nope is not a valid tool, try one of [ls, read_file].");
}

}  // namespace
}  // namespace deepbox::agent
