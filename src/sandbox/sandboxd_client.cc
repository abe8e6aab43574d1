#include "sandbox/sandboxd_client.h"

#include <fmt/format.h>

#include "common/base64.h"
#include "common/json.h"
#include "net/http_client.h"
#include "net/url.h"

namespace deepbox {
namespace {

using namespace std::chrono_literals;

Error ErrorFromResponse(const net::Response& r, std::string_view what) {
  auto parsed = ParseJsonObject(r.body);
  if (parsed) {
    auto it = parsed->find("error");
    if (it != parsed->end() && it->value().is_object()) {
      const auto& e = it->value().as_object();
      auto code = GetOptString(e, "code").value_or("INTERNAL");
      auto msg = GetOptString(e, "message").value_or("");
      return Error(ErrorCodeFromName(code), msg);
    }
  }
  return Error(r.status == 401 ? ErrorCode::kUnauthenticated : ErrorCode::kInternal,
               fmt::format("{}: sandbox daemon answered HTTP {}: {}", what, r.status,
                           r.body.substr(0, 200)));
}

ExitKind ParseExitKind(std::string_view s) {
  if (s == "signaled") return ExitKind::kSignaled;
  if (s == "timed_out") return ExitKind::kTimedOut;
  if (s == "killed") return ExitKind::kKilled;
  if (s == "spawn_failed") return ExitKind::kSpawnFailed;
  return ExitKind::kExited;
}

FileType ParseFileType(std::string_view s) {
  if (s == "directory") return FileType::kDirectory;
  if (s == "symlink") return FileType::kSymlink;
  if (s == "file") return FileType::kFile;
  return FileType::kOther;
}

int64_t IntOr(const json::object& o, std::string_view key, int64_t dflt) {
  auto it = o.find(key);
  if (it == o.end()) return dflt;
  if (it->value().is_int64()) return it->value().as_int64();
  if (it->value().is_uint64()) return static_cast<int64_t>(it->value().as_uint64());
  if (it->value().is_double()) return static_cast<int64_t>(it->value().as_double());
  return dflt;
}

bool BoolOr(const json::object& o, std::string_view key, bool dflt) {
  auto it = o.find(key);
  return it != o.end() && it->value().is_bool() ? it->value().as_bool() : dflt;
}

std::string StrOr(const json::object& o, std::string_view key) {
  return GetOptString(o, key).value_or("");
}

json::object ExecBody(const ExecRequest& r) {
  json::object o;
  if (!r.argv.empty()) {
    json::array a;
    for (const auto& s : r.argv) a.emplace_back(JsonString(s));
    o["argv"] = std::move(a);
  } else {
    o["shell"] = JsonString(r.shell);
  }
  if (!r.cwd.empty()) o["cwd"] = JsonString(r.cwd);
  if (!r.env.empty()) {
    json::object env;
    for (const auto& [k, v] : r.env) env[k] = JsonString(v);
    o["env"] = std::move(env);
  }
  if (!r.stdin_data.empty()) o["stdin_base64"] = Base64Encode(r.stdin_data);
  if (r.timeout.count() > 0) o["timeout_ms"] = r.timeout.count();
  if (r.max_output_bytes > 0) o["max_output_bytes"] = r.max_output_bytes;
  return o;
}

void FillExit(const json::object& o, ExecResult& out) {
  out.kind = ParseExitKind(StrOr(o, "status"));
  out.exit_code = static_cast<int>(IntOr(o, "exit_code", 0));
  out.signal = static_cast<int>(IntOr(o, "signal", 0));
  out.stdout_truncated = BoolOr(o, "stdout_truncated", false);
  out.stderr_truncated = BoolOr(o, "stderr_truncated", false);
  out.duration = std::chrono::milliseconds(IntOr(o, "duration_ms", 0));
  out.error = StrOr(o, "error");
}

FileInfo ParseFileInfo(const json::object& o) {
  FileInfo f;
  f.path = StrOr(o, "path");
  f.name = StrOr(o, "name");
  f.type = ParseFileType(StrOr(o, "type"));
  f.size = IntOr(o, "size", 0);
  auto mode = StrOr(o, "mode");
  f.mode = mode.empty() ? 0 : static_cast<uint32_t>(std::stoul(mode, nullptr, 8));
  f.modified_at = StrOr(o, "modified_at");
  f.link_target = StrOr(o, "link_target");
  return f;
}

std::string ModeString(uint32_t mode) { return fmt::format("{:04o}", mode & 07777); }

}  // namespace

SandboxdClient::~SandboxdClient() = default;

Result<std::unique_ptr<SandboxdClient>> SandboxdClient::Connect(const std::string& base_url,
                                                                SandboxdClientOptions options) {
  net::ClientOptions http_options;
  http_options.connect_timeout = options.connect_timeout;
  http_options.default_headers = options.default_headers;
  if (!options.token.empty()) {
    http_options.default_headers.Set("Authorization", "Bearer " + options.token);
  }
  http_options.read_idle_timeout =
      0ms;  // commands may be silent for long; requests carry deadlines
  auto http = net::HttpClient::Create(base_url, http_options);
  if (!http) return tl::unexpected(http.error());
  std::unique_ptr<SandboxdClient> client(new SandboxdClient());
  client->http_ = std::move(*http);
  client->options_ = std::move(options);
  net::ClientRequest req;
  req.target = "/deepbox/v1/info";
  req.timeout = client->options_.connect_timeout + 5000ms;
  auto r = client->http_->Send(req);
  if (!r) {
    return MakeError(r.error().code, fmt::format("sandbox daemon at {} is not reachable: {}",
                                                 base_url, r.error().message));
  }
  if (r->status != 200)
    return tl::unexpected(ErrorFromResponse(*r, "connecting to sandbox daemon"));
  auto info = ParseJsonObject(r->body);
  if (!info) return tl::unexpected(info.error());
  client->root_ = StrOr(*info, "root");
  client->id_ = client->options_.id.empty() ? StrOr(*info, "hostname") : client->options_.id;
  return client;
}

bool SandboxdClient::Healthy() {
  net::ClientRequest req;
  req.target = "/deepbox/v1/health";
  req.timeout = 5000ms;
  auto r = http_->Send(req);
  return r && r->status == 200;
}

Result<std::string> SandboxdClient::PostJson(const std::string& target, const std::string& body,
                                             std::chrono::milliseconds timeout) {
  net::ClientRequest req;
  req.method = "POST";
  req.target = target;
  req.headers.Set("Content-Type", "application/json");
  req.body = body;
  req.timeout = timeout;
  auto r = http_->Send(req);
  if (!r) {
    Error e = r.error();
    e.message = fmt::format("sandbox {}: {}", id_, e.message);
    return tl::unexpected(e);
  }
  if (r->status != 200) return tl::unexpected(ErrorFromResponse(*r, target));
  return std::move(r->body);
}

namespace {
std::chrono::milliseconds CommandDeadline(const ExecRequest& r, std::chrono::milliseconds slack) {
  if (r.timeout.count() <= 0) return 0ms;  // the daemon's default applies; no client deadline
  return r.timeout + slack;
}
}  // namespace

Result<ExecResult> SandboxdClient::Exec(const ExecRequest& request) {
  auto body = PostJson("/deepbox/v1/exec", ToJson(ExecBody(request)),
                       CommandDeadline(request, options_.request_slack));
  if (!body) return tl::unexpected(body.error());
  auto o = ParseJsonObject(*body);
  if (!o) return tl::unexpected(o.error());
  ExecResult out;
  FillExit(*o, out);
  out.stdout_data = StrOr(*o, "stdout");
  out.stderr_data = StrOr(*o, "stderr");
  out.combined = StrOr(*o, "output");
  return out;
}

Result<ExecResult> SandboxdClient::ExecStream(const ExecRequest& request,
                                              const OutputCallback& on_output) {
  net::ClientRequest req;
  req.method = "POST";
  req.target = "/deepbox/v1/exec/stream";
  req.headers.Set("Content-Type", "application/json");
  req.body = ToJson(ExecBody(request));
  req.timeout = CommandDeadline(request, options_.request_slack);
  std::string pending;
  std::optional<ExecResult> result;
  std::optional<Error> failure;
  int status = 0;
  std::string error_body;
  auto r = http_->SendStreaming(
      req,
      [&](const net::Response& head) {
        status = head.status;
        return true;
      },
      [&](std::string_view data) {
        if (status != 200) {
          error_body.append(data);
          return true;
        }
        pending.append(data);
        size_t start = 0;
        for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
          auto ev = ParseJsonObject(std::string_view(pending).substr(start, nl - start));
          if (!ev) continue;
          auto type = StrOr(*ev, "type");
          if (type == "stdout" || type == "stderr") {
            if (!on_output(type == "stdout" ? OutputStream::kStdout : OutputStream::kStderr,
                           StrOr(*ev, "data"))) {
              failure = Error(ErrorCode::kCancelled, "command cancelled by the caller");
              return false;
            }
          } else if (type == "keepalive") {
            // An empty delivery lets the caller cancel a silent command.
            if (!on_output(OutputStream::kStdout, std::string_view())) {
              failure = Error(ErrorCode::kCancelled, "command cancelled by the caller");
              return false;
            }
          } else if (type == "exit") {
            ExecResult out;
            FillExit(*ev, out);
            result = out;
          } else if (type == "error") {
            failure = Error(ErrorCodeFromName(StrOr(*ev, "code")), StrOr(*ev, "message"));
          }
        }
        pending.erase(0, start);
        return true;
      });
  if (failure) return tl::unexpected(*failure);
  if (!r) {
    Error e = r.error();
    e.message = fmt::format("sandbox {}: {}", id_, e.message);
    return tl::unexpected(e);
  }
  if (status != 200) {
    net::Response resp;
    resp.status = status;
    resp.body = error_body;
    return tl::unexpected(ErrorFromResponse(resp, "exec/stream"));
  }
  if (!result) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("sandbox {}: output stream ended without an exit status "
                                 "(the daemon or sandbox went away)",
                                 id_));
  }
  return *result;
}

Result<FileInfo> SandboxdClient::Stat(const std::string& path) {
  json::object o;
  o["path"] = JsonString(path);
  auto body = PostJson("/deepbox/v1/fs/stat", ToJson(o), options_.file_op_timeout);
  if (!body) return tl::unexpected(body.error());
  auto r = ParseJsonObject(*body);
  if (!r) return tl::unexpected(r.error());
  return ParseFileInfo(*r);
}

Result<std::vector<FileInfo>> SandboxdClient::List(const std::string& path) {
  json::object o;
  o["path"] = JsonString(path);
  auto body = PostJson("/deepbox/v1/fs/list", ToJson(o), options_.file_op_timeout);
  if (!body) return tl::unexpected(body.error());
  // A listing is hundreds of small strings and objects: parse it into one
  // arena (freed at once) instead of a heap allocation each.
  json::monotonic_resource arena(body->size() * 2 + 1024);
  boost::system::error_code ec;
  json::value v = json::parse(*body, ec, &arena);
  if (ec || !v.is_object()) {
    auto r = ParseJsonObject(*body);  // for its error message
    if (!r) return tl::unexpected(r.error());
    return MakeError(ErrorCode::kInternal, "sandbox daemon sent an invalid listing");
  }
  const json::object& r = v.as_object();
  std::vector<FileInfo> out;
  if (auto it = r.find("entries"); it != r.end() && it->value().is_array()) {
    const auto& entries = it->value().as_array();
    out.reserve(entries.size());
    for (const auto& e : entries) {
      if (e.is_object()) out.push_back(ParseFileInfo(e.as_object()));
    }
  }
  return out;
}

Result<ReadResult> SandboxdClient::Read(const std::string& path, const ReadOptions& options) {
  json::object o;
  o["path"] = JsonString(path);
  o["encoding"] = "base64";
  if (options.line_offset) o["line_offset"] = *options.line_offset;
  if (options.line_limit) o["line_limit"] = *options.line_limit;
  if (options.byte_offset) o["byte_offset"] = *options.byte_offset;
  if (options.byte_length) o["byte_length"] = *options.byte_length;
  if (options.max_bytes > 0) o["max_bytes"] = options.max_bytes;
  auto body = PostJson("/deepbox/v1/fs/read", ToJson(o), options_.file_op_timeout);
  if (!body) return tl::unexpected(body.error());
  auto r = ParseJsonObject(*body);
  if (!r) return tl::unexpected(r.error());
  ReadResult out;
  auto decoded = Base64Decode(StrOr(*r, "content_base64"));
  if (!decoded) return MakeError(ErrorCode::kInternal, "sandbox daemon sent invalid base64");
  out.content = std::move(*decoded);
  out.binary = BoolOr(*r, "binary", false);
  out.truncated = BoolOr(*r, "truncated", false);
  out.size = IntOr(*r, "size", 0);
  out.total_lines = IntOr(*r, "total_lines", -1);
  out.start_line = IntOr(*r, "start_line", 0);
  out.lines_returned = IntOr(*r, "lines_returned", 0);
  out.more_lines = BoolOr(*r, "more_lines", false);
  return out;
}

Status SandboxdClient::Write(const std::string& path, std::string_view content, uint32_t mode) {
  json::object o;
  o["path"] = JsonString(path);
  o["content_base64"] = Base64Encode(content);
  o["mode"] = ModeString(mode);
  auto body = PostJson("/deepbox/v1/fs/write", ToJson(o), options_.file_op_timeout);
  if (!body) return tl::unexpected(body.error());
  return {};
}

Result<EditResult> SandboxdClient::Edit(const std::string& path, const std::string& old_string,
                                        const std::string& new_string, bool replace_all) {
  json::object o;
  o["path"] = JsonString(path);
  o["old_string"] = JsonString(old_string);
  o["new_string"] = JsonString(new_string);
  o["replace_all"] = replace_all;
  auto body = PostJson("/deepbox/v1/fs/edit", ToJson(o), options_.file_op_timeout);
  if (!body) return tl::unexpected(body.error());
  auto r = ParseJsonObject(*body);
  if (!r) return tl::unexpected(r.error());
  return EditResult{static_cast<int>(IntOr(*r, "occurrences", 0))};
}

Status SandboxdClient::Mkdir(const std::string& path, bool parents) {
  json::object o;
  o["path"] = JsonString(path);
  o["parents"] = parents;
  auto body = PostJson("/deepbox/v1/fs/mkdir", ToJson(o), options_.file_op_timeout);
  if (!body) return tl::unexpected(body.error());
  return {};
}

Status SandboxdClient::Move(const std::string& from, const std::string& to, bool overwrite) {
  json::object o;
  o["from"] = JsonString(from);
  o["to"] = JsonString(to);
  o["overwrite"] = overwrite;
  auto body = PostJson("/deepbox/v1/fs/move", ToJson(o), options_.file_op_timeout);
  if (!body) return tl::unexpected(body.error());
  return {};
}

Status SandboxdClient::Delete(const std::string& path, bool recursive) {
  json::object o;
  o["path"] = JsonString(path);
  o["recursive"] = recursive;
  auto body = PostJson("/deepbox/v1/fs/delete", ToJson(o), options_.file_op_timeout);
  if (!body) return tl::unexpected(body.error());
  return {};
}

Result<GlobResult> SandboxdClient::Glob(const std::string& pattern, const std::string& path,
                                        size_t max_results) {
  json::object o;
  o["pattern"] = JsonString(pattern);
  if (!path.empty()) o["path"] = JsonString(path);
  if (max_results > 0) o["max_results"] = max_results;
  auto body = PostJson("/deepbox/v1/fs/glob", ToJson(o), options_.file_op_timeout);
  if (!body) return tl::unexpected(body.error());
  auto r = ParseJsonObject(*body);
  if (!r) return tl::unexpected(r.error());
  GlobResult out;
  out.truncated = BoolOr(*r, "truncated", false);
  if (auto it = r->find("paths"); it != r->end() && it->value().is_array()) {
    for (const auto& p : it->value().as_array()) {
      if (p.is_string()) out.paths.emplace_back(p.as_string());
    }
  }
  return out;
}

Result<GrepResult> SandboxdClient::Grep(const GrepRequest& request) {
  json::object o;
  o["pattern"] = JsonString(request.pattern);
  o["regex"] = request.regex;
  o["case_insensitive"] = request.case_insensitive;
  if (!request.path.empty()) o["path"] = JsonString(request.path);
  if (!request.glob.empty()) o["glob"] = JsonString(request.glob);
  o["output_mode"] = request.output_mode == GrepOutputMode::kContent ? "content"
                     : request.output_mode == GrepOutputMode::kFilesWithMatches
                         ? "files_with_matches"
                         : "count";
  if (request.max_count > 0) o["max_count"] = request.max_count;
  auto body = PostJson("/deepbox/v1/fs/grep", ToJson(o), options_.file_op_timeout);
  if (!body) return tl::unexpected(body.error());
  auto r = ParseJsonObject(*body);
  if (!r) return tl::unexpected(r.error());
  GrepResult out;
  out.truncated = BoolOr(*r, "truncated", false);
  if (auto it = r->find("matches"); it != r->end() && it->value().is_array()) {
    for (const auto& m : it->value().as_array()) {
      if (!m.is_object()) continue;
      const auto& mo = m.as_object();
      out.matches.push_back({StrOr(mo, "path"), IntOr(mo, "line", 0), StrOr(mo, "text")});
    }
  }
  if (auto it = r->find("files"); it != r->end() && it->value().is_array()) {
    for (const auto& p : it->value().as_array()) {
      if (p.is_string()) out.files.emplace_back(p.as_string());
    }
  }
  if (auto it = r->find("counts"); it != r->end() && it->value().is_array()) {
    for (const auto& c : it->value().as_array()) {
      if (!c.is_object()) continue;
      out.counts.emplace_back(StrOr(c.as_object(), "path"), IntOr(c.as_object(), "count", 0));
    }
  }
  return out;
}

Result<std::string> SandboxdClient::Download(const std::string& path) {
  net::ClientRequest req;
  req.target = "/deepbox/v1/fs/raw?path=" + net::PercentEncode(path);
  req.timeout = options_.file_op_timeout;
  auto r = http_->Send(req);
  if (!r) return tl::unexpected(r.error());
  if (r->status != 200) return tl::unexpected(ErrorFromResponse(*r, "download"));
  return std::move(r->body);
}

Status SandboxdClient::Upload(const std::string& path, std::string_view content, uint32_t mode) {
  net::ClientRequest req;
  req.method = "PUT";
  req.target = "/deepbox/v1/fs/raw?path=" + net::PercentEncode(path) + "&mode=" + ModeString(mode);
  req.headers.Set("Content-Type", "application/octet-stream");
  req.body = std::string(content);
  req.timeout = options_.file_op_timeout;
  auto r = http_->Send(req);
  if (!r) return tl::unexpected(r.error());
  if (r->status != 200) return tl::unexpected(ErrorFromResponse(*r, "upload"));
  return {};
}

}  // namespace deepbox
