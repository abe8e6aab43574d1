// The harness' shared vocabulary: the state of one agent conversation,
// human-in-the-loop types, events delivered to callers, and stop reasons.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/model/model.h"
#include "common/error.h"
#include "common/json.h"

namespace deepbox::agent {

// ------------------------------------------------------------------ HITL

enum class DecisionType { kApprove, kEdit, kReject, kRespond };
std::string_view DecisionTypeName(DecisionType t);  // "approve", "edit", ...
std::optional<DecisionType> DecisionTypeFromName(std::string_view name);

// A human's answer to one action request.
struct Decision {
  DecisionType type = DecisionType::kApprove;
  std::string message;                     // reject (optional) / respond (the tool result)
  std::optional<std::string> edited_name;  // edit: tool name (defaults to the original)
  json::object edited_args;                // edit: replacement arguments

  static Decision Approve() { return {}; }
  static Decision Edit(json::object args) {
    Decision d;
    d.type = DecisionType::kEdit;
    d.edited_args = std::move(args);
    return d;
  }
  static Decision Reject(std::string message = "") {
    Decision d;
    d.type = DecisionType::kReject;
    d.message = std::move(message);
    return d;
  }
  static Decision Respond(std::string message) {
    Decision d;
    d.type = DecisionType::kRespond;
    d.message = std::move(message);
    return d;
  }
};

// Per-tool interrupt configuration (deepagents interrupt_on value).
struct InterruptConfig {
  std::vector<DecisionType> allowed_decisions = {DecisionType::kApprove, DecisionType::kEdit,
                                                 DecisionType::kReject, DecisionType::kRespond};
  // Prefix of the action description; default "Tool execution requires approval".
  std::string description;
};

struct ActionRequest {
  std::string tool_call_id;
  std::string name;
  json::object args;
  std::string description;
};

struct ReviewConfig {
  std::string action_name;
  std::vector<DecisionType> allowed_decisions;
};

// One pause: the tool calls of the last model turn that need decisions, in
// call order. Answer with exactly one Decision per action request.
struct InterruptRequest {
  std::vector<ActionRequest> action_requests;
  std::vector<ReviewConfig> review_configs;
};

// ------------------------------------------------------------------ state

struct SummarizationEvent {
  size_t cutoff_index = 0;  // state.messages[cutoff_index:] are kept verbatim
  Message summary_message;  // role kUser
  std::optional<std::string> file_path;
};

// Everything a conversation (thread) carries between model turns.
struct AgentState {
  std::vector<Message> messages;
  json::array todos;
  std::optional<SummarizationEvent> summarization;
  std::optional<InterruptRequest> pending_interrupt;
  Usage usage;  // total over the thread
  // Token accounting for the summarization trigger: the last model call's
  // reported context size and how many messages state held after it.
  int64_t last_call_tokens = 0;
  size_t last_call_message_count = 0;
  size_t last_call_cutoff = 0;
};

// ------------------------------------------------------------------ events

enum class EventType {
  kTextDelta,      // text: streamed assistant text
  kToolCallStart,  // tool_*: a tool call begins
  kToolCallEnd,    // tool_*, ok, duration, output_preview
  kToolOutput,     // text: streamed output of a running tool (execute)
  kTodoUpdate,     // todos
  kInterrupt,      // interrupt: decisions needed
  kUsage,          // usage (this model call), total_usage
  kSummarized,     // text: history file path
  kFinalMessage,   // text: the final assistant message
  kError,          // text: what went wrong
  kRetry,          // text: the failure; attempt, max_attempts; duration: the wait before the next
  kToolCallRejected,  // tool_*, text: why a call was refused before it ran (malformed
                      // arguments, unknown tool, arguments against the schema)
};
std::string_view EventTypeName(EventType t);

struct AgentEvent {
  EventType type = EventType::kTextDelta;
  std::string agent;  // "" = the main agent, else the sub-agent type
  int depth = 0;
  std::string text;
  std::string tool_call_id;
  std::string tool_name;
  std::string main_argument;
  json::object tool_args;
  bool ok = true;
  std::chrono::milliseconds duration{0};
  std::string output_preview;
  json::array todos;
  const InterruptRequest* interrupt = nullptr;
  Usage usage;
  Usage total_usage;
  int attempt = 0;  // kRetry
  int max_attempts = 0;
};

using EventCallback = std::function<void(const AgentEvent&)>;

// Decides an interrupt synchronously (the CLI prompts the user). Returning
// nullopt pauses the run instead (resume later with the decisions).
using InterruptHandler =
    std::function<std::optional<std::vector<Decision>>(const InterruptRequest&)>;

enum class StopReason {
  kCompleted,    // the model answered without tool calls
  kStepLimit,    // max_steps model turns reached
  kCancelled,    // the cancel flag was set
  kInterrupted,  // waiting for human decisions (Resume)
  kError,        // model or harness failure (see RunResult::error)
  kTruncated,    // the final answer was cut off at the model's output token limit
                 // (stop_reason max_tokens / finish_reason length); final_text is partial
};
std::string_view StopReasonName(StopReason r);

}  // namespace deepbox::agent
