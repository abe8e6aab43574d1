// Anthropic Messages API client (POST {base}/v1/messages, streaming over SSE).
//
//  * Messages map to content blocks: assistant text + tool_use blocks; each
//    run of consecutive kTool (and kUser) messages becomes ONE user message,
//    tool_result blocks first (tool_use_id, content, is_error; images as image
//    blocks inside the tool_result content).
//  * Prompt caching (request.prompt_caching): cache_control ephemeral on the
//    last system block, the last tool and the last content block of the last
//    message (the moving tail): at most 3 of the API's 4 breakpoints.
//  * Streaming: text_delta -> on_text_delta as it arrives; tool_use start ->
//    on_tool_call_start; input_json_delta accumulated and parsed at
//    content_block_stop (empty = {}); message_delta gives stop_reason and
//    output usage; ping ignored; an `error` event fails the attempt.
//  * Retries (RetryPolicy): 408/409/429/5xx/529, connection failures, and
//    retryable stream errors (overloaded_error, api_error, ...) as long as no
//    output reached the callbacks; retry-after / retry-after-ms honoured.
#pragma once

#include <memory>
#include <string>

#include "agent/model/http_options.h"
#include "agent/model/model.h"
#include "common/error.h"
#include "common/json.h"

namespace deepbox::agent {

namespace internal {
class SseChatClient;
}

inline constexpr char kDefaultAnthropicModel[] = "claude-sonnet-4-6";
inline constexpr char kDefaultAnthropicBaseUrl[] = "https://api.anthropic.com";
inline constexpr char kAnthropicVersion[] = "2023-06-01";

struct AnthropicOptions {
  std::string model = kDefaultAnthropicModel;
  std::string api_key{};  // required
  std::string base_url = kDefaultAnthropicBaseUrl;
  int max_tokens = 0;            // 0 = AnthropicDefaultMaxTokens(model)
  int64_t max_input_tokens = 0;  // 0 = the profile table's value
  HttpOptions http{};
};

class AnthropicModel : public ChatModel {
 public:
  // Fails with the "ANTHROPIC_API_KEY is not set..." message when api_key is
  // empty, or INVALID_ARGUMENT for a bad base_url / CA file.
  static Result<std::unique_ptr<AnthropicModel>> Create(AnthropicOptions options);
  ~AnthropicModel() override;

  std::string name() const override;  // "anthropic:claude-sonnet-4-6"
  ModelProfile profile() const override;
  Result<ModelResponse> Generate(const ModelRequest& request,
                                 const StreamCallbacks& callbacks) override;

  // The JSON body Generate sends (with "stream": true).
  json::object BuildRequestBody(const ModelRequest& request) const;
  const AnthropicOptions& options() const { return options_; }

 private:
  AnthropicModel(AnthropicOptions options, std::unique_ptr<internal::SseChatClient> client);
  AnthropicOptions options_;
  std::unique_ptr<internal::SseChatClient> client_;
};

// The message for a missing key (also used by the factory).
std::string MissingAnthropicKeyMessage();

}  // namespace deepbox::agent
