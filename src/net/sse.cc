#include "net/sse.h"

namespace deepbox::net {

bool SseParser::Feed(std::string_view bytes) {
  pending_.append(bytes);
  size_t start = 0;
  for (;;) {
    size_t nl = pending_.find_first_of("\r\n", start);
    if (nl == std::string::npos) break;
    // A CR at the very end may be the first half of CRLF: wait for more bytes.
    if (pending_[nl] == '\r' && nl + 1 == pending_.size()) break;
    std::string_view line(pending_.data() + start, nl - start);
    size_t next = nl + 1;
    if (pending_[nl] == '\r' && pending_[nl + 1] == '\n') next = nl + 2;
    if (!ProcessLine(line)) {
      pending_.erase(0, next);
      return false;
    }
    start = next;
  }
  pending_.erase(0, start);
  return true;
}

bool SseParser::Finish() {
  if (!pending_.empty()) {
    std::string rest = std::move(pending_);
    pending_.clear();
    // A CR held back as a possible half of CRLF ends the line at the end of
    // the stream; it is not part of the line.
    if (rest.back() == '\r') rest.pop_back();
    if (!ProcessLine(rest)) return false;
  }
  return Dispatch();
}

bool SseParser::ProcessLine(std::string_view line) {
  if (line.empty()) return Dispatch();
  if (line.front() == ':') return true;  // comment / keepalive
  auto colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
  if (value.starts_with(' ')) value.remove_prefix(1);
  if (field == "event") {
    current_.event = std::string(value);
  } else if (field == "data") {
    if (has_data_) current_.data.push_back('\n');
    current_.data.append(value);
    has_data_ = true;
  } else if (field == "id") {
    current_.id = std::string(value);
  } else if (field == "retry") {
    // ASCII digits only (the SSE spec); anything else is ignored.
    if (!value.empty() && value.size() <= 9 &&
        value.find_first_not_of("0123456789") == std::string_view::npos) {
      current_.retry_ms = std::stoi(std::string(value));
    }
  }
  return true;
}

bool SseParser::Dispatch() {
  if (!has_data_ && current_.event.empty()) {
    // A retry: or id: alone still belongs to the stream: kept for the next event.
    return true;
  }
  SseEvent ev = std::move(current_);
  if (ev.event.empty()) ev.event = "message";
  current_ = SseEvent{};
  has_data_ = false;
  return cb_(ev);
}

}  // namespace deepbox::net
