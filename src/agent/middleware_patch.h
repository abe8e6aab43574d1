// Dangling tool-call patching (deepagents PatchToolCallsMiddleware, in
// BeforeAgent): when a new message arrives while the last assistant turn
// still has tool calls without results (a paused or cancelled run), each
// such call gets the result "Tool call {name} with id {id} was cancelled -
// another message came in before it could be completed." BeforeAgent runs
// before Run() appends the new user message, so the results come before it
// and the thread stays append-only (deepagents rewrites its message list
// instead). The loop additionally patches any other dangling call in the
// request it sends (AgentLoop::PatchDanglingToolCalls).
#pragma once

#include <functional>

#include "agent/middleware.h"
#include "agent/state.h"

namespace deepbox::agent {

class PatchToolCallsMiddleware : public Middleware {
 public:
  std::string_view name() const override { return "patch_tool_calls"; }
  void BeforeAgent(RunEnv& env) override;
};

// Appends the cancellation results for the trailing assistant message's
// unanswered calls (only when nothing but tool results follows it). Returns
// how many were added.
size_t PatchTrailingDanglingCalls(const AgentState& state,
                                  const std::function<void(Message)>& append);

}  // namespace deepbox::agent
