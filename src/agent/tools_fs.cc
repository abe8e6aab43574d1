#include "agent/tools_fs.h"

#include <algorithm>
#include <map>

#include "agent/background.h"
#include "agent/format.h"
#include "agent/paths.h"
#include "agent/permissions.h"
#include "agent/text.h"
#include "common/base64.h"
#include "common/strings.h"
#include "common/utf8.h"

namespace deepbox::agent {
namespace {

// ------------------------------------------------------------------ descriptions
// deepagents 0.7.32's tool descriptions and argument descriptions, verbatim
// (deepagents/middleware/filesystem.py): the model must see the same tools.

constexpr char kLsDescription[] =
    "Lists all files in a directory.\n\n"
    "This is useful for exploring the filesystem and finding the right file to read or edit.\n"
    "You should almost ALWAYS use this tool before using the read_file or edit_file tools.";

constexpr char kReadFileDescription[] =
    "Reads a file from the filesystem. Assume any path the user provides is valid; reading a "
    "missing file returns an error.\n\n"
    "Usage:\n"
    "- By default, it reads up to 100 lines starting from the beginning of the file. Use "
    "`offset`/`limit` to page through large files instead of reading them whole.\n"
    "- A status header, `@@ field | field | ... @@`, sits above the file content, and every line "
    "after it is verbatim file content. When content is truncated, there may be an explanation "
    "before the header. Never include the header when editing.\n"
    "- Speculatively batch multiple `read_file` calls in one response when several files may be "
    "useful.\n"
    "- An empty file returns a system-reminder warning in place of contents.\n"
    "- Large tool results may be offloaded to a file; the tool message gives the path. Read that "
    "path here, paging with `offset`/`limit`.\n"
    "- Images (`.png`, `.jpg`, etc.), audio, video, and PDFs return multimodal content blocks "
    "(https://docs.langchain.com/oss/python/langchain/messages#multimodal).\n"
    "- For images and PDFs, pagination via `offset`/`limit` is text-only - supply `file_path` "
    "only\n"
    "- Always read a file before editing it.";

constexpr char kEditFileDescription[] =
    "Performs exact string replacements in files.\n\n"
    "Usage:\n"
    "- You must read the file before editing; this tool errors otherwise.\n"
    "- Preserve the exact source indentation from the read output, and never include the read "
    "status header in old_string or new_string.\n"
    "- Prefer editing an existing file over creating a new one.\n"
    "- Only use emojis if the user explicitly requests it.";

constexpr char kWriteFileDescription[] =
    "Writes content to a file. Creates the file if it does not exist; replaces it entirely if it "
    "does.\n\n"
    "Usage:\n"
    "- Use this tool when you intend to create a new file or replace the whole file. You do not "
    "need to read the file first.\n"
    "- Prefer to edit existing files (with the edit_file tool) over creating new ones when "
    "possible.";

constexpr char kDeleteDescription[] =
    "Deletes a file or directory from the filesystem.\n\n"
    "Usage:\n"
    "- Permanently removes the file or directory at the given absolute path.\n"
    "- Deleting a directory removes it and everything inside it, recursively. Prefer\n"
    "  deleting a directory in one call over deleting each file individually.\n"
    "- This cannot be undone, so only delete paths you are sure are no longer needed.";

constexpr char kGlobDescription[] =
    "Find files matching a glob pattern, returning absolute paths.\n\n"
    "Supports `*` (any characters within a path segment), `**` (any directories), `?` (single "
    "character), `[abc]` (one character from a set), and `{a,b}` (alternatives), e.g. `*.py`, "
    "`src/**/*.py`, `*.{yml,yaml}`.\n\n"
    "A pattern without `/` matches the file name at any depth under the search root (`*.py` "
    "matches `src/app/main.py`). A pattern containing `/` matches the search-root-relative path "
    "(`src/**/*.py`). A leading `/` anchors to the search root (`/*.py` matches only top-level "
    "Python files).\n\n"
    "Leading-dot names are only matched when the pattern segment itself starts with `.` (use "
    "`.env`, or `.github/**/*.yml`). Because `**` will not descend into dot-directories, the bare "
    "form `*.yml` is *broader* than `**/*.yml` and is usually what you want.";

// With execute available (deepbox always offers it with the file tools).
constexpr char kGrepDescription[] =
    "Search for a LITERAL text pattern across files (NOT regex).\n\n"
    "The pattern is matched verbatim: regex metacharacters are ordinary characters, not "
    "operators. To match any of several strings, run a separate grep for each; "
    "`grep(pattern=\"foo|bar\")` searches for the literal text \"foo|bar\", and `.*` or `\\.` "
    "match those characters literally.\n"
    "- If you genuinely need regex, use the execute tool with `rg '<regex>'` instead.\n\n"
    "Returns matching files or content per `output_mode`. Offloaded large tool results live under "
    "the artifacts root (`/large_tool_results/` by default); grep that directory to search them "
    "when you do not know the exact path.";

constexpr char kGrepGlobDescription[] =
    "Glob pattern (NOT regex) limiting which files are searched (e.g. '*.py', '*.ts'). A pattern "
    "without '/' matches the file name at any depth; a pattern containing '/' matches the "
    "search-root-relative path (e.g. 'src/**/*.py'). This is an in-tool file filter, not a call "
    "to the separate glob tool. Brace expansion (e.g. '*.{ts,tsx}') is not supported on all "
    "backends; run a separate search per extension for reliable results.";

constexpr char kGrepOutputModeDescription[] =
    "Shape of the returned text. 'files_with_matches' (default): newline-separated matching file "
    "paths. 'content': matching lines grouped by file under a '<path>:' header, each line "
    "indented and formatted '<line_number>: <line text>' (only the matched line, no surrounding "
    "context). 'count': one '<path>: <match_count>' line per file.";

constexpr char kGlobPatternDescription[] =
    "Glob pattern to match files (e.g., '*.py', '**/*.py', '/subdir/**/*.md'). A pattern without "
    "'/' matches the file name at any depth; a pattern containing '/' matches the "
    "search-root-relative path; a leading '/' anchors to the search root ('/*.py' matches only "
    "top-level files). Leading-dot names are excluded unless the pattern segment starts with '.', "
    "so prefer the bare form '*.py' over '**/*.py' -- '**' will not descend into dot-directories "
    "like '.github'.";

// deepagents' sandbox read: pages are capped at 500 KiB of text (this banner
// included); files up to 1 MiB get a line count when the page stops early.
constexpr int64_t kMaxLineCountBytes = 1024 * 1024;
constexpr char kPageTruncationMsg[] =
    "\n\n[Output was truncated due to size limits. "
    "This paginated read result exceeded the sandbox stdout limit. "
    "Continue reading with a larger offset or smaller limit to inspect the rest of the file.]";

// ------------------------------------------------------------------ schemas

// pydantic's form of `T | None = None`.
json::object Optional(json::object type, std::string description) {
  json::object null_type;
  null_type["type"] = "null";
  json::object o;
  o["anyOf"] = json::array{std::move(type), std::move(null_type)};
  o["default"] = nullptr;
  o["description"] = std::move(description);
  return o;
}

json::object Type(std::string_view name) {
  json::object o;
  o["type"] = name;
  return o;
}

// ------------------------------------------------------------------ helpers

std::string Ext(std::string_view path) {
  size_t slash = path.rfind('/');
  std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  size_t dot = base.rfind('.');
  if (dot == std::string_view::npos || dot == 0) return "";
  return AsciiLower(base.substr(dot));
}

bool Denied(const ToolContext& ctx, FsOperation op, const std::string& path) {
  return ctx.permissions && ctx.permissions->Check(op, path) == PermissionMode::kDeny;
}

std::vector<std::string> FilterReadable(const ToolContext& ctx, std::vector<std::string> paths) {
  if (!ctx.permissions || ctx.permissions->empty()) return paths;
  std::vector<std::string> out;
  for (auto& p : paths) {
    if (!Denied(ctx, FsOperation::kRead, p)) out.push_back(std::move(p));
  }
  return out;
}

// The checks every file tool starts with, in deepagents' order: the path
// argument is validated (validate_path, relative paths resolved against the
// workspace), then checked against the permission rules. The absolute path,
// or the tool's error result.
using CheckedPath = tl::expected<std::string, ToolResult>;
CheckedPath CheckPath(const ToolContext& ctx, std::string_view raw, std::optional<FsOperation> op) {
  auto path = ResolveToolPath(raw, ctx.root);
  if (!path) return tl::unexpected(ToolResult::Err("Error: " + path.error().message));
  if (op && Denied(ctx, *op, *path)) {
    return tl::unexpected(ToolResult::Err(PermissionDeniedMessage(*op, *path)));
  }
  return *path;
}

// deepagents' error codes (the words its sandbox scripts and FileOperationError
// use), from the daemon's error codes; never an errno text.
enum class CodeSet { kLs, kRead, kTransfer };
std::string Code(CodeSet set, const Error& e) {
  switch (e.code) {
    case ErrorCode::kNotFound:
      return set == CodeSet::kLs ? "path_not_found" : "file_not_found";
    case ErrorCode::kPermissionDenied:
      return "permission_denied";
    case ErrorCode::kNotDirectory:
      return set == CodeSet::kLs     ? "not_a_directory"
             : set == CodeSet::kRead ? "file_not_found"
                                     : "invalid_path";
    case ErrorCode::kIsDirectory:
      return set == CodeSet::kRead ? "not_a_file" : "is_directory";
    case ErrorCode::kInvalidArgument:
      return set == CodeSet::kLs     ? "not_a_directory"
             : set == CodeSet::kRead ? "not_a_file"
                                     : "invalid_path";
    default:
      return e.message;
  }
}

std::string FileError(const std::string& path, const std::string& code) {
  return "Error: File '" + path + "': " + code;
}

// Whether `head` (a file's first bytes) fails to decode as UTF-8 the way
// deepagents checks it: incrementally, so a sequence cut at the end is fine.
bool UndecodableUtf8(std::string_view head) {
  size_t i = 0;
  while (i < head.size()) {
    const auto c = static_cast<unsigned char>(head[i]);
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xE  ? 3
                 : (c >> 3) == 0x1E ? 4
                                    : 0;
    if (len == 0 || (len == 2 && c < 0xC2) || (len == 4 && c > 0xF4)) return true;
    for (size_t k = 1; k < len; ++k) {
      if (i + k >= head.size()) return false;  // cut at the end: more would follow
      const auto d = static_cast<unsigned char>(head[i + k]);
      if ((d & 0xC0) != 0x80) return true;
      if (k == 1 && ((c == 0xE0 && d < 0xA0) || (c == 0xED && d > 0x9F) ||
                     (c == 0xF0 && d < 0x90) || (c == 0xF4 && d > 0x8F))) {
        return true;
      }
    }
    i += len;
  }
  return false;
}

std::string PathLane(const json::object& args, std::string_view root) {
  auto p = ArgOptString(args, "file_path");
  if (!p) return "";
  auto resolved = ResolveToolPath(*p, root);
  if (!resolved) return "";
  return "path:" + *resolved;
}

// A Tool whose spec is built once.
class BaseFsTool : public Tool {
 public:
  explicit BaseFsTool(FsToolOptions options) : options_(options) {}
  const ToolSpec& spec() const override { return spec_; }
  bool Evictable() const override { return false; }

 protected:
  ToolSpec spec_;
  FsToolOptions options_;
};

// A file mutation: same-path calls of one turn run in call order.
class MutatingFsTool : public BaseFsTool {
 public:
  using BaseFsTool::BaseFsTool;
  ToolScheduling Scheduling(const json::object& args, std::string_view root) const override {
    return {PathLane(args, root)};
  }
};

// ------------------------------------------------------------------ ls

class LsTool : public BaseFsTool {
 public:
  explicit LsTool(FsToolOptions o) : BaseFsTool(o) {
    spec_.name = "ls";
    spec_.description = kLsDescription;
    spec_.input_schema = SchemaObject(
        {{"path", SchemaString("Absolute path to the directory to list. Must be absolute, not "
                               "relative.")}},
        {"path"});
  }

  ToolResult Invoke(ToolContext& ctx, const json::object& args) override {
    auto path = CheckPath(ctx, ArgString(args, "path"), FsOperation::kRead);
    if (!path) return path.error();
    auto list = ctx.sandbox->ListNames(*path);  // names only: no stat per entry
    if (!list)
      return ToolResult::Err("Error: Path '" + *path + "': " + Code(CodeSet::kLs, list.error()));
    std::vector<std::string> paths;
    paths.reserve(list->size());
    for (const auto& e : *list) paths.push_back(JoinPath(*path, e.name));
    return ToolResult::Ok(FormatFilePaths(FilterReadable(ctx, std::move(paths))));
  }
};

// ------------------------------------------------------------------ read_file

class ReadFileTool : public BaseFsTool {
 public:
  explicit ReadFileTool(FsToolOptions o) : BaseFsTool(o) {
    spec_.name = "read_file";
    spec_.description = kReadFileDescription;
    spec_.input_schema = SchemaObject(
        {{"file_path", SchemaString("Absolute path to the file to read. Must be absolute, not "
                                    "relative.")},
         {"offset", SchemaInteger("Line number to start reading from (0-indexed). Use for "
                                  "pagination of large files.",
                                  0)},
         {"limit", SchemaInteger("Maximum number of lines to read. Use for pagination of large "
                                 "files.",
                                 kDefaultReadLimit)}},
        {"file_path"});
  }

  ToolScheduling Scheduling(const json::object& args, std::string_view root) const override {
    return {PathLane(args, root)};
  }

  ToolResult Invoke(ToolContext& ctx, const json::object& args) override {
    auto path = CheckPath(ctx, ArgString(args, "file_path"), FsOperation::kRead);
    if (!path) return path.error();
    const int64_t offset = ArgOptInt(args, "offset").value_or(0);
    const int64_t limit = ArgOptInt(args, "limit").value_or(kDefaultReadLimit);
    const int64_t off = std::max<int64_t>(offset, 0);
    const int64_t lim = std::max<int64_t>(limit, 0);
    Sandbox& sb = *ctx.sandbox;

    // One request: the page's lines, the size, the line count, a binary verdict.
    ReadOptions ro;
    ro.line_offset = off;
    ro.line_limit = std::max<int64_t>(lim, 1);
    // More than the page cap below, so the cap decides where a page ends.
    ro.max_bytes = static_cast<size_t>(kMaxReadPageBytes) + 4096;
    auto r = sb.Read(*path, ro);
    if (!r) return ToolResult::Err(FileError(*path, Code(CodeSet::kRead, r.error())));
    // No file has INT64_MAX / 4 lines: lines there come from a hostile daemon,
    // and the line arithmetic below would overflow.
    if (off > INT64_MAX / 4) {
      return ToolResult::Err(
          FileError(*path, "Line offset " + std::to_string(off) + " exceeds file length (" +
                               std::to_string(std::max<int64_t>(r->total_lines, 0)) + " lines)"));
    }
    std::vector<std::string> notices;
    if (std::string clamp = ClampedOffsetNotice(offset); !clamp.empty()) notices.push_back(clamp);
    if (r->size == 0) {
      // deepagents' sandbox read answers an empty file with the reminder as
      // its content, which is then shown as a one-line window.
      ReadWindow w{off + 1, off + 1, std::nullopt, std::nullopt};
      return ToolResult::Ok(
          TruncatePaginatedRead(kEmptyContentWarning, *path, w, options_.read_char_limit, notices));
    }
    std::string_view type = FileTypeForPath(*path);
    if (type != "text") return ReadBinary(sb, *path, r->size, type);
    if (r->binary) {
      // The daemon also calls NUL bytes binary; deepagents only what does not
      // decode as UTF-8 in the first 8 KiB.
      ReadOptions head;
      head.byte_offset = 0;
      head.byte_length = 8192;
      auto h = sb.Read(*path, head);
      if (!h) return ToolResult::Err(FileError(*path, Code(CodeSet::kRead, h.error())));
      if (UndecodableUtf8(h->content)) return ReadBinary(sb, *path, r->size, "file");
    }
    if (lim == 0) return ToolResult::Ok(NoLinesRequestedWarning(limit));

    // The page, as deepagents' read script builds it: lines joined by "\n"
    // within the byte cap; a line cut by the cap is shown in part but not
    // counted, and the cap's banner follows.
    std::vector<std::string_view> lines = Split(r->content, '\n');
    const size_t got = static_cast<size_t>(std::max<int64_t>(r->lines_returned, 0));
    if (lines.size() > got) lines.resize(got);
    if (static_cast<int64_t>(lines.size()) > lim) lines.resize(static_cast<size_t>(lim));
    if (lines.empty()) {
      int64_t total = r->total_lines >= 0 ? r->total_lines : off;
      return ToolResult::Err(FileError(*path, "Line offset " + std::to_string(off) +
                                                  " exceeds file length (" + std::to_string(total) +
                                                  " lines)"));
    }
    const size_t cap = static_cast<size_t>(kMaxReadPageBytes) - (sizeof(kPageTruncationMsg) - 1);
    std::string text;
    int64_t returned = 0;
    bool truncated = false;
    for (size_t i = 0; i < lines.size(); ++i) {
      const size_t piece = lines[i].size() + (i == 0 ? 0 : 1);
      if (text.size() + piece > cap) {
        truncated = true;
        std::string cut = i == 0 ? std::string(lines[i]) : "\n" + std::string(lines[i]);
        cut.resize(cap - text.size());
        text.append(cut.substr(0, Utf8CompletePrefix(cut)));
        break;
      }
      if (i) text.push_back('\n');
      text.append(lines[i]);
      ++returned;
    }
    // Lines consumed from the file: the partly shown one counts.
    const int64_t consumed = returned + (truncated ? 1 : 0);
    if (truncated) {
      text += kPageTruncationMsg;
      if (returned == 0) returned = 1;  // still progress past an overlong line
    }
    ReadWindow w;
    w.start_line = off + 1;
    w.end_line = off + returned;
    // deepagents knows the total when the page reached the end of the file,
    // or counts it for files up to 1 MiB.
    const bool at_eof = r->total_lines >= 0 && off + consumed >= r->total_lines;
    if (r->total_lines >= 0 && (at_eof || r->size <= kMaxLineCountBytes)) {
      w.total_lines = r->total_lines;
      if (*w.end_line < *w.total_lines) w.next_offset = *w.end_line;
    } else {
      w.next_offset = *w.end_line;
    }
    // A blank window that is the whole file is an empty file to the model.
    if (IsBlank(text) && *w.start_line == 1 && w.total_lines == w.end_line) {
      return ToolResult::Ok(kEmptyContentWarning);
    }
    // Blank last rows a "\n" join loses come back, as deepagents pads them.
    std::vector<std::string_view> rows = Split(text, '\n');
    if (!rows.empty() && rows.back().empty()) rows.pop_back();
    const int64_t want = *w.end_line - *w.start_line + 1;
    std::string body;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (i) body.push_back('\n');
      body.append(rows[i]);
    }
    for (int64_t i = static_cast<int64_t>(rows.size()); i < want; ++i) {
      if (i) body.push_back('\n');
    }
    return ToolResult::Ok(TruncatePaginatedRead(body, *path, w, options_.read_char_limit, notices));
  }

 private:
  ToolResult ReadBinary(Sandbox& sb, const std::string& path, int64_t size, std::string_view type) {
    if (size > kMaxBinaryBytes) {
      return ToolResult::Err(FileError(path, "Binary file exceeds maximum preview size of " +
                                                 std::to_string(kMaxBinaryBytes) + " bytes"));
    }
    auto bytes = sb.Download(path);
    if (!bytes) return ToolResult::Err(FileError(path, Code(CodeSet::kRead, bytes.error())));
    std::string mime = MimeTypeForPath(path);
    if (type == "image") {
      ToolResult result;
      result.images.push_back(ImageBlock{mime, Base64Encode(*bytes)});
      return result;
    }
    // deepbox's models take images only: other binary content is described.
    return ToolResult::Ok("Binary file '" + path + "' (" + std::to_string(bytes->size()) +
                          " bytes, " + mime +
                          ") cannot be shown as text. Inspect it with the execute tool "
                          "instead (e.g. `file`, `xxd | head`).");
  }
};

// ------------------------------------------------------------------ write_file

class WriteFileTool : public MutatingFsTool {
 public:
  explicit WriteFileTool(FsToolOptions o) : MutatingFsTool(o) {
    spec_.name = "write_file";
    spec_.description = kWriteFileDescription;
    spec_.input_schema = SchemaObject(
        {{"file_path", SchemaString("Absolute path where the file should be written. Must be "
                                    "absolute, not relative.")},
         {"content", SchemaString("The text content to write to the file. This parameter is "
                                  "required.")}},
        {"file_path", "content"});
  }

  ToolResult Invoke(ToolContext& ctx, const json::object& args) override {
    auto path = CheckPath(ctx, ArgString(args, "file_path"), FsOperation::kWrite);
    if (!path) return path.error();
    auto st = ctx.sandbox->Write(*path, ArgString(args, "content"));
    if (!st) {
      return ToolResult::Err("Failed to write file '" + *path +
                             "': " + Code(CodeSet::kTransfer, st.error()));
    }
    return ToolResult::Ok("Updated file " + *path);
  }
};

// ------------------------------------------------------------------ edit_file

class EditFileTool : public MutatingFsTool {
 public:
  explicit EditFileTool(FsToolOptions o) : MutatingFsTool(o) {
    spec_.name = "edit_file";
    spec_.description = kEditFileDescription;
    spec_.input_schema = SchemaObject(
        {{"file_path", SchemaString("Absolute path to the file to edit. Must be absolute, not "
                                    "relative.")},
         {"old_string", SchemaString("The exact text to find and replace. Must be unique in the "
                                     "file unless replace_all is True.")},
         {"new_string", SchemaString("The text to replace old_string with. Must be different "
                                     "from old_string.")},
         {"replace_all", SchemaBoolean("If True, replace all occurrences of old_string. If "
                                       "False (default), old_string must be unique.",
                                       false)}},
        {"file_path", "old_string", "new_string"});
  }

  ToolResult Invoke(ToolContext& ctx, const json::object& args) override {
    auto path = CheckPath(ctx, ArgString(args, "file_path"), FsOperation::kWrite);
    if (!path) return path.error();
    std::string old_s = ArgString(args, "old_string");
    std::string new_s = ArgString(args, "new_string");
    // Checked before the file is looked at, as deepagents' backends do.
    if (old_s.empty()) return ToolResult::Err(kEmptyOldStringError);
    bool replace_all = ArgBool(args, "replace_all", false);
    Sandbox& sb = *ctx.sandbox;
    auto r = sb.Edit(*path, old_s, new_s, replace_all);  // the daemon retries CRLF/LF
    if (!r) return ToolResult::Err(EditError(sb, *path, old_s, r.error()));
    return ToolResult::Ok("Successfully replaced " + std::to_string(r->occurrences) +
                          " instance(s) of the string in '" + *path + "'");
  }

 private:
  static std::string EditError(Sandbox& sb, const std::string& path, const std::string& old_s,
                               const Error& e) {
    switch (e.code) {
      case ErrorCode::kNotFound: {
        // NOT_FOUND covers both a missing file and a missing string.
        auto st = sb.Stat(path);
        if (!st && (st.error().code == ErrorCode::kNotFound ||
                    st.error().code == ErrorCode::kNotDirectory)) {
          return "Error: File '" + path + "' not found";
        }
        if (st && st->is_dir()) return "Error: '" + path + "' is not a regular file";
        return "Error: String not found in file: '" + old_s + "'";
      }
      case ErrorCode::kNotDirectory:
        return "Error: File '" + path + "' not found";
      case ErrorCode::kConflict:
        return "Error: String '" + old_s +
               "' appears multiple times. Use replace_all=True to replace all occurrences.";
      case ErrorCode::kPermissionDenied:
        return "Error: Permission denied editing file '" + path + "'";
      case ErrorCode::kIsDirectory:
        return "Error: '" + path + "' is not a regular file";
      case ErrorCode::kInvalidArgument: {
        if (e.reason == kReasonNotText) return "Error: File '" + path + "' is not a text file";
        if (e.reason == kReasonNotRegularFile) {
          return "Error: '" + path + "' is not a regular file";
        }
        return "Error editing file '" + path + "': " + e.message;
      }
      default:
        return "Error editing file '" + path + "': " + e.message;
    }
  }
};

// ------------------------------------------------------------------ delete

class DeleteTool : public MutatingFsTool {
 public:
  explicit DeleteTool(FsToolOptions o) : MutatingFsTool(o) {
    spec_.name = "delete";
    spec_.description = kDeleteDescription;
    spec_.input_schema = SchemaObject(
        {{"file_path", SchemaString("Absolute path to the file to delete. Must be absolute, not "
                                    "relative.")}},
        {"file_path"});
  }

  ToolResult Invoke(ToolContext& ctx, const json::object& args) override {
    auto path = CheckPath(ctx, ArgString(args, "file_path"), std::nullopt);
    if (!path) return path.error();
    Sandbox& sb = *ctx.sandbox;
    auto st = sb.Stat(*path);
    if (ctx.permissions && !ctx.permissions->empty()) {
      bool has_descendants = !st || st->is_dir();
      auto patterns = ctx.permissions->DeleteDenyPatterns(*path, has_descendants);
      if (!patterns.empty()) {
        return ToolResult::Err("Error: permission denied for write on " + *path +
                               " (matches deny rule(s): " + Join(patterns, ", ") + ")");
      }
    }
    if (!st) {
      if (st.error().code == ErrorCode::kNotFound || st.error().code == ErrorCode::kNotDirectory) {
        return ToolResult::Err("Error: '" + *path + "' not found");
      }
      return ToolResult::Err("Error deleting file '" + *path + "': " + st.error().message);
    }
    auto del = sb.Delete(*path, /*recursive=*/true);
    if (!del) {
      if (del.error().code == ErrorCode::kNotFound) {
        return ToolResult::Err("Error: '" + *path + "' not found");
      }
      return ToolResult::Err("Error deleting file '" + *path + "': " + del.error().message);
    }
    return ToolResult::Ok("Deleted " + *path);
  }
};

// ------------------------------------------------------------------ glob

class GlobTool : public BaseFsTool {
 public:
  explicit GlobTool(FsToolOptions o) : BaseFsTool(o) {
    spec_.name = "glob";
    spec_.description = kGlobDescription;
    spec_.input_schema =
        SchemaObject({{"pattern", SchemaString(kGlobPatternDescription)},
                      {"path", Optional(Type("string"),
                                        "Base directory to search from. Defaults to the "
                                        "backend's default root.")}},
                     {"pattern"});
  }

  ToolResult Invoke(ToolContext& ctx, const json::object& args) override {
    auto path_arg = ArgOptString(args, "path");
    auto path = CheckPath(ctx, path_arg.value_or(ctx.root), FsOperation::kRead);
    if (!path) return path.error();
    std::string pattern = ArgString(args, "pattern");
    Sandbox* sb = ctx.sandbox;
    // deepagents' glob refuses to climb out of the search root, once it found
    // the root.
    const std::string slashed = ReplaceAll(pattern, "\\", "/");
    for (std::string_view seg : Split(slashed, '/')) {
      if (seg != "..") continue;
      auto st = sb->Stat(*path);
      std::string code = !st                           ? Code(CodeSet::kLs, st.error())
                         : st->type == FileType::kFile ? "not_a_directory"
                                                       : "invalid_pattern";
      return ToolResult::Err("Error: Path '" + *path + "': " + code);
    }
    std::string dir = *path;
    auto result = CallWithTimeout<Result<GlobResult>>(
        [sb, pattern, dir] { return sb->Glob(pattern, dir, 10000); }, options_.glob_timeout);
    if (!result) return ToolResult::Err(GlobTimeoutMessage());
    if (!*result) {
      return ToolResult::Err("Error: Path '" + *path + "': " + Code(CodeSet::kLs, result->error()));
    }
    GlobResult& g = **result;
    // An unreadable directory outranks a budget cut: narrowing cannot help.
    GlobTruncation why = g.unreadable  ? GlobTruncation::kUnreadable
                         : g.truncated ? GlobTruncation::kBudget
                                       : GlobTruncation::kNone;
    return ToolResult::Ok(FormatGlobResult(FilterReadable(ctx, std::move(g.paths)), why));
  }
};

// ------------------------------------------------------------------ grep

class GrepTool : public BaseFsTool {
 public:
  explicit GrepTool(FsToolOptions o) : BaseFsTool(o) {
    spec_.name = "grep";
    spec_.description = kGrepDescription;
    json::object mode = Type("string");
    mode["enum"] = json::array{"files_with_matches", "content", "count"};
    mode["default"] = "files_with_matches";
    mode["description"] = kGrepOutputModeDescription;
    json::object positive = Type("integer");
    positive["exclusiveMinimum"] = 0;
    spec_.input_schema = SchemaObject(
        {{"pattern", SchemaString("Text pattern to search for (literal string, not regex).")},
         {"path", Optional(Type("string"),
                           "Directory to search in. Defaults to current working directory.")},
         {"glob", Optional(Type("string"), kGrepGlobDescription)},
         {"output_mode", mode},
         {"max_count",
          Optional(positive,
                   "Optional cap on the total number of matches returned across all files. "
                   "Leave unset to use the configured default. When the cap is hit, results "
                   "are truncated and a note says so; narrow the pattern or path to see the "
                   "rest.")}},
        {"pattern"});
  }

  ToolResult Invoke(ToolContext& ctx, const json::object& args) override {
    std::string pattern = ArgString(args, "pattern");
    std::string path = ctx.root;
    if (auto p = ArgOptString(args, "path")) {
      auto checked = CheckPath(ctx, *p, FsOperation::kRead);
      if (!checked) return checked.error();
      path = *checked;
    }
    std::string mode_s = ArgString(args, "output_mode", "files_with_matches");
    GrepMode mode = mode_s == "content" ? GrepMode::kContent
                    : mode_s == "count" ? GrepMode::kCount
                                        : GrepMode::kFilesWithMatches;
    int64_t cap = ArgOptInt(args, "max_count").value_or(options_.grep_max_count);
    if (cap <= 0) cap = options_.grep_max_count;

    auto found = Search(*ctx.sandbox, pattern, path, ArgOptString(args, "glob").value_or(""), cap);
    if (!found) return ToolResult::Err(found.error());
    bool truncated = found->truncated;
    std::vector<GrepMatch>& matches = found->matches;
    if (static_cast<int64_t>(matches.size()) > cap) {
      truncated = true;
      matches.resize(static_cast<size_t>(cap));
    }
    bool had_matches = !matches.empty();
    std::vector<GrepLine> lines;
    lines.reserve(matches.size());
    for (auto& m : matches) {
      if (Denied(ctx, FsOperation::kRead, m.path)) continue;
      std::string text = std::move(m.text);
      // grep prints the line without its "\n" (a "\r" before it stays).
      if (!text.empty() && text.back() == '\n') text.pop_back();
      lines.push_back({std::move(m.path), m.line, std::move(text)});
    }
    return ToolResult::Ok(FormatGrepToolResult(lines, mode, pattern, truncated, had_matches));
  }

 private:
  // The matches of a literal search, as deepagents' sandbox grep (grep -rF or
  // rg -F) finds them: a base that cannot be searched has no matches, and
  // .git directories below the base are skipped. One more than `cap` tells
  // "exactly cap" from "cut".
  static tl::expected<GrepResult, std::string> Search(Sandbox& sb, const std::string& pattern,
                                                      const std::string& base,
                                                      const std::string& glob, int64_t cap) {
    GrepRequest req;
    req.pattern = pattern;
    req.regex = false;
    req.path = base;
    // deepagents escapes braces for rg (GNU grep --include has none either).
    req.glob = glob.find('/') == std::string::npos
                   ? ReplaceAll(ReplaceAll(glob, "{", "\\{"), "}", "\\}")
                   : glob;
    req.output_mode = GrepOutputMode::kContent;
    size_t want = static_cast<size_t>(cap) + 1;
    constexpr size_t kLargest = 1000000;
    for (;;) {
      req.max_count = std::min(want, kLargest);
      auto r = sb.Grep(req);
      if (!r) {
        switch (r.error().code) {
          case ErrorCode::kNotFound:
          case ErrorCode::kPermissionDenied:
          case ErrorCode::kNotDirectory:
            return GrepResult{};
          default:
            return tl::unexpected("Path '" + base + "': " + r.error().message);
        }
      }
      const size_t returned = r->matches.size();
      std::erase_if(r->matches, [&](const GrepMatch& m) { return UnderGitDir(base, m.path); });
      if (!r->truncated || r->matches.size() >= want || req.max_count >= kLargest) {
        return std::move(*r);
      }
      want = std::min(kLargest, want * 4 + returned);
    }
  }

  // True when a directory named .git lies between `base` and the match.
  static bool UnderGitDir(std::string_view base, std::string_view path) {
    if (!PathIsWithin(path, base) || path.size() <= base.size()) return false;
    std::string_view rel = path.substr(base == "/" ? 1 : base.size() + 1);
    size_t slash = rel.rfind('/');
    if (slash == std::string_view::npos) return false;
    for (std::string_view dir : Split(rel.substr(0, slash), '/')) {
      if (dir == ".git") return true;
    }
    return false;
  }
};

}  // namespace

ToolPtr MakeLsTool(FsToolOptions o) { return std::make_shared<LsTool>(o); }
ToolPtr MakeReadFileTool(FsToolOptions o) { return std::make_shared<ReadFileTool>(o); }
ToolPtr MakeWriteFileTool(FsToolOptions o) { return std::make_shared<WriteFileTool>(o); }
ToolPtr MakeEditFileTool(FsToolOptions o) { return std::make_shared<EditFileTool>(o); }
ToolPtr MakeDeleteTool(FsToolOptions o) { return std::make_shared<DeleteTool>(o); }
ToolPtr MakeGlobTool(FsToolOptions o) { return std::make_shared<GlobTool>(o); }
ToolPtr MakeGrepTool(FsToolOptions o) { return std::make_shared<GrepTool>(o); }

std::vector<ToolPtr> MakeFilesystemTools(FsToolOptions o) {
  return {MakeLsTool(o),     MakeReadFileTool(o), MakeWriteFileTool(o), MakeEditFileTool(o),
          MakeDeleteTool(o), MakeGlobTool(o),     MakeGrepTool(o)};
}

bool IsFilesystemToolName(std::string_view name) {
  return name == "ls" || name == "read_file" || name == "write_file" || name == "edit_file" ||
         name == "delete" || name == "glob" || name == "grep";
}

std::string_view FileTypeForPath(std::string_view path) {
  static const std::map<std::string, std::string_view> kTypes = {
      {".png", "image"},  {".jpeg", "image"}, {".jpg", "image"},  {".webp", "image"},
      {".gif", "image"},  {".heic", "image"}, {".heif", "image"}, {".mp4", "video"},
      {".mpeg", "video"}, {".mov", "video"},  {".avi", "video"},  {".flv", "video"},
      {".mpg", "video"},  {".webm", "video"}, {".wmv", "video"},  {".3gpp", "video"},
      {".mkv", "video"},  {".wav", "audio"},  {".mp3", "audio"},  {".aiff", "audio"},
      {".aac", "audio"},  {".ogg", "audio"},  {".flac", "audio"}, {".pdf", "file"},
      {".ppt", "file"},   {".pptx", "file"},
  };
  auto it = kTypes.find(Ext(path));
  return it == kTypes.end() ? std::string_view("text") : it->second;
}

std::string MimeTypeForPath(std::string_view path) {
  static const std::map<std::string, std::string> kMime = {
      {".png", "image/png"},
      {".jpg", "image/jpeg"},
      {".jpeg", "image/jpeg"},
      {".gif", "image/gif"},
      {".webp", "image/webp"},
      {".heic", "image/heic"},
      {".heif", "image/heif"},
      {".pdf", "application/pdf"},
      {".mp4", "video/mp4"},
      {".mpeg", "video/mpeg"},
      {".mpg", "video/mpeg"},
      {".mov", "video/quicktime"},
      {".avi", "video/x-msvideo"},
      {".webm", "video/webm"},
      {".wav", "audio/x-wav"},
      {".mp3", "audio/mpeg"},
      {".ogg", "audio/ogg"},
      {".flac", "audio/flac"},
      {".aac", "audio/aac"},
      {".mkv", "video/x-matroska"},
      {".ppt", "application/vnd.ms-powerpoint"},
      {".pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation"},
  };
  auto it = kMime.find(Ext(path));
  return it == kMime.end() ? "application/octet-stream" : it->second;
}

}  // namespace deepbox::agent
