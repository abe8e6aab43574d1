// Upstream-compatible endpoints, so upstream clients work against deepbox:
//  - the legacy python-runtime API (the k8s-agent-sandbox Python SDK default):
//    GET /, POST /execute, POST /upload, GET /download|list|exists/{path};
//  - the upstream sandboxd REST API: /v1/files/{path}, /v1/health, /v1/metadata.
// Shapes and status codes follow the upstream servers (reference:
// shared/reference/agent-sandbox.md §4), including their own error shapes.
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>

#include "common/json.h"
#include "common/parse_number.h"
#include "sandboxd/fs/workspace.h"
#include "sandboxd/proc/runner.h"
#include "sandboxd/server/daemon.h"
#include "sandboxd/server/multipart.h"
#include "sandboxd/server/shlex.h"

extern char** environ;

namespace deepbox::sandboxd {
namespace {

net::Response Message(int status, const std::string& message) {
  json::object o;
  o["message"] = JsonString(message);
  return JsonResponse(status, ToJson(o));
}

// Upstream sandboxd's flat error shape: {"code","message"}.
net::Response V1Error(const Error& error) {
  json::object o;
  o["code"] = std::string(ErrorCodeName(error.code));
  o["message"] = JsonString(error.message);
  int status = ErrorCodeHttpStatus(error.code);
  if (error.code == ErrorCode::kIsDirectory || error.code == ErrorCode::kNotDirectory) status = 400;
  return JsonResponse(status, ToJson(o));
}

// Legacy paths are relative to the root ("/a.txt" and "a.txt" alike).
std::string LegacyPath(std::string_view p) {
  while (p.starts_with('/')) p.remove_prefix(1);
  return std::string(p);
}

}  // namespace

bool Daemon::HandleUpstream(net::Request& request, net::ResponseWriter& writer) {
  const std::string& m = request.method;
  std::string_view path = request.path;
  if (path == "/" && m == "GET") {
    (void)writer.Send(
        JsonResponse(200, R"({"status":"ok","message":"Sandbox Runtime is active."})"));
  } else if (path == "/execute" && m == "POST") {
    (void)writer.Send(LegacyExecute(request));
  } else if (path == "/upload" && m == "POST") {
    (void)writer.Send(LegacyUpload(request));
  } else if (path.starts_with("/download/") && m == "GET") {
    LegacyDownload(request, path.substr(10), writer);
  } else if (path.starts_with("/list/") && m == "GET") {
    (void)writer.Send(LegacyList(path.substr(6)));
  } else if (path.starts_with("/exists/") && m == "GET") {
    (void)writer.Send(LegacyExists(path.substr(8)));
  } else if (path == "/v1/health" && (m == "GET" || m == "HEAD")) {
    (void)writer.Send(V1Health());
  } else if (path == "/v1/metadata" && m == "GET") {
    (void)writer.Send(V1Metadata());
  } else if (path == "/v1/files" || path.starts_with("/v1/files/")) {
    V1Files(request, path.size() > 10 ? path.substr(10) : std::string_view(), writer);
  } else {
    return false;
  }
  return true;
}

net::Response Daemon::LegacyExecute(const net::Request& request) {
  auto body = ParseJsonObject(request.body);
  if (!body)
    return JsonResponse(422, R"({"detail":"request body must be JSON with a 'command' string"})");
  auto command = GetString(*body, "command");
  if (!command) return JsonResponse(422, R"({"detail":"field 'command' is required"})");
  // The SDK's command_timeout (k8s-agent-sandbox >= 1.0): a limit for this
  // command instead of the daemon's, reported back as "timed_out".
  std::chrono::milliseconds timeout = config_.legacy_exec_timeout;
  if (auto it = body->find("timeout_seconds"); it != body->end() && !it->value().is_null()) {
    const json::value& v = it->value();
    double seconds = -1;
    if (v.is_double()) seconds = v.get_double();
    if (v.is_int64()) seconds = static_cast<double>(v.get_int64());
    if (v.is_uint64()) seconds = static_cast<double>(v.get_uint64());
    // Finite, positive, at most a year (the comparison is false for NaN).
    if (!(seconds > 0 && seconds <= 365.0 * 24 * 3600))
      return JsonResponse(422, R"({"detail":"field 'timeout_seconds' must be a positive number"})");
    timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
  }
  auto reply = [](const std::string& out, const std::string& err, int code, bool timed_out) {
    json::object o;
    o["stdout"] = JsonString(out);
    o["stderr"] = JsonString(err);
    o["exit_code"] = code;
    o["timed_out"] = timed_out;
    return JsonResponse(200, ToJson(o));
  };
  auto args = ShlexSplit(*command);
  if (!args) return reply("", "Malformed command syntax: " + args.error().message, 1, false);
  if (args->empty()) return reply("", "No command provided", 1, false);
  proc::CommandSpec spec = proc::CommandSpec::Argv(std::move(*args));
  spec.cwd = root_.path();
  spec.inherit_env = true;
  spec.timeout = timeout;
  spec.kill_grace = std::chrono::milliseconds(0);  // upstream SIGKILLs the group at once
  spec.max_stdout_bytes = spec.max_stderr_bytes = config_.max_output_bytes;
  spec.max_combined_bytes = 0;
  proc::RunResult r = proc::Run(spec);
  if (auto* failed = std::get_if<proc::SpawnFailed>(&r.outcome)) {
    return reply("", "Failed to execute command: " + failed->error.message, 1, false);
  }
  if (std::holds_alternative<proc::TimedOut>(r.outcome)) {
    return reply(r.stdout_data,
                 r.stderr_data + fmt::format("Command timed out after {:g} seconds",
                                             static_cast<double>(timeout.count()) / 1000),
                 124, true);
  }
  return reply(r.stdout_data, r.stderr_data, proc::ShellExitCode(r.outcome), false);
}

net::Response Daemon::LegacyUpload(const net::Request& request) {
  auto parts = ParseMultipart(request.Header("Content-Type").value_or(""), request.body);
  if (!parts)
    return JsonResponse(422, ToJson(json::object{{"detail", JsonString(parts.error().message)}}));
  for (const auto& part : *parts) {
    if (part.name != "file") continue;
    std::string dest = LegacyPath(part.filename);
    if (dest.empty()) return Message(400, "Upload needs a filename");
    auto w = fs::Write(root_, dest, part.data);
    if (!w) {
      if (w.error().code == ErrorCode::kPermissionDenied) return Message(403, "Access denied");
      return Message(500, fmt::format("Failed to upload file: {}", w.error().message));
    }
    return Message(200, fmt::format("File '{}' uploaded successfully.", part.filename));
  }
  return JsonResponse(422, R"({"detail":"multipart field 'file' is required"})");
}

void Daemon::LegacyDownload(const net::Request&, std::string_view path,
                            net::ResponseWriter& writer) {
  std::string rel = LegacyPath(path);
  auto st = fs::OpenForRead(root_, rel);
  if (!st) {
    if (st.error().code == ErrorCode::kPermissionDenied) {
      (void)writer.Send(Message(403, "Access denied"));
    } else {
      (void)writer.Send(Message(404, "File not found"));
    }
    return;
  }
  RawDownloadPath(rel, writer, false);
}

net::Response Daemon::LegacyList(std::string_view path) {
  auto list = fs::List(root_, LegacyPath(path));
  if (!list) {
    if (list.error().code == ErrorCode::kPermissionDenied) return Message(403, "Access denied");
    return Message(404, "Path is not a directory");
  }
  json::array out;
  for (const auto& e : list->entries) {
    json::object o;
    o["name"] = JsonString(e.name);
    o["size"] = e.size;
    o["type"] = e.type == fs::FileType::kDirectory ? "directory" : "file";
    o["mod_time"] = static_cast<double>(e.mtime_epoch) + static_cast<double>(e.mtime_nsec) / 1e9;
    out.emplace_back(std::move(o));
  }
  return JsonResponse(200, ToJson(out));
}

net::Response Daemon::LegacyExists(std::string_view path) {
  std::string rel = LegacyPath(path);
  auto st = fs::Stat(root_, rel);
  json::object o;
  o["path"] = JsonString(rel);
  o["exists"] = st.has_value();
  return JsonResponse(200, ToJson(o));
}

net::Response Daemon::V1Health() const {
  json::object o;
  o["status"] = shutting_down_ ? "shutting_down" : "ok";
  o["uptime_seconds"] =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_)
          .count();
  return JsonResponse(shutting_down_ ? 503 : 200, ToJson(o));
}

net::Response Daemon::V1Metadata() const {
  json::object env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view name = kv.substr(0, eq);
    if (!name.starts_with(config_.metadata_env_prefix)) continue;
    std::string upper(name);
    for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    bool secret = false;
    for (std::string_view word : {"TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "KEY"}) {
      if (upper.find(word) != std::string::npos) secret = true;
    }
    if (!secret) env[name] = JsonString(kv.substr(eq + 1));
  }
  json::object o;
  o["env"] = std::move(env);
  return JsonResponse(200, ToJson(o));
}

void Daemon::V1Files(net::Request& request, std::string_view path, net::ResponseWriter& writer) {
  std::string rel(path);
  const std::string& m = request.method;
  if (m == "GET" || m == "HEAD") {
    auto st = fs::Stat(root_, rel);
    if (!st) {
      (void)writer.Send(V1Error(st.error()));
      return;
    }
    if (st->type == fs::FileType::kDirectory ||
        (st->type == fs::FileType::kSymlink && fs::List(root_, rel).has_value())) {
      auto list = fs::List(root_, rel);
      if (!list) {
        (void)writer.Send(V1Error(list.error()));
        return;
      }
      json::array entries;
      for (const auto& e : list->entries) {
        json::object o;
        o["name"] = JsonString(e.name);
        o["size"] = e.size;
        o["type"] = std::string(fs::FileTypeName(e.type));
        o["modified_at"] = e.mtime;
        o["mode"] = fmt::format("{:04o}", e.mode);
        entries.emplace_back(std::move(o));
      }
      json::object o;
      o["path"] = JsonString(rel.empty() ? "/" : rel);
      o["entries"] = std::move(entries);
      (void)writer.Send(JsonResponse(200, ToJson(o)));
      return;
    }
    if (m == "HEAD") {
      net::Response r;
      r.headers.Set("Content-Type", "application/octet-stream");
      r.headers.Set("Content-Length", std::to_string(st->size));
      (void)writer.Send(r);
      return;
    }
    RawDownloadPath(rel, writer, /*v1_errors=*/true);
    return;
  }
  if (m == "PUT") {
    auto mode_text = request.Query("mode");
    uint32_t mode = 0644;
    if (mode_text) {
      bool ok = mode_text->size() == 4 && (*mode_text)[0] == '0' &&
                mode_text->find_first_not_of("01234567") == std::string::npos;
      if (!ok) {
        (void)writer.Send(
            V1Error(Error(ErrorCode::kInvalidArgument, "mode must match ^0[0-7]{3}$")));
        return;
      }
      mode = ParseFileMode(*mode_text).value_or(0644);  // checked above
    }
    std::string_view data = request.body;
    std::vector<FormPart> parts;
    auto ctype = request.Header("Content-Type").value_or("");
    if (ctype.starts_with("multipart/form-data")) {
      auto parsed = ParseMultipart(ctype, request.body);
      if (!parsed) {
        (void)writer.Send(V1Error(parsed.error()));
        return;
      }
      parts = std::move(*parsed);
      auto it = std::find_if(parts.begin(), parts.end(),
                             [](const FormPart& p) { return p.name == "file"; });
      if (it == parts.end()) {
        (void)writer.Send(
            V1Error(Error(ErrorCode::kInvalidArgument, "multipart field 'file' is required")));
        return;
      }
      data = it->data;
    }
    deepbox::fs::WriteOptions wo;
    wo.mode = mode;
    auto w = fs::Write(root_, rel, data, wo);
    if (!w) {
      Error e = w.error();
      if (e.code == ErrorCode::kIsDirectory) e.code = ErrorCode::kInvalidArgument;
      (void)writer.Send(V1Error(e));
      return;
    }
    net::Response r;
    r.status = 204;
    (void)writer.Send(r);
    return;
  }
  if (m == "DELETE") {
    bool recursive = request.Query("recursive").value_or("") == "true";
    auto d = fs::Delete(root_, rel, recursive);
    if (!d) {
      (void)writer.Send(V1Error(d.error()));
      return;
    }
    net::Response r;
    r.status = 204;
    (void)writer.Send(r);
    return;
  }
  net::Response r = V1Error(Error(ErrorCode::kInvalidArgument, "method not allowed"));
  r.status = 405;
  (void)writer.Send(r);
}

}  // namespace deepbox::sandboxd
