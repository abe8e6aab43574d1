// Incremental parser for server-sent events (text/event-stream), as used by
// the Anthropic and OpenAI streaming APIs. Feed it bytes as they arrive.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace deepbox::net {

struct SseEvent {
  std::string event;  // "message" when the stream gave no event: field
  std::string data;   // data: lines joined with '\n'
  std::string id;
  int retry_ms = -1;  // the reconnection delay a retry: field of this event set; -1 none
};

class SseParser {
 public:
  using Callback = std::function<bool(const SseEvent&)>;  // false stops parsing
  explicit SseParser(Callback cb) : cb_(std::move(cb)) {}
  // Returns false once the callback asked to stop.
  bool Feed(std::string_view bytes);
  // Dispatches a final event left without a trailing blank line.
  bool Finish();

 private:
  bool ProcessLine(std::string_view line);
  bool Dispatch();
  Callback cb_;
  std::string pending_;
  SseEvent current_;
  bool has_data_ = false;
};

}  // namespace deepbox::net
