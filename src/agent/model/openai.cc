#include "agent/model/openai.h"

#include <fmt/format.h>

#include <map>
#include <utility>

#include "agent/model/http_stream.h"
#include "agent/model/profiles.h"
#include "agent/model/retry.h"
#include "net/http_client.h"

namespace deepbox::agent {
namespace {

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

json::object ParametersSchema(const json::object& schema) {
  json::object s = schema;
  if (!s.contains("type")) s["type"] = "object";
  if (s["type"] == "object" && !s.contains("properties")) s["properties"] = json::object{};
  return s;
}

bool UsesMaxCompletionTokens(std::string_view model) {
  return model.starts_with("o1") || model.starts_with("o3") || model.starts_with("o4") ||
         model.starts_with("gpt-5");
}

struct ApiError {
  std::string type;  // code if it is a string, else type
  std::string message;
};

ApiError ReadApiError(const json::value& err) {
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

ApiError ParseApiError(std::string_view body) {
  if (auto v = ParseJson(body); v && v->is_object()) {
    if (const auto* err = v->as_object().if_contains("error")) return ReadApiError(*err);
  }
  return ApiError{"", BodySnippet(body)};
}

AttemptError StatusError(int status, const net::Headers& headers, std::string_view body,
                         const OpenAiOptions& options) {
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
                      fmt::format("OpenAI-compatible server rejected the API key ({}): {}. "
                                  "Check OPENAI_API_KEY (and OPENAI_BASE_URL: {}).",
                                  what, api.message, options.base_url));
      break;
    case 403:
      e.error = Error(
          ErrorCode::kPermissionDenied,
          fmt::format("OpenAI-compatible server refused the request ({}): {}", what, api.message));
      break;
    case 404:
      e.error = Error(ErrorCode::kNotFound,
                      fmt::format("OpenAI-compatible server: not found ({}): {}. Check the model "
                                  "name ('{}') and OPENAI_BASE_URL ({}).",
                                  what, api.message, options.model, options.base_url));
      break;
    case 429:
      e.error =
          Error(ErrorCode::kResourceExhausted,
                fmt::format("OpenAI-compatible server rate limit ({}): {}", what, api.message));
      break;
    default:
      if (status >= 500) {
        e.error =
            Error(ErrorCode::kUnavailable,
                  fmt::format("OpenAI-compatible server unavailable ({}): {}", what, api.message));
      } else if (status >= 400) {
        e.error = Error(ErrorCode::kInvalidArgument,
                        fmt::format("OpenAI-compatible server rejected the request ({}): {}", what,
                                    api.message));
      } else {
        e.error = Error(ErrorCode::kInternal,
                        fmt::format("OpenAI-compatible server: unexpected HTTP {} response: {}",
                                    status, BodySnippet(body)));
      }
  }
  if (status == 400 || status == 413) {
    e.error.reason = internal::ContextOverflowReason(api.type, api.message);
  }
  return e;
}

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

class StreamState {
 public:
  explicit StreamState(const StreamCallbacks& callbacks) : callbacks_(callbacks) {}

  bool OnEvent(const net::SseEvent& ev) {
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
      ApiError api = ReadApiError(*err);
      return Fail(ErrorCode::kUnavailable,
                  fmt::format("OpenAI-compatible server stream error ({}): {}",
                              api.type.empty() ? "unknown" : api.type, api.message),
                  true);
    }
    if (auto model = GetOptString(chunk, "model"); model && response_.model.empty()) {
      response_.model = *model;
    }
    if (const auto* u = chunk.if_contains("usage"); u && u->is_object()) {
      const json::object& usage = u->as_object();
      int64_t prompt = TokenCountFromJson(usage.if_contains("prompt_tokens"));
      int64_t cached = 0;
      if (const auto* d = usage.if_contains("prompt_tokens_details"); d && d->is_object()) {
        cached = TokenCountFromJson(d->as_object().if_contains("cached_tokens"));
      }
      response_.usage.cache_read_tokens = cached;
      response_.usage.input_tokens = std::max<int64_t>(0, prompt - cached);
      response_.usage.output_tokens = TokenCountFromJson(usage.if_contains("completion_tokens"));
    }
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
        if (callbacks_.on_text_delta) {
          delivered_ = true;
          callbacks_.on_text_delta(*text);
        }
      }
      const auto* calls = d.if_contains("tool_calls");
      if (calls == nullptr || !calls->is_array()) continue;
      for (const auto& tc : calls->as_array()) {
        if (!tc.is_object()) continue;
        const json::object& frag = tc.as_object();
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
          if (callbacks_.on_tool_call_start) {
            delivered_ = true;
            callbacks_.on_tool_call_start(p.id, p.name);
          }
        }
      }
    }
    return true;
  }

  AttemptResult Finish() {
    if (failure_) return tl::unexpected(*failure_);
    if (!done_ && finish_reason_.empty()) {
      Fail(ErrorCode::kUnavailable, "OpenAI-compatible server: stream ended before [DONE]", true);
      return tl::unexpected(*failure_);
    }
    Message& msg = response_.message;
    msg.role = Role::kAssistant;
    msg.text = std::move(text_);
    for (auto& [index, p] : calls_) {
      ToolCall call;
      call.id = p.id.empty() ? fmt::format("call_{}", index) : p.id;
      call.name = p.name;
      std::string_view args = p.arguments;
      while (!args.empty() && (args.front() == ' ' || args.front() == '\n')) args.remove_prefix(1);
      if (!args.empty()) {
        auto v = ParseJson(args);
        if (v && v->is_object()) {
          call.input = std::move(v->as_object());
        } else {
          call.input_error = fmt::format(
              "the model's arguments for tool '{}' are not a JSON object ({}): {}", call.name,
              v ? "not an object" : v.error().message, BodySnippet(p.arguments, 200));
        }
      }
      msg.tool_calls.push_back(std::move(call));
    }
    response_.stop_reason = finish_reason_.empty()
                                ? (msg.tool_calls.empty() ? "end_turn" : "tool_use")
                                : MapFinishReason(finish_reason_);
    return std::move(response_);
  }

  AttemptResult TransportFailure(const Error& error) {
    Fail(error.code, "OpenAI-compatible server: " + internal::DescribeTransportError(error),
         internal::IsRetryableTransportError(error));
    return tl::unexpected(*failure_);
  }

 private:
  struct Partial {
    std::string id, name, arguments;
    bool started = false;
  };

  bool Fail(ErrorCode code, std::string message, bool retryable) {
    AttemptError e;
    e.error = Error(code, std::move(message));
    e.retryable = retryable && !delivered_;
    if (retryable && delivered_) e.error.message += " (after part of the response was streamed)";
    failure_ = std::move(e);
    return false;
  }

  const StreamCallbacks& callbacks_;
  ModelResponse response_;
  std::string text_;
  std::map<int64_t, Partial> calls_;
  std::string finish_reason_;
  bool delivered_ = false;
  bool done_ = false;
  std::optional<AttemptError> failure_;
};

}  // namespace

std::string MissingOpenAiKeyMessage() {
  return "OPENAI_API_KEY is not set. Export it (export OPENAI_API_KEY=sk-...), or point "
         "OPENAI_BASE_URL at a local OpenAI-compatible server (which needs no key).";
}

OpenAiModel::OpenAiModel(OpenAiOptions options, std::unique_ptr<net::HttpClient> client)
    : options_(std::move(options)), client_(std::move(client)) {}
OpenAiModel::~OpenAiModel() = default;

Result<std::unique_ptr<OpenAiModel>> OpenAiModel::Create(OpenAiOptions options) {
  if (options.model.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "openai: no model given; use --model openai:MODEL (e.g. openai:gpt-4o)");
  }
  if (options.base_url.empty()) options.base_url = kDefaultOpenAiBaseUrl;
  while (options.base_url.ends_with('/')) options.base_url.pop_back();
  if (options.api_key.empty() && options.base_url.find("api.openai.com") != std::string::npos) {
    return MakeError(ErrorCode::kUnauthenticated, MissingOpenAiKeyMessage());
  }
  auto client = internal::MakeHttpClient(options.base_url, options.http);
  if (!client) {
    return MakeError(client.error().code, fmt::format("OpenAI-compatible client for '{}': {}",
                                                      options.base_url, client.error().message));
  }
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
                                    {"parameters", ParametersSchema(tool.input_schema)}}}});
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
  auto attempt = [&]() -> AttemptResult {
    StreamState state(callbacks);
    auto post = internal::StreamingPost(*client_, "/chat/completions", headers, body, options_.http,
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
                        fmt::format("OpenAI-compatible server answered HTTP {} without an event "
                                    "stream (content-type '{}'): {}",
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
