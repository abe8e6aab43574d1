// `deepbox mcp`: the command line of the MCP server (mcp/server_command.h).
#include <CLI/CLI.hpp>
#include <memory>

#include "cli/cli.h"
#include "cli/mcp/server_command.h"
#include "cli/provider_flags.h"

namespace deepbox::cli {

void RegisterMcpCommand(CLI::App& app) {
  auto args = std::make_shared<mcp::McpArgs>();
  CLI::App* cmd = app.add_subcommand(
      "mcp",
      "Serve deepbox sandboxes to MCP clients (Claude Code, Codex, Cursor, deepagents via\n"
      "langchain-mcp-adapters): sandbox_create/list/delete, execute, ls, read_file,\n"
      "write_file, edit_file, glob, grep, upload_file, download_file. Over stdio by\n"
      "default (the client starts `deepbox mcp`); --listen serves Streamable HTTP on\n"
      "http://HOST:PORT/mcp instead. Speaks MCP 2026-07-28 and the initialize handshake\n"
      "of 2025-11-25 and 2025-06-18. Tools without sandbox_id use the client's default\n"
      "sandbox, created on first use and deleted when the client disconnects (stateless\n"
      "HTTP clients have none; a later server deletes it if this one dies). Each client\n"
      "sees only the sandboxes it created; --network, --ttl and --max-sandboxes* bound\n"
      "what clients may ask for. Setup for each client: docs/mcp.md.");
  cmd->add_option("--listen", args->listen,
                  "Serve Streamable HTTP on HOST:PORT (e.g. 127.0.0.1:8765) instead of stdio");
  cmd->add_flag("--no-auth", args->no_auth,
                "HTTP without a bearer token: only for a loopback --listen address (any local\n"
                "process can then use your sandboxes)");
  cmd->add_option("--token-file", args->token_file,
                  "HTTP bearer token clients must send (default: $DEEPBOX_MCP_TOKEN, else a\n"
                  "random token printed on stderr)");
  cmd->add_option("--allow-origin", args->allowed_origins,
                  "An Origin allowed besides loopback ones with the listener's port\n"
                  "(browsers' requests from elsewhere get 403)");
  cmd->add_option("--allow-host", args->allowed_hosts,
                  "A Host header value allowed besides the listener's own (NAME for any port,\n"
                  "or NAME:PORT), e.g. a reverse proxy's name; others get 421. On a loopback\n"
                  "listener the own ones are localhost, 127.x.y.z and [::1] with its port");
  cmd->add_option("--session-idle", args->session_idle_seconds,
                  "Seconds after which an idle HTTP session (2025 clients) ends and its default\n"
                  "sandbox is deleted")
      ->capture_default_str();
  cmd->add_option("--provider", args->provider,
                  "Where sandboxes are created by default: local (this machine) or k8s\n"
                  "(SandboxClaims from an agent-sandbox warm pool). Local sandboxes are always\n"
                  "available to clients; k8s ones also when a k8s flag below is given")
      ->capture_default_str();
  cmd->add_option("--label,-l", args->labels, "K=V label on every sandbox the server creates");
  cmd->add_option("--ttl", args->ttl_seconds,
                  "TTL in seconds of the sandboxes it creates, and the longest a client may ask\n"
                  "for (0 = never expire; only then may clients ask for 0)")
      ->capture_default_str();
  cmd->add_option("--idle-suspend", args->idle_suspend_seconds,
                  "Suspend a local sandbox it created after SECONDS unused (its processes\n"
                  "end, its files stay; the next call resumes it); 0 = never")
      ->capture_default_str();
  cmd->add_option("--network", args->network,
                  "Local sandboxes' network, none|public|allow=NAMES: the default and the widest\n"
                  "a client may ask for (none < allow= a subset < public)")
      ->capture_default_str();
  cmd->add_option("--secret", args->secrets,
                  "A secret every local sandbox of this server can use but never read\n"
                  "(repeatable): NAME=SOURCE@HOST[,HOST...], as `deepbox sandbox create\n"
                  "--secret`. Read once at start; clients can neither add nor read secrets\n"
                  "(they see the placeholder in $NAME). Needs --network public or allow=...");
  cmd->add_flag("--allow-client-network", args->allow_client_network,
                "Let clients ask sandbox_create for any network, wider than --network");
  cmd->add_flag("--shared", args->shared,
                "Let every client of this server see, use and delete the sandboxes any of them\n"
                "created (default: each client only its own)");
  cmd->add_option("--attach-selector", args->attach_selector,
                  "Label selector (k=v,...) of sandboxes made elsewhere (deepbox sandbox create,\n"
                  "deepbox run, an earlier server) that clients may see and use, not delete\n"
                  "(default: none are visible)");
  cmd->add_option("--max-sandboxes", args->max_sandboxes,
                  "Live sandboxes this server may have at once, default ones included (0 = no\n"
                  "cap)")
      ->capture_default_str();
  cmd->add_option("--max-sandboxes-per-client", args->max_sandboxes_per_client,
                  "Live sandboxes one client may have at once (0 = no cap)")
      ->capture_default_str();
  // The providers' settings, as they declare them (--pool, --memory, ...,
  // k8s: --namespace, the only namespace the server uses, --warm-pool, ...).
  AddProviderSettingFlags(cmd, args->settings);
  cmd->footer(
      "Exit codes: 0 the client went away or a signal stopped the server; 1 it could not\n"
      "start (e.g. the port is taken, no kubeconfig); 2 bad flags (or a bad\n"
      "AGENT_SANDBOX_* value).\n"
      "Environment: DEEPBOX_MCP_TOKEN (the HTTP bearer token), DEEPBOX_STATE_DIR; the\n"
      "providers' (a flag wins over its variable):\n" +
      ProviderEnvironmentHelp());
  cmd->callback([args] { SetExitCode(mcp::RunMcp(*args)); });
}

}  // namespace deepbox::cli
