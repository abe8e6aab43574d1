// Middleware hooks around the agent loop (LangChain AgentMiddleware, reduced
// to what deepbox uses). A middleware overrides the hooks it needs; the loop
// (agent.h) holds them in LoopConfig::middleware, outermost first.
//
//   tools(), system_prompt()  what the middleware adds to the agent, read
//                  once when the loop is made, in middleware order: its tools
//                  are offered after LoopConfig::tools (one named like a tool
//                  already offered is left out: a caller that wants another
//                  order, or its own tool of that name, lists it in
//                  LoopConfig::tools), its section is appended to
//                  LoopConfig::system_prompt after "\n\n".
//   BeforeAgent    once at the start of Run() (not Resume), before Run
//                  appends its input (RunEnv::input), so that what it appends
//                  comes first and the thread stays append-only.
//   WrapModelCall  around every model call, outermost first (LangChain's
//                  wrap_model_call). request.messages() is the effective
//                  conversation; changing it (mutable_messages, set_messages)
//                  changes this call only, never the thread. A MessageEdit
//                  does the same without making the loop rebuild its copy of
//                  the conversation for the next call (the built-in
//                  eviction and summarization use it).
//   AfterModel     after a model turn whose answer has tool calls, before
//                  they run, innermost first (LangChain's after_model): it
//                  may edit the calls, give calls a result without running
//                  them, or pause the run for human decisions
//                  (ModelTurn::Interrupt; Resume runs the pass again with
//                  the caller's decisions). An error stops the run. Results
//                  go through ModelTurn::SetResult, not RunEnv::append (the
//                  loop appends them after the message, in call order).
//   WrapToolCall   around each tool call's execution, outermost first, on the
//                  worker thread that runs it (LangChain's wrap_tool_call): it
//                  may answer without calling `next`, change the call, or
//                  change the result. Calls refused before they run (unknown
//                  tool, invalid arguments) and calls given a result in
//                  AfterModel do not reach it. Several calls run at once:
//                  only RunEnv::emit is safe to use here, not append.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/agent.h"

namespace deepbox::agent {

namespace internal {
struct LoopAccess;  // agent.cc: what only the loop sets
}  // namespace internal

// One model call as middleware see it (LangChain's ModelRequest): the
// provider request's settings, and the conversation behind accessors so that
// the loop knows whether it was changed.
class ModelCallRequest {
 public:
  std::string system;
  std::vector<ToolSpec> tools;
  int max_tokens = 0;
  bool prompt_caching = true;
  const std::atomic<bool>* cancel = nullptr;
  int cancel_fd = -1;

  ModelCallRequest() = default;
  explicit ModelCallRequest(std::vector<Message> messages) : messages_(std::move(messages)) {}

  const std::vector<Message>& messages() const { return messages_; }
  // This call's messages to change: the change never reaches the thread (the
  // loop rebuilds its copy for the next call).
  std::vector<Message>& mutable_messages() {
    ++changes_;
    return messages_;
  }
  void set_messages(std::vector<Message> messages) {
    ++changes_;
    messages_ = std::move(messages);
  }

  // What the loop knows about messages() (user messages, token counts,
  // open calls): null once they were changed. For the built-in fast paths.
  MessageView* view() const { return changes_ == 0 ? view_ : nullptr; }

 private:
  friend struct internal::LoopAccess;
  friend class MessageEdit;
  std::vector<Message> messages_;
  MessageView* view_ = nullptr;
  uint64_t changes_ = 0;  // mutable_messages/set_messages calls
};

// Changes to a request's messages for the scope of one WrapModelCall,
// undone when the edit is destroyed (so after `next` returned, whatever it
// returned), unless the messages were changed otherwise since (then the loop
// rebuilds them anyway). The loop keeps its copy of the conversation for the
// next call: the way to show a message differently on every call without
// rebuilding it every time.
class MessageEdit {
 public:
  explicit MessageEdit(ModelCallRequest& request) : request_(request) {}
  ~MessageEdit();
  MessageEdit(const MessageEdit&) = delete;
  MessageEdit& operator=(const MessageEdit&) = delete;

  // messages()[i].text is `text` until the edit ends.
  void SetText(size_t i, std::string text);
  // The `arg`-th argument (in object order) of tool call `call` of
  // messages()[i] is `value` until the edit ends.
  void SetArgument(size_t i, size_t call, size_t arg, json::value value);

 private:
  struct Saved {
    size_t message, call, arg;  // call == npos: the text
    std::string text;
    json::value value;
  };
  ModelCallRequest& request_;
  uint64_t changes_ = 0;  // request_.changes_ when the edits were made
  std::vector<Saved> saved_;
};

// A model turn whose answer has tool calls, before they run (AfterModel).
class ModelTurn {
 public:
  // Decisions for an interrupt, or nullopt to pause (made by the loop).
  using Decide = std::function<std::optional<std::vector<Decision>>(const InterruptRequest&)>;
  ModelTurn(Message& message, const InterruptRequest* resuming, Decide decide)
      : message_(message), resuming_(resuming), decide_(std::move(decide)) {}

  // The assistant message (the newest in the thread). After changing its
  // tool calls, call MessageChanged() so that the change is persisted.
  Message& message() { return message_; }
  void MessageChanged() { message_changed_ = true; }
  bool message_changed() const { return message_changed_; }

  // Gives a call its result without running it.
  void SetResult(const std::string& call_id, ToolResult result) {
    results_[call_id] = std::move(result);
  }
  std::map<std::string, ToolResult>& results() { return results_; }

  // Resume only: the pending interrupt the caller's decisions answer, until
  // a middleware takes them with Interrupt().
  const InterruptRequest* resuming() const { return resume_taken_ ? nullptr : resuming_; }

  // Human decisions for `request` (from the same middleware's last
  // Interrupt, so on Resume pass resuming()): on Resume the caller's
  // decisions; otherwise LoopHooks::on_interrupt answers, or nullopt: the
  // run pauses on `request` once this AfterModel returns (the kInterrupt
  // event is emitted first either way).
  std::optional<std::vector<Decision>> Interrupt(const InterruptRequest& request);
  bool paused() const { return paused_.has_value(); }

 private:
  friend struct internal::LoopAccess;
  Message& message_;
  const InterruptRequest* resuming_;
  Decide decide_;
  std::optional<std::vector<Decision>> resume_decisions_;
  bool resume_taken_ = false;
  bool message_changed_ = false;
  std::map<std::string, ToolResult> results_;
  std::optional<InterruptRequest> paused_;
};

// One tool call about to run (WrapToolCall).
struct ToolCallRequest {
  ToolCall call;                   // what runs (ids and events keep the original)
  ToolPtr tool;                    // the tool that runs it
  ToolContext* context = nullptr;  // cancel, streamed output, sandbox
};

using ModelCallFn = std::function<Result<ModelResponse>(ModelCallRequest&)>;
using ToolCallFn = std::function<ToolResult(ToolCallRequest&)>;

class Middleware {
 public:
  virtual ~Middleware() = default;
  virtual std::string_view name() const = 0;
  virtual std::vector<ToolPtr> tools() const { return {}; }
  virtual std::string system_prompt() const { return ""; }
  virtual void BeforeAgent(RunEnv&) {}
  virtual Result<ModelResponse> WrapModelCall(ModelCallRequest& request, RunEnv&,
                                              const ModelCallFn& next) {
    return next(request);
  }
  virtual Status AfterModel(ModelTurn&, RunEnv&) { return {}; }
  virtual ToolResult WrapToolCall(ToolCallRequest& request, RunEnv&, const ToolCallFn& next) {
    return next(request);
  }
};

}  // namespace deepbox::agent
