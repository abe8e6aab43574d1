// The transport-neutral MCP server: answers one request at a time for the
// stdio and Streamable HTTP transports (stdio.h, http_transport.h).
//
// A request carrying the modern envelope (_meta protocolVersion) is served
// statelessly under 2026-07-28, whatever came before on the connection.
// Otherwise the connection's (or HTTP session's) legacy session applies:
// `initialize` negotiates 2025-11-25 or 2025-06-18 and later requests are
// served under it. Methods: server/discover (modern), initialize, ping and
// logging/setLevel (legacy), tools/list, tools/call. Capabilities: tools,
// and logging for legacy sessions (a tool's log messages reach a session
// only after it set a level: ToolCallContext::Log).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/json.h"
#include "mcp/jsonrpc.h"
#include "mcp/protocol.h"
#include "mcp/registry.h"

namespace deepbox::mcp {

// What an initialize fixed for a connection or HTTP session.
class LegacySession {
 public:
  bool initialized() const;
  std::string protocol_version() const;
  void Initialize(std::string version, json::object capabilities, json::object client_info);
  void MarkReady();  // notifications/initialized
  bool ready() const;
  // logging/setLevel; none until the client sets one (then nothing is sent).
  void SetLogLevel(LogLevel level);
  bool WantsLog(LogLevel level) const;

 private:
  mutable std::mutex mu_;
  std::string version_;
  json::object capabilities_;
  json::object client_info_;
  bool ready_ = false;
  std::optional<LogLevel> log_level_;
};

struct ServerConfig {
  std::string instructions;       // server/discover and initialize
  int64_t list_ttl_ms = 3600000;  // tools/list and server/discover freshness (the list is fixed)
};

struct Reply {
  json::object result;  // when !error
  std::optional<RpcError> error;
  bool modern = false;  // served under 2026-07-28
};

// The HTTP status a modern error travels with (400 for malformed envelopes and
// params, 404 for an unknown method, 200 otherwise).
int HttpStatusForError(int code);

class McpServer {
 public:
  McpServer(std::shared_ptr<const ToolRegistry> tools, ServerConfig config);

  // One request. `session` is the connection's legacy session (null for a
  // stateless HTTP request, which must then be modern or an initialize).
  Reply Handle(const Message& request, LegacySession* session, ToolCallContext& ctx) const;
  // notifications/initialized; every other notification is the transport's
  // (notifications/cancelled) or ignored.
  void HandleNotification(const Message& notification, LegacySession* session) const;

  const ToolRegistry& tools() const { return *tools_; }

 private:
  Reply Modern(const Message& request, ToolCallContext& ctx) const;
  Reply Legacy(const Message& request, LegacySession* session, ToolCallContext& ctx) const;
  json::object DiscoverResult() const;

  std::shared_ptr<const ToolRegistry> tools_;
  ServerConfig config_;
};

}  // namespace deepbox::mcp
