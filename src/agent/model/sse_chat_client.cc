#include "agent/model/sse_chat_client.h"

#include <fmt/format.h>

#include <utility>

#include "agent/model/http_stream.h"
#include "net/http_client.h"

namespace deepbox::agent::internal {

AttemptResult StreamAccumulator::Finish() {
  if (failure_) return tl::unexpected(*failure_);
  return Complete();
}

AttemptResult StreamAccumulator::TransportFailure(const Error& error) {
  Fail(error.code, fmt::format("{}: {}", provider_, DescribeTransportError(error)),
       IsRetryableTransportError(error));
  return tl::unexpected(*failure_);
}

void StreamAccumulator::EmitText(std::string_view text) {
  if (text.empty() || !callbacks_.on_text_delta) return;
  delivered_ = true;
  callbacks_.on_text_delta(text);
}

void StreamAccumulator::EmitToolCallStart(const std::string& id, const std::string& name) {
  if (!callbacks_.on_tool_call_start) return;
  delivered_ = true;
  callbacks_.on_tool_call_start(id, name);
}

bool StreamAccumulator::Fail(ErrorCode code, std::string message, bool retryable,
                             std::string reason) {
  AttemptError e;
  e.error = Error(code, std::move(message), std::move(reason));
  // Output already shown cannot be taken back: such failures are final.
  e.retryable = retryable && !delivered_;
  if (retryable && delivered_) e.error.message += " (after part of the response was streamed)";
  failure_ = std::move(e);
  return false;
}

AttemptResult StreamAccumulator::Failed(ErrorCode code, std::string message, bool retryable) {
  Fail(code, std::move(message), retryable);
  return tl::unexpected(*failure_);
}

bool StreamAccumulator::FailWithStreamError(const ApiError& api, ErrorCode code, bool retryable,
                                            std::string reason) {
  return Fail(code,
              fmt::format("{} stream error ({}): {}", provider_,
                          api.type.empty() ? "unknown" : api.type, api.message),
              retryable, std::move(reason));
}

void ParseToolInput(std::string_view raw, std::string_view subject, ToolCall& call) {
  std::string_view text = raw;
  while (!text.empty() && (text.front() == ' ' || text.front() == '\n')) text.remove_prefix(1);
  if (text.empty()) return;  // no arguments: {}
  auto v = ParseJson(text);
  if (v && v->is_object()) {
    call.input = std::move(v->as_object());
    return;
  }
  call.input_error = fmt::format("{} not a JSON object ({}): {}", subject,
                                 v ? "not an object" : v.error().message, BodySnippet(raw, 200));
}

json::object ObjectSchema(const json::object& schema) {
  json::object s = schema;
  if (!s.contains("type")) s["type"] = "object";
  if (s["type"] == "object" && !s.contains("properties")) s["properties"] = json::object{};
  return s;
}

std::string NormalizedBaseUrl(std::string url, std::string_view fallback) {
  if (url.empty()) url = fallback;
  while (url.ends_with('/')) url.pop_back();
  return url;
}

SseChatClient::SseChatClient(const SseChatDialect& dialect, std::string model, std::string base_url,
                             HttpOptions http, std::unique_ptr<net::HttpClient> client)
    : dialect_(dialect),
      model_(std::move(model)),
      base_url_(std::move(base_url)),
      http_(std::move(http)),
      client_(std::move(client)) {}
SseChatClient::~SseChatClient() = default;

Result<std::unique_ptr<SseChatClient>> SseChatClient::Create(const SseChatDialect& dialect,
                                                             std::string model,
                                                             std::string base_url,
                                                             HttpOptions http) {
  auto client = MakeHttpClient(base_url, http);
  if (!client) {
    return MakeError(client.error().code, fmt::format("{} for '{}': {}", dialect.client_name,
                                                      base_url, client.error().message));
  }
  return std::unique_ptr<SseChatClient>(new SseChatClient(
      dialect, std::move(model), std::move(base_url), std::move(http), std::move(*client)));
}

Result<ModelResponse> SseChatClient::Generate(const ModelRequest& request,
                                              const StreamCallbacks& callbacks,
                                              const net::Headers& headers, const std::string& body,
                                              const NewAccumulator& new_accumulator) {
  return RunWithRetries(http_.retry, request.cancel, callbacks.on_retry, [&] {
    return Attempt(request, callbacks, headers, body, new_accumulator);
  });
}

AttemptResult SseChatClient::Attempt(const ModelRequest& request, const StreamCallbacks& callbacks,
                                     const net::Headers& headers, const std::string& body,
                                     const NewAccumulator& new_accumulator) {
  std::unique_ptr<StreamAccumulator> stream = new_accumulator(callbacks);
  auto post = StreamingPost(*client_, std::string(dialect_.path), headers, body, http_,
                            request.cancel, request.cancel_fd,
                            [&](const net::SseEvent& ev) { return stream->OnEvent(ev); });
  if (!post) {
    if (post.error().code == ErrorCode::kCancelled) {
      return tl::unexpected(AttemptError{post.error(), false, std::nullopt});
    }
    return stream->TransportFailure(post.error());
  }
  if (!post->event_stream) {
    if (post->status / 100 == 2) {
      AttemptError e;
      e.error =
          Error(ErrorCode::kInternal, fmt::format("{} answered HTTP {} without an event stream "
                                                  "(content-type '{}'): {}",
                                                  dialect_.provider, post->status,
                                                  post->headers.Get("content-type").value_or(""),
                                                  BodySnippet(post->body)));
      return tl::unexpected(std::move(e));
    }
    return tl::unexpected(StatusError(post->status, post->headers, post->body));
  }
  return stream->Finish();
}

ApiError SseChatClient::ReadErrorBody(std::string_view body) const {
  if (auto v = ParseJson(body); v && v->is_object()) {
    if (const auto* err = v->as_object().if_contains("error")) {
      if (auto api = dialect_.read_api_error(*err)) return std::move(*api);
    }
  }
  return ApiError{"", BodySnippet(body)};
}

AttemptError SseChatClient::StatusError(int status, const net::Headers& headers,
                                        std::string_view body) const {
  ApiError api = ReadErrorBody(body);
  while (api.message.ends_with('.') || api.message.ends_with(' ')) api.message.pop_back();
  std::string what =
      api.type.empty() ? fmt::format("{}", status) : fmt::format("{} {}", status, api.type);
  AttemptError e;
  e.retryable = IsRetryableStatus(status, headers);
  e.retry_after = ParseRetryAfter(headers);
  const std::string_view provider = dialect_.provider;
  const StatusMessage* worded = nullptr;
  for (const StatusMessage& entry : dialect_.status_messages) {
    if (entry.status == status) worded = &entry;
  }
  if (worded != nullptr) {
    e.error =
        Error(worded->code, fmt::format(fmt::runtime(worded->message), fmt::arg("what", what),
                                        fmt::arg("message", api.message), fmt::arg("model", model_),
                                        fmt::arg("base_url", base_url_)));
  } else if (status == 429) {
    e.error = Error(ErrorCode::kResourceExhausted,
                    fmt::format("{} rate limit ({}): {}", provider, what, api.message));
  } else if (status >= 500) {
    e.error = Error(ErrorCode::kUnavailable,
                    fmt::format("{} unavailable ({}): {}", provider, what, api.message));
  } else if (status >= 400) {
    e.error = Error(ErrorCode::kInvalidArgument,
                    fmt::format("{} rejected the request ({}): {}", provider, what, api.message));
  } else {
    e.error = Error(ErrorCode::kInternal, fmt::format("{}: unexpected HTTP {} response: {}",
                                                      provider, status, BodySnippet(body)));
  }
  if (status == 400 || status == 413) {
    e.error.reason = ContextOverflowReason(api.type, api.message);
  }
  return e;
}

}  // namespace deepbox::agent::internal
