// Test support: what a fake model server answers, one ScriptedTurn per HTTP
// request, in order. Shared by FakeAnthropicServer and FakeOpenAiServer.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "agent/model/model.h"
#include "common/error.h"
#include "common/json.h"
#include "net/http.h"

namespace deepbox::agent::testing {

struct ScriptedToolCall {
  ScriptedToolCall(std::string id, std::string name, json::object input = {})
      : id(std::move(id)), name(std::move(name)), input(std::move(input)) {}
  // A call whose arguments are streamed as `raw` (e.g. malformed JSON).
  static ScriptedToolCall Raw(std::string id, std::string name, std::string raw) {
    ScriptedToolCall c(std::move(id), std::move(name));
    c.raw_arguments = std::move(raw);
    return c;
  }

  std::string id;  // empty = generated ("toolu_fake_<n>" / "call_fake_<n>")
  std::string name{};
  json::object input{};
  // Streamed verbatim instead of `input` (to imitate malformed model output).
  std::optional<std::string> raw_arguments{};
};

struct ScriptedTurn {
  enum class Kind {
    kResponse,       // a complete streamed response: text, then tool calls
    kHttpError,      // `status` with the API's error body (+ `headers`)
    kDropMidStream,  // starts the stream (and streams `text`), then closes the connection
    kStreamError,    // starts the stream (and streams `text`), then an error event
    kStall,          // streams `text`, then only pings until the client goes away
    kSilentStall,    // streams `text`, then nothing at all until the client goes away
  };
  Kind kind = Kind::kResponse;
  std::string text{};
  std::vector<ScriptedToolCall> tool_calls{};
  std::string stop_reason{};     // Anthropic vocabulary; default tool_use / end_turn
  std::optional<Usage> usage{};  // default: derived from the request and response sizes
  int status = 0;                // kHttpError
  std::string error_type{};      // kHttpError / kStreamError: "rate_limit_error", ...
  std::string error_message{};
  net::Headers headers{};  // extra response headers (retry-after, ...)

  static ScriptedTurn Text(std::string text);
  static ScriptedTurn ToolCalls(std::vector<ScriptedToolCall> calls, std::string text = "");
  static ScriptedTurn HttpError(int status, std::string type, std::string message);
  // 429 rate_limit_error with `retry-after: <seconds>` (empty = no header).
  static ScriptedTurn RateLimited(std::string retry_after_seconds = "1");
  static ScriptedTurn Overloaded();   // 529 overloaded_error
  static ScriptedTurn ServerError();  // 500 api_error
  static ScriptedTurn DropMidStream(std::string text_before = "");
  static ScriptedTurn StreamError(std::string type = "overloaded_error",
                                  std::string message = "Overloaded", std::string text_before = "");
  static ScriptedTurn Stall(std::string text_before);
  static ScriptedTurn SilentStall(std::string text_before);
  static ScriptedTurn FromResponse(const ModelResponse& response);

  ScriptedTurn& WithUsage(Usage u) {
    usage = u;
    return *this;
  }
  ScriptedTurn& WithStopReason(std::string reason) {
    stop_reason = std::move(reason);
    return *this;
  }
  ScriptedTurn& WithHeader(std::string name, std::string value) {
    headers.Add(std::move(name), std::move(value));
    return *this;
  }
};

// The turns of a replay file (replay.h format) as a script, so a recorded or
// scripted conversation can be served over real HTTP by a fake server.
Result<std::vector<ScriptedTurn>> ScriptFromReplayFile(const std::string& path);

// Splits `text` into pieces of at most `max_bytes` bytes without cutting a
// UTF-8 sequence (a piece holds at least one character).
std::vector<std::string> SplitUtf8(std::string_view text, size_t max_bytes);

// One request a fake server received.
struct RecordedRequest {
  std::string method{};
  std::string path{};
  net::Headers headers{};
  std::string body{};
  json::object json{};  // the body parsed (empty if it was not a JSON object)
};

struct FakeServerOptions {
  bool tls = false;             // HTTPS with a fresh test CA (see ca_file())
  std::string api_key{};        // non-empty: requests must carry exactly this key (else 401)
  size_t text_delta_bytes = 5;  // text streamed in deltas of at most this many bytes
  size_t json_delta_bytes = 7;  // tool arguments streamed in fragments of this size
  size_t write_bytes = 0;       // 0 = one socket write per event; N = N-byte writes
  bool pings = true;            // Anthropic: a ping after message_start
  int port = 0;                 // 0 = an ephemeral port
};

}  // namespace deepbox::agent::testing
