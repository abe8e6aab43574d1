// Human-in-the-loop (LangChain HumanInTheLoopMiddleware semantics, plus the
// deepagents "ask" permission glue). The loop calls these after a model turn
// with tool calls:
//   BuildInterruptRequest -> the calls needing a decision (nullopt if none)
//   ValidateDecisions     -> one decision per action, each an allowed type
//   ApplyDecisions        -> approve: run as is; edit: run with new name/args
//                            (the assistant message is rewritten); reject: an
//                            error tool result (the message, or
//                            DefaultRejectMessage); respond: a successful
//                            tool result carrying the message, not executed.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/permissions.h"
#include "agent/state.h"
#include "agent/tool.h"

namespace deepbox::agent {

inline constexpr char kDefaultInterruptDescription[] = "Tool execution requires approval";

std::optional<InterruptRequest> BuildInterruptRequest(
    const std::vector<ToolCall>& calls, const std::map<std::string, InterruptConfig>& interrupt_on,
    const PermissionSet* permissions, const std::string& root);

// True when the assistant message was changed (edit decisions).
bool ApplyDecisions(const InterruptRequest& request, const std::vector<Decision>& decisions,
                    Message& assistant, std::map<std::string, ToolResult>& preset_results);

}  // namespace deepbox::agent
