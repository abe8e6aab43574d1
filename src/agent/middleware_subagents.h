// Sub-agents via the `task` tool (deepagents SubAgentMiddleware: the
// middleware contributes the tool and its system-prompt section,
// kTaskSystemPrompt; middleware.h). The tool runs an ephemeral agent of the
// requested type on the description, in its own context (a fresh
// conversation: [user(description)], its own todo list, its own
// summarization history file), sharing the sandbox. Only the sub-agent's
// final message comes back — the last assistant message with non-empty
// text, right-trimmed. An unknown type answers "We cannot invoke subagent X
// because it does not exist, the only allowed types are `a`, `b`". A
// `general-purpose` sub-agent (same model and tools as the main agent, minus
// `task` and `write_todos`) is added unless disabled or redefined.
//
// With a fork maker (TaskToolOptions::offer_fork; off by default, so the
// tool stays deepagents' own byte for byte), the tool has one more,
// optional argument, `sandbox`: "fork" runs the sub-agent in a new sandbox
// holding a copy of the caller's files as they are (a provider's Fork); its
// changes never reach the caller's sandbox, and the fork is deleted when the
// sub-agent ends. For trying an approach without touching the files.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/middleware.h"
#include "agent/permissions.h"
#include "agent/state.h"
#include "agent/tool.h"

namespace deepbox::agent {

struct SubAgentSpec {
  std::string name;
  std::string description;
  std::string system_prompt;
  // Tool names taken from the main agent's tools; nullopt = all of them
  // except `task` and `write_todos`.
  std::optional<std::vector<std::string>> tools;
  std::vector<ToolPtr> extra_tools;  // tools only this sub-agent has
  std::shared_ptr<ChatModel> model;  // null = the main agent's model
  // nullopt = inherit the main agent's interrupt_on.
  std::optional<std::map<std::string, InterruptConfig>> interrupt_on;
  // nullopt = inherit the main agent's rules; a value replaces them.
  std::optional<std::vector<PermissionRule>> permissions;
  std::vector<std::string> skills_dirs;
};

extern const char kGeneralPurposeName[];  // "general-purpose"
extern const char kGeneralPurposeDescription[];
extern const char kDefaultSubagentPrompt[];
extern const char kTaskSystemPrompt[];

// Runs one sub-agent to completion and returns its final text; `fork`: in
// a fork of the sandbox.
using SubagentRunner = std::function<Result<std::string>(
    const std::string& type, const std::string& description, bool fork, ToolContext& ctx)>;

struct TaskToolOptions {
  // With false, task calls of one turn run one after another
  // (deterministic model-call order, e.g. for replayed conversations).
  bool parallel = true;
  // The `sandbox` argument ("shared" | "fork") is offered.
  bool offer_fork = false;
};

// The `sandbox` argument's description (what the model reads).
extern const char kTaskSandboxArgDescription[];

// `agents`: (name, description) in listing order.
ToolPtr MakeTaskTool(std::vector<std::pair<std::string, std::string>> agents, SubagentRunner runner,
                     TaskToolOptions options = {});

class SubAgentMiddleware : public Middleware {
 public:
  // `agents`: (name, description) in listing order; `runner` runs one.
  SubAgentMiddleware(std::vector<std::pair<std::string, std::string>> agents, SubagentRunner runner,
                     TaskToolOptions options = {})
      : task_(MakeTaskTool(std::move(agents), std::move(runner), options)) {}
  std::string_view name() const override { return "subagents"; }
  std::vector<ToolPtr> tools() const override { return {task_}; }
  std::string system_prompt() const override { return kTaskSystemPrompt; }

 private:
  ToolPtr task_;
};

// The text a finished sub-agent returns: its last non-empty assistant text.
std::string SubagentFinalText(const std::vector<Message>& messages);

}  // namespace deepbox::agent
