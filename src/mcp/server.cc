#include "mcp/server.h"

#include <fmt/format.h>

#include "mcp/protocol.h"

namespace deepbox::mcp {

bool LegacySession::initialized() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !version_.empty();
}

std::string LegacySession::protocol_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

void LegacySession::Initialize(std::string version, json::object capabilities,
                               json::object client_info) {
  std::lock_guard<std::mutex> lock(mu_);
  version_ = std::move(version);
  capabilities_ = std::move(capabilities);
  client_info_ = std::move(client_info);
}

void LegacySession::MarkReady() {
  std::lock_guard<std::mutex> lock(mu_);
  ready_ = true;
}

bool LegacySession::ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ready_;
}

int HttpStatusForError(int code) {
  switch (code) {
    case kParseError:
    case kInvalidRequest:
    case kInvalidParams:
    case kHeaderMismatch:
    case kMissingRequiredClientCapability:
    case kUnsupportedProtocolVersion:
      return 400;
    case kMethodNotFound:
      return 404;
    default:
      return 200;
  }
}

namespace {

bool KnownMethod(std::string_view m) {
  return m == "initialize" || m == "ping" || m == "server/discover" || m == "tools/list" ||
         m == "tools/call" || m == "logging/setLevel";
}

// Logging is a legacy session's: a modern (stateless) request has no level.
json::object Capabilities(bool legacy) {
  json::object tools;
  tools["listChanged"] = false;
  json::object caps;
  caps["tools"] = std::move(tools);
  if (legacy) caps["logging"] = json::object();
  return caps;
}

Reply ErrorReply(RpcError e, bool modern) {
  Reply r;
  r.error = std::move(e);
  r.modern = modern;
  return r;
}

// Pagination: the list is one page; only the absence of a cursor is valid.
std::optional<RpcError> CheckCursor(const json::object& params) {
  const json::value* c = params.if_contains("cursor");
  if (!c || c->is_null()) return std::nullopt;
  return RpcError(kInvalidParams, "Invalid params: unknown cursor (tools/list has one page)");
}

}  // namespace

McpServer::McpServer(std::shared_ptr<const ToolRegistry> tools, ServerConfig config)
    : tools_(std::move(tools)), config_(std::move(config)) {}

json::object McpServer::DiscoverResult() const {
  json::object r;
  json::array versions;
  for (const auto& v : SupportedVersions()) versions.emplace_back(v);
  r["supportedVersions"] = std::move(versions);
  r["capabilities"] = Capabilities(false);
  if (!config_.instructions.empty()) r["instructions"] = config_.instructions;
  r["ttlMs"] = config_.list_ttl_ms;
  r["cacheScope"] = "public";
  return r;
}

Reply McpServer::Handle(const Message& request, LegacySession* session,
                        ToolCallContext& ctx) const {
  if (!KnownMethod(request.method)) {
    return ErrorReply(
        RpcError(kMethodNotFound, fmt::format("Method not found: {}", request.method)),
        HasModernMeta(request.params));
  }
  // initialize is legacy by definition, even if a client adds modern _meta.
  if (request.method != "initialize" && HasModernMeta(request.params)) {
    return Modern(request, ctx);
  }
  return Legacy(request, session, ctx);
}

Reply McpServer::Modern(const Message& request, ToolCallContext& ctx) const {
  auto meta = ReadModernMeta(request.params);
  if (!meta) return ErrorReply(meta.error(), true);
  Reply r;
  r.modern = true;
  if (request.method == "server/discover") {
    r.result = DiscoverResult();
  } else if (request.method == "tools/list") {
    if (auto e = CheckCursor(request.params)) return ErrorReply(*e, true);
    r.result["tools"] = tools_->ListJson();
    r.result["ttlMs"] = config_.list_ttl_ms;
    r.result["cacheScope"] = "public";
  } else if (request.method == "tools/call") {
    auto result = tools_->Call(request.params, ctx);
    if (!result) return ErrorReply(result.error(), true);
    r.result = std::move(*result);
  } else {
    // ping was removed in 2026-07-28; initialize never gets here.
    return ErrorReply(RpcError(kMethodNotFound,
                               fmt::format("Method not found: {} (not part of protocol version {})",
                                           request.method, kModernVersion)),
                      true);
  }
  r.result["resultType"] = "complete";
  json::object rmeta;
  if (const json::value* m = r.result.if_contains("_meta"); m && m->is_object()) {
    rmeta = m->get_object();
  }
  rmeta[kMetaServerInfo] = ServerImplementation();
  r.result["_meta"] = std::move(rmeta);
  return r;
}

Reply McpServer::Legacy(const Message& request, LegacySession* session,
                        ToolCallContext& ctx) const {
  Reply r;
  if (request.method == "initialize") {
    if (!session) {
      return ErrorReply(
          RpcError(kInvalidRequest, "Invalid Request: initialize is not possible here"), false);
    }
    const json::value* v = request.params.if_contains("protocolVersion");
    if (!v || !v->is_string()) {
      return ErrorReply(
          RpcError(kInvalidParams, "Invalid params: \"protocolVersion\" must be a string"), false);
    }
    const json::value* caps = request.params.if_contains("capabilities");
    if (caps && !caps->is_object()) {
      return ErrorReply(
          RpcError(kInvalidParams, "Invalid params: \"capabilities\" must be an object"), false);
    }
    const json::value* info = request.params.if_contains("clientInfo");
    std::string version = NegotiateLegacyVersion(v->get_string());
    session->Initialize(version, caps ? caps->get_object() : json::object{},
                        info && info->is_object() ? info->get_object() : json::object{});
    r.result["protocolVersion"] = version;
    r.result["capabilities"] = Capabilities(true);
    r.result["serverInfo"] = ServerImplementation();
    if (!config_.instructions.empty()) r.result["instructions"] = config_.instructions;
    return r;
  }
  if (request.method == "ping") return r;  // allowed before initialize too
  if (!session || !session->initialized()) {
    // Neither era: no modern envelope and no handshake on this connection.
    auto meta = ReadModernMeta(request.params);
    return ErrorReply(meta ? RpcError(kInvalidRequest, "Invalid Request") : meta.error(), true);
  }
  if (request.method == "server/discover") {
    // Modern-only; a legacy session asking for it gets an answer anyway,
    // harmless and useful for tools probing the server.
    r.result = DiscoverResult();
    return r;
  }
  if (request.method == "tools/list") {
    if (auto e = CheckCursor(request.params)) return ErrorReply(*e, false);
    r.result["tools"] = tools_->ListJson();
    return r;
  }
  if (request.method == "tools/call") {
    auto result = tools_->Call(request.params, ctx);
    if (!result) return ErrorReply(result.error(), false);
    r.result = std::move(*result);
    return r;
  }
  if (request.method == "logging/setLevel") {
    const json::value* level = request.params.if_contains("level");
    std::optional<LogLevel> parsed;
    if (level && level->is_string()) parsed = ParseLogLevel(level->get_string());
    if (!parsed) {
      return ErrorReply(RpcError(kInvalidParams,
                                 "Invalid params: \"level\" must be one of debug, info, notice, "
                                 "warning, error, critical, alert, emergency"),
                        false);
    }
    session->SetLogLevel(*parsed);
    return r;
  }
  return ErrorReply(RpcError(kMethodNotFound, fmt::format("Method not found: {}", request.method)),
                    false);
}

void LegacySession::SetLogLevel(LogLevel level) {
  std::lock_guard<std::mutex> lock(mu_);
  log_level_ = level;
}

bool LegacySession::WantsLog(LogLevel level) const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_level_ && level >= *log_level_;
}

void McpServer::HandleNotification(const Message& notification, LegacySession* session) const {
  if (notification.method == "notifications/initialized" && session) session->MarkReady();
}

}  // namespace deepbox::mcp
