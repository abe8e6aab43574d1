// The agent loop: model <-> tools until the model stops calling tools.
//
// One turn = one model call. When the answer has tool calls, the loop
//  1. asks for human decisions on calls that need them (interrupt_on, "ask"
//     permissions) through LoopHooks::on_interrupt, or pauses the run
//     (StopReason::kInterrupted) so Resume() can continue with decisions;
//  2. validates arguments, then runs the calls concurrently on worker
//     threads: calls sharing a scheduling lane (file tools on the same path,
//     user tools that are not parallel-safe) run one after another in call
//     order, everything else in parallel;
//  3. appends the results in call order and loops.
// It stops on a final answer, the step limit (max model turns), the cancel
// flag (checked between steps and passed to the model call and to running
// tools), an interrupt, or an error. Middleware (middleware.h) wraps the
// model call and post-processes tool results.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/model/model.h"
#include "agent/permissions.h"
#include "agent/state.h"
#include "agent/tool.h"
#include "sandbox/sandbox.h"

namespace deepbox::agent {

class Middleware;

struct LoopConfig {
  std::shared_ptr<ChatModel> model;
  Sandbox* sandbox = nullptr;
  std::string system_prompt;
  std::vector<ToolPtr> tools;
  std::vector<std::shared_ptr<Middleware>> middleware;  // outermost first
  std::map<std::string, InterruptConfig> interrupt_on;
  std::shared_ptr<const PermissionSet> permissions;  // may be null
  int max_steps = 1000;                              // model turns per Run/Resume
  int max_parallel_tools = 16;                       // worker threads per turn
  int max_tokens = 0;                                // per model call; 0 = client default
  std::string agent_name;                            // "" = main agent
  int depth = 0;
  std::string session_id;  // names the conversation-history file
};

// The caller's side of a run. Every member is optional.
struct LoopHooks {
  EventCallback on_event;
  InterruptHandler on_interrupt;  // unset = pause on interrupts
  const std::atomic<bool>* cancel = nullptr;
  // Persistence: called as the state changes (on the loop's thread).
  std::function<void(const Message&)> on_message;           // appended
  std::function<void(const Message&)> on_message_replaced;  // same id, new content
  std::function<void(const SummarizationEvent&)> on_summarization;
  std::function<void(const std::optional<InterruptRequest>&)> on_interrupt_state;
  std::function<void(const json::array&)> on_todos;
  std::function<void(const ModelResponse&)> on_model_response;
};

struct LoopOutcome {
  StopReason reason = StopReason::kCompleted;
  std::string final_text;
  std::optional<Error> error;
  Usage usage;  // this run only
  int steps = 0;
};

// What middleware sees of a running loop.
struct RunEnv {
  const LoopConfig& config;
  AgentState& state;
  LoopHooks& hooks;
  std::function<void(AgentEvent)> emit;  // thread-safe, tags agent/depth
  std::function<void(Message)> append;   // appends to state + persists
};

class AgentLoop {
 public:
  explicit AgentLoop(LoopConfig config);
  ~AgentLoop();
  AgentLoop(const AgentLoop&) = delete;
  AgentLoop& operator=(const AgentLoop&) = delete;

  const LoopConfig& config() const { return config_; }

  // Runs after the caller appended the new user message to state.messages.
  LoopOutcome Run(AgentState& state, LoopHooks& hooks);
  // Continues a run paused on state.pending_interrupt with one decision per
  // action request.
  LoopOutcome Resume(AgentState& state, std::vector<Decision> decisions, LoopHooks& hooks);

  // The messages the model sees: the summary plus the kept tail when the
  // conversation was summarized, otherwise everything.
  static std::vector<Message> EffectiveMessages(const AgentState& state);
  // Adds the cancellation result right after every assistant message whose
  // tool calls have no result (a request-time safety net; the patch
  // middleware persists these for the trailing message).
  static std::vector<Message> PatchDanglingToolCalls(std::vector<Message> messages);
  static std::string NewMessageId();

 private:
  struct Impl;
  LoopConfig config_;
  std::unique_ptr<Impl> impl_;
};

// Validates decisions against an interrupt: one per action, each of an
// allowed type. Messages follow LangChain's HumanInTheLoopMiddleware.
Status ValidateDecisions(const InterruptRequest& request, const std::vector<Decision>& decisions);

}  // namespace deepbox::agent
