#include "agent/model/anthropic.h"

#include <fmt/format.h>

#include <climits>
#include <map>
#include <utility>

#include "agent/model/http_stream.h"
#include "agent/model/profiles.h"
#include "agent/model/retry.h"
#include "net/http_client.h"

namespace deepbox::agent {
namespace {

using internal::BodySnippet;

json::object CacheControl() { return json::object{{"type", "ephemeral"}}; }

json::object TextBlock(std::string_view text) {
  return json::object{{"type", "text"}, {"text", JsonString(text)}};
}

json::object ImageBlock(const agent::ImageBlock& image) {
  return json::object{{"type", "image"},
                      {"source", json::object{{"type", "base64"},
                                              {"media_type", JsonString(image.media_type)},
                                              {"data", JsonString(image.base64_data)}}}};
}

json::object ToolResultBlock(const Message& m) {
  json::object block{{"type", "tool_result"}, {"tool_use_id", JsonString(m.tool_call_id)}};
  if (m.images.empty()) {
    if (!m.text.empty()) block["content"] = JsonString(m.text);
  } else {
    json::array content;
    if (!m.text.empty()) content.push_back(TextBlock(m.text));
    for (const auto& image : m.images) content.push_back(ImageBlock(image));
    block["content"] = std::move(content);
  }
  if (m.is_error) block["is_error"] = true;
  return block;
}

// The API rejects empty text blocks and empty messages.
constexpr std::string_view kEmptyPlaceholder = "(empty)";

json::array BuildMessages(const std::vector<Message>& messages) {
  json::array out;
  size_t i = 0;
  while (i < messages.size()) {
    const Message& m = messages[i];
    if (m.role == Role::kAssistant) {
      json::array content;
      if (!m.text.empty()) content.push_back(TextBlock(m.text));
      for (const auto& call : m.tool_calls) {
        content.push_back(json::object{{"type", "tool_use"},
                                       {"id", JsonString(call.id)},
                                       {"name", JsonString(call.name)},
                                       {"input", call.input}});
      }
      if (content.empty()) content.push_back(TextBlock(kEmptyPlaceholder));
      out.push_back(json::object{{"role", "assistant"}, {"content", std::move(content)}});
      ++i;
      continue;
    }
    // A run of user and tool messages: one user message, tool results first
    // (the API requires them at the start of the content).
    json::array results;
    json::array others;
    for (; i < messages.size() && messages[i].role != Role::kAssistant; ++i) {
      const Message& u = messages[i];
      if (u.role == Role::kTool) {
        results.push_back(ToolResultBlock(u));
        continue;
      }
      if (!u.text.empty()) others.push_back(TextBlock(u.text));
      for (const auto& image : u.images) others.push_back(ImageBlock(image));
    }
    for (auto& block : others) results.push_back(std::move(block));
    if (results.empty()) results.push_back(TextBlock(kEmptyPlaceholder));
    out.push_back(json::object{{"role", "user"}, {"content", std::move(results)}});
  }
  return out;
}

json::object ToolSchema(const json::object& schema) {
  json::object s = schema;
  if (!s.contains("type")) s["type"] = "object";
  if (s["type"] == "object" && !s.contains("properties")) s["properties"] = json::object{};
  return s;
}

struct ApiError {
  std::string type;
  std::string message;
};

ApiError ParseApiError(std::string_view body) {
  ApiError e;
  if (auto v = ParseJson(body); v && v->is_object()) {
    if (const auto* err = v->as_object().if_contains("error"); err && err->is_object()) {
      e.type = GetOptString(err->as_object(), "type").value_or("");
      e.message = GetOptString(err->as_object(), "message").value_or("");
      return e;
    }
  }
  e.message = BodySnippet(body);
  return e;
}

AttemptError StatusError(int status, const net::Headers& headers, std::string_view body,
                         const AnthropicOptions& options) {
  ApiError api = ParseApiError(body);
  while (api.message.ends_with('.') || api.message.ends_with(' ')) api.message.pop_back();
  std::string what =
      api.type.empty() ? fmt::format("{}", status) : fmt::format("{} {}", status, api.type);
  AttemptError e;
  e.retryable = IsRetryableStatus(status, headers);
  e.retry_after = ParseRetryAfter(headers);
  switch (status) {
    case 401:
      e.error = Error(ErrorCode::kUnauthenticated,
                      fmt::format("Anthropic API key rejected ({}): {}. Check ANTHROPIC_API_KEY.",
                                  what, api.message));
      break;
    case 403:
      e.error = Error(ErrorCode::kPermissionDenied,
                      fmt::format("Anthropic API refused the request ({}): {}. Check that the "
                                  "key in ANTHROPIC_API_KEY may use model '{}'.",
                                  what, api.message, options.model));
      break;
    case 404:
      e.error = Error(ErrorCode::kNotFound,
                      fmt::format("Anthropic API: not found ({}): {}. Check the model name "
                                  "('{}') and ANTHROPIC_BASE_URL ({}).",
                                  what, api.message, options.model, options.base_url));
      break;
    case 429:
      e.error = Error(ErrorCode::kResourceExhausted,
                      fmt::format("Anthropic API rate limit ({}): {}", what, api.message));
      break;
    default:
      if (status >= 500) {
        e.error = Error(ErrorCode::kUnavailable,
                        fmt::format("Anthropic API unavailable ({}): {}", what, api.message));
      } else if (status >= 400) {
        e.error =
            Error(ErrorCode::kInvalidArgument,
                  fmt::format("Anthropic API rejected the request ({}): {}", what, api.message));
      } else {
        e.error = Error(ErrorCode::kInternal,
                        fmt::format("Anthropic API: unexpected HTTP {} response: {}", status,
                                    BodySnippet(body)));
      }
  }
  if (status == 400 || status == 413) {
    e.error.reason = internal::ContextOverflowReason(api.type, api.message);
  }
  return e;
}

bool IsRetryableStreamError(std::string_view type) {
  return type == "overloaded_error" || type == "api_error" || type == "rate_limit_error" ||
         type == "timeout_error" || type.empty();
}

ErrorCode StreamErrorCode(std::string_view type) {
  if (type == "rate_limit_error") return ErrorCode::kResourceExhausted;
  if (type == "invalid_request_error" || type == "request_too_large") {
    return ErrorCode::kInvalidArgument;
  }
  if (type == "authentication_error") return ErrorCode::kUnauthenticated;
  if (type == "permission_error") return ErrorCode::kPermissionDenied;
  if (type == "not_found_error") return ErrorCode::kNotFound;
  return ErrorCode::kUnavailable;
}

// A content block index: anything but an int in range reads as `fallback`.
int IntField(const json::object& obj, std::string_view key, int fallback) {
  const json::value* v = obj.if_contains(key);
  if (v == nullptr || !v->is_int64()) return fallback;
  int64_t n = v->as_int64();
  return n >= INT_MIN && n <= INT_MAX ? static_cast<int>(n) : fallback;
}

void ReadUsage(const json::object& u, Usage& usage) {
  usage.input_tokens = TokenCountFromJson(u.if_contains("input_tokens"), usage.input_tokens);
  usage.output_tokens = TokenCountFromJson(u.if_contains("output_tokens"), usage.output_tokens);
  usage.cache_read_tokens =
      TokenCountFromJson(u.if_contains("cache_read_input_tokens"), usage.cache_read_tokens);
  usage.cache_write_tokens =
      TokenCountFromJson(u.if_contains("cache_creation_input_tokens"), usage.cache_write_tokens);
}

// Parses a tool's streamed input; failures land in call.input_error.
void FinishToolInput(const std::string& raw, ToolCall& call) {
  std::string_view text = raw;
  while (!text.empty() && (text.front() == ' ' || text.front() == '\n')) text.remove_prefix(1);
  if (text.empty()) return;  // no arguments: {}
  auto v = ParseJson(text);
  if (v && v->is_object()) {
    call.input = std::move(v->as_object());
    return;
  }
  call.input_error =
      fmt::format("the model's input for tool '{}' is not a JSON object ({}): {}", call.name,
                  v ? "not an object" : v.error().message, BodySnippet(raw, 200));
}

// The state of one streamed response.
class StreamState {
 public:
  StreamState(const StreamCallbacks& callbacks) : callbacks_(callbacks) {}

  // Returns false to stop the stream (failure_ then says why).
  bool OnEvent(const net::SseEvent& ev) {
    if (ev.event == "ping") return true;
    auto parsed = ParseJson(ev.data);
    if (!parsed || !parsed->is_object()) {
      return Fail(ErrorCode::kInternal,
                  fmt::format("Anthropic API sent an unreadable '{}' event: {}", ev.event,
                              BodySnippet(ev.data, 200)),
                  /*retryable=*/true);
    }
    const json::object& data = parsed->as_object();
    std::string type = GetOptString(data, "type").value_or(ev.event);
    if (type == "message_start") {
      if (const auto* msg = data.if_contains("message"); msg && msg->is_object()) {
        response_.model = GetOptString(msg->as_object(), "model").value_or("");
        if (const auto* u = msg->as_object().if_contains("usage"); u && u->is_object()) {
          ReadUsage(u->as_object(), response_.usage);
        }
      }
    } else if (type == "content_block_start") {
      int index = IntField(data, "index", -1);
      const auto* cb = data.if_contains("content_block");
      if (cb == nullptr || !cb->is_object()) return true;
      Block& block = blocks_[index];
      std::string block_type = GetOptString(cb->as_object(), "type").value_or("");
      if (block_type == "text") {
        block.kind = Block::kText;
        std::string initial = GetOptString(cb->as_object(), "text").value_or("");
        if (!initial.empty()) EmitText(block, initial);
      } else if (block_type == "tool_use") {
        block.kind = Block::kToolUse;
        block.call.id = GetOptString(cb->as_object(), "id").value_or("");
        block.call.name = GetOptString(cb->as_object(), "name").value_or("");
        if (callbacks_.on_tool_call_start) {
          delivered_ = true;
          callbacks_.on_tool_call_start(block.call.id, block.call.name);
        }
      }
    } else if (type == "content_block_delta") {
      int index = IntField(data, "index", -1);
      const auto* delta = data.if_contains("delta");
      auto it = blocks_.find(index);
      if (delta == nullptr || !delta->is_object() || it == blocks_.end()) return true;
      const json::object& d = delta->as_object();
      std::string delta_type = GetOptString(d, "type").value_or("");
      if (delta_type == "text_delta" && it->second.kind == Block::kText) {
        EmitText(it->second, GetOptString(d, "text").value_or(""));
      } else if (delta_type == "input_json_delta" && it->second.kind == Block::kToolUse) {
        it->second.json += GetOptString(d, "partial_json").value_or("");
      }
    } else if (type == "content_block_stop") {
      int index = IntField(data, "index", -1);
      if (auto it = blocks_.find(index);
          it != blocks_.end() && it->second.kind == Block::kToolUse) {
        FinishToolInput(it->second.json, it->second.call);
        it->second.json.clear();
      }
    } else if (type == "message_delta") {
      if (const auto* d = data.if_contains("delta"); d && d->is_object()) {
        if (auto reason = GetOptString(d->as_object(), "stop_reason")) {
          response_.stop_reason = *reason;
        }
      }
      if (const auto* u = data.if_contains("usage"); u && u->is_object()) {
        ReadUsage(u->as_object(), response_.usage);
      }
    } else if (type == "message_stop") {
      stopped_ = true;
      return false;  // done; ignore anything after
    } else if (type == "error") {
      ApiError api;
      if (const auto* err = data.if_contains("error"); err && err->is_object()) {
        api.type = GetOptString(err->as_object(), "type").value_or("");
        api.message = GetOptString(err->as_object(), "message").value_or("");
      }
      return Fail(StreamErrorCode(api.type),
                  fmt::format("Anthropic API stream error ({}): {}",
                              api.type.empty() ? "unknown" : api.type, api.message),
                  IsRetryableStreamError(api.type),
                  internal::ContextOverflowReason(api.type, api.message));
    }
    return true;
  }

  // After the HTTP exchange: the response, or why the attempt failed.
  AttemptResult Finish() {
    if (failure_) return tl::unexpected(*failure_);
    if (!stopped_) {
      Fail(ErrorCode::kUnavailable, "Anthropic API stream ended before message_stop", true);
      return tl::unexpected(*failure_);
    }
    Message& msg = response_.message;
    msg.role = Role::kAssistant;
    for (auto& [index, block] : blocks_) {
      if (block.kind == Block::kText) msg.text += block.text;
      if (block.kind == Block::kToolUse) {
        if (!block.json.empty()) FinishToolInput(block.json, block.call);  // no block_stop
        msg.tool_calls.push_back(std::move(block.call));
      }
    }
    if (response_.stop_reason.empty()) {
      response_.stop_reason = msg.tool_calls.empty() ? "end_turn" : "tool_use";
    }
    return std::move(response_);
  }

  // A transport failure (connection dropped, timeout) during the stream.
  AttemptResult TransportFailure(const Error& error) {
    Fail(error.code, "Anthropic API: " + internal::DescribeTransportError(error),
         internal::IsRetryableTransportError(error));
    return tl::unexpected(*failure_);
  }

 private:
  struct Block {
    enum Kind { kOther, kText, kToolUse } kind = kOther;
    std::string text;
    ToolCall call;
    std::string json;
  };

  void EmitText(Block& block, const std::string& text) {
    if (text.empty()) return;
    block.text += text;
    if (callbacks_.on_text_delta) {
      delivered_ = true;
      callbacks_.on_text_delta(text);
    }
  }

  bool Fail(ErrorCode code, std::string message, bool retryable, std::string reason = {}) {
    AttemptError e;
    e.error = Error(code, std::move(message), std::move(reason));
    // Output already shown cannot be taken back: such failures are final.
    e.retryable = retryable && !delivered_;
    if (retryable && delivered_) e.error.message += " (after part of the response was streamed)";
    failure_ = std::move(e);
    return false;
  }

  const StreamCallbacks& callbacks_;
  ModelResponse response_;
  std::map<int, Block> blocks_;
  bool delivered_ = false;
  bool stopped_ = false;
  std::optional<AttemptError> failure_;
};

}  // namespace

std::string MissingAnthropicKeyMessage() {
  return "ANTHROPIC_API_KEY is not set. Export it (export ANTHROPIC_API_KEY=sk-ant-...), or run "
         "with --model replay:FILE to use a recorded conversation.";
}

AnthropicModel::AnthropicModel(AnthropicOptions options, std::unique_ptr<net::HttpClient> client)
    : options_(std::move(options)), client_(std::move(client)) {}
AnthropicModel::~AnthropicModel() = default;

Result<std::unique_ptr<AnthropicModel>> AnthropicModel::Create(AnthropicOptions options) {
  if (options.api_key.empty()) {
    return MakeError(ErrorCode::kUnauthenticated, MissingAnthropicKeyMessage());
  }
  if (options.model.empty()) options.model = kDefaultAnthropicModel;
  if (options.base_url.empty()) options.base_url = kDefaultAnthropicBaseUrl;
  while (options.base_url.ends_with('/')) options.base_url.pop_back();
  auto client = internal::MakeHttpClient(options.base_url, options.http);
  if (!client) {
    return MakeError(client.error().code, fmt::format("Anthropic API client for '{}': {}",
                                                      options.base_url, client.error().message));
  }
  return std::unique_ptr<AnthropicModel>(
      new AnthropicModel(std::move(options), std::move(*client)));
}

std::string AnthropicModel::name() const { return "anthropic:" + options_.model; }

ModelProfile AnthropicModel::profile() const {
  ModelProfile p = AnthropicProfile(options_.model);
  if (options_.max_input_tokens > 0) p.max_input_tokens = options_.max_input_tokens;
  return p;
}

json::object AnthropicModel::BuildRequestBody(const ModelRequest& request) const {
  int max_tokens = request.max_tokens > 0    ? request.max_tokens
                   : options_.max_tokens > 0 ? options_.max_tokens
                                             : AnthropicDefaultMaxTokens(options_.model);
  json::object body{{"model", JsonString(options_.model)}, {"max_tokens", max_tokens}};
  bool cache = request.prompt_caching;
  if (!request.system.empty()) {
    json::object block = TextBlock(request.system);
    if (cache) block["cache_control"] = CacheControl();
    body["system"] = json::array{std::move(block)};
  }
  json::array messages = BuildMessages(request.messages);
  if (cache && !messages.empty()) {
    json::array& content = messages.back().as_object()["content"].as_array();
    if (!content.empty()) content.back().as_object()["cache_control"] = CacheControl();
  }
  body["messages"] = std::move(messages);
  if (!request.tools.empty()) {
    json::array tools;
    for (const auto& tool : request.tools) {
      tools.push_back(json::object{{"name", JsonString(tool.name)},
                                   {"description", JsonString(tool.description)},
                                   {"input_schema", ToolSchema(tool.input_schema)}});
    }
    if (cache) tools.back().as_object()["cache_control"] = CacheControl();
    body["tools"] = std::move(tools);
  }
  body["stream"] = true;
  return body;
}

Result<ModelResponse> AnthropicModel::Generate(const ModelRequest& request,
                                               const StreamCallbacks& callbacks) {
  const std::string body = ToJson(BuildRequestBody(request));
  net::Headers headers;
  headers.Set("x-api-key", options_.api_key);
  headers.Set("anthropic-version", kAnthropicVersion);
  headers.Set("content-type", "application/json");
  headers.Set("accept", "text/event-stream");
  auto attempt = [&]() -> AttemptResult {
    StreamState state(callbacks);
    auto post = internal::StreamingPost(*client_, "/v1/messages", headers, body, options_.http,
                                        request.cancel, request.cancel_fd,
                                        [&](const net::SseEvent& ev) { return state.OnEvent(ev); });
    if (!post) {
      if (post.error().code == ErrorCode::kCancelled) {
        return tl::unexpected(AttemptError{post.error(), false, std::nullopt});
      }
      return state.TransportFailure(post.error());
    }
    if (!post->event_stream) {
      if (post->status / 100 == 2) {
        AttemptError e;
        e.error = Error(ErrorCode::kInternal,
                        fmt::format("Anthropic API answered HTTP {} without an event stream "
                                    "(content-type '{}'): {}",
                                    post->status, post->headers.Get("content-type").value_or(""),
                                    BodySnippet(post->body)));
        return tl::unexpected(std::move(e));
      }
      return tl::unexpected(StatusError(post->status, post->headers, post->body, options_));
    }
    return state.Finish();
  };
  return RunWithRetries(options_.http.retry, request.cancel, callbacks.on_retry, attempt);
}

}  // namespace deepbox::agent
