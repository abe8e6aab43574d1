// Kubernetes watch streams (and list answers) through the real KubeClient
// and HTTP stack, from a server on loopback TCP. Input: a flags byte (bits
// 0-5: how the body is cut into HTTP chunks; bit 6: the body answers the
// initial list instead of the watch), then the body: newline-separated watch
// events, or a list. Every later request gets 403, which must end the watch.
// Properties: WatchObjects returns (an error or the caller's stop; never a
// crash or a hang) after a bounded number of requests.
#include "fuzz/stream_server.h"
#include "k8s/rest_client.h"
#include "k8s/watch.h"

namespace {

using deepbox::fuzz::StreamServer;

const deepbox::k8s::ResourceType kClaims{"extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims",
                                         "SandboxClaim"};

struct Fixture {
  // KubeClient takes only http(s) servers: loopback TCP.
  StreamServer server{"k8s-watch", StreamServer::Listen::kLoopbackTcp};
  std::unique_ptr<deepbox::k8s::KubeClient> client = [this] {
    deepbox::k8s::RestConfig rc;
    rc.server = server.url();
    rc.source = "fuzz API server";
    deepbox::k8s::ClientOptions options;
    options.max_retries = 0;
    options.qps = 1e9;
    options.burst = 1 << 30;
    options.sleep = [](std::chrono::milliseconds) {};
    auto c = deepbox::k8s::KubeClient::Create(rc, options);
    if (!c) deepbox::fuzz::Fail("fixture: " + c.error().ToString());
    return std::move(*c);
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
  f.server.Script(200, "application/json",
                  std::string(reinterpret_cast<const char*>(data) + 1, size - 1), flags & 63);
  deepbox::k8s::WatchOptions options;
  options.resource_version = flags & 64 ? "" : "100";
  int events = 0;
  auto stats =
      deepbox::k8s::WatchObjects(*f.client, kClaims, "default", options,
                                 [&](const deepbox::k8s::WatchEvent&) { return ++events < 1000; });
  // The scripted answer, then one refused request per retry path at most.
  FUZZ_CHECK(f.server.requests() <= 4, "the watch kept sending requests after a 403");
  (void)stats;
  return 0;
}
