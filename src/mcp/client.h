// An MCP client: connects to a server over stdio (a local process, or a
// process inside a sandbox) or Streamable HTTP, speaks whichever protocol
// generation the server does, lists its tools and calls them.
//
// Era detection follows the spec's backward-compatibility rules: a
// server/discover probe at 2026-07-28 first; a DiscoverResult (or an
// UnsupportedProtocolVersion naming a modern version) means modern, any
// other error or silence (stdio) means legacy, and the client falls back to
// the initialize handshake (2025-11-25, accepting 2025-06-18).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/version.h"
#include "mcp/elicitation.h"
#include "mcp/jsonrpc.h"
#include "mcp/oauth.h"
#include "net/http.h"
#include "sandbox/sandbox.h"

namespace deepbox::mcp {

// A byte stream of newline-delimited JSON messages to a server process.
class LineChannel {
 public:
  virtual ~LineChannel() = default;
  // Starts delivering lines; on_closed runs once when the stream ends (with
  // why, e.g. "exited with status 1: <stderr tail>").
  virtual void Start(std::function<void(std::string_view line)> on_line,
                     std::function<void(const Error&)> on_closed) = 0;
  virtual Status Send(std::string_view line) = 0;
  // Closes the server's input, waits briefly, then ends it. Idempotent.
  virtual void Close() = 0;
};

// A host process (posix_spawn, its own process group; stderr kept for errors).
Result<std::unique_ptr<LineChannel>> SpawnProcessChannel(
    const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
    const std::string& cwd);
// A process inside a sandbox (Sandbox::ExecStream with streamed stdin).
Result<std::unique_ptr<LineChannel>> SandboxProcessChannel(
    Sandbox& sandbox, const std::vector<std::string>& argv,
    const std::map<std::string, std::string>& env, const std::string& cwd);

struct RemoteTool {
  std::string name;
  std::string title;
  std::string description;
  json::object input_schema;
};

struct ContentImage {
  std::string media_type;
  std::string base64_data;
};

struct ToolCallResult {
  bool is_error = false;
  std::string text;  // the text blocks, joined; other blocks described
  std::vector<ContentImage> images;
  std::optional<json::value> structured;
};

struct CallOptions {
  const std::atomic<bool>* cancel = nullptr;
  int cancel_fd = -1;
  std::function<void(double progress, std::optional<double> total, std::string_view message)>
      on_progress;
  std::chrono::milliseconds timeout{std::chrono::hours(1)};
};

struct ClientOptions {
  std::string client_name = "deepbox";
  std::string client_version = std::string(kVersion);
  std::chrono::milliseconds request_timeout{60000};  // discover, initialize, tools/list
  std::chrono::milliseconds probe_timeout{10000};    // stdio: silence = a legacy server
  // HTTP: OAuth for servers that answer 401/403 with a Bearer challenge
  // (mcp/oauth.h); unset: such an answer is an error.
  OAuthSessionFactory oauth;
  // Set: the client declares the elicitation capability and answers
  // elicitation/create with it; unset: no capability, such requests get
  // "method not found".
  ElicitationHandler on_elicitation;
  // HTTP: a POST's SSE stream that ends before the answer is resumed with GET
  // and Last-Event-ID (after the stream's retry: delay, else this), at most
  // max_stream_resumptions times in a row without a new event.
  std::chrono::milliseconds default_sse_retry{1000};
  int max_stream_resumptions = 5;
};

// Internal transport of a client (stdio or HTTP).
class RpcTransport;

class McpClient {
 public:
  static Result<std::unique_ptr<McpClient>> ConnectStdio(std::unique_ptr<LineChannel> channel,
                                                         ClientOptions options = {});
  // url "http://host:port/mcp"; headers sent with every request (Authorization, ...).
  static Result<std::unique_ptr<McpClient>> ConnectHttp(const std::string& url,
                                                        const net::Headers& headers,
                                                        ClientOptions options = {});
  ~McpClient();

  const std::string& protocol_version() const { return version_; }
  bool modern() const { return modern_; }
  const json::object& server_info() const { return server_info_; }
  const std::string& instructions() const { return instructions_; }

  Result<std::vector<RemoteTool>> ListTools();
  Result<ToolCallResult> CallTool(const std::string& name, const json::object& arguments,
                                  const CallOptions& options = {});
  // Why the connection is gone (the server exited, ...), or nullopt while it works.
  std::optional<Error> failure() const;
  void Close();

 private:
  McpClient(std::unique_ptr<RpcTransport> t, ClientOptions o);
  Status Negotiate();
  json::object Params(json::object params, const json::value& progress_token = nullptr) const;
  json::object Capabilities() const;

  std::unique_ptr<RpcTransport> transport_;
  ClientOptions options_;
  bool modern_ = false;
  std::string version_;
  json::object server_info_;
  std::string instructions_;
};

// ToolCallResult from a CallToolResult object (content blocks described as text).
ToolCallResult ToolCallResultFromJson(const json::object& result);

}  // namespace deepbox::mcp
