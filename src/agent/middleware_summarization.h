// Conversation summarization (deepagents SummarizationMiddleware).
//
// Before every model call the effective conversation (a previous summary plus
// the kept tail, see AgentLoop::EffectiveMessages) is measured:
//  - trigger: 85 % of the model profile's max_input_tokens, else 170 000
//    tokens;
//  - keep: the most recent 10 % of max_input_tokens (by tokens), else the
//    last 6 messages; the cut never separates a tool result from its call;
//  - before that, older write_file/edit_file string arguments longer than
//    2 000 chars are shown as their first 20 chars + "...(argument truncated)"
//    (trigger/keep: the same fractions, else 20 messages) — in the request
//    only, the thread keeps the originals.
// On trigger the summarized messages are appended to
// <root>/conversation_history/<session>.md under "## Summarized at <iso>",
// a summary is produced by a model call, and the request continues with the
// summary HumanMessage (SummaryMessageText) + the kept messages. The event is
// recorded in AgentState::summarization (and persisted by the thread store).
// A model error that says the context overflowed triggers the same path once.
//
// Token counts: the last model call's reported usage plus ~4 chars/token
// (+3 per message) for messages added since; ~4 chars/token when unknown.
#pragma once

#include <memory>
#include <span>

#include "agent/middleware.h"

namespace deepbox::agent {

struct SummarizationOptions {
  std::shared_ptr<ChatModel> model;  // for the summary call; null = the agent's model
  double trigger_fraction = 0.85;
  double keep_fraction = 0.10;
  int64_t trigger_tokens = 170000;  // without a profile
  size_t keep_messages = 6;         // without a profile
  size_t max_arg_length = 2000;
  size_t truncate_keep_messages = 20;  // without a profile
  std::string history_dir_name = "conversation_history";
};

class SummarizationMiddleware : public Middleware {
 public:
  explicit SummarizationMiddleware(SummarizationOptions options = {});
  std::string_view name() const override { return "summarization"; }
  Result<ModelResponse> WrapModelCall(ModelCallRequest& request, RunEnv& env,
                                      const ModelCallFn& next) override;

  // ~4 chars per token, +3 tokens per message (LangChain's approximation).
  static int64_t ApproxTokens(std::span<const Message> messages);
  static int64_t ApproxTokens(const Message& m);
  // The transcript format written to the history file.
  static std::string RenderHistory(std::span<const Message> messages);

 private:
  // Summarizes request.messages() (the effective conversation) and continues
  // with the summary + the kept tail.
  Result<ModelResponse> Summarize(ModelCallRequest& request, RunEnv& env, const ModelCallFn& next,
                                  const ModelProfile& profile);
  SummarizationOptions options_;
};

}  // namespace deepbox::agent
