#include "agent/format.h"

#include <algorithm>
#include <map>

#include "agent/py_repr.h"
#include "agent/text.h"
#include "common/strings.h"

namespace deepbox::agent {

const char kEmptyContentWarning[] = "System reminder: File exists but has empty contents";
const char kTruncationGuidance[] =
    "... [results truncated, try being more specific with your parameters]";
const char kGrepTruncationNote[] =
    "Note: the search stopped early (it hit its time limit or the maximum match count). "
    "The matches above are valid but incomplete. Narrow the search (a more specific pattern or a "
    "narrower path), or raise max_count, to see the rest.";
const char kGlobTruncationNote[] =
    "Note: the search stopped early because it hit its time or size limit. The paths above are "
    "valid but incomplete. Narrow the search (a more specific pattern or a narrower path) to see "
    "the rest.";
const char kGlobUnreadableNote[] =
    "Note: some directories could not be read, so the paths above are valid but incomplete. "
    "Narrowing the search will NOT reveal the missing files -- they are inaccessible. Continue "
    "with what is listed, or report the access problem rather than retrying.";
const char kEmptyOldStringError[] =
    "Error: old_string cannot be empty. Provide the exact text to replace.";
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
  return "[Output was truncated due to size limits. "
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
                                const ContentPreview& preview) {
  // deepagents shortens ids only where the model sees them.
  constexpr size_t kVisibleIdLimit = 32;
  std::string id(CodePointCount(tool_call_id) > kVisibleIdLimit
                     ? std::string(CodePointPrefix(tool_call_id, kVisibleIdLimit)) + "..."
                     : std::string(tool_call_id));
  std::string out = "Tool result too large, the result of this tool call ";
  out += id;
  out += " was saved in the filesystem at this path: ";
  out.append(file_path);
  out +=
      "\n\nYou can read the result from the filesystem by using the read_file tool, but make "
      "sure to only read part of the result at a time.\n\nYou can do this by specifying an offset "
      "and limit in the read_file tool call. For example, to read the first 100 lines, you can "
      "use the read_file tool with offset=0 and limit=100.\n\n";
  out += PreviewNote(preview, "result");
  out += "\n\n";
  out += preview.text;
  out += "\n";
  return out;
}

std::string TooLargeHumanMessage(std::string_view file_path, const ContentPreview& preview) {
  return "Message content too large and was saved to the filesystem at: " + std::string(file_path) +
         "\n\nYou can read the full content using the read_file tool with pagination (offset "
         "and limit parameters).\n\n" +
         PreviewNote(preview, "content") + "\n\n" + preview.text + "\n";
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
  auto lines = Split(content, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return FormatLinesWithNumbers(lines, start_line);
}

std::vector<std::string> ReadHeaderFields(const ReadWindow& w) {
  if (!w.start_line || !w.end_line) return {};
  std::string span = "lines " + std::to_string(*w.start_line) + "-" + std::to_string(*w.end_line);
  if (w.total_lines) span += " of " + std::to_string(*w.total_lines);
  std::vector<std::string> fields{std::move(span)};
  if (w.next_offset && (!w.total_lines || *w.end_line < *w.total_lines)) {
    fields.push_back("next offset " + std::to_string(*w.next_offset));
  }
  return fields;
}

namespace {

std::string Header(const std::vector<std::string>& fields) {
  return "@@ " + Join(fields, " | ") + " @@";
}

// Code points of AssembleRead(body, fields, notices) for a body of
// `body_chars` code points, without building it.
size_t AssembledChars(size_t body_chars, const std::vector<std::string>& fields,
                      const std::vector<std::string>& notices) {
  size_t n = CodePointCount(Header(fields)) + 1 + body_chars;
  for (const auto& notice : notices) n += CodePointCount(notice) + 1;
  return n;
}

}  // namespace

std::string AssembleRead(std::string_view body, const std::vector<std::string>& fields,
                         const std::vector<std::string>& notices) {
  std::string out;
  for (const auto& notice : notices) {
    out += notice;
    out += "\n";
  }
  out += Header(fields);
  out += "\n";
  out.append(body);
  return out;
}

std::string ClampedOffsetNotice(int64_t offset) {
  if (offset >= 0) return "";
  return "[Requested offset " + std::to_string(offset) +
         " is before the start of the file; read from line 1 instead.]";
}

std::string TruncatePaginatedRead(std::string_view body, std::string_view file_path,
                                  const ReadWindow& window, size_t char_limit,
                                  const std::vector<std::string>& notices) {
  std::vector<std::string> fields = ReadHeaderFields(window);
  const size_t body_chars = CodePointCount(body);
  if (char_limit == 0 || AssembledChars(body_chars, fields, notices) < char_limit) {
    return AssembleRead(body, fields, notices);
  }
  std::vector<std::string> cut_notices = notices;
  cut_notices.push_back(ReadFileTruncationMessage(file_path));
  if (window.start_line && window.end_line) {
    // One safe cut per whole source line: (chars, bytes, source line) at its end.
    struct Boundary {
      size_t chars;
      size_t bytes;
      int64_t line;
    };
    std::vector<Boundary> boundaries;
    size_t chars = 0;
    size_t bytes = 0;
    int64_t line = *window.start_line;
    for (std::string_view row : Split(body, '\n')) {
      // Rows past the window (a page's truncation banner) are not content.
      if (line > *window.end_line) break;
      chars += CodePointCount(row);
      bytes += row.size();
      boundaries.push_back({chars, bytes, line});
      chars += 1;
      bytes += 1;
      ++line;
    }
    for (auto it = boundaries.rbegin(); it != boundaries.rend(); ++it) {
      ReadWindow adjusted{window.start_line, it->line, it->line, window.total_lines};
      std::vector<std::string> adjusted_fields = ReadHeaderFields(adjusted);
      adjusted_fields.emplace_back("truncated due to size");
      if (AssembledChars(it->chars, adjusted_fields, cut_notices) <= char_limit) {
        return AssembleRead(body.substr(0, it->bytes), adjusted_fields, cut_notices);
      }
    }
  }
  // Not even one whole line fits: no offset reaches the rest of it.
  std::string_view first = body.substr(0, std::min(body.find('\n'), body.size()));
  const size_t oversized = CodePointCount(first);
  ReadWindow clipped{window.start_line, window.start_line, std::nullopt, window.total_lines};
  auto fields_for = [&](size_t shown) {
    std::vector<std::string> f = ReadHeaderFields(clipped);
    f.emplace_back("truncated mid-line");
    f.push_back(std::to_string(shown) + " of " + std::to_string(oversized) + " chars");
    return f;
  };
  const size_t reserved = AssembledChars(0, fields_for(oversized), cut_notices);
  const size_t shown = std::min(oversized, char_limit > reserved ? char_limit - reserved : 0);
  return AssembleRead(CodePointPrefix(body, shown), fields_for(shown), cut_notices);
}

// ------------------------------------------------------------------ ls / glob

std::string TruncateIfTooLong(std::string_view text) {
  if (CodePointCount(text) > kToolResultCharLimit) {
    const size_t keep = kToolResultCharLimit - CodePointCount(kTruncationGuidance) - 1;
    return std::string(CodePointPrefix(text, keep)) + "\n" + kTruncationGuidance;
  }
  return std::string(text);
}

std::vector<std::string> TruncateIfTooLong(const std::vector<std::string>& items) {
  // The list is rendered with repr: each item costs its repr plus ", ".
  const size_t budget = kToolResultCharLimit - CodePointCount(PyRepr(kTruncationGuidance)) - 2;
  size_t used = 0;
  for (size_t kept = 0; kept < items.size(); ++kept) {
    used += CodePointCount(PyRepr(items[kept])) + 2;
    if (used > budget) {
      std::vector<std::string> out(items.begin(), items.begin() + static_cast<ptrdiff_t>(kept));
      out.emplace_back(kTruncationGuidance);
      return out;
    }
  }
  return items;
}

std::string FormatFilePaths(const std::vector<std::string>& paths) {
  if (paths.empty()) return "No files found";
  return PyReprList(TruncateIfTooLong(paths));
}

std::string FormatGlobResult(const std::vector<std::string>& paths, GlobTruncation truncation) {
  std::string content = FormatFilePaths(paths);
  if (truncation == GlobTruncation::kBudget) content += "\n\n" + std::string(kGlobTruncationNote);
  if (truncation == GlobTruncation::kUnreadable) {
    content += "\n\n" + std::string(kGlobUnreadableNote);
  }
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

ContentPreview CreateContentPreview(std::string_view content, size_t head_lines,
                                    size_t tail_lines) {
  constexpr size_t kPreviewLineChars = 1000;
  auto lines = SplitLines(content);
  bool clipped = false;
  auto clip = [&](std::string_view l) {
    if (CodePointCount(l) > kPreviewLineChars) clipped = true;
    return CodePointPrefix(l, kPreviewLineChars);
  };
  ContentPreview out;
  if (lines.size() <= head_lines + tail_lines) {
    std::vector<std::string_view> preview;
    for (auto l : lines) preview.push_back(clip(l));
    out.text = FormatLinesWithNumbers(preview, 1);
    out.lines_clipped = clipped;
    return out;
  }
  std::vector<std::string_view> head;
  std::vector<std::string_view> tail;
  for (size_t i = 0; i < head_lines; ++i) head.push_back(clip(lines[i]));
  for (size_t i = lines.size() - tail_lines; i < lines.size(); ++i) tail.push_back(clip(lines[i]));
  out.text = FormatLinesWithNumbers(head, 1);
  out.text += "\n... [" + std::to_string(lines.size() - head_lines - tail_lines) +
              " lines truncated] ...\n";
  out.text += FormatLinesWithNumbers(tail, static_cast<int64_t>(lines.size() - tail_lines + 1));
  out.lines_omitted = true;
  out.lines_clipped = clipped;
  return out;
}

std::string PreviewNote(const ContentPreview& preview, std::string_view subject) {
  std::string note = preview.lines_omitted ? "Here is a preview showing the head and tail of the "
                                           : "Here is a preview of the ";
  note.append(subject);
  std::vector<std::string> caveats;
  if (preview.lines_omitted) {
    caveats.emplace_back(
        "lines of the form `... [N lines truncated] ...` indicate omitted lines in the middle of "
        "the content");
  }
  if (preview.lines_clipped) {
    caveats.emplace_back(
        "the output contains lines longer than 1000 characters; this preview shows only their "
        "first 1000 characters");
  }
  if (!caveats.empty()) note += " (" + Join(caveats, "; ") + ")";
  return note + ":";
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
