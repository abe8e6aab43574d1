// A stdio MCP server of the test tools (test_registry.h) plus `crash`, which
// writes "boom" on stderr and exits 3. With --legacy it answers like a server
// of the 2025 protocol: server/discover and modern requests are unknown
// methods, one request at a time. With --no-crash it has no `crash` (a server
// whose tools changed between two starts).
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "mcp/protocol.h"
#include "mcp/server.h"
#include "mcp/stdio.h"
#include "mcp/testing/test_registry.h"

using namespace deepbox;
using namespace deepbox::mcp;

namespace {

// Progress as notifications on stdout, as a 2025 server sends them (the
// request's progressToken), so the client's legacy path is exercised too.
class LegacyCallContext : public ToolCallContext {
 public:
  explicit LegacyCallContext(json::value token) : token_(std::move(token)) {}
  const std::atomic<bool>* cancel_flag() const override { return &cancel_; }
  bool wants_progress() const override { return !token_.is_null(); }
  void Progress(double progress, std::optional<double> total, std::string_view message) override {
    if (token_.is_null()) return;
    json::object p;
    p["progressToken"] = token_;
    p["progress"] = JsonNumber(progress);
    if (total) p["total"] = JsonNumber(*total);
    if (!message.empty()) p["message"] = JsonString(message);
    std::cout << SerializeNotification("notifications/progress", p) << "\n" << std::flush;
  }
  const std::string& owner() const override { return owner_; }

 private:
  std::atomic<bool> cancel_{false};
  json::value token_;
  std::string owner_ = "stdio";
};

}  // namespace

int main(int argc, char** argv) {
  bool legacy = false;
  bool crash = true;
  for (int i = 1; i < argc; ++i) {
    legacy = legacy || std::strcmp(argv[i], "--legacy") == 0;
    crash = crash && std::strcmp(argv[i], "--no-crash") != 0;
  }
  auto registry = testing::TestRegistry();
  if (crash) {
    registry->Add({"crash",
                   "",
                   "Exits the server.",
                   ParseJsonObject(R"({"type":"object","additionalProperties":false})").value(),
                   std::nullopt,
                   {},
                   [](const json::object&, ToolCallContext&) -> ToolOutcome {
                     std::fprintf(stderr, "boom\n");
                     std::fflush(stderr);
                     _exit(3);
                   }});
  }
  McpServer server(registry, ServerConfig{"test server", 1000});
  if (!legacy) {
    StdioOptions o;
    return ServeStdio(server, o) ? 0 : 1;
  }
  LegacySession session;
  std::string line;
  while (std::getline(std::cin, line)) {
    auto m = ParseMessage(line);
    if (!m) {
      std::cout << SerializeError(m.error().id, m.error().error) << "\n" << std::flush;
      continue;
    }
    if (m->is_notification()) {
      server.HandleNotification(*m, &session);
      continue;
    }
    if (!m->is_request()) continue;
    if (m->method == "server/discover" || HasModernMeta(m->params)) {
      std::cout << SerializeError(m->id, RpcError(kMethodNotFound, "Method not found")) << "\n"
                << std::flush;
      continue;
    }
    LegacyCallContext ctx(ProgressToken(m->params));
    Reply r = server.Handle(*m, &session, ctx);
    std::cout << (r.error ? SerializeError(m->id, *r.error) : SerializeResult(m->id, r.result))
              << "\n"
              << std::flush;
  }
  return 0;
}
