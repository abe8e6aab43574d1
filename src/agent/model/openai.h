// OpenAI-compatible chat completions client (POST {base}/chat/completions with
// stream: true and stream_options.include_usage), so OpenAI and local servers
// (llama.cpp server, vLLM, Ollama) work alike.
//
//  * Messages: a system message, user messages (text, or text + image_url
//    parts), assistant messages with tool_calls (arguments as JSON text),
//    role "tool" messages with tool_call_id. Tool messages cannot carry
//    images, so a tool result's images follow the run of tool messages as a
//    user message.
//  * Streaming: choices[0].delta.content -> on_text_delta; delta.tool_calls[i]
//    fragments (index, id, function.name, function.arguments) accumulated per
//    index, on_tool_call_start once a call has its name; [DONE]; the final
//    usage chunk (prompt_tokens, completion_tokens,
//    prompt_tokens_details.cached_tokens).
//  * finish_reason maps to Anthropic's vocabulary (see ModelResponse).
//  * The retry and error policy of the Anthropic client.
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

inline constexpr char kDefaultOpenAiBaseUrl[] = "https://api.openai.com/v1";

struct OpenAiOptions {
  std::string model{};    // required
  std::string api_key{};  // optional for local servers; required for api.openai.com
  std::string base_url = kDefaultOpenAiBaseUrl;
  int max_tokens = 0;            // 0 = not sent (the server's default)
  int64_t max_input_tokens = 0;  // 0 = the profile table's value
  HttpOptions http{};
};

class OpenAiModel : public ChatModel {
 public:
  static Result<std::unique_ptr<OpenAiModel>> Create(OpenAiOptions options);
  ~OpenAiModel() override;

  std::string name() const override;  // "openai:gpt-4o"
  ModelProfile profile() const override;
  Result<ModelResponse> Generate(const ModelRequest& request,
                                 const StreamCallbacks& callbacks) override;

  json::object BuildRequestBody(const ModelRequest& request) const;
  const OpenAiOptions& options() const { return options_; }

 private:
  OpenAiModel(OpenAiOptions options, std::unique_ptr<internal::SseChatClient> client);
  OpenAiOptions options_;
  std::unique_ptr<internal::SseChatClient> client_;
};

std::string MissingOpenAiKeyMessage();

}  // namespace deepbox::agent
