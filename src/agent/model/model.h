// Model-neutral conversation types and the chat model interface. The harness
// (src/agent) speaks only these; src/agent/model has the Anthropic, OpenAI-
// compatible and replay implementations.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json.h"

namespace deepbox::agent {

struct ToolCall {
  std::string id;  // provider's id (Anthropic "toolu_…", OpenAI "call_…")
  std::string name;
  json::object input;
  // Non-empty when the model's arguments were not a JSON object (input is then
  // empty): the harness should answer the call with an error tool result
  // quoting this text instead of running the tool.
  std::string input_error{};
};

struct ImageBlock {
  std::string media_type;  // "image/png"
  std::string base64_data;
};

enum class Role { kUser, kAssistant, kTool };

// One conversation message. Tool results are separate messages (role kTool,
// one per tool call), as in LangChain; clients group them as their API needs.
struct Message {
  Role role = Role::kUser;
  std::string text;                  // user / assistant text, or tool result text
  std::vector<ToolCall> tool_calls;  // assistant only
  std::vector<ImageBlock> images;    // user or tool result attachments
  std::string tool_call_id;          // tool only
  std::string tool_name;             // tool only
  bool is_error = false;             // tool only
  std::string id;                    // stable message id (assigned by the harness)

  static Message User(std::string text);
  static Message Assistant(std::string text, std::vector<ToolCall> calls = {});
  static Message Tool(std::string tool_call_id, std::string tool_name, std::string text,
                      bool is_error = false);
};

struct ToolSpec {
  std::string name;
  std::string description;
  json::object input_schema;  // JSON Schema of the arguments
};

// Token counts of one call (or, summed, of a run). input_tokens counts only the
// uncached input, as Anthropic reports it; OpenAI-compatible clients subtract
// cached tokens from prompt_tokens so that cost accounting is uniform.
struct Usage {
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  int64_t cache_read_tokens = 0;
  int64_t cache_write_tokens = 0;
  Usage& operator+=(const Usage& o);
};

// Token counts come from model servers, recordings and thread files: a count
// that is negative or not an integer reads as `fallback`, and a huge one is
// capped, so the sums the harness makes (per call, per run) cannot overflow.
constexpr int64_t kMaxTokenCount = int64_t{1} << 40;
int64_t TokenCountFromJson(const json::value* value, int64_t fallback = 0);

// Per-model facts the harness needs (summarization threshold, cost).
struct ModelProfile {
  int64_t max_input_tokens = 0;  // 0 = unknown
  double usd_per_mtok_input = 0;
  double usd_per_mtok_output = 0;
  double usd_per_mtok_cache_read = 0;
  double usd_per_mtok_cache_write = 0;
  double CostUsd(const Usage& u) const;
};

struct ModelRequest {
  std::string system;
  std::vector<Message> messages;
  std::vector<ToolSpec> tools;
  int max_tokens = 0;          // 0 = client default
  bool prompt_caching = true;  // where the provider supports it
  // Set to true from another thread (Ctrl-C) to abort the call promptly.
  const std::atomic<bool>* cancel = nullptr;
  // Optional fd (eventfd/pipe) made readable together with *cancel: it also
  // ends a wait on a silent server at once (a stalled stream would otherwise
  // only notice *cancel when the next bytes arrive).
  int cancel_fd = -1;
};

// A retryable failure of one attempt: the client waits `delay`, then tries again.
struct RetryNotice {
  int attempt = 0;  // the attempt that failed (1 = the first)
  int max_attempts = 0;
  std::chrono::milliseconds delay{0};
  Error error;  // why it failed
};

// Streaming observers; all optional. Called on the calling thread.
struct StreamCallbacks {
  std::function<void(std::string_view)> on_text_delta;
  std::function<void(const std::string& id, const std::string& name)> on_tool_call_start;
  std::function<void(const RetryNotice&)> on_retry;  // the client is backing off
};

struct ModelResponse {
  Message message;  // role kAssistant
  Usage usage;
  // Anthropic's vocabulary for every client: "end_turn", "tool_use",
  // "max_tokens", "stop_sequence", "refusal", ... (OpenAI's "stop" ->
  // "end_turn", "tool_calls" -> "tool_use", "length" -> "max_tokens").
  std::string stop_reason;
  std::string model;  // model id the server reported
};

// Implementations: AnthropicModel (anthropic.h), OpenAiModel (openai.h),
// ReplayModel / RecordingModel (replay.h); build one with CreateChatModel
// (factory.h). Generate may be called from several threads at once.
// Errors: UNAUTHENTICATED (bad or missing key), INVALID_ARGUMENT (400),
// PERMISSION_DENIED (403), NOT_FOUND (404), RESOURCE_EXHAUSTED (429 after
// retries), UNAVAILABLE (5xx/overload/connection after retries), TIMEOUT,
// CANCELLED (request.cancel was set).
class ChatModel {
 public:
  virtual ~ChatModel() = default;
  virtual std::string name() const = 0;  // "anthropic:claude-sonnet-4-6"
  virtual ModelProfile profile() const = 0;
  virtual Result<ModelResponse> Generate(const ModelRequest& request,
                                         const StreamCallbacks& callbacks) = 0;
};

}  // namespace deepbox::agent
