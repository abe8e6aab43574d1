// The Anthropic Messages stream decoder (src/agent/model/anthropic.h), fed
// through the real client and HTTP stack by a server on a unix socket.
// Input: a flags byte (bits 0-5: how the body is cut into HTTP chunks; bit 6:
// answer 529 instead of 200; bit 7: application/json instead of
// text/event-stream), then the response body. Retries are off. Properties:
// Generate ends in a response or an error (no crash, no hang, no sanitizer
// report), and a response is the assistant's with a stop reason.
#include "agent/model/anthropic.h"
#include "fuzz/stream_server.h"

namespace {

using deepbox::fuzz::StreamServer;

struct Fixture {
  StreamServer server{"anthropic"};
  std::unique_ptr<deepbox::agent::AnthropicModel> model = [this] {
    deepbox::agent::AnthropicOptions options;
    options.api_key = "fuzz-key";
    options.base_url = server.url();
    options.http.retry.max_retries = 0;
    auto m = deepbox::agent::AnthropicModel::Create(options);
    if (!m) deepbox::fuzz::Fail("fixture: " + m.error().ToString());
    return std::move(*m);
  }();
};

Fixture& F() {
  static Fixture* f = new Fixture();
  return *f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  Fixture& f = F();
  f.server.Script(flags & 64 ? 529 : 200, flags & 128 ? "application/json" : "text/event-stream",
                  std::string(reinterpret_cast<const char*>(data) + 1, size - 1), flags & 63);
  deepbox::agent::ModelRequest request;
  request.system = "fuzz";
  deepbox::agent::Message user;
  user.role = deepbox::agent::Role::kUser;
  user.text = "hi";
  request.messages.push_back(user);
  std::string streamed;
  deepbox::agent::StreamCallbacks callbacks;
  callbacks.on_text_delta = [&](std::string_view d) { streamed.append(d); };
  auto response = f.model->Generate(request, callbacks);
  if (response) {
    FUZZ_CHECK(!response->stop_reason.empty(), "a response without a stop reason");
    FUZZ_CHECK(response->message.role == deepbox::agent::Role::kAssistant,
               "a response that is not the assistant's");
  }
  return 0;
}
