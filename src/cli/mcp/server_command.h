// `deepbox mcp`: deepbox's sandboxes as an MCP server, over stdio (the
// default: a client starts `deepbox mcp` and talks on its stdin/stdout) or
// Streamable HTTP (--listen HOST:PORT, endpoint /mcp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/provider_flags.h"

namespace deepbox::mcp {

struct McpArgs {
  std::string listen;      // "" = stdio; else HOST:PORT for Streamable HTTP
  bool no_auth = false;    // HTTP without a bearer token (loopback listeners only)
  std::string token_file;  // the bearer token ("" = $DEEPBOX_MCP_TOKEN, else a fresh one)
  std::vector<std::string> allowed_origins;
  std::vector<std::string> allowed_hosts;  // Host header values besides the listener's own
  int64_t session_idle_seconds = 1800;     // HTTP legacy sessions
  // The conformance suite's fixture tools instead of the sandbox tools
  // (mcp/conformance_fixture.h; scripts/mcp-conformance.sh only).
  bool conformance_fixture = false;

  std::string provider = "local";      // a registered provider: where sandboxes are created
  std::vector<std::string> labels;     // K=V on every sandbox created
  int64_t ttl_seconds = 3600;          // default and maximum (0 = never expire, any TTL allowed)
  int64_t idle_suspend_seconds = 600;  // local sandboxes it creates: suspended after (0 = never)
  std::string network = "none";        // local sandboxes: default and widest allowed
  std::string image;                   // local sandboxes' default OCI image ("" = host root)
  bool allow_client_network = false;   // clients may ask for any network
  // --secret: every local sandbox it creates gets these (a placeholder of its
  // own each); clients can neither add nor read secrets.
  std::vector<std::string> secrets;
  bool shared = false;          // clients see and use each other's sandboxes
  std::string attach_selector;  // sandboxes made elsewhere that clients may use
  int64_t max_sandboxes = 20;   // live sandboxes of this server (0 = no cap)
  int64_t max_sandboxes_per_client = 5;
  // The providers' settings given (sandbox/registry.h); the rest come from
  // their environment variables (AGENT_SANDBOX_* for k8s), else defaults.
  cli::ProviderSettingFlags settings;
};

// Returns the process exit code (0, or 1/2 with a message on stderr).
int RunMcp(const McpArgs& args);

}  // namespace deepbox::mcp
