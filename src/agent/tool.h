// The tool abstraction of the harness. Built-in tools (tools_*.h) and user
// tools implement Tool; the loop validates arguments against the JSON schema,
// schedules calls (parallel lanes) and invokes them with a ToolContext.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/model/model.h"
#include "agent/state.h"
#include "common/json.h"
#include "sandbox/sandbox.h"

namespace deepbox::agent {

class PermissionSet;

struct ToolResult {
  std::string text;
  std::vector<ImageBlock> images;
  bool is_error = false;

  static ToolResult Ok(std::string text) { return {std::move(text), {}, false}; }
  static ToolResult Err(std::string text) { return {std::move(text), {}, true}; }
};

// What a running tool may use. Built by the loop for each call.
struct ToolContext {
  Sandbox* sandbox = nullptr;
  std::string root;  // Sandbox::root(), cached
  const ToolCall* call = nullptr;
  const std::atomic<bool>* cancel = nullptr;
  int cancel_fd = -1;  // readable once *cancel is set (ModelRequest::cancel_fd)
  const PermissionSet* permissions = nullptr;
  AgentState* state = nullptr;  // the running agent's state (todos)
  // Streams partial output of long-running tools (execute) to the caller.
  std::function<void(std::string_view)> on_output;
  // Emits an updated todo list (write_todos).
  std::function<void(const json::array&)> on_todos;
  // The running agent's event sink (already serialized) and interrupt
  // handler; the task tool hands them to the sub-agent it runs.
  EventCallback on_event;
  InterruptHandler on_interrupt;
  int depth = 0;  // 0 = main agent, 1 = sub-agent, ...

  bool cancelled() const { return cancel && cancel->load(); }
};

// How the loop may run a call next to the other calls of the same turn.
// Calls with the same non-empty lane run one after another in call order;
// an empty lane runs on its own, concurrently with everything else.
struct ToolScheduling {
  std::string lane;
};

class Tool {
 public:
  virtual ~Tool() = default;
  virtual const ToolSpec& spec() const = 0;
  const std::string& name() const { return spec().name; }
  virtual ToolResult Invoke(ToolContext& ctx, const json::object& args) = 0;
  // Default: own lane (runs concurrently).
  virtual ToolScheduling Scheduling(const json::object& args, std::string_view root) const;
  // The argument worth showing in a one-line summary (path, command, ...).
  virtual std::string MainArgument(const json::object& args) const;
  // Whether large results may be evicted to the filesystem.
  virtual bool Evictable() const { return true; }
  // false: left out of the tools offered to the model from the next turn on
  // (e.g. the tools of an MCP server that died); a call by name still gets
  // the tool's own error.
  virtual bool Available() const { return true; }
};

using ToolPtr = std::shared_ptr<Tool>;

// A tool from a function. `parallel_safe` = false (the default) puts every
// call of every such tool into one shared lane, so they run sequentially.
class FunctionTool : public Tool {
 public:
  using Fn = std::function<ToolResult(ToolContext&, const json::object&)>;
  FunctionTool(ToolSpec spec, Fn fn, bool parallel_safe = false);
  const ToolSpec& spec() const override { return spec_; }
  ToolResult Invoke(ToolContext& ctx, const json::object& args) override;
  ToolScheduling Scheduling(const json::object& args, std::string_view root) const override;

 private:
  ToolSpec spec_;
  Fn fn_;
  bool parallel_safe_;
};

// Validates `args` against a (flat) JSON schema the way pydantic reports it:
// nullopt when valid, else the LangChain-style tool error text, e.g.
// "Error invoking tool 'read_file' with kwargs {...} with error:\n file_path: Field
// required\n Please fix your mistakes."
std::optional<std::string> ValidateToolArgs(const ToolSpec& spec, const json::object& args);

// Schema builders.
json::object SchemaObject(std::initializer_list<std::pair<std::string, json::object>> props,
                          std::initializer_list<std::string> required);
json::object SchemaString(std::string description);
json::object SchemaInteger(std::string description, std::optional<int64_t> def = std::nullopt);
json::object SchemaBoolean(std::string description, std::optional<bool> def = std::nullopt);

// Typed argument access after validation (defaults applied by the caller).
std::string ArgString(const json::object& args, std::string_view key, std::string def = "");
std::optional<std::string> ArgOptString(const json::object& args, std::string_view key);
std::optional<int64_t> ArgOptInt(const json::object& args, std::string_view key);
bool ArgBool(const json::object& args, std::string_view key, bool def);

}  // namespace deepbox::agent
