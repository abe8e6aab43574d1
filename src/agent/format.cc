#include "agent/format.h"

#include <algorithm>
#include <map>

#include "agent/py_repr.h"
#include "agent/text.h"

namespace deepbox::agent {

const char kEmptyContentWarning[] = "System reminder: File exists but has empty contents";
const char kTruncationGuidance[] =
    "... [results truncated, try being more specific with your parameters]";
const char kGrepTruncationNote[] =
    "Note: the search stopped early (it hit its time limit or the maximum match count). "
    "The matches above are valid but incomplete. Narrow the search (a more specific pattern or a "
    "narrower path), or raise max_count, to see the rest.";
const char kGlobTruncationNote[] =
    "Note: the search stopped early because it hit its time limit. The paths above are valid but "
    "incomplete. Narrow the search (a more specific pattern or a narrower path) to see the rest.";
const char kRegexLiteralHint[] =
    "Note: grep matches literal text, not regex, so characters like "
    "`|`, `.*`, and `\\.` are searched verbatim. Search for the literal "
    "text you need instead; for `|` alternation, run a separate search "
    "per alternative.";
const char kSandboxReadTruncationMsg[] =
    "\n\n[Output was truncated due to size limits. "
    "This paginated read result exceeded the sandbox stdout limit. "
    "Continue reading with a larger offset or smaller limit to inspect the rest of the file.]";

std::string NoLinesRequestedWarning(int64_t limit) {
  return "System reminder: no lines were read because `limit` was " + std::to_string(limit) +
         ". The file was not inspected and may have contents; retry with `limit` >= 1 to read "
         "it.";
}

std::string ReadFileTruncationMessage(std::string_view file_path) {
  return "\n\n[Output was truncated due to size limits. "
         "The file content is very large. "
         "Consider reformatting the file to make it easier to navigate. "
         "For example, if this is JSON, use execute(command='jq . " +
         std::string(file_path) +
         "') to pretty-print it with line breaks. "
         "For other formats, you can use appropriate formatting tools to split long lines.]";
}

std::string GlobTimeoutMessage() {
  return "Error: glob timed out after 10.0s. Try a more specific pattern or a narrower path.";
}

std::string TooLargeToolMessage(std::string_view tool_call_id, std::string_view file_path,
                                std::string_view content_sample) {
  std::string out = "Tool result too large, the result of this tool call ";
  out.append(tool_call_id);
  out += " was saved in the filesystem at this path: ";
  out.append(file_path);
  out +=
      "\n\nYou can read the result from the filesystem by using the read_file tool, but make "
      "sure to only read part of the result at a time.\n\nYou can do this by specifying an offset "
      "and limit in the read_file tool call. For example, to read the first 100 lines, you can "
      "use the read_file tool with offset=0 and limit=100.\n\nHere is a preview showing the head "
      "and tail of the result (lines of the form `... [N lines truncated] ...` indicate omitted "
      "lines in the middle of the content):\n\n";
  out.append(content_sample);
  out += "\n";
  return out;
}

std::string TooLargeHumanMessage(std::string_view file_path, std::string_view content_sample) {
  return "Message content too large and was saved to the filesystem at: " + std::string(file_path) +
         "\n\nYou can read the full content using the read_file tool with pagination (offset "
         "and limit parameters).\n\nHere is a preview showing the head and tail of the "
         "content:\n\n" +
         std::string(content_sample) + "\n";
}

std::string DanglingToolCallMessage(std::string_view name, std::string_view id) {
  return "Tool call " + std::string(name) + " with id " + std::string(id) +
         " was cancelled - another message came in before it could be completed.";
}

std::string UnknownSubagentMessage(std::string_view subagent_type,
                                   const std::vector<std::string>& allowed) {
  std::string list;
  for (size_t i = 0; i < allowed.size(); ++i) {
    if (i) list += ", ";
    list += "`" + allowed[i] + "`";
  }
  return "We cannot invoke subagent " + std::string(subagent_type) +
         " because it does not exist, the only allowed types are " + list;
}

std::string DefaultRejectMessage(std::string_view name, std::string_view id) {
  return "User rejected the tool call for `" + std::string(name) + "` with id " + std::string(id) +
         ". The tool was not executed. Do not retry this tool call unless the user explicitly "
         "requests it.";
}

std::string SummaryMessageText(std::string_view summary,
                               const std::optional<std::string>& history_path) {
  if (history_path) {
    return "You are in the middle of a conversation that has been summarized.\n\nThe full "
           "conversation history has been saved to " +
           *history_path +
           " should you need to refer back to it for details.\n\nA condensed summary "
           "follows:\n\n<summary>\n" +
           std::string(summary) + "\n</summary>";
  }
  return "Here is a summary of the conversation to date:\n\n" + std::string(summary);
}

std::string InvalidToolMessage(std::string_view name, const std::vector<std::string>& tools) {
  return "Error: " + std::string(name) + " is not a valid tool, try one of [" + Join(tools, ", ") +
         "].";
}

// ------------------------------------------------------------------ read_file

std::string FormatLinesWithNumbers(const std::vector<std::string_view>& lines, int64_t start_line) {
  struct Row {
    std::string marker;
    std::string_view text;
  };
  std::vector<Row> rows;
  rows.reserve(lines.size());
  size_t width = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    int64_t num = static_cast<int64_t>(i) + start_line;
    auto chunks = ChunkByCodePoints(lines[i], kMaxLineLength);
    for (size_t c = 0; c < chunks.size(); ++c) {
      std::string marker = std::to_string(num);
      if (c > 0) marker += "." + std::to_string(c);
      width = std::max(width, marker.size());
      rows.push_back({std::move(marker), chunks[c]});
    }
  }
  std::string out;
  size_t total = 0;
  for (const Row& r : rows) total += width + 3 + r.text.size();
  out.reserve(total);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i) out.push_back('\n');
    out.append(width - rows[i].marker.size(), ' ');
    out.append(rows[i].marker);
    out.append("  ");
    out.append(rows[i].text);
  }
  return out;
}

std::string FormatContentWithLineNumbers(std::string_view content, int64_t start_line) {
  auto lines = SplitOn(content, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return FormatLinesWithNumbers(lines, start_line);
}

std::string RemainingLinesNotice(const ReadWindow& w) {
  if (!w.start_line || !w.end_line || !w.next_offset) return "";
  int64_t read_count = *w.end_line - *w.start_line + 1;
  const char* read_unit = read_count == 1 ? "line" : "lines";
  if (!w.total_lines) {
    return "\n\n[Read " + std::to_string(read_count) + " " + read_unit + " (lines " +
           std::to_string(*w.start_line) + "-" + std::to_string(*w.end_line) +
           "). More lines remain from offset " + std::to_string(*w.next_offset) + ".]";
  }
  if (*w.end_line >= *w.total_lines) return "";
  int64_t remaining = *w.total_lines - *w.end_line;
  const char* remaining_unit = remaining == 1 ? "line" : "lines";
  return "\n\n[Read " + std::to_string(read_count) + " " + read_unit + " (lines " +
         std::to_string(*w.start_line) + "-" + std::to_string(*w.end_line) + " of " +
         std::to_string(*w.total_lines) + " total). " + std::to_string(remaining) + " " +
         remaining_unit + " remaining from offset " + std::to_string(*w.next_offset) + ".]";
}

std::string ClampedOffsetNotice(int64_t offset) {
  if (offset >= 0) return "";
  return "\n\n[Requested offset " + std::to_string(offset) +
         " is before the start of the file; read from line 1 instead.]";
}

namespace {

// int() of the integer part of a row marker; nullopt if not a number.
std::optional<int64_t> RowSourceLine(std::string_view row) {
  size_t i = 0;
  while (i < row.size() && (row[i] == ' ' || row[i] == '\t')) ++i;
  row.remove_prefix(i);
  size_t sep = row.find("  ");
  std::string_view marker = sep == std::string_view::npos ? row : row.substr(0, sep);
  size_t dot = marker.find('.');
  if (dot != std::string_view::npos) marker = marker.substr(0, dot);
  if (marker.empty()) return std::nullopt;
  int64_t v = 0;
  for (char c : marker) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

std::string TruncatePaginatedRead(std::string_view content, std::string_view file_path,
                                  const ReadWindow& window, size_t char_limit) {
  std::string notice = RemainingLinesNotice(window);
  size_t content_chars = CodePointCount(content);
  size_t notice_chars = CodePointCount(notice);
  if (char_limit == 0 || content_chars + notice_chars < char_limit) {
    return std::string(content) + notice;
  }
  std::string msg = ReadFileTruncationMessage(file_path);
  size_t msg_chars = CodePointCount(msg);
  if (window.start_line && window.end_line) {
    auto rows = SplitOn(content, '\n');
    // (char position, byte position, source line)
    struct Boundary {
      size_t chars;
      size_t bytes;
      int64_t line;
    };
    std::vector<Boundary> boundaries;
    size_t pos_chars = 0;
    size_t pos_bytes = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      pos_chars += CodePointCount(rows[i]);
      pos_bytes += rows[i].size();
      auto source = RowSourceLine(rows[i]);
      if (!source || *source > *window.end_line) break;
      std::optional<int64_t> next;
      if (i + 1 < rows.size()) next = RowSourceLine(rows[i + 1]);
      if (next != source) boundaries.push_back({pos_chars, pos_bytes, *source});
      pos_chars += 1;
      pos_bytes += 1;
    }
    for (auto it = boundaries.rbegin(); it != boundaries.rend(); ++it) {
      ReadWindow adjusted{window.start_line, it->line, it->line, window.total_lines};
      std::string adjusted_notice = RemainingLinesNotice(adjusted);
      if (it->chars + msg_chars + CodePointCount(adjusted_notice) <= char_limit) {
        return std::string(content.substr(0, it->bytes)) + msg + adjusted_notice;
      }
    }
  }
  size_t max_chars = char_limit > msg_chars ? char_limit - msg_chars : 0;
  return std::string(CodePointPrefix(content, max_chars)) + msg;
}

// ------------------------------------------------------------------ ls / glob

std::string TruncateIfTooLong(std::string_view text) {
  if (CodePointCount(text) > kToolResultCharLimit) {
    return std::string(CodePointPrefix(text, kToolResultCharLimit)) + "\n" + kTruncationGuidance;
  }
  return std::string(text);
}

std::vector<std::string> TruncateIfTooLong(const std::vector<std::string>& items) {
  size_t total = 0;
  for (const auto& item : items) total += CodePointCount(item);
  if (total <= kToolResultCharLimit) return items;
  size_t keep = items.size() * kToolResultCharLimit / total;
  std::vector<std::string> out(items.begin(), items.begin() + static_cast<ptrdiff_t>(keep));
  out.emplace_back(kTruncationGuidance);
  return out;
}

std::string FormatFilePaths(const std::vector<std::string>& paths) {
  if (paths.empty()) return "No files found";
  return PyReprList(TruncateIfTooLong(paths));
}

std::string FormatGlobResult(const std::vector<std::string>& paths, bool truncated) {
  std::string content = FormatFilePaths(paths);
  if (truncated) content += "\n\n" + std::string(kGlobTruncationNote);
  return content;
}

// ------------------------------------------------------------------ grep

std::string FormatGrepMatches(const std::vector<GrepLine>& matches, GrepMode mode) {
  if (matches.empty()) return "No matches found";
  std::map<std::string, std::vector<const GrepLine*>> grouped;
  for (const auto& m : matches) grouped[m.path].push_back(&m);
  std::string out;
  bool first = true;
  auto line = [&](const std::string& text) {
    if (!first) out.push_back('\n');
    first = false;
    out += text;
  };
  for (const auto& [path, items] : grouped) {
    switch (mode) {
      case GrepMode::kFilesWithMatches:
        line(path);
        break;
      case GrepMode::kCount:
        line(path + ": " + std::to_string(items.size()));
        break;
      case GrepMode::kContent:
        line(path + ":");
        for (const GrepLine* m : items) line("  " + std::to_string(m->line) + ": " + m->text);
        break;
    }
  }
  return out;
}

bool LooksLikeRegex(std::string_view p) {
  static constexpr std::string_view kEscaped = ".wWdDsSbB(){}[]|+*?^$";
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '|') return true;
    if (p[i] == '.' && i + 1 < p.size() && (p[i + 1] == '*' || p[i + 1] == '+')) return true;
    if (p[i] == '\\' && i + 1 < p.size() && kEscaped.find(p[i + 1]) != std::string_view::npos) {
      return true;
    }
  }
  return false;
}

std::string FormatGrepToolResult(const std::vector<GrepLine>& matches, GrepMode mode,
                                 std::string_view pattern, bool truncated,
                                 bool backend_had_matches) {
  std::string formatted = TruncateIfTooLong(FormatGrepMatches(matches, mode));
  std::vector<std::string> notes;
  if (truncated) notes.emplace_back(kGrepTruncationNote);
  if (!truncated && matches.empty() && !backend_had_matches && LooksLikeRegex(pattern)) {
    notes.emplace_back(kRegexLiteralHint);
  }
  if (!notes.empty()) formatted += "\n\n" + Join(notes, "\n\n");
  return formatted;
}

// ------------------------------------------------------------------ eviction

std::string CreateContentPreview(std::string_view content, size_t head_lines, size_t tail_lines) {
  auto lines = SplitLines(content);
  auto cut = [](std::string_view l) { return CodePointPrefix(l, 1000); };
  if (lines.size() <= head_lines + tail_lines) {
    std::vector<std::string_view> preview;
    for (auto l : lines) preview.push_back(cut(l));
    return FormatLinesWithNumbers(preview, 1);
  }
  std::vector<std::string_view> head;
  std::vector<std::string_view> tail;
  for (size_t i = 0; i < head_lines; ++i) head.push_back(cut(lines[i]));
  for (size_t i = lines.size() - tail_lines; i < lines.size(); ++i) tail.push_back(cut(lines[i]));
  std::string out = FormatLinesWithNumbers(head, 1);
  out += "\n... [" + std::to_string(lines.size() - head_lines - tail_lines) +
         " lines truncated] ...\n";
  out += FormatLinesWithNumbers(tail, static_cast<int64_t>(lines.size() - tail_lines + 1));
  return out;
}

// ------------------------------------------------------------------ execute

std::string FormatExecuteOutput(std::string_view output, std::optional<int> exit_code,
                                bool truncated) {
  std::string out(output);
  if (exit_code) {
    out += *exit_code == 0 ? "\n[Command succeeded with exit code "
                           : "\n[Command failed with exit code ";
    out += std::to_string(*exit_code) + "]";
  }
  if (truncated) out += "\n[Output was truncated due to size limits]";
  return out;
}

}  // namespace deepbox::agent
