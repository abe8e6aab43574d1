// The OpenAI-compatible chat completions stream decoder (src/agent/model/openai.h), fed
// through the real client and HTTP stack by a server on a unix socket.
// Input format and properties: fuzz/model_stream_fuzz.h; retries are off.
#include "agent/model/openai.h"
#include "fuzz/model_stream_fuzz.h"

namespace {

using deepbox::fuzz::StreamServer;

struct Fixture {
  StreamServer server{"openai"};
  std::unique_ptr<deepbox::agent::OpenAiModel> model = [this] {
    deepbox::agent::OpenAiOptions options;
    options.model = "gpt-4o";
    options.api_key = "fuzz-key";
    options.base_url = server.url();
    options.http.retry.max_retries = 0;
    auto m = deepbox::agent::OpenAiModel::Create(options);
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
  return deepbox::fuzz::FuzzModelStream(*f.model, f.server, 503, data, size);
}
