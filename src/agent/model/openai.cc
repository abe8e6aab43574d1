#include "agent/model/openai.h"

#include <fmt/format.h>

#include <map>
#include <utility>

#include "agent/model/http_stream.h"
#include "agent/model/profiles.h"
#include "agent/model/sse_chat_client.h"

namespace deepbox::agent {
namespace {

using internal::ApiError;
using internal::BodySnippet;

json::object ImagePart(const agent::ImageBlock& image) {
  return json::object{
      {"type", "image_url"},
      {"image_url", json::object{{"url", JsonString("data:" + image.media_type + ";base64," +
                                                    image.base64_data)}}}};
}

json::value UserContent(const Message& m) {
  if (m.images.empty()) return JsonString(m.text);
  json::array parts;
  if (!m.text.empty())
    parts.push_back(json::object{{"type", "text"}, {"text", JsonString(m.text)}});
  for (const auto& image : m.images) parts.push_back(ImagePart(image));
  return parts;
}

json::array BuildMessages(const std::string& system, const std::vector<Message>& messages) {
  json::array out;
  if (!system.empty())
    out.push_back(json::object{{"role", "system"}, {"content", JsonString(system)}});
  size_t i = 0;
  while (i < messages.size()) {
    const Message& m = messages[i];
    if (m.role == Role::kUser) {
      out.push_back(json::object{{"role", "user"}, {"content", UserContent(m)}});
      ++i;
    } else if (m.role == Role::kAssistant) {
      json::object msg{{"role", "assistant"}};
      if (m.tool_calls.empty() || !m.text.empty()) {
        msg["content"] = JsonString(m.text);
      } else {
        msg["content"] = nullptr;
      }
      if (!m.tool_calls.empty()) {
        json::array calls;
        for (const auto& call : m.tool_calls) {
          calls.push_back(json::object{
              {"id", JsonString(call.id)},
              {"type", "function"},
              {"function",
               json::object{{"name", JsonString(call.name)}, {"arguments", ToJson(call.input)}}}});
        }
        msg["tool_calls"] = std::move(calls);
      }
      out.push_back(std::move(msg));
      ++i;
    } else {
      // A run of tool results; their images follow as one user message.
      json::array images;
      for (; i < messages.size() && messages[i].role == Role::kTool; ++i) {
        const Message& t = messages[i];
        std::string text = t.text;
        if (t.is_error && !text.starts_with("Error")) text = "Error: " + text;
        out.push_back(json::object{{"role", "tool"},
                                   {"tool_call_id", JsonString(t.tool_call_id)},
                                   {"content", JsonString(text)}});
        if (!t.images.empty()) {
          images.push_back(json::object{
              {"type", "text"},
              {"text", JsonString(fmt::format("Images returned by tool '{}' (call {}):",
                                              t.tool_name, t.tool_call_id))}});
          for (const auto& image : t.images) images.push_back(ImagePart(image));
        }
      }
      if (!images.empty())
        out.push_back(json::object{{"role", "user"}, {"content", std::move(images)}});
    }
  }
  return out;
}

bool UsesMaxCompletionTokens(std::string_view model) {
  return model.starts_with("o1") || model.starts_with("o3") || model.starts_with("o4") ||
         model.starts_with("gpt-5");
}

// A string error is its message; an object's type is its code if that is a
// string, else its type.
std::optional<ApiError> ReadOpenAiError(const json::value& err) {
  ApiError e;
  if (err.is_string()) {
    e.message = std::string(err.as_string());
  } else if (err.is_object()) {
    const json::object& o = err.as_object();
    e.message = GetOptString(o, "message").value_or("");
    e.type = GetOptString(o, "code").value_or(GetOptString(o, "type").value_or(""));
  }
  return e;
}

constexpr internal::StatusMessage kOpenAiStatusMessages[] = {
    {401, ErrorCode::kUnauthenticated,
     "OpenAI-compatible server rejected the API key ({what}): {message}. Check OPENAI_API_KEY "
     "(and OPENAI_BASE_URL: {base_url})."},
    {403, ErrorCode::kPermissionDenied,
     "OpenAI-compatible server refused the request ({what}): {message}"},
    {404, ErrorCode::kNotFound,
     "OpenAI-compatible server: not found ({what}): {message}. Check the model name ('{model}') "
     "and OPENAI_BASE_URL ({base_url})."},
};

constexpr internal::SseChatDialect kOpenAiDialect{
    .provider = "OpenAI-compatible server",
    .client_name = "OpenAI-compatible client",
    .path = "/chat/completions",
    .status_messages = kOpenAiStatusMessages,
    .read_api_error = ReadOpenAiError,
};

// An index from the server: anything but an int64 reads as 0.
int64_t IntField(const json::object& obj, std::string_view key) {
  const json::value* v = obj.if_contains(key);
  if (v == nullptr || !v->is_int64()) return 0;
  return v->as_int64();
}

std::string MapFinishReason(std::string_view reason) {
  if (reason == "stop") return "end_turn";
  if (reason == "tool_calls" || reason == "function_call") return "tool_use";
  if (reason == "length") return "max_tokens";
  if (reason == "content_filter") return "refusal";
  return std::string(reason);
}

// The state of one streamed response: text and tool calls by index.
class OpenAiStream : public internal::StreamAccumulator {
 public:
  explicit OpenAiStream(const StreamCallbacks& callbacks)
      : StreamAccumulator(callbacks, kOpenAiDialect.provider) {}

  bool OnEvent(const net::SseEvent& ev) override {
    std::string_view data = ev.data;
    while (!data.empty() && data.back() == ' ') data.remove_suffix(1);
    if (data == "[DONE]") {
      done_ = true;
      return false;
    }
    if (data.empty()) return true;
    auto parsed = ParseJson(data);
    if (!parsed || !parsed->is_object()) {
      return Fail(ErrorCode::kInternal,
                  fmt::format("OpenAI-compatible server sent an unreadable chunk: {}",
                              BodySnippet(data, 200)),
                  true);
    }
    const json::object& chunk = parsed->as_object();
    if (const auto* err = chunk.if_contains("error"); err && !err->is_null()) {
      return FailWithStreamError(*ReadOpenAiError(*err), ErrorCode::kUnavailable, true);
    }
    if (auto model = GetOptString(chunk, "model"); model && response().model.empty()) {
      response().model = *model;
    }
    if (const auto* u = chunk.if_contains("usage"); u && u->is_object()) ReadUsage(u->as_object());
    const auto* choices = chunk.if_contains("choices");
    if (choices == nullptr || !choices->is_array()) return true;
    for (const auto& c : choices->as_array()) {
      if (!c.is_object()) continue;
      const json::object& choice = c.as_object();
      if (IntField(choice, "index") != 0) continue;
      if (auto reason = GetOptString(choice, "finish_reason")) finish_reason_ = *reason;
      const auto* delta = choice.if_contains("delta");
      if (delta == nullptr || !delta->is_object()) continue;
      const json::object& d = delta->as_object();
      if (auto text = GetOptString(d, "content"); text && !text->empty()) {
        text_ += *text;
        EmitText(*text);
      }
      const auto* calls = d.if_contains("tool_calls");
      if (calls == nullptr || !calls->is_array()) continue;
      for (const auto& tc : calls->as_array()) {
        if (tc.is_object()) ReadToolCallFragment(tc.as_object());
      }
    }
    return true;
  }

 private:
  struct Partial {
    std::string id, name, arguments;
    bool started = false;
  };

  void ReadUsage(const json::object& usage) {
    int64_t prompt = TokenCountFromJson(usage.if_contains("prompt_tokens"));
    int64_t cached = 0;
    if (const auto* d = usage.if_contains("prompt_tokens_details"); d && d->is_object()) {
      cached = TokenCountFromJson(d->as_object().if_contains("cached_tokens"));
    }
    Usage& out = response().usage;
    out.cache_read_tokens = cached;
    out.input_tokens = std::max<int64_t>(0, prompt - cached);
    out.output_tokens = TokenCountFromJson(usage.if_contains("completion_tokens"));
  }

  void ReadToolCallFragment(const json::object& frag) {
    int64_t index =
        frag.contains("index") ? IntField(frag, "index") : static_cast<int64_t>(calls_.size());
    Partial& p = calls_[index];
    if (auto id = GetOptString(frag, "id"); id && !id->empty()) p.id = *id;
    if (const auto* fn = frag.if_contains("function"); fn && fn->is_object()) {
      // Most servers send the name once; some repeat it in every fragment.
      if (auto name = GetOptString(fn->as_object(), "name"); name && *name != p.name) {
        p.name += *name;
      }
      if (auto args = GetOptString(fn->as_object(), "arguments")) p.arguments += *args;
    }
    if (!p.started && !p.name.empty()) {
      p.started = true;
      EmitToolCallStart(p.id, p.name);
    }
  }

  AttemptResult Complete() override {
    if (!done_ && finish_reason_.empty()) {
      return Failed(ErrorCode::kUnavailable, "OpenAI-compatible server: stream ended before [DONE]",
                    true);
    }
    ModelResponse& out = response();
    Message& msg = out.message;
    msg.role = Role::kAssistant;
    msg.text = std::move(text_);
    for (auto& [index, p] : calls_) {
      ToolCall call;
      call.id = p.id.empty() ? fmt::format("call_{}", index) : p.id;
      call.name = p.name;
      internal::ParseToolInput(
          p.arguments, fmt::format("the model's arguments for tool '{}' are", call.name), call);
      msg.tool_calls.push_back(std::move(call));
    }
    out.stop_reason = finish_reason_.empty() ? (msg.tool_calls.empty() ? "end_turn" : "tool_use")
                                             : MapFinishReason(finish_reason_);
    return std::move(out);
  }

  std::string text_;
  std::map<int64_t, Partial> calls_;
  std::string finish_reason_;
  bool done_ = false;
};

}  // namespace

std::string MissingOpenAiKeyMessage() {
  return "OPENAI_API_KEY is not set. Export it (export OPENAI_API_KEY=sk-...), or point "
         "OPENAI_BASE_URL at a local OpenAI-compatible server (which needs no key).";
}

OpenAiModel::OpenAiModel(OpenAiOptions options, std::unique_ptr<internal::SseChatClient> client)
    : options_(std::move(options)), client_(std::move(client)) {}
OpenAiModel::~OpenAiModel() = default;

Result<std::unique_ptr<OpenAiModel>> OpenAiModel::Create(OpenAiOptions options) {
  if (options.model.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "openai: no model given; use --model openai:MODEL (e.g. openai:gpt-4o)");
  }
  options.base_url =
      internal::NormalizedBaseUrl(std::move(options.base_url), kDefaultOpenAiBaseUrl);
  if (options.api_key.empty() && options.base_url.find("api.openai.com") != std::string::npos) {
    return MakeError(ErrorCode::kUnauthenticated, MissingOpenAiKeyMessage());
  }
  auto client = internal::SseChatClient::Create(kOpenAiDialect, options.model, options.base_url,
                                                options.http);
  if (!client) return tl::unexpected(client.error());
  return std::unique_ptr<OpenAiModel>(new OpenAiModel(std::move(options), std::move(*client)));
}

std::string OpenAiModel::name() const { return "openai:" + options_.model; }

ModelProfile OpenAiModel::profile() const {
  ModelProfile p = OpenAiProfile(options_.model);
  if (options_.max_input_tokens > 0) p.max_input_tokens = options_.max_input_tokens;
  return p;
}

json::object OpenAiModel::BuildRequestBody(const ModelRequest& request) const {
  json::object body{{"model", JsonString(options_.model)},
                    {"messages", BuildMessages(request.system, request.messages)},
                    {"stream", true},
                    {"stream_options", json::object{{"include_usage", true}}}};
  int max_tokens = request.max_tokens > 0 ? request.max_tokens : options_.max_tokens;
  if (max_tokens > 0) {
    body[UsesMaxCompletionTokens(options_.model) ? "max_completion_tokens" : "max_tokens"] =
        max_tokens;
  }
  if (!request.tools.empty()) {
    json::array tools;
    for (const auto& tool : request.tools) {
      tools.push_back(json::object{
          {"type", "function"},
          {"function", json::object{{"name", JsonString(tool.name)},
                                    {"description", JsonString(tool.description)},
                                    {"parameters", internal::ObjectSchema(tool.input_schema)}}}});
    }
    body["tools"] = std::move(tools);
  }
  return body;
}

Result<ModelResponse> OpenAiModel::Generate(const ModelRequest& request,
                                            const StreamCallbacks& callbacks) {
  const std::string body = ToJson(BuildRequestBody(request));
  net::Headers headers;
  if (!options_.api_key.empty()) headers.Set("authorization", "Bearer " + options_.api_key);
  headers.Set("content-type", "application/json");
  headers.Set("accept", "text/event-stream");
  return client_->Generate(request, callbacks, headers, body, [](const StreamCallbacks& cb) {
    return std::make_unique<OpenAiStream>(cb);
  });
}

}  // namespace deepbox::agent
