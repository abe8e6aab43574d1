#include "agent/tools_fs.h"

#include <algorithm>
#include <map>

#include "agent/background.h"
#include "agent/format.h"
#include "agent/paths.h"
#include "agent/permissions.h"
#include "agent/text.h"
#include "common/base64.h"

namespace deepbox::agent {
namespace {

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

// deepagents error codes for a failed ls.
std::string LsCode(const Error& e) {
  switch (e.code) {
    case ErrorCode::kNotFound:
      return "path_not_found";
    case ErrorCode::kNotDirectory:
      return "not_a_directory";
    case ErrorCode::kPermissionDenied:
      return "permission_denied";
    default:
      return e.message;
  }
}

// deepagents error codes for a failed read.
std::string ReadCode(const Error& e) {
  switch (e.code) {
    case ErrorCode::kNotFound:
      return "file_not_found";
    case ErrorCode::kIsDirectory:
      return "not_a_file";
    case ErrorCode::kPermissionDenied:
      return "permission_denied";
    default:
      return e.message;
  }
}

std::string FileError(const std::string& path, const std::string& code) {
  return "Error: File '" + path + "': " + code;
}

// Resolves the tool's path argument or produces the deepagents error.
Result<std::string> Resolve(const ToolContext& ctx, std::string_view path) {
  return ResolveToolPath(path, ctx.root);
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

// ------------------------------------------------------------------ ls

class LsTool : public BaseFsTool {
 public:
  explicit LsTool(FsToolOptions o) : BaseFsTool(o) {
    spec_.name = "ls";
    spec_.description =
        "List the entries (files and directories) of one directory, as absolute paths.\n\n"
        "Use it to explore the filesystem and find the right file before you read or edit "
        "one; check what exists before calling read_file or edit_file.";
    spec_.input_schema = SchemaObject(
        {{"path", SchemaString("Absolute path of the directory to list (e.g. the workspace "
                               "root). Must be absolute, not relative.")}},
        {"path"});
  }

  ToolResult Invoke(ToolContext& ctx, const json::object& args) override {
    auto path = Resolve(ctx, ArgString(args, "path"));
    if (!path) return ToolResult::Err("Error: " + path.error().message);
    if (Denied(ctx, FsOperation::kRead, *path)) {
      return ToolResult::Err(PermissionDeniedMessage(FsOperation::kRead, *path));
    }
    auto list = ctx.sandbox->List(*path);
    if (!list) {
      return ToolResult::Err("Error: Path '" + *path + "': " + LsCode(list.error()));
    }
    std::vector<std::string> paths;
    paths.reserve(list->size());
    for (const auto& e : *list) paths.push_back(e.path.empty() ? JoinPath(*path, e.name) : e.path);
    return ToolResult::Ok(FormatFilePaths(FilterReadable(ctx, std::move(paths))));
  }
};

// ------------------------------------------------------------------ read_file

class ReadFileTool : public BaseFsTool {
 public:
  explicit ReadFileTool(FsToolOptions o) : BaseFsTool(o) {
    spec_.name = "read_file";
    spec_.description =
        "Read a file from the sandbox filesystem. Assume a path the user gives is valid; a "
        "missing file returns an error.\n\n"
        "Usage:\n"
        "- By default it returns up to 100 lines from the start of the file. Page through "
        "large files with `offset` (0-based first line) and `limit` (line count) rather than "
        "reading them whole.\n"
        "- Each output line is its line number (starting at `offset` + 1), two spaces, then the "
        "source text. The numbers are not part of the file: never put them into edit_file "
        "strings.\n"
        "- Lines longer than 5,000 characters are split into continuation rows numbered like "
        "5.1, 5.2; `limit` counts source lines, not rows.\n"
        "- When several files may be useful, read them in parallel: several read_file calls in "
        "one response.\n"
        "- An empty file returns a system reminder instead of content.\n"
        "- Large tool results may be saved to a file (under large_tool_results/ in the "
        "workspace); the tool message names the path. Read it here, paging with "
        "`offset`/`limit`.\n"
        "- Images (.png, .jpg, .gif, .webp) are returned as images; pagination applies to text "
        "only, so pass just `file_path` for them.\n"
        "- Always read a file before editing it.";
    spec_.input_schema = SchemaObject(
        {{"file_path", SchemaString("Absolute path of the file to read. Must be absolute, not "
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
    auto path = Resolve(ctx, ArgString(args, "file_path"));
    if (!path) return ToolResult::Err("Error: " + path.error().message);
    if (Denied(ctx, FsOperation::kRead, *path)) {
      return ToolResult::Err(PermissionDeniedMessage(FsOperation::kRead, *path));
    }
    int64_t offset = ArgOptInt(args, "offset").value_or(0);
    int64_t limit = ArgOptInt(args, "limit").value_or(kDefaultReadLimit);
    Sandbox& sb = *ctx.sandbox;

    std::string_view type = FileTypeForPath(*path);
    if (type != "text") {
      auto st = sb.Stat(*path);
      if (!st) return ToolResult::Err(FileError(*path, ReadCode(st.error())));
      if (st->is_dir()) return ToolResult::Err(FileError(*path, "not_a_file"));
      if (st->size == 0) return ToolResult::Ok(kEmptyContentWarning);
      return ReadBinary(sb, *path, st->size, type);
    }

    int64_t off = std::max<int64_t>(offset, 0);
    int64_t lim = std::max<int64_t>(limit, 0);
    ReadOptions ro;
    ro.line_offset = off;
    ro.line_limit = std::max<int64_t>(lim, 1);
    ro.max_bytes = static_cast<size_t>(kMaxReadPageBytes);
    auto r = sb.Read(*path, ro);
    if (!r) return ToolResult::Err(FileError(*path, ReadCode(r.error())));
    if (r->size == 0) return ToolResult::Ok(kEmptyContentWarning);
    if (r->binary) return ReadBinary(sb, *path, r->size, "file");
    if (lim == 0) return ToolResult::Ok(NoLinesRequestedWarning(limit));

    // The window's lines (joined with "\n", "\r" already stripped); a line cut
    // by the page byte cap is the last one and is not counted as read.
    std::string_view content = r->content;
    bool partial_tail = r->truncated;
    std::vector<std::string_view> lines = SplitOn(content, '\n');
    size_t got = static_cast<size_t>(std::max<int64_t>(r->lines_returned, 0));
    if (lines.size() > got) lines.resize(got);
    for (auto& l : lines) {
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    }
    if (static_cast<int64_t>(lines.size()) > lim) lines.resize(static_cast<size_t>(lim));
    int64_t returned = static_cast<int64_t>(lines.size()) - (partial_tail ? 1 : 0);
    // No file has INT64_MAX / 4 lines: lines there come from a hostile daemon,
    // and the line arithmetic below would overflow.
    if (lines.empty() || off > INT64_MAX / 4) {
      int64_t total = r->total_lines >= 0 ? r->total_lines : off;
      return ToolResult::Err("Error: Line offset " + std::to_string(off) +
                             " exceeds file length (" + std::to_string(total) + " lines)");
    }
    std::string window_text;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) window_text.push_back('\n');
      window_text.append(lines[i]);
    }
    if (IsBlank(window_text)) return ToolResult::Ok(kEmptyContentWarning);
    if (r->truncated) {
      // As deepagents' sandbox read: the page banner follows the text.
      window_text += kSandboxReadTruncationMsg;
      if (returned <= 0) returned = 1;
    }

    ReadWindow w;
    w.start_line = off + 1;
    w.end_line = off + returned;
    std::optional<int64_t> total;
    if (r->total_lines >= 0) {
      total = r->total_lines;
    } else if (!r->more_lines && !r->truncated) {
      total = *w.end_line;
    }
    w.total_lines = total;
    if (total) {
      if (*w.end_line < *total) w.next_offset = *w.end_line;
    } else {
      w.next_offset = *w.end_line;
    }
    std::string numbered = FormatContentWithLineNumbers(window_text, *w.start_line);
    return ToolResult::Ok(TruncatePaginatedRead(numbered, *path, w, options_.read_char_limit) +
                          ClampedOffsetNotice(offset));
  }

 private:
  ToolResult ReadBinary(Sandbox& sb, const std::string& path, int64_t size, std::string_view type) {
    if (size > kMaxBinaryBytes) {
      return ToolResult::Err(FileError(path, "Binary file exceeds maximum preview size of " +
                                                 std::to_string(kMaxBinaryBytes) + " bytes"));
    }
    auto bytes = sb.Download(path);
    if (!bytes) return ToolResult::Err(FileError(path, ReadCode(bytes.error())));
    if (bytes->empty()) return ToolResult::Ok(kEmptyContentWarning);
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

class WriteFileTool : public BaseFsTool {
 public:
  explicit WriteFileTool(FsToolOptions o) : BaseFsTool(o) {
    spec_.name = "write_file";
    spec_.description =
        "Write a file: create it if missing, or replace its entire content if it exists. "
        "Missing parent directories are created.\n\n"
        "Usage:\n"
        "- Use it to create a new file or to rewrite a whole file; reading the file first is "
        "not required.\n"
        "- To change part of an existing file, prefer edit_file.";
    spec_.input_schema = SchemaObject(
        {{"file_path", SchemaString("Absolute path of the file to write. Must be absolute, not "
                                    "relative.")},
         {"content", SchemaString("The full text content of the file. Required.")}},
        {"file_path", "content"});
  }

  ToolScheduling Scheduling(const json::object& args, std::string_view root) const override {
    return {PathLane(args, root)};
  }

  ToolResult Invoke(ToolContext& ctx, const json::object& args) override {
    auto path = Resolve(ctx, ArgString(args, "file_path"));
    if (!path) return ToolResult::Err("Error: " + path.error().message);
    if (Denied(ctx, FsOperation::kWrite, *path)) {
      return ToolResult::Err(PermissionDeniedMessage(FsOperation::kWrite, *path));
    }
    auto st = ctx.sandbox->Write(*path, ArgString(args, "content"));
    if (!st) {
      return ToolResult::Err("Failed to write file '" + *path + "': " + st.error().message);
    }
    return ToolResult::Ok("Updated file " + *path);
  }
};

// ------------------------------------------------------------------ edit_file

class EditFileTool : public BaseFsTool {
 public:
  explicit EditFileTool(FsToolOptions o) : BaseFsTool(o) {
    spec_.name = "edit_file";
    spec_.description =
        "Replace an exact string in a file.\n\n"
        "Usage:\n"
        "- Read the file with read_file before editing it.\n"
        "- Copy the text exactly as read_file showed it, keeping its indentation, and never "
        "include the line-number prefix (number plus two spaces) in old_string or new_string.\n"
        "- old_string must occur exactly once unless replace_all is true; add surrounding "
        "context to make it unique.\n"
        "- Prefer editing existing files to creating new ones.\n"
        "- Do not add emojis unless the user asks for them.";
    spec_.input_schema = SchemaObject(
        {{"file_path", SchemaString("Absolute path of the file to edit. Must be absolute, not "
                                    "relative.")},
         {"old_string", SchemaString("The exact text to replace. Must be unique in the file "
                                     "unless replace_all is true.")},
         {"new_string", SchemaString("The replacement text (must differ from old_string).")},
         {"replace_all", SchemaBoolean("Replace every occurrence of old_string. If false "
                                       "(default), old_string must be unique.",
                                       false)}},
        {"file_path", "old_string", "new_string"});
  }

  ToolScheduling Scheduling(const json::object& args, std::string_view root) const override {
    return {PathLane(args, root)};
  }

  ToolResult Invoke(ToolContext& ctx, const json::object& args) override {
    auto path = Resolve(ctx, ArgString(args, "file_path"));
    if (!path) return ToolResult::Err("Error: " + path.error().message);
    if (Denied(ctx, FsOperation::kWrite, *path)) {
      return ToolResult::Err(PermissionDeniedMessage(FsOperation::kWrite, *path));
    }
    std::string old_s = ArgString(args, "old_string");
    std::string new_s = ArgString(args, "new_string");
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
        if (!st && st.error().code == ErrorCode::kNotFound) {
          return "Error: File '" + path + "' not found";
        }
        if (st && st->is_dir()) return "Error: '" + path + "' is not a regular file";
        return "Error: String not found in file: '" + old_s + "'";
      }
      case ErrorCode::kConflict:
        return "Error: String '" + old_s +
               "' appears multiple times. Use replace_all=True to replace all occurrences.";
      case ErrorCode::kPermissionDenied:
        return "Error: Permission denied editing file '" + path + "'";
      case ErrorCode::kIsDirectory:
        return "Error: '" + path + "' is not a regular file";
      case ErrorCode::kInvalidArgument: {
        std::string m = AsciiLower(e.message);
        if (m.find("text") != std::string::npos || m.find("utf") != std::string::npos ||
            m.find("binary") != std::string::npos) {
          return "Error: File '" + path + "' is not a text file";
        }
        if (m.find("regular") != std::string::npos) {
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

class DeleteTool : public BaseFsTool {
 public:
  explicit DeleteTool(FsToolOptions o) : BaseFsTool(o) {
    spec_.name = "delete";
    spec_.description =
        "Delete a file or a directory.\n\n"
        "Usage:\n"
        "- Permanently removes the file or directory at the given absolute path.\n"
        "- A directory is removed recursively with everything inside it; delete a directory "
        "in one call rather than file by file.\n"
        "- This cannot be undone: delete only paths you are sure are no longer needed.";
    spec_.input_schema = SchemaObject(
        {{"file_path", SchemaString("Absolute path of the file or directory to delete. Must be "
                                    "absolute, not relative.")}},
        {"file_path"});
  }

  ToolScheduling Scheduling(const json::object& args, std::string_view root) const override {
    return {PathLane(args, root)};
  }

  ToolResult Invoke(ToolContext& ctx, const json::object& args) override {
    auto path = Resolve(ctx, ArgString(args, "file_path"));
    if (!path) return ToolResult::Err("Error: " + path.error().message);
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
      if (st.error().code == ErrorCode::kNotFound) {
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
    spec_.description =
        "Find files whose paths match a glob pattern; returns absolute paths (files only).\n\n"
        "Syntax: `*` (any characters within one path segment), `**` (any number of "
        "directories), `?` (one character), `[abc]` / `[!a]` (character classes) and `{a,b}` "
        "(alternatives), e.g. `*.py`, `src/**/*.py`, `*.{yml,yaml}`.\n\n"
        "A pattern without `/` matches the file name at any depth below the search root "
        "(`*.py` finds `src/app/main.py`). A pattern with `/` matches the path relative to the "
        "search root (`src/**/*.py`); a leading `/` anchors it to the root (`/*.py` finds only "
        "top-level files).\n\n"
        "Names starting with `.` match only when the pattern segment itself starts with `.` "
        "(`.env`, `.github/**/*.yml`). `**` does not descend into dot-directories, so the bare "
        "`*.yml` is broader than `**/*.yml` and is usually what you want.";
    spec_.input_schema = SchemaObject(
        {{"pattern", SchemaString("Glob pattern, e.g. '*.py', '**/*.py', 'src/**/*.md'. "
                                  "Without '/' it matches file names at any depth; with '/' "
                                  "the path relative to the search root.")},
         {"path",
          [] {
            json::object o;
            o["type"] = json::array{"string", "null"};
            o["description"] = "Directory to search from. Defaults to the workspace root.";
            o["default"] = nullptr;
            return o;
          }()}},
        {"pattern"});
  }

  ToolResult Invoke(ToolContext& ctx, const json::object& args) override {
    auto path_arg = ArgOptString(args, "path");
    auto path = Resolve(ctx, path_arg.value_or(ctx.root));
    if (!path) return ToolResult::Err("Error: " + path.error().message);
    if (Denied(ctx, FsOperation::kRead, *path)) {
      return ToolResult::Err(PermissionDeniedMessage(FsOperation::kRead, *path));
    }
    std::string pattern = ArgString(args, "pattern");
    Sandbox* sb = ctx.sandbox;
    std::string dir = *path;
    auto result = CallWithTimeout<Result<GlobResult>>(
        [sb, pattern, dir] { return sb->Glob(pattern, dir, 10000); }, options_.glob_timeout);
    if (!result) return ToolResult::Err(GlobTimeoutMessage());
    if (!*result) {
      const Error& e = result->error();
      std::string code = e.code == ErrorCode::kNotFound           ? "path_not_found"
                         : e.code == ErrorCode::kNotDirectory     ? "not_a_directory"
                         : e.code == ErrorCode::kPermissionDenied ? "permission_denied"
                                                                  : e.message;
      return ToolResult::Err("Error: Path '" + *path + "': " + code);
    }
    GlobResult& g = **result;
    return ToolResult::Ok(FormatGlobResult(FilterReadable(ctx, std::move(g.paths)), g.truncated));
  }
};

// ------------------------------------------------------------------ grep

class GrepTool : public BaseFsTool {
 public:
  explicit GrepTool(FsToolOptions o) : BaseFsTool(o) {
    spec_.name = "grep";
    spec_.description =
        "Search files for a LITERAL text pattern (not a regex).\n\n"
        "The pattern is matched character for character: regex metacharacters have no special "
        "meaning. To find any of several strings, run one grep per string; "
        "`grep(pattern=\"foo|bar\")` looks for the literal text \"foo|bar\", and `.*` or `\\.` "
        "match those characters literally.\n"
        "- If you really need a regex, use the execute tool with `rg '<regex>'` (or "
        "`grep -E`).\n\n"
        "Returns matching files, matching lines or per-file counts according to "
        "`output_mode`. Large tool results saved to files live under large_tool_results/ in "
        "the workspace; grep that directory when you do not know the exact path.";
    json::object path_prop;
    path_prop["type"] = json::array{"string", "null"};
    path_prop["description"] = "Directory (or file) to search. Defaults to the workspace root.";
    path_prop["default"] = nullptr;
    json::object glob_prop;
    glob_prop["type"] = json::array{"string", "null"};
    glob_prop["description"] =
        "Glob (not regex) limiting which files are searched, e.g. '*.py'. Without '/' it "
        "matches the file name at any depth; with '/' the path relative to the search root "
        "(e.g. 'src/**/*.py'). This filters files inside grep; it does not call the glob tool. "
        "Brace expansion ('*.{ts,tsx}') may not be supported everywhere: run one search per "
        "extension for reliable results.";
    glob_prop["default"] = nullptr;
    json::object mode_prop;
    mode_prop["type"] = "string";
    mode_prop["enum"] = json::array{"files_with_matches", "content", "count"};
    mode_prop["default"] = "files_with_matches";
    mode_prop["description"] =
        "Shape of the answer. 'files_with_matches' (default): matching file paths, one per "
        "line. 'content': the matching lines grouped under a '<path>:' header, each indented "
        "as '<line_number>: <line text>' (matched lines only, no context). 'count': one "
        "'<path>: <match_count>' line per file.";
    json::object max_prop;
    max_prop["type"] = json::array{"integer", "null"};
    max_prop["exclusiveMinimum"] = 0;
    max_prop["default"] = nullptr;
    max_prop["description"] =
        "Optional cap on the total number of matches across all files (default 1000). When "
        "the cap is hit the result says it was truncated; narrow the pattern or path to see "
        "the rest.";
    spec_.input_schema = SchemaObject(
        {{"pattern", SchemaString("Text to search for (a literal string, not a regex).")},
         {"path", path_prop},
         {"glob", glob_prop},
         {"output_mode", mode_prop},
         {"max_count", max_prop}},
        {"pattern"});
  }

  ToolResult Invoke(ToolContext& ctx, const json::object& args) override {
    std::string pattern = ArgString(args, "pattern");
    std::string path = ctx.root;
    if (auto p = ArgOptString(args, "path")) {
      auto resolved = Resolve(ctx, *p);
      if (!resolved) return ToolResult::Err("Error: " + resolved.error().message);
      if (Denied(ctx, FsOperation::kRead, *resolved)) {
        return ToolResult::Err(PermissionDeniedMessage(FsOperation::kRead, *resolved));
      }
      path = *resolved;
    }
    std::string mode_s = ArgString(args, "output_mode", "files_with_matches");
    GrepMode mode = mode_s == "content" ? GrepMode::kContent
                    : mode_s == "count" ? GrepMode::kCount
                                        : GrepMode::kFilesWithMatches;
    int64_t cap = ArgOptInt(args, "max_count").value_or(options_.grep_max_count);
    if (cap <= 0) cap = options_.grep_max_count;

    GrepRequest req;
    req.pattern = pattern;
    req.regex = false;
    req.path = path;
    req.glob = ArgOptString(args, "glob").value_or("");
    req.output_mode = GrepOutputMode::kContent;
    req.max_count = static_cast<size_t>(cap) + 1;  // one past the cap proves truncation
    auto r = ctx.sandbox->Grep(req);
    if (!r) {
      const Error& e = r.error();
      std::string code = e.code == ErrorCode::kNotFound           ? "path_not_found"
                         : e.code == ErrorCode::kPermissionDenied ? "permission_denied"
                                                                  : e.message;
      return ToolResult::Err("Path '" + path + "': " + code);
    }
    bool truncated = r->truncated;
    if (static_cast<int64_t>(r->matches.size()) > cap) {
      truncated = true;
      r->matches.resize(static_cast<size_t>(cap));
    }
    bool had_matches = !r->matches.empty();
    std::vector<GrepLine> lines;
    lines.reserve(r->matches.size());
    for (auto& m : r->matches) {
      if (Denied(ctx, FsOperation::kRead, m.path)) continue;
      std::string text = std::move(m.text);
      while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
      lines.push_back({std::move(m.path), m.line, std::move(text)});
    }
    return ToolResult::Ok(FormatGrepToolResult(lines, mode, pattern, truncated, had_matches));
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
