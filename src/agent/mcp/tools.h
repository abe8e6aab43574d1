// MCP servers' tools for deepbox's agent. Each configured server
// (config.h) is started and asked for its tools, which the model sees as
// `mcp__<server>__<tool>` (names reduced to [A-Za-z0-9_-], at most 64
// characters). A call goes to the server with the model's arguments;
// progress notifications stream as the tool's output; cancelling the run
// cancels the call.
//
// Trust: a host-side server (the default) runs as the user, outside any
// sandbox: it is the user's own configuration, trusted like any program they
// run. `"sandbox": true` starts a stdio server inside the agent's sandbox,
// with the sandbox's isolation, for servers one does not trust.
//
// A server that fails to start is reported once (on_problem) and left out; a
// server that dies later is reported once, and its tools are withdrawn: the
// model is no longer offered them, and a call by name answers with an error
// saying why.
//
// A sandbox that was suspended has lost its processes, the servers inside it
// among them: RestartSandboxed starts those again (after the resume).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/mcp/config.h"
#include "agent/tool.h"
#include "mcp/client.h"

namespace deepbox::agent {

struct McpToolsetOptions {
  Sandbox* sandbox = nullptr;  // for "sandbox": true servers
  // One line per problem: a server that did not start, or died.
  std::function<void(const std::string& message)> on_problem;
  mcp::ClientOptions client;
};

class McpToolset {
 public:
  // Starts every server (concurrently) and lists its tools.
  static std::shared_ptr<McpToolset> Start(const std::vector<McpServerConfig>& servers,
                                           McpToolsetOptions options);
  ~McpToolset();

  // The agent tools of every server that started, in server then tool order.
  const std::vector<ToolPtr>& tools() const { return tools_; }
  std::vector<std::string> tool_names() const;
  // The configuration of the server whose tool `tool_name` is (null: none of the set's).
  const McpServerConfig* ServerOf(std::string_view tool_name) const;
  // "name: N tools (stdio, 2026-07-28)" per running server.
  std::vector<std::string> Describe() const;
  // Closes every connection (stdio servers get EOF, HTTP sessions DELETE).
  void Close();

  // Starts every server that runs inside the sandbox ("sandbox": true) and
  // started when the set was made (one that did not never offered tools)
  // again, initializes it and lists its tools: the sandbox was suspended and
  // resumed, its processes are gone. The agent keeps the tools it was given
  // (its tool list is fixed for its thread, and a new tool mid-thread would
  // be one the user never saw listed): a tool the server no longer has is
  // withdrawn (a call by name answers with an error saying so), a tool it
  // gained is reported through on_problem and left out, the rest call the
  // new process. A server that does not start again is reported; its tools
  // are withdrawn and answer with an error naming it. Returns the number of
  // servers started again. Not while a tool of the set is being called.
  size_t RestartSandboxed();

  struct Server;

 private:
  McpToolset() = default;
  McpToolsetOptions options_;
  std::vector<std::shared_ptr<Server>> servers_;
  std::vector<ToolPtr> tools_;
  std::vector<std::shared_ptr<Server>> tool_servers_;  // tools_[i]'s server
};

// `mcp__<server>__<tool>`, reduced to the characters model APIs accept.
std::string McpToolName(std::string_view server, std::string_view tool);

}  // namespace deepbox::agent
