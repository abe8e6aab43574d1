// Internal: the skeleton the HTTP chat model clients (Anthropic, OpenAI-
// compatible) share. It owns what does not depend on the wire dialect: the
// HTTP client and its options, one streaming POST per attempt under the retry
// policy, HTTP error statuses mapped to codes and messages, cancellation,
// and the bookkeeping of a streamed response (what reached the callbacks,
// why an attempt failed). A dialect supplies its wording (SseChatDialect),
// its request body and headers, and a StreamAccumulator reading its events.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "agent/model/http_options.h"
#include "agent/model/model.h"
#include "agent/model/retry.h"
#include "common/error.h"
#include "common/json.h"
#include "net/http.h"
#include "net/sse.h"

namespace deepbox::net {
class HttpClient;
}

namespace deepbox::agent::internal {

// An API's error object: its type (or code) and its message.
struct ApiError {
  std::string type;
  std::string message;
};

// An HTTP error status the dialect words itself. `message` is a fmt template
// with the named arguments {what} ("403 permission_error"), {message} (the
// server's, without its final period), {model} and {base_url}.
struct StatusMessage {
  int status = 0;
  ErrorCode code = ErrorCode::kInternal;
  std::string_view message;
};

// What tells one dialect's client apart from another's, besides its body,
// headers and events.
struct SseChatDialect {
  // Starts every message: "Anthropic API" -> "Anthropic API rate limit (429 ...): ...".
  std::string_view provider;
  // Names the client in Create's errors: "Anthropic API client for 'URL': ...".
  std::string_view client_name;
  std::string_view path;  // the POST target, e.g. "/v1/messages"
  // Statuses worded by the dialect (401, 403, 404). Any other is "{provider}
  // rate limit" (429), "unavailable" (5xx) or "rejected the request" (4xx).
  std::span<const StatusMessage> status_messages;
  // The API's error from the "error" member of a failed response's body;
  // nullopt when it is not one (the message is then the body itself).
  std::optional<ApiError> (*read_api_error)(const json::value& error);
};

// Reads one streamed response's events, passing text and tool-call starts to
// the callbacks as they arrive. One per attempt.
class StreamAccumulator {
 public:
  StreamAccumulator(const StreamCallbacks& callbacks, std::string_view provider)
      : callbacks_(callbacks), provider_(provider) {}
  virtual ~StreamAccumulator() = default;
  StreamAccumulator(const StreamAccumulator&) = delete;
  StreamAccumulator& operator=(const StreamAccumulator&) = delete;

  // One server-sent event; false stops the stream (after a failure, or at its
  // end marker).
  virtual bool OnEvent(const net::SseEvent& event) = 0;

  // After the HTTP exchange: the response, or why the attempt failed.
  AttemptResult Finish();
  // A transport failure (connection dropped, timeout) during the stream.
  AttemptResult TransportFailure(const Error& error);

 protected:
  // The response of a stream that ended without a failure (or the failure
  // of one that ended too early).
  virtual AttemptResult Complete() = 0;

  void EmitText(std::string_view text);
  void EmitToolCallStart(const std::string& id, const std::string& name);
  // Records why the attempt failed; returns false (to stop the stream).
  bool Fail(ErrorCode code, std::string message, bool retryable, std::string reason = {});
  // Fail for Complete: the failure as its result.
  AttemptResult Failed(ErrorCode code, std::string message, bool retryable);
  // An error the API sent in the stream: "{provider} stream error (type): message".
  bool FailWithStreamError(const ApiError& api, ErrorCode code, bool retryable,
                           std::string reason = {});

  ModelResponse& response() { return response_; }
  std::string_view provider() const { return provider_; }

 private:
  const StreamCallbacks& callbacks_;
  std::string_view provider_;
  ModelResponse response_;
  bool delivered_ = false;  // output reached the callbacks: no retry from here
  std::optional<AttemptError> failure_;
};

// Parses a tool call's streamed arguments into call.input (blank = {}).
// Text that is not a JSON object leaves input empty and sets input_error:
// "`subject` not a JSON object (why): snippet", with subject e.g. "the
// model's input for tool 'ls' is".
void ParseToolInput(std::string_view raw, std::string_view subject, ToolCall& call);

// The POSTs of one chat model.
class SseChatClient {
 public:
  using NewAccumulator =
      std::function<std::unique_ptr<StreamAccumulator>(const StreamCallbacks& callbacks)>;

  // base_url as the caller normalised it (NormalizedBaseUrl); `model` and
  // base_url are quoted in error messages.
  static Result<std::unique_ptr<SseChatClient>> Create(const SseChatDialect& dialect,
                                                       std::string model, std::string base_url,
                                                       HttpOptions http);
  ~SseChatClient();

  // POSTs `body` to the dialect's path with retries; each attempt's stream
  // is read by a fresh accumulator.
  Result<ModelResponse> Generate(const ModelRequest& request, const StreamCallbacks& callbacks,
                                 const net::Headers& headers, const std::string& body,
                                 const NewAccumulator& new_accumulator);

 private:
  SseChatClient(const SseChatDialect& dialect, std::string model, std::string base_url,
                HttpOptions http, std::unique_ptr<net::HttpClient> client);
  AttemptResult Attempt(const ModelRequest& request, const StreamCallbacks& callbacks,
                        const net::Headers& headers, const std::string& body,
                        const NewAccumulator& new_accumulator);
  ApiError ReadErrorBody(std::string_view body) const;
  AttemptError StatusError(int status, const net::Headers& headers, std::string_view body) const;

  const SseChatDialect& dialect_;
  std::string model_;
  std::string base_url_;
  HttpOptions http_;
  std::unique_ptr<net::HttpClient> client_;
};

// A tool's JSON Schema as the APIs want it: an object schema by default,
// with (possibly empty) properties.
json::object ObjectSchema(const json::object& schema);

// `url` without trailing slashes; `fallback` when empty.
std::string NormalizedBaseUrl(std::string url, std::string_view fallback);

}  // namespace deepbox::agent::internal
