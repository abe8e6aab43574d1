// The deepbox API (/deepbox/v1/...), documented in docs/sandboxd-api.md.
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>

#include "common/base64.h"
#include "common/json.h"
#include "common/parse_number.h"
#include "sandboxd/fs/workspace.h"
#include "sandboxd/proc/runner.h"
#include "sandboxd/server/daemon.h"
#include "sandboxd/server/exec_json.h"
#include "sandboxd/server/exec_records.h"
#include "sandboxd/server/exec_sessions.h"
#include "sandboxd/server/fs_json.h"

namespace deepbox::sandboxd {
namespace {

net::Response Ok(const json::object& o) { return JsonResponse(200, ToJson(o)); }

// "mode": an octal string of permission bits, at most "7777".
Result<uint32_t> ParseMode(const json::object& body, uint32_t dflt) {
  auto text = GetOptStringChecked(body, "mode");
  if (!text) return tl::unexpected(text.error());
  if (!*text) return dflt;
  auto mode = ParseFileMode(**text);
  if (!mode) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("mode '{}' must be octal like \"0644\" (at most 7777)",
                                 text->value().substr(0, 32)));
  }
  return *mode;
}

// Content from "content" (text) or "content_base64".
Result<std::string> ContentField(const json::object& body, std::string_view text_key,
                                 std::string_view b64_key) {
  auto b64 = GetOptStringChecked(body, b64_key);
  if (!b64) return tl::unexpected(b64.error());
  if (*b64) {
    auto decoded = Base64Decode(**b64);
    if (!decoded) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("field '{}' is not valid base64", b64_key));
    }
    return std::move(*decoded);
  }
  auto text = GetOptStringChecked(body, text_key);
  if (!text) return tl::unexpected(text.error());
  return text->value_or("");
}

template <typename T>
Result<T> NonNegative(const json::object& o, std::string_view key, T dflt) {
  auto v = GetOptInt(o, key);
  if (!v) return tl::unexpected(v.error());
  if (!*v) return dflt;
  if (**v < 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("field '{}' must not be negative", key));
  }
  return static_cast<T>(**v);
}

}  // namespace

void Daemon::HandleDeepbox(net::Request& request, net::ResponseWriter& writer) {
  std::string_view path = request.path;
  if (path == "/healthz" || path == "/deepbox/v1/health") {
    (void)writer.Send(Health());
    return;
  }
  constexpr std::string_view kPrefix = "/deepbox/v1/";
  std::string_view rest = path.substr(kPrefix.size());
  const std::string& m = request.method;
  if (rest == "info" && m == "GET") {
    (void)writer.Send(Info());
  } else if (rest == "exec" && m == "POST") {
    (void)writer.Send(Exec(request));
  } else if (rest == "exec/stream" && m == "POST") {
    ExecStream(request, writer);
  } else if (rest == "exec/attach" && m == "POST") {
    ExecAttach(request, writer);
  } else if (rest == "exec/cancel" && m == "POST") {
    (void)writer.Send(ExecCancel(request));
  } else if (rest.starts_with("exec/sessions/") && m == "POST") {
    (void)writer.Send(ExecSessionRequest(request, rest.substr(14)));
  } else if (rest == "processes" || rest.starts_with("processes/")) {
    (void)writer.Send(Processes(request, rest.substr(9)));
  } else if (rest == "fs/raw" && (m == "GET" || m == "HEAD")) {
    RawDownload(request, writer);
  } else if (rest == "fs/raw" && m == "PUT") {
    (void)writer.Send(RawUpload(request));
  } else if (rest == "fs/tar/download" && m == "POST") {
    TarDownload(request, writer);
  } else if (rest == "fs/tar/upload" && m == "PUT") {
    (void)writer.Send(TarUpload(request));
  } else if (rest.starts_with("fs/") && m == "POST") {
    (void)writer.Send(Files(request, rest.substr(3)));
  } else {
    (void)writer.Send(
        ErrorResponse(Error(ErrorCode::kNotFound,
                            fmt::format("no such endpoint: {} {}", request.method, request.path))));
  }
}

net::Response Daemon::Info() const {
  json::object o;
  o["version"] = std::string(kVersion);
  o["root"] = root_.path();
  // Where the native file API is rooted ("/" inside a sandbox; see --files-root).
  o["files_root"] = files_root().path();
  o["pid"] = ::getpid();
  o["uid"] = ::getuid();
  o["gid"] = ::getgid();
  char host[HOST_NAME_MAX + 1] = {};
  ::gethostname(host, sizeof host);
  o["hostname"] = JsonString(host);
  json::object limits;
  limits["default_timeout_ms"] = config_.default_timeout.count();
  limits["max_output_bytes"] = config_.max_output_bytes;
  o["limits"] = std::move(limits);
  // What this daemon's exec API supports beyond v1's first version; clients
  // use these only when listed, so they keep working with older daemons.
  o["features"] = json::array{"exec_output_base64", "exec_stdin_stream", "exec_tty",
                              "exec_attach",        "activity",          "fs_tree"};
  return Ok(o);
}

net::Response Daemon::Exec(const net::Request& request) {
  auto body = ParseJsonObject(request.body);
  if (!body) return ErrorResponse(body.error());
  auto spec = ParseCommandSpec(*body, *this);
  if (!spec) return ErrorResponse(spec.error());
  auto base64 = ParseOutputEncoding(*body);
  if (!base64) return ErrorResponse(base64.error());
  proc::RunResult r = proc::Run(*spec);
  return Ok(RunResultJson(r, *base64));
}

namespace {

// "tty": true (24x80) or {"rows": R, "cols": C}.
Result<std::optional<proc::WindowSize>> ParseTty(const json::object& body) {
  auto it = body.find("tty");
  if (it == body.end() || it->value().is_null()) return std::nullopt;
  if (it->value().is_bool()) {
    if (!it->value().as_bool()) return std::nullopt;
    return proc::WindowSize{};
  }
  if (!it->value().is_object()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "field 'tty' must be true or {\"rows\": R, \"cols\": C}");
  }
  proc::WindowSize size;
  for (auto [key, field] : {std::pair{"rows", &size.rows}, {"cols", &size.cols}}) {
    auto v = GetOptInt(it->value().as_object(), key);
    if (!v) return tl::unexpected(v.error());
    if (!*v) continue;
    if (**v < 1 || **v > 10000) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("tty {} must be between 1 and 10000", key));
    }
    *field = static_cast<uint16_t>(**v);
  }
  return size;
}

// One output event line. Base64 text needs no JSON escaping.
std::string OutputEvent(proc::StreamKind kind, std::string_view data, bool base64) {
  if (!base64) {
    json::object ev;
    ev["type"] = std::string(proc::StreamKindName(kind));
    ev["data"] = JsonString(data);
    return ToJson(ev) + "\n";
  }
  std::string line =
      fmt::format("{{\"type\":\"{}\",\"data_base64\":\"", proc::StreamKindName(kind));
  line += Base64Encode(data);
  line += "\"}\n";
  return line;
}

}  // namespace

void Daemon::ExecStream(const net::Request& request, net::ResponseWriter& writer) {
  auto body = ParseJsonObject(request.body);
  if (!body) {
    (void)writer.Send(ErrorResponse(body.error()));
    return;
  }
  auto spec = ParseCommandSpec(*body, *this);
  if (!spec) {
    (void)writer.Send(ErrorResponse(spec.error()));
    return;
  }
  auto base64 = ParseOutputEncoding(*body);
  auto stdin_stream = GetOptBool(*body, "stdin_stream");
  auto tty = ParseTty(*body);
  if (!base64 || !stdin_stream || !tty) {
    (void)writer.Send(ErrorResponse(!base64         ? base64.error()
                                    : !stdin_stream ? stdin_stream.error()
                                                    : tty.error()));
    return;
  }
  const bool interactive = stdin_stream->value_or(false);
  // An identified exec is recorded so a cut stream can be re-attached to; the
  // same id sent again (a client that lost the answer) attaches, never reruns.
  std::shared_ptr<ExecRecord> record;
  auto exec_id = GetOptStringChecked(*body, "exec_id");
  if (!exec_id) {
    (void)writer.Send(ErrorResponse(exec_id.error()));
    return;
  }
  if (*exec_id && !(*exec_id)->empty()) {
    if (interactive) {
      (void)writer.Send(ErrorResponse(Error(
          ErrorCode::kInvalidArgument, "exec_id is for non-interactive execs (not stdin_stream)")));
      return;
    }
    bool existed = false;
    auto begun = exec_records_->Begin(**exec_id, &existed);
    if (!begun) {
      (void)writer.Send(ErrorResponse(begun.error()));
      return;
    }
    if (existed) {
      StreamRecord(*begun, 0, writer);
      return;
    }
    record = std::move(*begun);
  }
  spec->tty = *tty;
  // An interactive session ends with its client (a disconnect kills it), so it
  // has no default timeout; an explicit timeout_ms still applies.
  if (interactive && !body->contains("timeout_ms")) spec->timeout = std::chrono::milliseconds(0);
  std::shared_ptr<ExecSessions::Session> session;
  if (interactive) {
    auto opened = exec_sessions_->Open(spec->tty.has_value());
    if (!opened) {
      (void)writer.Send(ErrorResponse(opened.error()));
      return;
    }
    session = std::move(*opened);
  }
  net::Headers headers;
  headers.Set("Content-Type", "application/x-ndjson");
  headers.Set("Cache-Control", "no-store");
  if (!writer.BeginStream(200, headers)) {
    if (session) exec_sessions_->End(session);
    return;
  }
  proc::StreamCallbacks cb;
  cb.utf8_align = !*base64;  // exact bytes need no alignment
  cb.idle_interval = config_.keepalive_interval;
  // Without a record, a lost client cancels the command. With one, a lost
  // client has kOrphanGrace to re-attach (a cut stream is not a cancel); the
  // client cancels explicitly with POST /deepbox/v1/exec/cancel.
  constexpr auto kOrphanGrace = std::chrono::seconds(30);
  bool client_lost = false;
  std::chrono::steady_clock::time_point unattended_since;
  auto keep_running = [&] {
    if (!record) return !client_lost;
    if (record->cancelled()) return false;
    if (!client_lost) return true;
    const auto now = std::chrono::steady_clock::now();
    if (record->followers() > 0) unattended_since = now;
    return now - unattended_since < kOrphanGrace;
  };
  auto lose_client = [&] {
    if (client_lost) return;
    client_lost = true;
    unattended_since = std::chrono::steady_clock::now();
  };
  auto send = [&](std::string line) {
    if (record) record->Append(line);
    if (!client_lost && !writer.WriteChunk(line)) lose_client();
    return keep_running();
  };
  cb.on_output = [&](proc::StreamKind kind, std::string_view data) {
    return send(OutputEvent(kind, data, *base64));
  };
  // POST exec/cancel stops the command at once (the record's eventfd).
  if (record) cb.cancel_fd = record->cancel_fd();
  cb.on_idle = [&] {
    if (!client_lost && writer.ClientGone()) lose_client();
    if (!client_lost && !writer.WriteChunk("{\"type\":\"keepalive\"}\n")) lose_client();
    return keep_running();
  };
  if (session) {
    cb.on_started = [&](UniqueFd input, pid_t pid) {
      ExecSessions::Attach(*session, std::move(input));
      json::object ev;
      ev["type"] = "started";
      ev["session"] = ExecSessions::IdOf(*session);
      ev["pid"] = pid;
      // A failed write shows again at the first output or keepalive.
      (void)writer.WriteChunk(ToJson(ev) + "\n");
    };
  }
  proc::StreamResult r = proc::RunStreaming(*spec, cb);
  if (session) exec_sessions_->End(session);
  json::object ev = OutcomeJson(r.outcome);
  ev["type"] = "exit";
  ev["stdout_bytes"] = r.stdout_total;
  ev["stderr_bytes"] = r.stderr_total;
  ev["duration_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(r.duration).count();
  std::string exit_line = ToJson(ev) + "\n";
  if (record) record->Finish(exit_line);
  if (!client_lost && writer.WriteChunk(exit_line)) (void)writer.EndStream();
}

void Daemon::StreamRecord(const std::shared_ptr<ExecRecord>& record, uint64_t after,
                          net::ResponseWriter& writer) {
  net::Headers headers;
  headers.Set("Content-Type", "application/x-ndjson");
  headers.Set("Cache-Control", "no-store");
  if (!writer.BeginStream(200, headers)) return;
  bool ok = record->Follow(
      after, [&](std::string_view line) { return writer.WriteChunk(line).has_value(); },
      [&](uint64_t first_kept, uint64_t dropped) {
        json::object gap;
        gap["type"] = "gap";
        gap["dropped_events"] = dropped;
        gap["next_event"] = first_kept;
        (void)writer.WriteChunk(ToJson(gap) + "\n");
      },
      [&] {
        return !writer.ClientGone() && writer.WriteChunk("{\"type\":\"keepalive\"}\n").has_value();
      },
      config_.keepalive_interval);
  if (ok) (void)writer.EndStream();
}

net::Response Daemon::ExecCancel(const net::Request& request) {
  auto body = ParseJsonObject(request.body);
  if (!body) return ErrorResponse(body.error());
  auto id = GetString(*body, "exec_id");
  if (!id) return ErrorResponse(id.error());
  auto record = exec_records_->Find(*id);
  if (!record) return ErrorResponse(record.error());
  (*record)->Cancel();
  return Ok(json::object{});
}

void Daemon::ExecAttach(const net::Request& request, net::ResponseWriter& writer) {
  auto body = ParseJsonObject(request.body);
  if (!body) {
    (void)writer.Send(ErrorResponse(body.error()));
    return;
  }
  auto id = GetString(*body, "exec_id");
  auto after = GetOptInt(*body, "after");
  if (!id || !after) {
    (void)writer.Send(ErrorResponse(!id ? id.error() : after.error()));
    return;
  }
  if (after->value_or(0) < 0) {
    (void)writer.Send(
        ErrorResponse(Error(ErrorCode::kInvalidArgument, "field 'after' must not be negative")));
    return;
  }
  auto record = exec_records_->Find(*id);
  if (!record) {
    (void)writer.Send(ErrorResponse(record.error()));
    return;
  }
  StreamRecord(*record, static_cast<uint64_t>(after->value_or(0)), writer);
}

net::Response Daemon::ExecSessionRequest(const net::Request& request, std::string_view rest) {
  // rest = "{id}/stdin" or "{id}/resize"
  auto slash = rest.find('/');
  std::string_view id = rest.substr(0, slash);
  std::string_view action = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
  if (action == "stdin") {
    // The body is the bytes themselves (any Content-Type): no encoding cost
    // per keystroke or per chunk of a large input.
    auto eof = request.Query("eof");
    if (eof && *eof != "true" && *eof != "false" && *eof != "1" && *eof != "0") {
      return ErrorResponse(Error(ErrorCode::kInvalidArgument, "eof must be true or false"));
    }
    const bool close = eof && (*eof == "true" || *eof == "1");
    if (auto st = exec_sessions_->Write(id, request.body, close); !st) {
      return ErrorResponse(st.error());
    }
    json::object o;
    o["written"] = request.body.size();
    return Ok(o);
  }
  if (action == "resize") {
    auto body = ParseJsonObject(request.body);
    if (!body) return ErrorResponse(body.error());
    proc::WindowSize size;
    for (auto [key, field] : {std::pair{"rows", &size.rows}, {"cols", &size.cols}}) {
      auto v = GetOptInt(*body, key);
      if (!v) return ErrorResponse(v.error());
      if (!*v || **v < 1 || **v > 10000) {
        return ErrorResponse(Error(ErrorCode::kInvalidArgument,
                                   fmt::format("field '{}' must be between 1 and 10000", key)));
      }
      *field = static_cast<uint16_t>(**v);
    }
    if (auto st = exec_sessions_->Resize(id, size); !st) return ErrorResponse(st.error());
    return Ok(json::object{});
  }
  return ErrorResponse(Error(ErrorCode::kNotFound,
                             fmt::format("no such endpoint: {} {}", request.method, request.path)));
}

net::Response Daemon::Files(const net::Request& request, std::string_view op) {
  auto parsed = ParseJsonObject(request.body);
  if (!parsed) return ErrorResponse(parsed.error());
  const json::object& body = *parsed;

  if (op == "stat") {
    auto path = GetString(body, "path");
    if (!path) return ErrorResponse(path.error());
    auto info = fs::Stat(files_root(), *path);
    if (!info) return ErrorResponse(info.error());
    return Ok(FileInfoJson(*info));
  }
  if (op == "list") {
    auto path = GetString(body, "path");
    if (!path) return ErrorResponse(path.error());
    auto stat = GetOptBool(body, "stat");
    if (!stat) return ErrorResponse(stat.error());
    fs::ListOptions lo;
    lo.stat = stat->value_or(true);
    auto list = fs::List(files_root(), *path, lo);
    if (!list) return ErrorResponse(list.error());
    return JsonResponse(200, ListJson(*list));
  }
  if (op == "read") {
    auto path = GetString(body, "path");
    if (!path) return ErrorResponse(path.error());
    fs::ReadOptions ro;
    ro.max_bytes = 16 << 20;
    for (auto [key, field] : {std::pair{"line_offset", &ro.line_offset},
                              {"line_limit", &ro.line_limit},
                              {"byte_offset", &ro.offset},
                              {"byte_length", &ro.length}}) {
      auto v = GetOptInt(body, key);
      if (!v) return ErrorResponse(v.error());
      if (*v) {
        if (**v < 0) {
          return ErrorResponse(Error(ErrorCode::kInvalidArgument,
                                     fmt::format("field '{}' must not be negative", key)));
        }
        *field = static_cast<uint64_t>(**v);
      }
    }
    auto max = NonNegative<uint64_t>(body, "max_bytes", ro.max_bytes);
    if (!max) return ErrorResponse(max.error());
    ro.max_bytes = std::min<uint64_t>(*max, 256u << 20);
    auto encoding = GetOptString(body, "encoding").value_or("utf-8");
    if (encoding != "utf-8" && encoding != "base64") {
      return ErrorResponse(
          Error(ErrorCode::kInvalidArgument, "encoding must be \"utf-8\" or \"base64\""));
    }
    auto r = fs::Read(files_root(), *path, ro);
    if (!r) return ErrorResponse(r.error());
    std::string content;
    if (r->line_mode) {
      for (size_t i = 0; i < r->lines.size(); ++i) {
        if (i > 0) content.push_back('\n');
        content += r->lines[i];
      }
    } else {
      content = std::move(r->content);
    }
    json::object o;
    o["path"] = JsonString(r->path);
    if (encoding == "base64") {
      o["content_base64"] = Base64Encode(content);
    } else {
      o["content"] = JsonString(content);
    }
    o["binary"] = r->binary;
    o["truncated"] = r->truncated;
    o["size"] = r->size;
    if (r->line_mode) {
      o["total_lines"] = r->total_lines;
      o["start_line"] = r->line_offset;
      o["lines_returned"] = r->lines.size();
      o["more_lines"] = r->more_lines;
    }
    return Ok(o);
  }
  if (op == "write") {
    auto path = GetString(body, "path");
    if (!path) return ErrorResponse(path.error());
    auto content = ContentField(body, "content", "content_base64");
    if (!content) return ErrorResponse(content.error());
    auto mode = ParseMode(body, 0644);
    if (!mode) return ErrorResponse(mode.error());
    auto parents = GetOptBool(body, "create_parents");
    if (!parents) return ErrorResponse(parents.error());
    deepbox::fs::WriteOptions wo;
    wo.create_parents = parents->value_or(true);
    if (body.contains("mode")) wo.mode = *mode;
    auto r = fs::Write(files_root(), *path, *content, wo);
    if (!r) return ErrorResponse(r.error());
    json::object o;
    o["path"] = JsonString(r->path);
    o["size"] = r->bytes;
    o["created"] = r->created;
    return Ok(o);
  }
  if (op == "edit") {
    auto path = GetString(body, "path");
    auto old_s = GetString(body, "old_string");
    auto new_s = GetString(body, "new_string");
    auto all = GetOptBool(body, "replace_all");
    for (const auto* e : {&path, &old_s, &new_s}) {
      if (!*e) return ErrorResponse(e->error());
    }
    if (!all) return ErrorResponse(all.error());
    auto r = fs::Edit(files_root(), *path, *old_s, *new_s, all->value_or(false));
    if (!r) return ErrorResponse(r.error());
    json::object o;
    o["path"] = JsonString(r->path);
    o["occurrences"] = r->replacements;
    return Ok(o);
  }
  if (op == "mkdir") {
    auto path = GetString(body, "path");
    if (!path) return ErrorResponse(path.error());
    auto parents = GetOptBool(body, "parents");
    if (!parents) return ErrorResponse(parents.error());
    auto mode = ParseMode(body, 0755);
    if (!mode) return ErrorResponse(mode.error());
    auto r = fs::Mkdir(files_root(), *path, parents->value_or(true), *mode);
    if (!r) return ErrorResponse(r.error());
    json::object o;
    o["path"] = JsonString(*r);
    return Ok(o);
  }
  if (op == "move") {
    auto from = GetString(body, "from");
    auto to = GetString(body, "to");
    if (!from) return ErrorResponse(from.error());
    if (!to) return ErrorResponse(to.error());
    auto overwrite = GetOptBool(body, "overwrite");
    if (!overwrite) return ErrorResponse(overwrite.error());
    auto r = fs::Move(files_root(), *from, *to, overwrite->value_or(false));
    if (!r) return ErrorResponse(r.error());
    json::object o;
    o["path"] = JsonString(*r);
    return Ok(o);
  }
  if (op == "delete") {
    auto path = GetString(body, "path");
    if (!path) return ErrorResponse(path.error());
    auto recursive = GetOptBool(body, "recursive");
    if (!recursive) return ErrorResponse(recursive.error());
    auto r = fs::Delete(files_root(), *path, recursive->value_or(false));
    if (!r) return ErrorResponse(r.error());
    json::object o;
    o["path"] = JsonString(files_root().ToAbsolute(files_root().ToRelative(*path).value_or("")));
    return Ok(o);
  }
  if (op == "glob") return Glob(body);
  if (op == "grep") return Grep(body);
  if (op == "tree") return Tree(body);
  return ErrorResponse(Error(ErrorCode::kNotFound, fmt::format("no such file operation: {}", op)));
}

}  // namespace deepbox::sandboxd
