#include "agent/model/anthropic.h"

#include <fmt/format.h>

#include <climits>
#include <map>
#include <utility>

#include "agent/model/http_stream.h"
#include "agent/model/profiles.h"
#include "agent/model/sse_chat_client.h"

namespace deepbox::agent {
namespace {

using internal::ApiError;
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

std::optional<ApiError> ReadAnthropicError(const json::value& error) {
  if (!error.is_object()) return std::nullopt;
  return ApiError{GetOptString(error.as_object(), "type").value_or(""),
                  GetOptString(error.as_object(), "message").value_or("")};
}

constexpr internal::StatusMessage kAnthropicStatusMessages[] = {
    {401, ErrorCode::kUnauthenticated,
     "Anthropic API key rejected ({what}): {message}. Check ANTHROPIC_API_KEY."},
    {403, ErrorCode::kPermissionDenied,
     "Anthropic API refused the request ({what}): {message}. Check that the key in "
     "ANTHROPIC_API_KEY may use model '{model}'."},
    {404, ErrorCode::kNotFound,
     "Anthropic API: not found ({what}): {message}. Check the model name ('{model}') and "
     "ANTHROPIC_BASE_URL ({base_url})."},
};

constexpr internal::SseChatDialect kAnthropicDialect{
    .provider = "Anthropic API",
    .client_name = "Anthropic API client",
    .path = "/v1/messages",
    .status_messages = kAnthropicStatusMessages,
    .read_api_error = ReadAnthropicError,
};

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
  internal::ParseToolInput(raw, fmt::format("the model's input for tool '{}' is", call.name), call);
}

// The state of one streamed response: content blocks by index.
class AnthropicStream : public internal::StreamAccumulator {
 public:
  explicit AnthropicStream(const StreamCallbacks& callbacks)
      : StreamAccumulator(callbacks, kAnthropicDialect.provider) {}

  bool OnEvent(const net::SseEvent& ev) override {
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
        response().model = GetOptString(msg->as_object(), "model").value_or("");
        if (const auto* u = msg->as_object().if_contains("usage"); u && u->is_object()) {
          ReadUsage(u->as_object(), response().usage);
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
        AppendText(block, GetOptString(cb->as_object(), "text").value_or(""));
      } else if (block_type == "tool_use") {
        block.kind = Block::kToolUse;
        block.call.id = GetOptString(cb->as_object(), "id").value_or("");
        block.call.name = GetOptString(cb->as_object(), "name").value_or("");
        EmitToolCallStart(block.call.id, block.call.name);
      }
    } else if (type == "content_block_delta") {
      int index = IntField(data, "index", -1);
      const auto* delta = data.if_contains("delta");
      auto it = blocks_.find(index);
      if (delta == nullptr || !delta->is_object() || it == blocks_.end()) return true;
      const json::object& d = delta->as_object();
      std::string delta_type = GetOptString(d, "type").value_or("");
      if (delta_type == "text_delta" && it->second.kind == Block::kText) {
        AppendText(it->second, GetOptString(d, "text").value_or(""));
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
          response().stop_reason = *reason;
        }
      }
      if (const auto* u = data.if_contains("usage"); u && u->is_object()) {
        ReadUsage(u->as_object(), response().usage);
      }
    } else if (type == "message_stop") {
      stopped_ = true;
      return false;  // done; ignore anything after
    } else if (type == "error") {
      ApiError api;
      if (const auto* err = data.if_contains("error"))
        api = ReadAnthropicError(*err).value_or(ApiError{});
      return FailWithStreamError(api, StreamErrorCode(api.type), IsRetryableStreamError(api.type),
                                 internal::ContextOverflowReason(api.type, api.message));
    }
    return true;
  }

 private:
  struct Block {
    enum Kind { kOther, kText, kToolUse } kind = kOther;
    std::string text;
    ToolCall call;
    std::string json;
  };

  AttemptResult Complete() override {
    if (!stopped_) {
      return Failed(ErrorCode::kUnavailable, "Anthropic API stream ended before message_stop",
                    true);
    }
    ModelResponse& out = response();
    Message& msg = out.message;
    msg.role = Role::kAssistant;
    for (auto& [index, block] : blocks_) {
      if (block.kind == Block::kText) msg.text += block.text;
      if (block.kind == Block::kToolUse) {
        if (!block.json.empty()) FinishToolInput(block.json, block.call);  // no block_stop
        msg.tool_calls.push_back(std::move(block.call));
      }
    }
    if (out.stop_reason.empty()) out.stop_reason = msg.tool_calls.empty() ? "end_turn" : "tool_use";
    return std::move(out);
  }

  void AppendText(Block& block, const std::string& text) {
    block.text += text;
    EmitText(text);
  }

  std::map<int, Block> blocks_;
  bool stopped_ = false;
};

}  // namespace

std::string MissingAnthropicKeyMessage() {
  return "ANTHROPIC_API_KEY is not set. Export it (export ANTHROPIC_API_KEY=sk-ant-...), or run "
         "with --model replay:FILE to use a recorded conversation.";
}

AnthropicModel::AnthropicModel(AnthropicOptions options,
                               std::unique_ptr<internal::SseChatClient> client)
    : options_(std::move(options)), client_(std::move(client)) {}
AnthropicModel::~AnthropicModel() = default;

Result<std::unique_ptr<AnthropicModel>> AnthropicModel::Create(AnthropicOptions options) {
  if (options.api_key.empty()) {
    return MakeError(ErrorCode::kUnauthenticated, MissingAnthropicKeyMessage());
  }
  if (options.model.empty()) options.model = kDefaultAnthropicModel;
  options.base_url =
      internal::NormalizedBaseUrl(std::move(options.base_url), kDefaultAnthropicBaseUrl);
  auto client = internal::SseChatClient::Create(kAnthropicDialect, options.model, options.base_url,
                                                options.http);
  if (!client) return tl::unexpected(client.error());
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
                                   {"input_schema", internal::ObjectSchema(tool.input_schema)}});
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
  return client_->Generate(request, callbacks, headers, body, [](const StreamCallbacks& cb) {
    return std::make_unique<AnthropicStream>(cb);
  });
}

}  // namespace deepbox::agent
