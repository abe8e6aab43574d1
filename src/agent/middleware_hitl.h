// Human-in-the-loop (LangChain HumanInTheLoopMiddleware semantics, plus the
// deepagents "ask" permission glue), in AfterModel (middleware.h): after a
// model turn with tool calls, the calls named in interrupt_on and the file
// calls an "ask" permission rule guards become one InterruptRequest, in call
// order (BuildInterruptRequest). The caller's LoopHooks::on_interrupt
// decides it, or the run pauses until Resume() (which brings the pending
// request back here with the decisions). Then:
//   ValidateDecisions -> one decision per action, each an allowed type (else
//                        the run stops with that error, still resumable)
//   ApplyDecisions    -> approve: run as is; edit: run with new name/args
//                        (the assistant message is rewritten); reject: an
//                        error tool result (the message, or
//                        DefaultRejectMessage); respond: a successful
//                        tool result carrying the message, not executed.
#pragma once

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

inline constexpr char kDefaultInterruptDescription[] = "Tool execution requires approval";

class HumanInTheLoopMiddleware : public Middleware {
 public:
  // `ask_rules`: the permission rules whose "ask" mode interrupts (may be null).
  HumanInTheLoopMiddleware(std::map<std::string, InterruptConfig> interrupt_on,
                           std::shared_ptr<const PermissionSet> ask_rules)
      : interrupt_on_(std::move(interrupt_on)), ask_rules_(std::move(ask_rules)) {}
  std::string_view name() const override { return "human_in_the_loop"; }
  Status AfterModel(ModelTurn& turn, RunEnv& env) override;

 private:
  std::map<std::string, InterruptConfig> interrupt_on_;
  std::shared_ptr<const PermissionSet> ask_rules_;
};

std::optional<InterruptRequest> BuildInterruptRequest(
    const std::vector<ToolCall>& calls, const std::map<std::string, InterruptConfig>& interrupt_on,
    const PermissionSet* permissions, const std::string& root);

// Validates decisions against an interrupt: one per action, each of an
// allowed type. Messages follow LangChain's HumanInTheLoopMiddleware.
Status ValidateDecisions(const InterruptRequest& request, const std::vector<Decision>& decisions);

// True when the assistant message was changed (edit decisions).
bool ApplyDecisions(const InterruptRequest& request, const std::vector<Decision>& decisions,
                    Message& assistant, std::map<std::string, ToolResult>& preset_results);

}  // namespace deepbox::agent
