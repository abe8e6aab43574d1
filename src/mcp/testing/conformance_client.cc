// The client side of the official MCP conformance suite
// (scripts/mcp-conformance.sh): `conformance client --command` runs this
// program with the scenario's server URL appended, the scenario's name in
// MCP_CONFORMANCE_SCENARIO and, for some, a JSON context in
// MCP_CONFORMANCE_CONTEXT (pre-registered OAuth credentials: a client id with
// a secret or a private key). It drives
// deepbox's own MCP client (mcp/client.h, the one `deepbox run` uses for
// .mcp.json servers) as an agent would: connect (the era probe, then
// initialize), list the tools, and, where the scenario offers one to call,
// call it. Exit 0 when every step worked.
//
// The parts a person plays in real use are played here: the OAuth
// authorization (the suite's authorization server grants at once, so its
// redirect is read instead of a browser's: testing/redirect_user_agent.h) and
// the answer to an elicitation (accept, leaving every field to the schema's
// defaults, which the client library fills in).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/json.h"
#include "mcp/client.h"
#include "mcp/testing/redirect_user_agent.h"

using deepbox::json::object;

namespace {

// The client ID metadata document URL the suite's basic-cimd scenario expects.
constexpr const char* kConformanceClientMetadataUrl =
    "https://conformance-test.local/client-metadata.json";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: mcp_conformance_client URL (scenario in MCP_CONFORMANCE_SCENARIO)\n");
    return 2;
  }
  const char* env = std::getenv("MCP_CONFORMANCE_SCENARIO");
  const std::string scenario = env != nullptr ? env : "";
  const std::string url = argv[argc - 1];

  deepbox::mcp::ClientOptions options;
  deepbox::mcp::OAuthOptions oauth;
  oauth.client_name = "deepbox-conformance";
  oauth.client_id_metadata_url = kConformanceClientMetadataUrl;
  oauth.user_agent = std::make_shared<deepbox::mcp::testing::RedirectFollowingUserAgent>();
  if (const char* ctx = std::getenv("MCP_CONFORMANCE_CONTEXT")) {
    if (auto o = deepbox::ParseJsonObject(ctx)) {
      oauth.client_id = deepbox::GetOptString(*o, "client_id").value_or("");
      oauth.client_secret = deepbox::GetOptString(*o, "client_secret").value_or("");
      oauth.private_key_pem = deepbox::GetOptString(*o, "private_key_pem").value_or("");
      oauth.signing_alg = deepbox::GetOptString(*o, "signing_algorithm").value_or("");
    }
  }
  // What a user configures for a machine-to-machine client (`deepbox mcp
  // login --client-credentials`): the client credentials grant, no browser.
  oauth.client_credentials = scenario.rfind("auth/client-credentials-", 0) == 0;
  options.oauth = deepbox::mcp::MakeOAuthSessionFactory(std::move(oauth));
  options.on_elicitation = [](const deepbox::mcp::ElicitationRequest& req) {
    std::printf("elicitation: %s (accepted with the defaults)\n", req.message.c_str());
    deepbox::mcp::ElicitationAnswer a;
    a.action = "accept";
    return a;
  };

  auto client = deepbox::mcp::McpClient::ConnectHttp(url, {}, options);
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
