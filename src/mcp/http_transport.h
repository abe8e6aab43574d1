// The Streamable HTTP transport of the server: one endpoint (POST; GET and
// DELETE as the spec says), on src/net's HTTP server.
//
//  * Security: the Origin header, when present, must be a loopback origin (or
//    one allowed explicitly), else 403; a bearer token is required unless the
//    caller disabled it (only allowed for a loopback listener, see
//    mcp_command.cc); a wrong or missing token gets 401.
//  * Modern requests (2026-07-28 _meta) are stateless: MCP-Protocol-Version,
//    Mcp-Method and Mcp-Name must match the body (400, -32020); an
//    Mcp-Session-Id header on them is ignored.
//  * initialize opens a legacy session (Mcp-Session-Id in the reply); its
//    requests carry the header; DELETE ends it; an unknown id gets 404.
//    Sessions idle longer than session_idle_timeout end by themselves.
//  * A request answers with one JSON object, or with an SSE stream when it is
//    a tools/call asking for progress (and the client accepts SSE): progress
//    notifications, then the response. A client that disconnects cancels its
//    request (the running command is killed); no answer is sent then.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "mcp/server.h"
#include "net/conn.h"

namespace deepbox::mcp {

struct HttpTransportOptions {
  std::string path = "/mcp";
  std::string bearer_token;  // "" = no authentication
  // Origins accepted besides http(s)://localhost|127.0.0.1|[::1][:port].
  std::vector<std::string> allowed_origins;
  std::chrono::milliseconds session_idle_timeout{std::chrono::minutes(30)};
  size_t max_sessions = 256;
  size_t max_body_bytes = 64u << 20;
  // An owner's client is gone (its legacy session ended, or the server
  // stops): "session:<id>" for sessions, "http" for the stateless requests.
  std::function<void(const std::string& owner)> on_owner_gone;
};

class McpHttpServer {
 public:
  static Result<std::unique_ptr<McpHttpServer>> Start(const McpServer& server,
                                                      const net::Endpoint& endpoint,
                                                      HttpTransportOptions options);
  ~McpHttpServer();
  int port() const;
  // Stops serving, cancels running calls, ends every session (on_owner_gone
  // for each, then for "http"). Idempotent.
  void Stop();

  struct Impl;

 private:
  explicit McpHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether `origin` ("http://127.0.0.1:8080") names this machine's loopback.
bool IsLoopbackOrigin(std::string_view origin);

}  // namespace deepbox::mcp
