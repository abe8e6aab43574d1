// Large tool-result eviction (deepagents FilesystemMiddleware): a result of
// any tool except ls, glob, grep, read_file, edit_file, write_file and delete
// whose text exceeds 80 000 characters is written to
// <root>/large_tool_results/<tool call id with . / \ -> _> and replaced by
// TooLargeToolMessage with a head-5 / tail-5 numbered preview. Images stay.
// If the write fails the result is kept as is.
//
// User messages longer than 200 000 characters are likewise saved to
// <root>/conversation_history/<message id>.md (once) and shown to the model
// as TooLargeHumanMessage with the same preview; the thread keeps the full
// text.
//
// deepbox deviation: deepagents writes to /large_tool_results at the
// backend's virtual root; deepbox writes under the workspace root because the
// rest of the sandbox filesystem is read-only.
#pragma once

#include "agent/middleware.h"

namespace deepbox::agent {

class EvictionMiddleware : public Middleware {
 public:
  explicit EvictionMiddleware(size_t char_limit = 80000, size_t human_char_limit = 200000)
      : char_limit_(char_limit), human_char_limit_(human_char_limit) {}
  std::string_view name() const override { return "eviction"; }
  ToolResult WrapToolCall(ToolCallRequest& request, RunEnv& env, const ToolCallFn& next) override;
  Result<ModelResponse> WrapModelCall(ModelCallRequest& request, RunEnv& env,
                                      const ModelCallFn& next) override;

  // The path a result is evicted to.
  static std::string EvictionPath(const std::string& root, const std::string& tool_call_id);

 private:
  size_t char_limit_;
  size_t human_char_limit_;
};

}  // namespace deepbox::agent
