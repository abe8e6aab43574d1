// Output formats and exact message strings of the deepagents 0.7 tools and
// middleware. Everything here is pure (no sandbox, no model) so every notice
// and error string is unit-tested in isolation. Lengths are in code points,
// as in Python.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deepbox::agent {

// ------------------------------------------------------------------ limits

inline constexpr size_t kMaxLineLength = 5000;     // read_file row split
inline constexpr int64_t kToolTokenLimit = 20000;  // tool_token_limit_before_evict
inline constexpr size_t kCharsPerToken = 4;
inline constexpr size_t kToolResultCharLimit = 80000;  // 4 x 20 000
inline constexpr int64_t kDefaultReadLimit = 100;
inline constexpr int64_t kMaxBinaryBytes = 500 * 1024;  // 512 000
inline constexpr int64_t kMaxReadPageBytes = 500 * 1024;
inline constexpr int64_t kDefaultGrepMaxCount = 1000;
inline constexpr int64_t kMaxExecuteTimeoutSeconds = 3600;
inline constexpr double kGlobTimeoutSeconds = 10.0;

// ------------------------------------------------------------------ messages

extern const char kEmptyContentWarning[];  // "System reminder: File exists but has empty contents"
extern const char kTruncationGuidance[];   // "... [results truncated, try being more specific ...]"
extern const char kGrepTruncationNote[];
extern const char kGlobTruncationNote[];
extern const char kGlobUnreadableNote[];
extern const char kEmptyOldStringError[];  // "Error: old_string cannot be empty. ..."
extern const char kRegexLiteralHint[];
extern const char kSandboxReadTruncationMsg[];

std::string NoLinesRequestedWarning(int64_t limit);
// "[Output was truncated ...jq . {path}...]" (without the leading blank line:
// it is a notice above the read header).
std::string ReadFileTruncationMessage(std::string_view file_path);
std::string GlobTimeoutMessage();  // "Error: glob timed out after 10.0s. ..."
struct ContentPreview;
// The stub replacing an evicted tool result (ids over 32 chars shortened, as
// deepagents shows them).
std::string TooLargeToolMessage(std::string_view tool_call_id, std::string_view file_path,
                                const ContentPreview& preview);
// A user message saved to the filesystem (deepagents TOO_LARGE_HUMAN_MSG).
std::string TooLargeHumanMessage(std::string_view file_path, const ContentPreview& preview);
// PatchToolCalls: "Tool call {name} with id {id} was cancelled - ..."
std::string DanglingToolCallMessage(std::string_view name, std::string_view id);
// task with an unknown subagent_type.
std::string UnknownSubagentMessage(std::string_view subagent_type,
                                   const std::vector<std::string>& allowed);
// HITL reject without a message.
std::string DefaultRejectMessage(std::string_view name, std::string_view id);
// Summarization: the HumanMessage replacing the summarized prefix.
std::string SummaryMessageText(std::string_view summary,
                               const std::optional<std::string>& history_path);
// LangChain ToolNode messages.
std::string InvalidToolMessage(std::string_view name, const std::vector<std::string>& tools);

// ------------------------------------------------------------------ read_file

// One rendered row per line, lines over 5 000 chars split into N, N.1, N.2
// rows; markers right-aligned to the widest marker, then two spaces
// (deepagents format_content_with_line_numbers: eviction previews).
std::string FormatLinesWithNumbers(const std::vector<std::string_view>& lines, int64_t start_line);
// String form: split on "\n", a trailing empty line dropped.
std::string FormatContentWithLineNumbers(std::string_view content, int64_t start_line = 1);

// The window a backend read returned (1-based lines; next_offset 0-based).
struct ReadWindow {
  std::optional<int64_t> start_line;
  std::optional<int64_t> end_line;
  std::optional<int64_t> next_offset;  // nullopt at EOF
  std::optional<int64_t> total_lines;  // nullopt when unknown
};

// The status header's fields: "lines A-B[ of T]", then "next offset N" when
// the window stopped short of the end (deepagents _window_fields).
std::vector<std::string> ReadHeaderFields(const ReadWindow& window);
// Notices (one per line), "@@ f1 | f2 @@", then the verbatim source body.
std::string AssembleRead(std::string_view body, const std::vector<std::string>& fields,
                         const std::vector<std::string>& notices);
// "[Requested offset -1 is before the start of the file; read from line 1
// instead.]" or "" (a notice above the header).
std::string ClampedOffsetNotice(int64_t offset);
// The rendered read: header and body, cut to `char_limit` code points at the
// last whole source line that fits ("truncated due to size", resume offset
// adjusted), or inside the first line ("truncated mid-line") when none fits;
// the truncation message then sits above the header.
std::string TruncatePaginatedRead(std::string_view body, std::string_view file_path,
                                  const ReadWindow& window, size_t char_limit,
                                  const std::vector<std::string>& notices = {});

// ------------------------------------------------------------------ ls / glob

// truncate_if_too_long for strings: > 80 000 chars -> a prefix, "\n", guidance
// (80 000 chars in all).
std::string TruncateIfTooLong(std::string_view text);
// truncate_if_too_long for lists: items while their reprs (plus ", ") fit the
// budget, then the guidance as the last item.
std::vector<std::string> TruncateIfTooLong(const std::vector<std::string>& items);
// "No files found" or the Python repr of the (truncated) list.
std::string FormatFilePaths(const std::vector<std::string>& paths);
// Why a glob stopped early.
enum class GlobTruncation { kNone, kBudget, kUnreadable };
std::string FormatGlobResult(const std::vector<std::string>& paths, GlobTruncation truncation);

// ------------------------------------------------------------------ grep

enum class GrepMode { kFilesWithMatches, kContent, kCount };

struct GrepLine {
  std::string path;
  int64_t line = 0;
  std::string text;
};

// format_grep_matches: files / content / count, or "No matches found".
std::string FormatGrepMatches(const std::vector<GrepLine>& matches, GrepMode mode);
bool LooksLikeRegex(std::string_view pattern);
// The tool text: body (size-capped) + truncation note or regex hint.
std::string FormatGrepToolResult(const std::vector<GrepLine>& matches, GrepMode mode,
                                 std::string_view pattern, bool truncated,
                                 bool backend_had_matches);

// ------------------------------------------------------------------ eviction

// A line-numbered head 5 / tail 5 preview and what it left out (deepagents
// ContentPreview): whole lines omitted behind a marker, lines clipped at
// 1 000 chars. The notes of TooLarge*Message say exactly that.
struct ContentPreview {
  std::string text;
  bool lines_omitted = false;
  bool lines_clipped = false;
};
ContentPreview CreateContentPreview(std::string_view content, size_t head_lines = 5,
                                    size_t tail_lines = 5);
// "Here is a preview of the {subject}:" or the head/tail variant with its caveats.
std::string PreviewNote(const ContentPreview& preview, std::string_view subject);

// ------------------------------------------------------------------ execute

// output + "\n[Command succeeded|failed with exit code N]" (when known) +
// "\n[Output was truncated due to size limits]".
std::string FormatExecuteOutput(std::string_view output, std::optional<int> exit_code,
                                bool truncated);

}  // namespace deepbox::agent
