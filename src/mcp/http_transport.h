// The Streamable HTTP transport of the server: one endpoint (POST; GET and
// DELETE as the spec says), on src/net's HTTP server.
//
//  * Security, checked on each request's head before a byte of its body is
//    read (a refused request costs no buffer; it is answered and closed):
//    the Host header must name this server (421 otherwise): on a loopback
//    listener a loopback name or address (localhost, 127.x.y.z, [::1]) with
//    the listener's port, on one bound to an address that address or the
//    --listen name with its port, or one of allowed_hosts. The Origin
//    header, when present, must be a loopback origin with the listener's
//    port (or one allowed explicitly), else 403. A bearer token is required
//    unless the caller disabled it (only allowed for a loopback listener, see
//    cli/mcp/server_command.cc); a wrong or missing token gets 401.
//  * Memory: a body is at most max_body_bytes (the largest upload_file,
//    413 beyond it); buffered bodies of all clients together hold at most
//    max_buffered_body_bytes (503 beyond it); each peer address has at most
//    max_connections_per_peer connections at once.
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

// The request body an upload_file of `transfer_bytes` needs: its base64 (4
// characters per 3 bytes) and 1 MiB for the rest of the JSON-RPC message.
constexpr size_t BodyBytesForTransfer(size_t transfer_bytes) {
  return (transfer_bytes + 2) / 3 * 4 + (size_t{1} << 20);
}
// SandboxToolsOptions::max_transfer_bytes (src/cli/mcp/sandbox_tools.h), which
// this library cannot include; tests/mcp uploads a file of the size
// upload_file announces through HTTP, so the two cannot drift apart.
inline constexpr size_t kMaxUploadFileBytes = size_t{32} << 20;

struct HttpTransportOptions {
  std::string path = "/mcp";
  std::string bearer_token;  // "" = no authentication
  // Origins accepted besides http(s)://localhost|127.0.0.1|[::1] with the
  // listener's port.
  std::vector<std::string> allowed_origins;
  // Host header values accepted besides the listener's own names (see
  // above): "name" (any port) or "name:port", e.g. the name of a reverse
  // proxy that passes the client's Host on.
  std::vector<std::string> allowed_hosts;
  std::chrono::milliseconds session_idle_timeout{std::chrono::minutes(30)};
  size_t max_sessions = 256;
  size_t max_body_bytes = BodyBytesForTransfer(kMaxUploadFileBytes);
  size_t max_buffered_body_bytes = 3 * BodyBytesForTransfer(kMaxUploadFileBytes);
  size_t max_connections_per_peer = 64;
  // A whole request body must arrive within this long (a 32 MiB upload_file
  // needs about 50 KB/s), besides the server's minimum rate.
  std::chrono::milliseconds body_deadline{std::chrono::minutes(15)};
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

// Whether `origin` ("http://127.0.0.1:8080") names this machine's loopback,
// and, when `port` is not 0, that port (80 or 443 when the origin has none).
bool IsLoopbackOrigin(std::string_view origin, int port = 0);
// Whether `host` (no brackets, no port) is a loopback name or address:
// localhost, 127.x.y.z, ::1 (or ::ffff:127.x.y.z).
bool IsLoopbackHostName(std::string_view host);

}  // namespace deepbox::mcp
