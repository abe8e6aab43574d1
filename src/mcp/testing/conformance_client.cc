// The client side of the official MCP conformance suite
// (scripts/mcp-conformance.sh): `conformance client --command` runs this
// program with the scenario's server URL appended and the scenario's name in
// MCP_CONFORMANCE_SCENARIO. It drives deepbox's own MCP client (mcp/client.h,
// the one `deepbox run` uses for .mcp.json servers) as an agent would:
// connect (the era probe, then initialize), list the tools, and, where the
// scenario offers one to call, call it. Exit 0 when every step worked.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "mcp/client.h"

using deepbox::json::object;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: mcp_conformance_client URL (scenario in MCP_CONFORMANCE_SCENARIO)\n");
    return 2;
  }
  const char* env = std::getenv("MCP_CONFORMANCE_SCENARIO");
  const std::string scenario = env != nullptr ? env : "";
  const std::string url = argv[argc - 1];
  auto client = deepbox::mcp::McpClient::ConnectHttp(url, {});
  if (!client) {
    std::fprintf(stderr, "%s: connect: %s\n", scenario.c_str(), client.error().ToString().c_str());
    return 1;
  }
  std::printf("connected: protocol %s\n", (*client)->protocol_version().c_str());
  auto tools = (*client)->ListTools();
  if (!tools) {
    std::fprintf(stderr, "%s: tools/list: %s\n", scenario.c_str(),
                 tools.error().ToString().c_str());
    return 1;
  }
  int rc = 0;
  for (const auto& tool : *tools) {
    std::printf("tool: %s\n", tool.name.c_str());
    // The arguments an agent would give the scenarios' tools.
    object args;
    if (tool.name == "add_numbers") {
      args["a"] = 5;
      args["b"] = 3;
    } else if (scenario == "tools_call" || scenario.empty()) {
      continue;  // only the tool the scenario checks
    }
    auto result = (*client)->CallTool(tool.name, args);
    if (!result) {
      std::fprintf(stderr, "%s: tools/call %s: %s\n", scenario.c_str(), tool.name.c_str(),
                   result.error().ToString().c_str());
      rc = 1;
      continue;
    }
    std::printf("%s -> %s%s\n", tool.name.c_str(), result->is_error ? "error: " : "",
                result->text.c_str());
    if (result->is_error) rc = 1;
  }
  (*client)->Close();
  return rc;
}
