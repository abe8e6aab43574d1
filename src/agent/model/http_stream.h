// Internal: one streaming POST of a model call, with the body parsed as
// server-sent events on success and collected on failure.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "agent/model/http_options.h"
#include "common/error.h"
#include "net/http.h"
#include "net/http_client.h"
#include "net/sse.h"

namespace deepbox::agent::internal {

Result<std::unique_ptr<net::HttpClient>> MakeHttpClient(const std::string& base_url,
                                                        const HttpOptions& options);

struct PostOutcome {
  int status = 0;
  net::Headers headers;
  bool event_stream = false;  // 2xx with content-type text/event-stream
  std::string body;           // the body when !event_stream (capped at 1 MiB)
  bool stopped = false;       // on_event or cancellation stopped the stream
};

// Sends the POST; for a 2xx event stream, hands each event to on_event (false
// stops). Checks *cancel whenever bytes arrive; `cancel_fd` (-1 = none), once
// readable, ends a wait for the server at once. Transport failures come back
// as the client's error (UNAVAILABLE / TIMEOUT).
Result<PostOutcome> StreamingPost(net::HttpClient& client, const std::string& target,
                                  const net::Headers& headers, const std::string& body,
                                  const HttpOptions& options, const std::atomic<bool>* cancel,
                                  int cancel_fd,
                                  const std::function<bool(const net::SseEvent&)>& on_event);

// Whether a transport failure (from StreamingPost) is worth retrying:
// connection refused/reset/dropped and timeouts are; a TLS certificate the
// client does not trust is not.
bool IsRetryableTransportError(const Error& error);
// The failure's message, with a hint for certificate problems.
std::string DescribeTransportError(const Error& error);

// kReasonContextOverflow when a model API's error (its type or code, and its
// message) says the request was longer than the model's context window, as
// Anthropic ("prompt is too long"), OpenAI (context_length_exceeded) and
// OpenAI-compatible servers word it; else "". The only place that reads an
// API's error text: the rest of the agent sees Error::reason.
std::string ContextOverflowReason(std::string_view api_type, std::string_view message);

// First `max` bytes of a body, valid UTF-8, for error messages.
std::string BodySnippet(std::string_view body, size_t max = 300);

}  // namespace deepbox::agent::internal
