#include "sandbox/sandboxd_client.h"

#include <fmt/format.h>
#include <sys/random.h>

#include <algorithm>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "common/base64.h"
#include "common/json.h"
#include "common/parse_number.h"
#include "common/random.h"
#include "net/http_client.h"
#include "net/url.h"

namespace deepbox {
namespace {

using namespace std::chrono_literals;

// A daemon's error message is shown to people and models: keep it bounded.
constexpr size_t kMaxDaemonMessage = 4096;
// The longest exec/stream event line accepted.
constexpr size_t kMaxEventLine = 16u << 20;

Error ErrorFromResponse(const net::Response& r, std::string_view what) {
  auto parsed = ParseJsonObject(r.body);
  if (parsed) {
    auto it = parsed->find("error");
    if (it != parsed->end() && it->value().is_object()) {
      const auto& e = it->value().as_object();
      auto code = GetOptString(e, "code").value_or("INTERNAL");
      auto msg = GetOptString(e, "message").value_or("");
      if (msg.size() > kMaxDaemonMessage) msg = msg.substr(0, kMaxDaemonMessage) + "...";
      // A reason is kept only well formed (it is matched by code).
      std::string reason = GetOptString(e, "reason").value_or("");
      if (!ValidErrorReason(reason)) reason.clear();
      return Error(ErrorCodeFromName(code), msg, reason);
    }
  }
  return Error(r.status == 401 ? ErrorCode::kUnauthenticated : ErrorCode::kInternal,
               fmt::format("{}: sandbox daemon answered HTTP {}: {}", what, r.status,
                           r.body.substr(0, 200)));
}

// Every answer of a daemon is hostile input (issue 16): a field of the wrong
// kind or out of range makes the answer invalid, with an error naming the
// field, never a crash, a wrapped value or a silent default.
Error InvalidAnswer(std::string_view key, std::string_view expected) {
  return Error(
      ErrorCode::kInternal,
      fmt::format("sandbox daemon sent an invalid answer: field '{}' must be {}", key, expected));
}

// A listing or a tree is thousands of small strings and arrays: parsed into
// one arena (freed at once) instead of a heap allocation each.
class LargeAnswer {
 public:
  static Result<std::unique_ptr<LargeAnswer>> Parse(const std::string& body,
                                                    std::string_view what) {
    boost::system::error_code ec;
    std::unique_ptr<LargeAnswer> a(new LargeAnswer(body, ec));
    if (ec || !a->value_.is_object()) {
      auto r = ParseJsonObject(body);  // for its error message
      if (!r) return tl::unexpected(r.error());
      return MakeError(ErrorCode::kInternal,
                       fmt::format("sandbox daemon sent an invalid {}", what));
    }
    return a;
  }
  const json::object& object() const { return value_.as_object(); }

 private:
  LargeAnswer(const std::string& body, boost::system::error_code& ec)
      : arena_(body.size() * 2 + 1024), value_(json::parse(body, ec, &arena_)) {}
  json::monotonic_resource arena_;
  json::value value_;  // in arena_
};

// Reads typed fields of one answer object; a missing or null field takes its
// default, a bad one is remembered (the first) and reported by error().
class AnswerReader {
 public:
  explicit AnswerReader(const json::object& o) : o_(o) {}

  int64_t Int(std::string_view key, int64_t dflt, int64_t min = INT64_MIN,
              int64_t max = INT64_MAX) {
    const json::value* v = Find(key);
    if (!v) return dflt;
    auto n = JsonToInt64(*v);
    if (!n || *n < min || *n > max) {
      Fail(key, fmt::format("an integer from {} to {}", min, max));
      return dflt;
    }
    return *n;
  }
  bool Bool(std::string_view key, bool dflt) {
    const json::value* v = Find(key);
    if (!v) return dflt;
    if (!v->is_bool()) {
      Fail(key, "a boolean");
      return dflt;
    }
    return v->as_bool();
  }
  std::string Str(std::string_view key) {
    const json::value* v = Find(key);
    if (!v) return {};
    if (!v->is_string()) {
      Fail(key, "a string");
      return {};
    }
    return std::string(v->as_string());
  }
  void Fail(std::string_view key, std::string_view expected) {
    if (!error_) error_ = InvalidAnswer(key, expected);
  }
  Status status() const {
    if (error_) return tl::unexpected(*error_);
    return {};
  }

 private:
  const json::value* Find(std::string_view key) const {
    auto it = o_.find(key);
    if (it == o_.end() || it->value().is_null()) return nullptr;
    return &it->value();
  }
  const json::object& o_;
  std::optional<Error> error_;
};

std::optional<ExitKind> ParseExitKind(std::string_view s) {
  if (s == "exited") return ExitKind::kExited;
  if (s == "signaled") return ExitKind::kSignaled;
  if (s == "timed_out") return ExitKind::kTimedOut;
  if (s == "killed") return ExitKind::kKilled;
  if (s == "spawn_failed") return ExitKind::kSpawnFailed;
  return std::nullopt;
}

FileType ParseFileType(std::string_view s) {
  if (s == "directory") return FileType::kDirectory;
  if (s == "symlink") return FileType::kSymlink;
  if (s == "file") return FileType::kFile;
  return FileType::kOther;
}

std::string StrOr(const json::object& o, std::string_view key) {
  return GetOptString(o, key).value_or("");
}

// The /exec and /exec/stream request; base64_output when the daemon offers it.
json::object ExecBody(const ExecRequest& r, bool base64_output) {
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
  if (r.stdin_stream) {
    o["stdin_stream"] = true;
  } else if (!r.stdin_data.empty()) {
    o["stdin_base64"] = Base64Encode(r.stdin_data);
  }
  if (r.tty) {
    json::object tty;
    tty["rows"] = r.tty->rows;
    tty["cols"] = r.tty->cols;
    o["tty"] = std::move(tty);
  }
  if (r.timeout.count() > 0) o["timeout_ms"] = r.timeout.count();
  if (r.max_output_bytes > 0) o["max_output_bytes"] = r.max_output_bytes;
  // The exact bytes (older daemons do not list the feature and send text).
  if (base64_output) o["output_encoding"] = "base64";
  return o;
}

// Output bytes of an answer: `key`_base64 when present, else the text `key`.
std::string OutputField(AnswerReader& r, const json::object& o, const std::string& key) {
  if (o.contains(key + "_base64")) {
    auto decoded = Base64Decode(r.Str(key + "_base64"));
    if (!decoded) r.Fail(key + "_base64", "base64");
    return decoded.value_or("");
  }
  return r.Str(key);
}

// The stdin of an interactive command: requests naming its daemon session.
class SessionInput : public ExecInput {
 public:
  SessionInput(net::HttpClient& http, std::string sandbox, std::string session)
      : http_(http), sandbox_(std::move(sandbox)), session_(std::move(session)) {}

  Status Write(std::string_view bytes) override {
    return Post("stdin", std::string(bytes), "application/octet-stream");
  }
  Status Close() override { return Post("stdin?eof=true", "", "application/octet-stream"); }
  Status Resize(TerminalSize size) override {
    json::object o;
    o["rows"] = size.rows;
    o["cols"] = size.cols;
    return Post("resize", ToJson(o), "application/json");
  }

 private:
  Status Post(std::string_view action, std::string body, std::string_view type) {
    net::ClientRequest req;
    req.method = "POST";
    req.target = fmt::format("/deepbox/v1/exec/sessions/{}/{}", session_, action);
    req.headers.Set("Content-Type", std::string(type));
    req.body = std::move(body);
    // No deadline: a write waits while the command does not read, and the
    // daemon answers at the latest when the command ends.
    req.timeout = 0ms;
    auto r = http_.Send(req);
    if (!r) {
      Error e = r.error();
      e.message = fmt::format("sandbox {}: {}", sandbox_, e.message);
      return tl::unexpected(e);
    }
    if (r->status != 200) return tl::unexpected(ErrorFromResponse(*r, "exec stdin"));
    return {};
  }

  net::HttpClient& http_;
  std::string sandbox_;
  std::string session_;
};

// Session ids come from the daemon and go into request paths.
bool ValidSessionId(std::string_view id) {
  return !id.empty() && id.size() <= 128 &&
         id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") ==
             std::string_view::npos;
}

Status FillExit(const json::object& o, ExecResult& out) {
  AnswerReader r(o);
  auto kind = ParseExitKind(r.Str("status"));
  if (!kind) r.Fail("status", "one of exited, signaled, timed_out, killed, spawn_failed");
  out.kind = kind.value_or(ExitKind::kExited);
  // Shell conventions: 0..255 (128 + signal after a signal).
  out.exit_code = static_cast<int>(r.Int("exit_code", 0, 0, 255));
  out.signal = static_cast<int>(r.Int("signal", 0, 0, 127));
  out.stdout_truncated = r.Bool("stdout_truncated", false);
  out.stderr_truncated = r.Bool("stderr_truncated", false);
  out.duration = std::chrono::milliseconds(r.Int("duration_ms", 0, 0));
  out.error = r.Str("error");
  return r.status();
}

Result<FileInfo> ParseFileInfo(const json::object& o) {
  AnswerReader r(o);
  FileInfo f;
  f.path = r.Str("path");
  f.name = r.Str("name");
  f.type = ParseFileType(r.Str("type"));
  f.size = r.Int("size", 0, 0);
  auto mode = r.Str("mode");
  if (!mode.empty()) {
    auto parsed = ParseFileMode(mode);
    if (!parsed) r.Fail("mode", "permission bits in octal, at most 7777");
    f.mode = parsed.value_or(0);
  }
  f.modified_at = r.Str("modified_at");
  f.link_target = r.Str("link_target");
  if (auto s = r.status(); !s) return tl::unexpected(s.error());
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
  client->id_ = client->options_.id;
  // Without an id the daemon's hostname is it: /info is needed now.
  if (!client->options_.read_info_on_connect && !client->id_.empty()) return client;
  if (auto s = client->EnsureInfo(); !s) return tl::unexpected(s.error());
  if (client->id_.empty()) client->id_ = client->hostname_;
  return client;
}

Status SandboxdClient::EnsureInfo() const {
  if (info_known_.load(std::memory_order_acquire)) return {};
  std::lock_guard lock(info_mu_);
  if (info_known_.load(std::memory_order_relaxed)) return {};
  net::ClientRequest req;
  req.target = "/deepbox/v1/info";
  req.timeout = options_.connect_timeout + 5000ms;
  auto r = Send(req);
  if (!r) {
    Error e = r.error();  // its reason and errno say why (DaemonSocketDead reads them)
    e.message =
        fmt::format("sandbox daemon at {} is not reachable: {}", http_->base_url(), e.message);
    return tl::unexpected(e);
  }
  if (r->status != 200)
    return tl::unexpected(ErrorFromResponse(*r, "connecting to sandbox daemon"));
  auto info = ParseJsonObject(r->body);
  if (!info) return tl::unexpected(info.error());
  AnswerReader fields(*info);
  std::string root = fields.Str("root");
  std::string hostname = fields.Str("hostname");
  if (auto s = fields.status(); !s) return tl::unexpected(s.error());
  root_ = std::move(root);
  hostname_ = std::move(hostname);
  // Optional capabilities of newer daemons; an older one lists none.
  if (auto it = info->find("features"); it != info->end() && it->value().is_array()) {
    for (const auto& f : it->value().as_array()) {
      if (!f.is_string()) continue;
      if (f.as_string() == "exec_output_base64") exec_base64_ = true;
      if (f.as_string() == "exec_stdin_stream") exec_stdin_stream_ = true;
      if (f.as_string() == "exec_tty") exec_tty_ = true;
      if (f.as_string() == "exec_attach") exec_attach_ = true;
    }
  }
  info_known_.store(true, std::memory_order_release);
  return {};
}

std::string SandboxdClient::root() const {
  if (!EnsureInfo()) return "";
  return root_;  // written once, before info_known_
}

Status SandboxdClient::Wake() const {
  return options_.before_request ? options_.before_request() : Status{};
}

Result<net::Response> SandboxdClient::Send(const net::ClientRequest& request) const {
  if (auto st = Wake(); !st) return tl::unexpected(st.error());
  auto r = http_->Send(request);
  // Until the daemon first answered (a client that did not read /info on
  // connect), a connection that could not be made is tried again: nothing
  // was sent, and the daemon (or the way to it) may be a moment from up.
  auto wait = 50ms;
  for (int retry = 0; !r && !options_.read_info_on_connect && !answered_.load() &&
                      net::NothingSent(r.error()) && retry < 4;
       ++retry, wait *= 2) {
    std::this_thread::sleep_for(wait);
    r = http_->Send(request);
  }
  if (r) answered_.store(true);
  return r;
}

Error SandboxdClient::Lost(Error e, std::string_view what) const {
  // Cancelled and timed out are the caller's; "cannot connect" sent nothing.
  if (e.code != ErrorCode::kUnavailable || net::NothingSent(e)) return e;
  std::string why = options_.lost_connection_reason ? options_.lost_connection_reason() : "";
  if (why.empty()) {
    return Error(ErrorCode::kUnavailable,
                 fmt::format("sandbox {}: the connection to its daemon broke during the {} (the "
                             "daemon restarted or died), which may not have completed: {}",
                             id_, what, e.message));
  }
  return Error(
      ErrorCode::kUnavailable,
      fmt::format("sandbox {}: {} during the {}, which may not have completed", id_, why, what));
}

std::optional<uint64_t> SandboxdClient::OomKills() const {
  if (!options_.oom_kill_count) return std::nullopt;
  return options_.oom_kill_count();
}

void SandboxdClient::NoteOomKill(std::optional<uint64_t> before, ExecResult& result) const {
  if (!before) return;
  // SIGKILL itself, or a shell that reports its child's (128 + 9).
  const bool killed = ((result.kind == ExitKind::kSignaled || result.kind == ExitKind::kKilled) &&
                       result.signal == SIGKILL) ||
                      (result.kind == ExitKind::kExited && result.exit_code == 128 + SIGKILL);
  if (!killed) return;
  auto after = OomKills();
  if (after && *after > *before) {
    result.oom_killed = true;
    result.memory_limit_bytes = options_.memory_limit_bytes;
  }
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
  auto r = Send(req);
  if (!r) {
    Error e = r.error();
    if (!net::NothingSent(e) && e.code == ErrorCode::kUnavailable) {
      return tl::unexpected(Lost(e, target == "/deepbox/v1/exec" ? "command" : "request"));
    }
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
  if (request.stdin_stream || request.tty) {
    return MakeError(ErrorCode::kInvalidArgument, "stdin_stream and tty need ExecStream");
  }
  // Before /info was read the exact bytes are asked for all the same: a daemon
  // without the feature ignores the field and answers text, which is read too.
  const bool base64 = info_known_.load(std::memory_order_acquire) ? exec_base64_ : true;
  const auto oom_before = OomKills();
  auto body = PostJson("/deepbox/v1/exec", ToJson(ExecBody(request, base64)),
                       CommandDeadline(request, options_.request_slack));
  if (!body) return tl::unexpected(body.error());
  auto o = ParseJsonObject(*body);
  if (!o) return tl::unexpected(o.error());
  ExecResult out;
  if (auto s = FillExit(*o, out); !s) return tl::unexpected(s.error());
  AnswerReader r(*o);
  out.stdout_data = OutputField(r, *o, "stdout");
  out.stderr_data = OutputField(r, *o, "stderr");
  out.combined = OutputField(r, *o, "output");
  if (auto s = r.status(); !s) return tl::unexpected(s.error());
  NoteOomKill(oom_before, out);
  return out;
}

Status SandboxdClient::CancelExec(const std::string& exec_id) {
  json::object cancel;
  cancel["exec_id"] = exec_id;
  auto r = PostJson("/deepbox/v1/exec/cancel", ToJson(cancel), 5000ms);
  if (!r) return tl::unexpected(r.error());
  return {};
}

Result<ExecResult> SandboxdClient::ExecStream(const ExecRequest& request,
                                              const OutputCallback& on_output) {
  // An interactive command needs features an older daemon lacks: know them first.
  if (request.stdin_stream || request.tty) {
    if (auto s = EnsureInfo(); !s) return tl::unexpected(s.error());
  }
  const bool known = info_known_.load(std::memory_order_acquire);
  if (known && ((request.stdin_stream && !exec_stdin_stream_) || (request.tty && !exec_tty_))) {
    return MakeError(ErrorCode::kUnimplemented,
                     fmt::format("the daemon of sandbox {} (deepbox-sandboxd) is too old for "
                                 "{}: it does not offer it",
                                 id_, request.tty ? "a terminal (tty)" : "streamed stdin"));
  }
  // A non-interactive exec gets an id: if a proxy or router cuts the stream,
  // the client re-attaches to the rest of it instead of running it again.
  // Before /info was read: base64 output and an exec id all the same (a
  // daemon without the features ignores both); a cut stream is re-attached
  // only once /info says the daemon can.
  json::object exec_body = ExecBody(request, known ? exec_base64_ : true);
  std::string exec_id;
  if (!request.stdin_stream && (known ? exec_attach_ : true)) {
    exec_id = "x" + RandomHex(32);
    exec_body["exec_id"] = exec_id;
  }
  if (request.on_exec_id && !request.stdin_stream) request.on_exec_id(exec_id);
  // 0: no client deadline (the daemon's default timeout applies).
  const auto limit = CommandDeadline(request, options_.request_slack);
  const auto deadline = limit.count() > 0 ? std::chrono::steady_clock::now() + limit
                                          : std::chrono::steady_clock::time_point::max();

  std::optional<SessionInput> input;
  // Declared after `input`, so destroyed before it: on every return, the
  // caller's writers stop while the input is still valid.
  struct InputClosing {
    std::optional<SessionInput>& input;
    const std::function<void()>& hook;
    ~InputClosing() {
      if (input && hook) hook();
    }
  } input_closing{input, request.on_input_closing};
  std::optional<ExecResult> result;
  std::optional<Error> failure;
  uint64_t events = 0;  // events consumed (keepalives, "started" and "gap" not counted)
  bool output_lost = false;

  // One request: the original exec/stream, or an exec/attach after a cut.
  // Returns the transport's result; `status`/`error_body` describe the answer.
  auto attempt = [&](const std::string& target, const std::string& body, int& status,
                     std::string& error_body) {
    net::ClientRequest req;
    req.method = "POST";
    req.target = target;
    req.headers.Set("Content-Type", "application/json");
    // Sent chunked: a Go httputil.ReverseProxy (the agent-sandbox router)
    // forwarding a Content-Length body reads it once more after sending it;
    // a daemon that answers at once races that read, and the proxy then drops
    // the stream (issue 12). With chunked framing the read ends first.
    auto offset = std::make_shared<size_t>(0);
    req.body_source = [offset, &body](char* buf, size_t size) -> Result<size_t> {
      size_t n = std::min(size, body.size() - *offset);
      std::memcpy(buf, body.data() + *offset, n);
      *offset += n;
      return n;
    };
    if (limit.count() > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      req.timeout = std::max(left, std::chrono::milliseconds(1));
    }
    std::string pending;
    status = 0;
    if (auto st = Wake(); !st) return Result<net::Response>(tl::unexpected(st.error()));
    return http_->SendStreaming(
        req,
        [&](const net::Response& head) {
          status = head.status;
          return true;
        },
        [&](std::string_view data) {
          if (status != 200) {  // an error answer: a bounded part is enough for the message
            if (error_body.size() < 64 * 1024) error_body.append(data.substr(0, 64 * 1024));
            return true;
          }
          pending.append(data);
          size_t start = 0;
          for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
            auto ev = ParseJsonObject(std::string_view(pending).substr(start, nl - start));
            if (!ev) continue;
            auto type = StrOr(*ev, "type");
            if (type == "keepalive") {
              // An empty delivery lets the caller cancel a silent command.
              if (!on_output(OutputStream::kStdout, std::string_view())) {
                failure = Error(ErrorCode::kCancelled, "command cancelled by the caller");
                return false;
              }
              continue;
            }
            if (type == "started") {
              if (!request.stdin_stream || input) continue;
              std::string session = StrOr(*ev, "session");
              if (!ValidSessionId(session)) {
                failure = InvalidAnswer("session", "an id of letters, digits, - and _");
                return false;
              }
              input.emplace(*http_, id_, std::move(session));
              if (request.on_started) request.on_started(*input);
              continue;
            }
            if (type == "gap") {  // events lost from the daemon's record
              output_lost = true;
              auto next = ev->find("next_event");
              if (next != ev->end() && next->value().is_int64() &&
                  next->value().as_int64() > static_cast<int64_t>(events)) {
                events = static_cast<uint64_t>(next->value().as_int64());
              }
              continue;
            }
            ++events;
            if (type == "stdout" || type == "stderr") {
              AnswerReader fields(*ev);
              std::string bytes = OutputField(fields, *ev, "data");
              if (auto s = fields.status(); !s) {
                failure = s.error();
                return false;
              }
              if (!on_output(type == "stdout" ? OutputStream::kStdout : OutputStream::kStderr,
                             bytes)) {
                failure = Error(ErrorCode::kCancelled, "command cancelled by the caller");
                return false;
              }
            } else if (type == "exit") {
              ExecResult out;
              if (auto s = FillExit(*ev, out); !s) {
                failure = s.error();
                return false;
              }
              result = out;
            } else if (type == "error") {
              failure = Error(ErrorCodeFromName(StrOr(*ev, "code")), StrOr(*ev, "message"));
            }
          }
          pending.erase(0, start);
          // Event lines are small (output comes in chunks): an endless one is a
          // hostile daemon, not a reason to run out of memory.
          if (pending.size() > kMaxEventLine) {
            failure = Error(ErrorCode::kInternal,
                            fmt::format("sandbox {}: the daemon sent an exec event over {} bytes",
                                        id_, kMaxEventLine));
            return false;
          }
          return true;
        });
  };

  int status = 0;
  std::string error_body;
  const std::string first_body = ToJson(exec_body);
  const auto oom_before = OomKills();
  auto r = attempt("/deepbox/v1/exec/stream", first_body, status, error_body);
  bool reached_daemon = status != 0;
  // The stream was cut after the daemon took the command (no exit came):
  // re-attached below, unless the daemon is gone or restarted.
  auto cut = [&] { return !failure && !result && status == 200; };
  std::optional<Error> lost;
  auto note_cut = [&] {
    if (lost || !cut()) return;
    lost = r ? Error(ErrorCode::kUnavailable, "output stream ended without an exit status")
             : r.error();
  };
  note_cut();
  // Re-attach while the stream keeps being cut (never re-running the command:
  // the daemon answers a repeated exec id by attaching to the first run).
  for (int tries = 0; !exec_id.empty() && !failure && !result && tries < 6 &&
                      std::chrono::steady_clock::now() < deadline && (!r || status == 200);
       ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50) * (1 << std::min(tries, 5)));
    if (!info_known_.load(std::memory_order_acquire)) {
      // The id was sent unchecked: only a daemon that lists exec_attach kept
      // it (another would run the command again, or not know the id).
      if (!EnsureInfo()) continue;
      if (!exec_attach_) break;
    }
    json::object attach;
    attach["exec_id"] = exec_id;
    attach["after"] = events;
    std::string body = reached_daemon ? ToJson(attach) : first_body;
    error_body.clear();
    r = attempt(reached_daemon ? "/deepbox/v1/exec/attach" : "/deepbox/v1/exec/stream", body,
                status, error_body);
    reached_daemon = reached_daemon || status != 0;
    note_cut();
  }
  // Still no exit after a cut: the daemon could not be reached again, or it
  // no longer knows the command (it restarted: its records went with it).
  if (lost && !failure && !result &&
      (!r || status == 200 || (status == 404 && reached_daemon && !exec_id.empty()))) {
    Error e = Lost(*lost, "command");
    if (e.message == lost->message) e.message = fmt::format("sandbox {}: {}", id_, e.message);
    return tl::unexpected(e);
  }
  if (failure) {
    // A named exec outlives its stream (for re-attaching): stop it explicitly.
    if (failure->code == ErrorCode::kCancelled && !exec_id.empty()) {
      json::object cancel;
      cancel["exec_id"] = exec_id;
      (void)PostJson("/deepbox/v1/exec/cancel", ToJson(cancel), 5000ms);
    }
    return tl::unexpected(*failure);
  }
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
  if (output_lost) {  // re-attached too late to get every byte
    result->stdout_truncated = true;
    result->stderr_truncated = true;
  }
  NoteOomKill(oom_before, *result);
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
  return ListEntries(path, true);
}

Result<std::vector<FileInfo>> SandboxdClient::ListNames(const std::string& path) {
  return ListEntries(path, false);
}

Result<std::vector<FileInfo>> SandboxdClient::ListEntries(const std::string& path, bool stat) {
  json::object o;
  o["path"] = JsonString(path);
  if (!stat) o["stat"] = false;
  auto body = PostJson("/deepbox/v1/fs/list", ToJson(o), options_.file_op_timeout);
  if (!body) return tl::unexpected(body.error());
  auto answer = LargeAnswer::Parse(*body, "listing");
  if (!answer) return tl::unexpected(answer.error());
  const json::object& r = (*answer)->object();
  std::vector<FileInfo> out;
  if (auto it = r.find("entries"); it != r.end() && it->value().is_array()) {
    const auto& entries = it->value().as_array();
    out.reserve(entries.size());
    for (const auto& e : entries) {
      if (!e.is_object()) return tl::unexpected(InvalidAnswer("entries", "an array of objects"));
      auto info = ParseFileInfo(e.as_object());
      if (!info) return tl::unexpected(info.error());
      out.push_back(std::move(*info));
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
  AnswerReader fields(*r);
  out.binary = fields.Bool("binary", false);
  out.truncated = fields.Bool("truncated", false);
  out.size = fields.Int("size", 0, 0);
  out.total_lines = fields.Int("total_lines", -1, -1);
  out.start_line = fields.Int("start_line", 0, 0);
  out.lines_returned = fields.Int("lines_returned", 0, 0);
  out.more_lines = fields.Bool("more_lines", false);
  if (auto s = fields.status(); !s) return tl::unexpected(s.error());
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
  AnswerReader fields(*r);
  auto occurrences = fields.Int("occurrences", 0, 0, INT_MAX);
  if (auto s = fields.status(); !s) return tl::unexpected(s.error());
  return EditResult{static_cast<int>(occurrences)};
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
  AnswerReader fields(*r);
  out.truncated = fields.Bool("truncated", false);
  out.unreadable = fields.Bool("unreadable", false);
  if (auto s = fields.status(); !s) return tl::unexpected(s.error());
  if (auto it = r->find("paths"); it != r->end() && it->value().is_array()) {
    for (const auto& p : it->value().as_array()) {
      if (!p.is_string()) return tl::unexpected(InvalidAnswer("paths", "an array of strings"));
      out.paths.emplace_back(p.as_string());
    }
  }
  return out;
}

Result<TreeResult> SandboxdClient::Tree(const TreeRequest& request) {
  json::object o;
  if (!request.path.empty()) o["path"] = JsonString(request.path);
  if (request.max_entries > 0) o["max_entries"] = request.max_entries;
  if (!request.skip_dirs.empty()) {
    json::array skip;
    for (const auto& d : request.skip_dirs) skip.emplace_back(JsonString(d));
    o["skip_dirs"] = std::move(skip);
  }
  auto body = PostJson("/deepbox/v1/fs/tree", ToJson(o), options_.file_op_timeout);
  if (!body) {
    // A daemon from before fs_tree: "no such file operation".
    if (body.error().code == ErrorCode::kNotFound &&
        body.error().message.find("no such file operation") != std::string::npos) {
      return MakeError(ErrorCode::kUnimplemented,
                       fmt::format("sandbox {}: its daemon cannot list a tree (fs/tree)", id_));
    }
    return tl::unexpected(body.error());
  }
  auto answer = LargeAnswer::Parse(*body, "tree");
  if (!answer) return tl::unexpected(answer.error());
  const json::object& r = (*answer)->object();
  TreeResult out;
  boost::system::error_code ec;
  AnswerReader fields(r);
  out.truncated = fields.Bool("truncated", false);
  out.unreadable = fields.Bool("unreadable", false);
  if (auto s = fields.status(); !s) return tl::unexpected(s.error());
  const json::value* entries = r.if_contains("entries");
  if (entries == nullptr || !entries->is_array()) {
    return tl::unexpected(InvalidAnswer("entries", "an array"));
  }
  out.entries.reserve(entries->as_array().size());
  for (const auto& e : entries->as_array()) {
    // [path, size, mtime_ns, mode, "f" | "l"]; anything else is refused.
    const json::array* a = e.if_array();
    if (a == nullptr || a->size() != 5 || !(*a)[0].is_string() || !(*a)[4].is_string()) {
      return tl::unexpected(InvalidAnswer("entries", "[path, size, mtime_ns, mode, type] arrays"));
    }
    auto size = (*a)[1].to_number<uint64_t>(ec);
    if (ec) return tl::unexpected(InvalidAnswer("entries", "a size that is a whole number"));
    auto mtime = (*a)[2].to_number<int64_t>(ec);
    if (ec) return tl::unexpected(InvalidAnswer("entries", "an mtime that is a whole number"));
    auto mode = (*a)[3].to_number<uint32_t>(ec);
    if (ec || mode > 07777) return tl::unexpected(InvalidAnswer("entries", "permission bits"));
    std::string_view type = (*a)[4].as_string();
    std::string_view path = (*a)[0].as_string();
    if (type != "f" && type != "l") return tl::unexpected(InvalidAnswer("entries", "type f or l"));
    if (path.empty() || path.front() == '/' || path.size() > 4096) {
      return tl::unexpected(InvalidAnswer("entries", "relative paths"));
    }
    out.entries.push_back(TreeEntry{std::string(path), type == "l", size, mtime, mode});
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
  AnswerReader fields(*r);
  out.truncated = fields.Bool("truncated", false);
  if (auto it = r->find("matches"); it != r->end() && it->value().is_array()) {
    for (const auto& m : it->value().as_array()) {
      if (!m.is_object()) return tl::unexpected(InvalidAnswer("matches", "an array of objects"));
      AnswerReader mo(m.as_object());
      auto path = mo.Str("path");
      auto line = mo.Int("line", 0, 0);
      out.matches.push_back({std::move(path), line, mo.Str("text")});
      if (auto s = mo.status(); !s) return tl::unexpected(s.error());
    }
  }
  if (auto it = r->find("files"); it != r->end() && it->value().is_array()) {
    for (const auto& p : it->value().as_array()) {
      if (!p.is_string()) return tl::unexpected(InvalidAnswer("files", "an array of strings"));
      out.files.emplace_back(p.as_string());
    }
  }
  if (auto it = r->find("counts"); it != r->end() && it->value().is_array()) {
    for (const auto& c : it->value().as_array()) {
      if (!c.is_object()) return tl::unexpected(InvalidAnswer("counts", "an array of objects"));
      AnswerReader co(c.as_object());
      auto path = co.Str("path");
      out.counts.emplace_back(std::move(path), co.Int("count", 0, 0));
      if (auto s = co.status(); !s) return tl::unexpected(s.error());
    }
  }
  if (auto s = fields.status(); !s) return tl::unexpected(s.error());
  return out;
}

Result<std::string> SandboxdClient::Download(const std::string& path) {
  net::ClientRequest req;
  req.target = "/deepbox/v1/fs/raw?path=" + net::PercentEncode(path);
  req.timeout = options_.file_op_timeout;
  auto r = Send(req);
  if (!r) return tl::unexpected(Lost(r.error(), "download"));
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
  auto r = Send(req);
  if (!r) return tl::unexpected(Lost(r.error(), "upload"));
  if (r->status != 200) return tl::unexpected(ErrorFromResponse(*r, "upload"));
  return {};
}

Error SandboxdClient::AnswerError(const net::Response& response, std::string_view what) {
  return ErrorFromResponse(response, what);
}

Status SandboxdClient::DownloadTo(const std::string& path,
                                  const std::function<Status(std::string_view data)>& sink) {
  net::ClientRequest req;
  req.target = "/deepbox/v1/fs/raw?path=" + net::PercentEncode(path);
  Status sink_status;
  std::string error_body;
  int status = 0;
  if (auto st = Wake(); !st) return tl::unexpected(st.error());
  auto r = http_->SendStreaming(
      req,
      [&](const net::Response& head) {
        status = head.status;
        return true;
      },
      [&](std::string_view data) {
        if (status != 200) {  // an error answer: keep (a bounded part of) it for the message
          if (error_body.size() < 64 * 1024) error_body.append(data.substr(0, 64 * 1024));
          return true;
        }
        sink_status = sink(data);
        return sink_status.has_value();
      });
  if (!sink_status) return sink_status;
  if (!r) return tl::unexpected(Lost(r.error(), "download"));
  if (status != 200) {
    net::Response answer;
    answer.status = status;
    answer.body = std::move(error_body);
    return tl::unexpected(ErrorFromResponse(answer, "download " + path));
  }
  return {};
}

Status SandboxdClient::UploadFrom(
    const std::string& path, uint32_t mode, uint64_t length,
    const std::function<Result<size_t>(char* buf, size_t size)>& source) {
  net::ClientRequest req;
  req.method = "PUT";
  req.target = "/deepbox/v1/fs/raw?path=" + net::PercentEncode(path) + "&mode=" + ModeString(mode);
  req.headers.Set("Content-Type", "application/octet-stream");
  req.body_source = source;
  req.body_length = length;
  if (auto st = Wake(); !st) return tl::unexpected(st.error());
  auto r = http_->Send(req);
  if (!r) return tl::unexpected(Lost(r.error(), "upload"));
  if (r->status != 200) return tl::unexpected(ErrorFromResponse(*r, "upload " + path));
  return {};
}

}  // namespace deepbox
