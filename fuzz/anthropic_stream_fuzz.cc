// The Anthropic Messages stream decoder (src/agent/model/anthropic.h), fed
// through the real client and HTTP stack by a server on a unix socket.
// Input format and properties: fuzz/model_stream_fuzz.h; retries are off.
#include "agent/model/anthropic.h"
#include "fuzz/model_stream_fuzz.h"

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
  Fixture& f = F();
  return deepbox::fuzz::FuzzModelStream(*f.model, f.server, 529, data, size);
}
