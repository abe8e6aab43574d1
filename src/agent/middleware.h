// Middleware hooks around the agent loop (deepagents/LangChain
// AgentMiddleware, reduced to what deepbox uses):
//   BeforeAgent    once at the start of Run() (not Resume)
//   WrapModelCall  around every model call (outermost first). The request's
//                  messages are the effective conversation, lent by the
//                  loop's MessageView (agent.h): a change meant for this call
//                  only must be undone before returning.
//   AfterToolCall  on every tool result, on the worker thread that ran it
#pragma once

#include <functional>
#include <string_view>

#include "agent/agent.h"

namespace deepbox::agent {

using ModelCallFn = std::function<Result<ModelResponse>(ModelRequest&)>;

class Middleware {
 public:
  virtual ~Middleware() = default;
  virtual std::string_view name() const = 0;
  virtual void BeforeAgent(RunEnv&) {}
  virtual Result<ModelResponse> WrapModelCall(ModelRequest& request, RunEnv&,
                                              const ModelCallFn& next) {
    return next(request);
  }
  virtual void AfterToolCall(const ToolCall&, const Tool*, ToolResult&, RunEnv&) {}
};

}  // namespace deepbox::agent
