// Dangling tool-call patching (deepagents PatchToolCallsMiddleware): when a
// new message arrives while the last assistant turn still has tool calls
// without results (a paused or cancelled run), each such call gets the result
// "Tool call {name} with id {id} was cancelled - another message came in
// before it could be completed." DeepAgent applies this before appending the
// new user message, so the thread stays append-only; the loop additionally
// patches any other dangling call in the request it sends
// (AgentLoop::PatchDanglingToolCalls).
#pragma once

#include <functional>

#include "agent/state.h"

namespace deepbox::agent {

// Appends the cancellation results for the trailing assistant message's
// unanswered calls (only when nothing but tool results follows it). Returns
// how many were added.
size_t PatchTrailingDanglingCalls(const AgentState& state,
                                  const std::function<void(Message)>& append);

}  // namespace deepbox::agent
