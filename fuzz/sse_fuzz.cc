// The server-sent-events parser (model streams). Input: one byte choosing
// how the rest is cut into chunks, then the stream. Properties: the events do
// not depend on how the bytes were chunked (fed whole, byte by byte, or in
// pseudo-random pieces), and an event's name and id never hold a line break.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "net/sse.h"

namespace {

using deepbox::net::SseEvent;
using deepbox::net::SseParser;

struct Seen {
  std::vector<std::string> events;  // "event|id|data"
  bool stopped = false;
};

// Feeds `stream` in pieces of the sizes `next_size` returns; the callback
// asks to stop at the `stop_after`-th event (0 = never).
Seen Parse(std::string_view stream, size_t stop_after, const std::function<size_t()>& next_size) {
  Seen seen;
  SseParser parser([&](const SseEvent& ev) {
    FUZZ_CHECK(ev.event.find_first_of("\r\n") == std::string::npos,
               "an event name holds a line break");
    FUZZ_CHECK(ev.id.find_first_of("\r\n") == std::string::npos, "an event id holds a line break");
    seen.events.push_back(ev.event + "|" + ev.id + "|" + ev.data);
    return stop_after == 0 || seen.events.size() < stop_after;
  });
  while (!stream.empty()) {
    size_t n = std::min(stream.size(), std::max<size_t>(1, next_size()));
    if (!parser.Feed(stream.substr(0, n))) {
      seen.stopped = true;
      return seen;
    }
    stream.remove_prefix(n);
  }
  seen.stopped = !parser.Finish();
  return seen;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const unsigned seed = data[0];
  std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t stop_after = seed & 3;  // sometimes stop early, as a cancelled stream does

  Seen whole = Parse(stream, stop_after, [&] { return stream.size(); });
  Seen bytes = Parse(stream, stop_after, [] { return size_t{1}; });
  uint32_t state = seed * 2654435761u + 1;
  Seen pieces = Parse(stream, stop_after, [&] {
    state = state * 1103515245u + 12345u;
    return static_cast<size_t>((state >> 16) % 17);
  });
  FUZZ_CHECK(whole.events == bytes.events, "byte-by-byte feeding gives other events");
  FUZZ_CHECK(whole.events == pieces.events, "chunked feeding gives other events");
  FUZZ_CHECK(whole.stopped == bytes.stopped && whole.stopped == pieces.stopped,
             "stopping depends on chunking");
  return 0;
}
