// The agent loop: model <-> tools until the model stops calling tools.
//
// One turn = one model call. When the answer has tool calls, the loop
//  1. runs the middleware's AfterModel pass (middleware.h): human-in-the-loop
//     (middleware_hitl.h) asks for decisions there through
//     LoopHooks::on_interrupt, or pauses the run (StopReason::kInterrupted)
//     so that Resume() can continue with decisions;
//  2. validates arguments, then runs the calls concurrently on worker
//     threads, each through the middleware's WrapToolCall: calls sharing a
//     scheduling lane (file tools on the same path, user tools that are not
//     parallel-safe) run one after another in call order, everything else
//     in parallel;
//  3. appends the results in call order and loops.
// It stops on a final answer, the step limit (max model turns), the cancel
// flag (checked between steps and passed to the model call and to running
// tools), an interrupt, or an error. Middleware (middleware.h) also wraps the
// model call and may contribute tools and a system-prompt section.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
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
  std::shared_ptr<const PermissionSet> permissions;     // for the tools; may be null
  int max_steps = 1000;                                 // model turns per Run/Resume
  int max_parallel_tools = 16;                          // worker threads per turn
  int max_tokens = 0;                                   // per model call; 0 = client default
  std::string agent_name;                               // "" = main agent
  int depth = 0;
  std::string session_id;  // names the conversation-history file
};

// The caller's side of a run. Every member is optional.
struct LoopHooks {
  EventCallback on_event;
  InterruptHandler on_interrupt;  // unset = pause on interrupts
  const std::atomic<bool>* cancel = nullptr;
  int cancel_fd = -1;  // readable once *cancel is set (ModelRequest::cancel_fd)
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

// ~4 chars per token, +3 tokens per message (LangChain's approximation).
int64_t ApproxMessageTokens(const Message& m);

// The effective conversation (AgentLoop::EffectiveMessages) kept across the
// turns of one run, so that a turn copies the messages added since the last
// one instead of the whole thread. The loop lends the vector to the model
// call (ModelCallRequest) and takes it back after the call; it rebuilds the
// view when the call changed the messages (ModelCallRequest::mutable_messages)
// or when the summarization changed. Middleware never see this rule: their
// per-call changes either go through a MessageEdit (undone before the loop
// takes the vector back) or make the next Lend rebuild. A view lives for one
// Run/Resume, during which state.messages only grows (a human edit changes
// the newest assistant message before the next Lend copies it). Loop thread
// only.
class MessageView {
 public:
  // Brings the view up to date with `state` (appends the messages added
  // since the last Lend, rebuilds when the summarization changed) and moves
  // it out.
  std::vector<Message> Lend(const AgentState& state);
  // Takes the vector back; `changed`: its messages were changed in the call
  // (then, as for any other vector, the next Lend rebuilds).
  void Return(std::vector<Message> messages, bool changed = false);
  // Whether `messages` is the vector Lend returned, not replaced.
  bool IsLent(const std::vector<Message>& messages) const;

  // About the lent messages; valid while IsLent(them).
  // False when every tool call has a result; true means maybe not.
  bool MayHaveDanglingCalls() const { return !open_calls_.empty(); }
  // Indexes of the user messages, ascending.
  const std::vector<size_t>& user_indexes() const { return user_indexes_; }
  // Sum of ApproxMessageTokens over `lent` (counted once per message).
  int64_t ApproxTokens(const std::vector<Message>& lent);

 private:
  void Rebuild(const AgentState& state);
  void Add(const Message& m, size_t index);

  std::vector<Message> messages_;
  bool valid_ = false;
  bool lent_ = false;
  size_t synced_ = 0;  // state.messages reflected
  bool summarized_ = false;
  std::string summary_id_;
  size_t cutoff_ = 0;
  std::unordered_set<std::string> open_calls_;  // call ids without a result (yet)
  std::vector<size_t> user_indexes_;
  int64_t tokens_ = 0;  // ApproxMessageTokens of the first tokens_counted_
  size_t tokens_counted_ = 0;
  // The lent vector.
  const Message* lent_data_ = nullptr;
  size_t lent_size_ = 0;
  std::string lent_front_id_, lent_back_id_;
};

// What middleware sees of a running loop.
struct RunEnv {
  const LoopConfig& config;
  AgentState& state;
  LoopHooks& hooks;
  std::function<void(AgentEvent)> emit;  // thread-safe, tags agent/depth
  std::function<void(Message)> append;   // appends to state + persists (loop thread)
  // BeforeAgent: the messages Run() appends after it (the new user message).
  std::span<const Message> input;
};

class AgentLoop {
 public:
  explicit AgentLoop(LoopConfig config);
  ~AgentLoop();
  AgentLoop(const AgentLoop&) = delete;
  AgentLoop& operator=(const AgentLoop&) = delete;

  const LoopConfig& config() const { return config_; }
  // What the model is offered: LoopConfig::tools and system_prompt with the
  // middleware's tools and sections (middleware.h).
  const std::vector<ToolPtr>& tools() const;
  const std::string& system_prompt() const;

  // Appends `input` (the new user message; persisted through
  // LoopHooks::on_message) after the middleware's BeforeAgent and runs. A
  // pending interrupt is dropped first: new input answers it (the patch
  // middleware gives its calls a result).
  LoopOutcome Run(AgentState& state, LoopHooks& hooks, std::vector<Message> input = {});
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
  // Whether PatchDanglingToolCalls would add anything.
  static bool HasDanglingToolCalls(const std::vector<Message>& messages);
  static std::string NewMessageId();

 private:
  struct Impl;
  LoopConfig config_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepbox::agent
