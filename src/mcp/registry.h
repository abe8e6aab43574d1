// The tools an MCP server offers: definitions (name, schemas, annotations), a
// deterministic listing, and calls with strict argument validation. A tool's
// own failures and bad arguments become results with isError (the model can
// act on them); only an unknown tool is a protocol error (-32602).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "mcp/jsonrpc.h"
#include "mcp/protocol.h"

namespace deepbox::mcp {

// Content blocks of a CallToolResult.
json::object TextContent(std::string_view text);
json::object ImageContent(std::string_view base64_data, std::string_view mime_type);
// An embedded resource with binary contents (BlobResourceContents).
json::object BlobResourceContent(std::string_view uri, std::string_view mime_type,
                                 std::string_view base64_data);

struct ToolOutcome {
  json::array content;
  std::optional<json::value> structured;  // structuredContent (successful calls)
  bool is_error = false;
  json::object meta;  // the result's _meta (e.g. which sandbox ran the call)

  static ToolOutcome Text(std::string text, bool is_error = false);
  static ToolOutcome Error(std::string text) { return Text(std::move(text), true); }
};

// What a running tool may use.
class ToolCallContext {
 public:
  virtual ~ToolCallContext() = default;
  // Set once the client cancelled the request or went away.
  virtual const std::atomic<bool>* cancel_flag() const = 0;
  bool cancelled() const {
    const std::atomic<bool>* f = cancel_flag();
    return f != nullptr && f->load();
  }
  // Whether the client asked for progress (a progressToken).
  virtual bool wants_progress() const = 0;
  // Sends notifications/progress; `progress` must grow with each call.
  virtual void Progress(double progress, std::optional<double> total, std::string_view message) = 0;
  // Sends notifications/message when the client's session asked for `level`
  // or above (logging/setLevel); otherwise, and by default, nothing.
  virtual void Log(LogLevel level, std::string_view logger, const json::value& data) {
    (void)level;
    (void)logger;
    (void)data;
  }
  // Who the call belongs to, for per-client state (the default sandbox):
  // "stdio", "session:<id>", "http".
  virtual const std::string& owner() const = 0;
};

using ToolHandler = std::function<ToolOutcome(const json::object& args, ToolCallContext& ctx)>;

struct ToolDef {
  std::string name;
  std::string title;
  std::string description;
  json::object input_schema;
  std::optional<json::object> output_schema;
  json::object annotations;  // readOnlyHint, destructiveHint, ...
  ToolHandler handler;
};

class ToolRegistry {
 public:
  void Add(ToolDef tool);
  const ToolDef* Find(std::string_view name) const;
  const std::vector<ToolDef>& tools() const { return tools_; }
  // The Tool objects of tools/list, in registration order.
  json::array ListJson() const;
  // Runs a tools/call: -32602 for an unknown tool or malformed params;
  // otherwise a CallToolResult (bad arguments give isError with the reasons).
  tl::expected<json::object, RpcError> Call(const json::object& params, ToolCallContext& ctx) const;

 private:
  std::vector<ToolDef> tools_;
};

// A CallToolResult object from an outcome.
json::object CallToolResultJson(const ToolOutcome& outcome);

}  // namespace deepbox::mcp
