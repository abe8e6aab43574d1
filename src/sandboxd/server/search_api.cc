// glob, grep and tree: /deepbox/v1/fs/glob, /deepbox/v1/fs/grep, /deepbox/v1/fs/tree.
#include <fmt/format.h>

#include "common/json.h"
#include "sandboxd/fs/glob.h"
#include "sandboxd/fs/grep.h"
#include "sandboxd/fs/tree.h"
#include "sandboxd/server/daemon.h"
#include "sandboxd/server/fs_json.h"

namespace deepbox::sandboxd {

net::Response Daemon::Glob(const json::object& body) {
  auto pattern = GetString(body, "pattern");
  if (!pattern) return ErrorResponse(pattern.error());
  auto path = GetOptStringChecked(body, "path");
  if (!path) return ErrorResponse(path.error());
  auto max = GetOptInt(body, "max_results");
  if (!max) return ErrorResponse(max.error());
  fs::GlobOptions options;
  options.path = path->value_or("");
  if (*max) {
    if (**max <= 0)
      return ErrorResponse(Error(ErrorCode::kInvalidArgument, "max_results must be positive"));
    options.max_results = static_cast<size_t>(std::min<int64_t>(**max, 1000000));
  }
  auto r = fs::Glob(files_root(), *pattern, options);
  if (!r) return ErrorResponse(r.error());
  json::array paths;
  for (const auto& p : r->paths) paths.emplace_back(JsonString(p));
  json::object o;
  o["paths"] = std::move(paths);
  o["truncated"] = r->truncated;
  o["unreadable"] = r->unreadable;
  return JsonResponse(200, ToJson(o));
}

// {"path"?, "max_entries"?, "skip_dirs"?: [names]} -> {"entries": [[path
// relative to the base, size, mtime_ns, mode, "f" | "l"], ...] sorted by
// path, "truncated", "unreadable"}: arrays, since a project has thousands.
net::Response Daemon::Tree(const json::object& body) {
  auto path = GetOptStringChecked(body, "path");
  if (!path) return ErrorResponse(path.error());
  auto max = GetOptInt(body, "max_entries");
  if (!max) return ErrorResponse(max.error());
  fs::TreeOptions options;
  options.path = path->value_or("");
  if (*max) {
    if (**max <= 0)
      return ErrorResponse(Error(ErrorCode::kInvalidArgument, "max_entries must be positive"));
    options.max_entries = static_cast<size_t>(std::min<int64_t>(**max, 1000000));
  }
  if (const json::value* skip = body.if_contains("skip_dirs"); skip != nullptr) {
    if (!skip->is_array() || skip->as_array().size() > 1000) {
      return ErrorResponse(
          Error(ErrorCode::kInvalidArgument, "skip_dirs must be an array of at most 1000 names"));
    }
    for (const auto& name : skip->as_array()) {
      if (!name.is_string()) {
        return ErrorResponse(Error(ErrorCode::kInvalidArgument, "skip_dirs must hold strings"));
      }
      options.skip_dirs.emplace_back(name.as_string());
    }
  }
  auto r = fs::Tree(files_root(), options);
  if (!r) return ErrorResponse(r.error());
  return JsonResponse(200, TreeJson(*r));
}

net::Response Daemon::Grep(const json::object& body) {
  auto pattern = GetString(body, "pattern");
  if (!pattern) return ErrorResponse(pattern.error());
  if (pattern->empty())
    return ErrorResponse(Error(ErrorCode::kInvalidArgument, "pattern is empty"));
  fs::GrepOptions options;
  auto path = GetOptStringChecked(body, "path");
  auto glob = GetOptStringChecked(body, "glob");
  auto regex = GetOptBool(body, "regex");
  auto ci = GetOptBool(body, "case_insensitive");
  auto max = GetOptInt(body, "max_count");
  if (!path) return ErrorResponse(path.error());
  if (!glob) return ErrorResponse(glob.error());
  if (!regex) return ErrorResponse(regex.error());
  if (!ci) return ErrorResponse(ci.error());
  if (!max) return ErrorResponse(max.error());
  options.path = path->value_or("");
  options.glob = glob->value_or("");
  options.regex = regex->value_or(false);
  options.case_insensitive = ci->value_or(false);
  options.max_count = 1000;
  if (*max) {
    if (**max <= 0)
      return ErrorResponse(Error(ErrorCode::kInvalidArgument, "max_count must be positive"));
    options.max_count = static_cast<size_t>(std::min<int64_t>(**max, 1000000));
  }
  std::string mode = GetOptString(body, "output_mode").value_or("content");
  if (mode == "content") {
    options.output_mode = fs::GrepOutputMode::kContent;
  } else if (mode == "files_with_matches") {
    options.output_mode = fs::GrepOutputMode::kFilesWithMatches;
  } else if (mode == "count") {
    options.output_mode = fs::GrepOutputMode::kCount;
  } else {
    return ErrorResponse(
        Error(ErrorCode::kInvalidArgument,
              fmt::format("output_mode '{}' must be content, files_with_matches or count", mode)));
  }
  auto r = fs::Grep(files_root(), *pattern, options);
  if (!r) return ErrorResponse(r.error());
  json::object o;
  json::array matches;
  for (const auto& m : r->matches) {
    json::object mo;
    mo["path"] = JsonString(m.path);
    mo["line"] = m.line_number;
    mo["text"] = JsonString(m.line);
    if (m.line_truncated) mo["text_truncated"] = true;
    matches.emplace_back(std::move(mo));
  }
  json::array files;
  for (const auto& f : r->files) files.emplace_back(JsonString(f));
  json::array counts;
  for (const auto& c : r->counts) {
    json::object co;
    co["path"] = JsonString(c.path);
    co["count"] = c.count;
    counts.emplace_back(std::move(co));
  }
  o["matches"] = std::move(matches);
  o["files"] = std::move(files);
  o["counts"] = std::move(counts);
  o["truncated"] = r->truncated;
  o["files_searched"] = r->files_searched;
  o["binary_files_skipped"] = r->binary_files_skipped;
  return JsonResponse(200, ToJson(o));
}

}  // namespace deepbox::sandboxd
