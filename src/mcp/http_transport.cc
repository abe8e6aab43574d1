#include "mcp/http_transport.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/random.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "common/random.h"
#include "common/utf8.h"
#include "mcp/protocol.h"
#include "net/http_server.h"
#include "net/url.h"

namespace deepbox::mcp {

bool IsLoopbackOrigin(std::string_view origin, int port) {
  auto url = net::ParseUrl(origin);
  if (!url || (url->scheme != "http" && url->scheme != "https")) return false;
  if (port != 0 && url->port != port) return false;
  return url->host == "localhost" || url->host == "127.0.0.1" || url->host == "::1";
}

bool IsLoopbackHostName(std::string_view host) {
  if (net::EqualsIgnoreCase(host, "localhost")) return true;
  std::string text(host);
  in_addr v4{};
  if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (::inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

namespace {

struct HostPort {
  std::string name;  // brackets removed
  int port = 80;     // the port of http:// when absent
  bool has_port = false;
};

// A Host header value ("localhost:8765", "[::1]:8765", "example.com");
// nullopt when malformed.
std::optional<HostPort> ParseHostHeader(std::string_view value) {
  std::string_view name;
  std::string_view port_text;
  if (value.starts_with("[")) {
    auto close = value.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    name = value.substr(1, close - 1);
    std::string_view after = value.substr(close + 1);
    if (!after.empty()) {
      if (!after.starts_with(":")) return std::nullopt;
      port_text = after.substr(1);
      if (port_text.empty()) return std::nullopt;
    }
  } else {
    auto colon = value.find(':');
    name = value.substr(0, colon);
    if (colon != std::string_view::npos) {
      port_text = value.substr(colon + 1);
      if (port_text.empty() || port_text.find(':') != std::string_view::npos) return std::nullopt;
    }
  }
  if (name.empty()) return std::nullopt;
  HostPort out;
  out.name = std::string(name);
  if (!port_text.empty()) {
    auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), out.port);
    if (ec != std::errc() || p != port_text.data() + port_text.size() || out.port <= 0 ||
        out.port > 65535) {
      return std::nullopt;
    }
    out.has_port = true;
  }
  return out;
}

using Clock = std::chrono::steady_clock;

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

bool HeaderListHas(const std::optional<std::string>& header, std::string_view type) {
  if (!header) return false;
  std::string_view h = *header;
  size_t pos = 0;
  while (pos <= h.size()) {
    size_t comma = h.find(',', pos);
    std::string_view item = h.substr(pos, comma == std::string_view::npos ? h.npos : comma - pos);
    item = item.substr(0, item.find(';'));
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (net::EqualsIgnoreCase(item, type)) return true;
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return false;
}

net::Response JsonRpcErrorResponse(int status, const json::value& id, const RpcError& error) {
  return net::Response::Json(status, SerializeError(id, error));
}

// One running request (its cancellation and progress stream).
class HttpCall : public ToolCallContext {
 public:
  // `session`: the legacy session's state (its log level), null for a
  // stateless request.
  HttpCall(json::value token, std::string owner, std::shared_ptr<const LegacySession> session)
      : token_(std::move(token)), owner_(std::move(owner)), session_(std::move(session)) {}
  const std::atomic<bool>* cancel_flag() const override { return &cancel_; }
  bool wants_progress() const override { return stream_ != nullptr && !token_.is_null(); }
  void Progress(double progress, std::optional<double> total, std::string_view message) override {
    if (!wants_progress() || cancel_.load()) return;
    json::object p;
    p["progressToken"] = token_;
    p["progress"] = JsonNumber(progress);
    if (total) p["total"] = JsonNumber(*total);
    if (!message.empty()) p["message"] = JsonString(message);
    SendEvent(SerializeNotification("notifications/progress", p));
  }
  void Log(LogLevel level, std::string_view logger, const json::value& data) override {
    if (!session_ || !session_->WantsLog(level) || cancel_.load()) return;
    SendEvent(SerializeLogMessage(level, logger, data));
  }
  const std::string& owner() const override { return owner_; }

  void Cancel() { cancel_.store(true); }
  void set_stream(net::ResponseWriter* w) { stream_ = w; }
  bool SendEvent(const std::string& json) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stream_) return false;
    auto st = stream_->WriteChunk("event: message\ndata: " + json + "\n\n");
    if (!st) cancel_.store(true);  // the client is gone
    return static_cast<bool>(st);
  }

 private:
  json::value token_;
  std::string owner_;
  std::shared_ptr<const LegacySession> session_;
  std::atomic<bool> cancel_{false};
  std::mutex mu_;
  net::ResponseWriter* stream_ = nullptr;
};

struct HttpSession {
  std::string id;
  std::string owner;
  LegacySession legacy;
  std::mutex mu;
  Clock::time_point last_used = Clock::now();
  std::map<std::string, std::shared_ptr<HttpCall>> in_flight;
};

}  // namespace

struct McpHttpServer::Impl {
  const McpServer* server = nullptr;
  HttpTransportOptions options;
  std::unique_ptr<net::HttpServer> http;
  // The listener, for the Host and Origin checks (set before serving starts).
  int port = 0;
  bool loopback_listener = false;
  bool wildcard_listener = false;
  std::vector<std::string> own_names;  // a non-loopback listener's address and --listen name

  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::shared_ptr<HttpSession>> sessions;
  std::vector<std::shared_ptr<HttpCall>> stateless_calls;  // for Stop()
  bool stopping = false;
  std::thread janitor;

  // The checks on a request's head (Host, Origin, bearer token): the
  // refusal, or nullopt.
  std::optional<net::Response> Authorize(const net::Request& head) const;
  bool HostAllowed(std::string_view name, int port) const;
  void Handle(net::Request& req, net::ResponseWriter& w);
  void HandlePost(net::Request& req, net::ResponseWriter& w);
  void RunRequest(const Message& msg, const std::shared_ptr<HttpSession>& session, bool accepts_sse,
                  net::Headers extra, net::ResponseWriter& w);
  void EndSession(const std::string& id);
  void Janitor();
};

bool McpHttpServer::Impl::HostAllowed(std::string_view name, int host_port) const {
  for (const auto& allowed : options.allowed_hosts) {
    auto entry = ParseHostHeader(allowed);
    // An entry without a port allows any.
    if (entry && net::EqualsIgnoreCase(entry->name, name) &&
        (!entry->has_port || entry->port == host_port)) {
      return true;
    }
  }
  // All interfaces and no name configured: no name to compare with.
  if (wildcard_listener && options.allowed_hosts.empty()) return true;
  if (host_port != port) return false;
  if (IsLoopbackHostName(name)) return loopback_listener || wildcard_listener;
  if (loopback_listener || wildcard_listener) return false;
  for (const auto& own : own_names) {
    if (net::EqualsIgnoreCase(own, name)) return true;
  }
  return false;
}

std::optional<net::Response> McpHttpServer::Impl::Authorize(const net::Request& req) const {
  // Host first: a request for another name (DNS rebinding) learns nothing.
  auto host = req.Header("Host");
  if (!host) {
    return JsonRpcErrorResponse(
        400, nullptr, RpcError(kInvalidRequest, "Bad Request: the Host header is missing"));
  }
  auto parsed_host = ParseHostHeader(*host);
  if (!parsed_host || !HostAllowed(parsed_host->name, parsed_host->port)) {
    std::string expected = loopback_listener
                               ? fmt::format("localhost, 127.0.0.1 or [::1] with port {}", port)
                               : fmt::format("this server's address or name with port {}", port);
    return JsonRpcErrorResponse(
        421, nullptr,
        RpcError(kInvalidRequest,
                 fmt::format("Misdirected Request: Host '{}' does not name this server "
                             "(expected {}, or a name given with --allow-host)",
                             SanitizeUtf8(*host), expected)));
  }
  if (auto origin = req.Header("Origin")) {
    bool ok = IsLoopbackOrigin(*origin, port) ||
              std::find(options.allowed_origins.begin(), options.allowed_origins.end(), *origin) !=
                  options.allowed_origins.end();
    if (!ok) {
      std::string why =
          IsLoopbackOrigin(*origin)
              ? fmt::format(" (a loopback origin must have this server's port, {})", port)
              : std::string();
      return JsonRpcErrorResponse(
          403, nullptr,
          RpcError(kInvalidRequest, fmt::format("Forbidden: origin '{}' is not allowed{}",
                                                SanitizeUtf8(*origin), why)));
    }
  }
  if (!options.bearer_token.empty()) {
    auto auth = req.Header("Authorization");
    bool ok = false;
    if (auth && auth->size() > 7 && net::EqualsIgnoreCase(auth->substr(0, 7), "Bearer ")) {
      ok = ConstantTimeEquals(std::string_view(*auth).substr(7), options.bearer_token);
    }
    if (!ok) {
      net::Response r = net::Response::Text(401, "Unauthorized: a bearer token is required\n");
      r.headers.Set("WWW-Authenticate", "Bearer realm=\"deepbox mcp\"");
      return r;
    }
  }
  return std::nullopt;
}

// Runs after Authorize passed (ServerOptions::authorize_head).
void McpHttpServer::Impl::Handle(net::Request& req, net::ResponseWriter& w) {
  if (req.path != options.path) {
    (void)w.Send(net::Response::Text(404, "Not Found\n"));
    return;
  }
  if (req.method == "POST") {
    HandlePost(req, w);
    return;
  }
  if (req.method == "DELETE") {
    auto sid = req.Header("Mcp-Session-Id");
    if (!sid) {
      net::Response r = net::Response::Text(405, "Method Not Allowed\n");
      r.headers.Set("Allow", "POST");
      (void)w.Send(r);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!sessions.count(*sid)) {
        (void)w.Send(net::Response::Text(404, "Not Found: no such session\n"));
        return;
      }
    }
    EndSession(*sid);
    (void)w.Send(net::Response::Text(200, ""));
    return;
  }
  // GET: no standalone SSE stream here (server-initiated messages are never sent).
  net::Response r = net::Response::Text(405, "Method Not Allowed\n");
  r.headers.Set("Allow", "POST, DELETE");
  (void)w.Send(r);
}

void McpHttpServer::Impl::HandlePost(net::Request& req, net::ResponseWriter& w) {
  auto ctype = req.Header("Content-Type");
  if (!HeaderListHas(ctype, "application/json")) {
    (void)w.Send(JsonRpcErrorResponse(
        415, nullptr,
        RpcError(kInvalidRequest, "Unsupported Media Type: the body must be application/json")));
    return;
  }
  auto parsed = ParseMessage(req.body);
  if (!parsed) {
    (void)w.Send(JsonRpcErrorResponse(400, parsed.error().id, parsed.error().error));
    return;
  }
  Message& msg = *parsed;
  auto accept = req.Header("Accept");
  bool accepts_json = HeaderListHas(accept, "application/json") || HeaderListHas(accept, "*/*");
  bool accepts_sse = HeaderListHas(accept, "text/event-stream");
  bool modern = !msg.is_response() && HasModernMeta(msg.params) && msg.method != "initialize";

  // The session of a legacy message.
  std::shared_ptr<HttpSession> session;
  auto sid = req.Header("Mcp-Session-Id");
  if (!modern && sid) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = sessions.find(*sid);
    if (it == sessions.end()) {
      (void)w.Send(JsonRpcErrorResponse(
          404, msg.is_request() ? msg.id : json::value(nullptr),
          RpcError(kInvalidRequest, "Session not found: start a new one with initialize")));
      return;
    }
    session = it->second;
    std::lock_guard<std::mutex> slock(session->mu);
    session->last_used = Clock::now();
  }
  if (!modern && session) {
    // A legacy client sends the negotiated version on every request.
    if (auto v = req.Header("MCP-Protocol-Version"); v && !IsAcceptedLegacyHeaderVersion(*v)) {
      (void)w.Send(JsonRpcErrorResponse(
          400, msg.is_request() ? msg.id : json::value(nullptr),
          RpcError(kInvalidRequest,
                   fmt::format("Bad Request: unsupported MCP-Protocol-Version '{}'",
                               SanitizeUtf8(*v)))));
      return;
    }
  }

  if (msg.is_response()) {
    (void)w.Send(net::Response::Text(202, ""));  // we send no requests: nothing to match
    return;
  }
  if (msg.is_notification()) {
    if (msg.method == "notifications/cancelled" && session) {
      const json::value* id = msg.params.if_contains("requestId");
      if (id && IsValidId(*id)) {
        std::lock_guard<std::mutex> lock(session->mu);
        auto it = session->in_flight.find(IdKey(*id));
        if (it != session->in_flight.end()) it->second->Cancel();
      }
    } else {
      server->HandleNotification(msg, session ? &session->legacy : nullptr);
    }
    (void)w.Send(net::Response::Text(202, ""));
    return;
  }
  if (!accepts_json && !accepts_sse) {
    (void)w.Send(JsonRpcErrorResponse(
        406, msg.id,
        RpcError(kInvalidRequest,
                 "Not Acceptable: the client must accept application/json and text/event-stream")));
    return;
  }

  net::Headers extra;
  if (modern) {
    // The request's headers mirror its body (2026-07-28 Server Validation).
    auto version = MetaProtocolVersion(msg.params).value_or("");
    auto hv = req.Header("MCP-Protocol-Version");
    auto mismatch = [&](std::string what) {
      (void)w.Send(
          JsonRpcErrorResponse(400, msg.id, RpcError(kHeaderMismatch, "Header mismatch: " + what)));
    };
    if (!hv) return mismatch("the MCP-Protocol-Version header is missing");
    if (*hv != version) {
      if (!IsModernVersion(version) && !IsModernVersion(*hv)) {
        // Neither names a version we speak: say which we do.
        (void)w.Send(JsonRpcErrorResponse(400, msg.id, UnsupportedVersionError(version)));
        return;
      }
      return mismatch(
          fmt::format("MCP-Protocol-Version header value '{}' does not match body "
                      "value '{}'",
                      SanitizeUtf8(*hv), SanitizeUtf8(version)));
    }
    auto method = req.Header("Mcp-Method");
    if (!method) return mismatch("the Mcp-Method header is missing");
    if (*method != msg.method) {
      return mismatch(fmt::format("Mcp-Method header value '{}' does not match body value '{}'",
                                  SanitizeUtf8(*method), SanitizeUtf8(msg.method)));
    }
    if (msg.method == "tools/call") {
      const json::value* name = msg.params.if_contains("name");
      auto nh = req.Header("Mcp-Name");
      if (!nh) return mismatch("the Mcp-Name header is missing");
      auto decoded = DecodeHeaderValue(*nh);
      if (!decoded) return mismatch("the Mcp-Name header has invalid characters");
      if (!name || !name->is_string() || *decoded != std::string_view(name->get_string())) {
        return mismatch(fmt::format("Mcp-Name header value '{}' does not match the body",
                                    SanitizeUtf8(*decoded)));
      }
    }
  } else if (!session) {
    if (msg.method == "initialize") {
      std::lock_guard<std::mutex> lock(mu);
      if (stopping) {
        (void)w.Send(net::Response::Text(503, "Service Unavailable: shutting down\n"));
        return;
      }
      if (sessions.size() >= options.max_sessions) {
        (void)w.Send(JsonRpcErrorResponse(
            503, msg.id, RpcError(kInternalError, "too many sessions: try again later")));
        return;
      }
      session = std::make_shared<HttpSession>();
      session->id = RandomHex(32);
      session->owner = "session:" + session->id;
      sessions[session->id] = session;
      extra.Set("Mcp-Session-Id", session->id);
    } else if (msg.method != "ping") {
      (void)w.Send(JsonRpcErrorResponse(
          400, msg.id,
          RpcError(kInvalidRequest,
                   fmt::format("Bad Request: no Mcp-Session-Id (call initialize first) and no "
                               "_meta[\"{}\"] (protocol version {})",
                               kMetaProtocolVersion, kModernVersion))));
      return;
    }
  }
  RunRequest(msg, session, accepts_sse, std::move(extra), w);
}

void McpHttpServer::Impl::RunRequest(const Message& msg,
                                     const std::shared_ptr<HttpSession>& session, bool accepts_sse,
                                     net::Headers extra, net::ResponseWriter& w) {
  auto call = std::make_shared<HttpCall>(
      ProgressToken(msg.params), session ? session->owner : std::string("http"),
      session ? std::shared_ptr<const LegacySession>(session, &session->legacy) : nullptr);
  std::string key = IdKey(msg.id);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stopping) {
      (void)w.Send(net::Response::Text(503, "Service Unavailable: shutting down\n"));
      return;
    }
    if (session) {
      std::lock_guard<std::mutex> slock(session->mu);
      session->in_flight[key] = call;
    } else {
      stateless_calls.push_back(call);
    }
  }
  // A stream when something may come before the result: progress asked
  // for, or log messages (the session set a level).
  bool stream = accepts_sse && msg.method == "tools/call" &&
                (!ProgressToken(msg.params).is_null() ||
                 (session && session->legacy.WantsLog(LogLevel::kEmergency)));
  if (stream) {
    net::Headers h = extra;
    h.Set("Content-Type", "text/event-stream");
    h.Set("Cache-Control", "no-cache");
    h.Set("X-Accel-Buffering", "no");
    if (w.BeginStream(200, h)) {
      call->set_stream(&w);
    } else {
      call->Cancel();
    }
  }
  // A client that goes away cancels its request (the spec's cancellation on
  // HTTP): watched while the call runs.
  std::atomic<bool> done{false};
  std::mutex wmu;
  std::condition_variable wcv;
  std::thread watcher([&] {
    std::unique_lock<std::mutex> lock(wmu);
    while (!done.load()) {
      if (w.ClientGone()) {
        call->Cancel();
        return;
      }
      wcv.wait_for(lock, std::chrono::milliseconds(100));
    }
  });
  Reply reply;
  if (!call->cancelled()) {
    reply = server->Handle(msg, session ? &session->legacy : nullptr, *call);
  }
  {
    std::lock_guard<std::mutex> lock(wmu);
    done.store(true);
  }
  wcv.notify_all();
  watcher.join();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (session) {
      std::lock_guard<std::mutex> slock(session->mu);
      session->in_flight.erase(key);
      session->last_used = Clock::now();
    } else {
      stateless_calls.erase(std::remove(stateless_calls.begin(), stateless_calls.end(), call),
                            stateless_calls.end());
    }
  }
  if (call->cancelled()) {
    // No response for a cancelled request; a stream is just closed.
    if (stream && w.started()) (void)w.EndStream();
    return;
  }
  std::string body =
      reply.error ? SerializeError(msg.id, *reply.error) : SerializeResult(msg.id, reply.result);
  if (stream) {
    call->SendEvent(body);
    call->set_stream(nullptr);
    (void)w.EndStream();
    return;
  }
  int status = reply.error && reply.modern ? HttpStatusForError(reply.error->code) : 200;
  net::Response r = net::Response::Json(status, std::move(body));
  for (const auto& [k, v] : extra.entries()) r.headers.Set(k, v);
  (void)w.Send(r);
}

void McpHttpServer::Impl::EndSession(const std::string& id) {
  std::shared_ptr<HttpSession> s;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = sessions.find(id);
    if (it == sessions.end()) return;
    s = it->second;
    sessions.erase(it);
  }
  {
    std::lock_guard<std::mutex> lock(s->mu);
    for (auto& [k, c] : s->in_flight) c->Cancel();
  }
  if (options.on_owner_gone) options.on_owner_gone(s->owner);
}

void McpHttpServer::Impl::Janitor() {
  std::unique_lock<std::mutex> lock(mu);
  while (!stopping) {
    cv.wait_for(lock, std::chrono::seconds(5));
    if (stopping) break;
    std::vector<std::string> idle;
    auto now = Clock::now();
    for (auto& [id, s] : sessions) {
      std::lock_guard<std::mutex> slock(s->mu);
      if (s->in_flight.empty() && now - s->last_used > options.session_idle_timeout) {
        idle.push_back(id);
      }
    }
    lock.unlock();
    for (const auto& id : idle) EndSession(id);
    lock.lock();
  }
}

McpHttpServer::McpHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

McpHttpServer::~McpHttpServer() { Stop(); }

Result<std::unique_ptr<McpHttpServer>> McpHttpServer::Start(const McpServer& server,
                                                            const net::Endpoint& endpoint,
                                                            HttpTransportOptions options) {
  for (const auto& host : options.allowed_hosts) {
    if (!ParseHostHeader(host)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("allowed host '{}': expected NAME or NAME:PORT", host));
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->server = &server;
  impl->options = std::move(options);
  Impl* raw = impl.get();
  net::ServerOptions so;
  so.max_body_bytes = impl->options.max_body_bytes;
  so.max_buffered_body_bytes = impl->options.max_buffered_body_bytes;
  so.max_connections_per_peer = impl->options.max_connections_per_peer;
  so.buffered_body_deadline = impl->options.body_deadline;
  so.authorize_head = [raw](const net::Request& head) { return raw->Authorize(head); };
  so.server_header = "deepbox-mcp";
  // A long tool call writes nothing for minutes on a JSON reply.
  so.write_timeout = std::chrono::minutes(10);
  auto http = net::HttpServer::Create(
      endpoint, [raw](net::Request& req, net::ResponseWriter& w) { raw->Handle(req, w); }, so);
  if (!http) return tl::unexpected(http.error());
  impl->http = std::move(*http);
  // Bound but not yet accepting: what the head checks compare with.
  impl->port = impl->http->port();
  // A unix socket has no address to compare with: as all interfaces.
  const std::string bound = impl->http->bound_address().value_or("::");
  impl->loopback_listener = IsLoopbackHostName(bound);
  impl->wildcard_listener = bound == "0.0.0.0" || bound == "::";
  if (!impl->loopback_listener && !impl->wildcard_listener) {
    impl->own_names.push_back(bound);
    if (!endpoint.host.empty()) impl->own_names.push_back(endpoint.host);
  }
  impl->http->Start();
  impl->janitor = std::thread([raw] { raw->Janitor(); });
  return std::unique_ptr<McpHttpServer>(new McpHttpServer(std::move(impl)));
}

int McpHttpServer::port() const { return impl_->http->port(); }

void McpHttpServer::Stop() {
  if (!impl_) return;
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopping) return;
    impl_->stopping = true;
    for (auto& [id, s] : impl_->sessions) ids.push_back(id);
    for (auto& c : impl_->stateless_calls) c->Cancel();
  }
  impl_->cv.notify_all();
  if (impl_->janitor.joinable()) impl_->janitor.join();
  for (const auto& id : ids) impl_->EndSession(id);
  impl_->http->Stop();
  if (impl_->options.on_owner_gone) impl_->options.on_owner_gone("http");
}

}  // namespace deepbox::mcp
