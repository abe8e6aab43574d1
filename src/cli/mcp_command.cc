// `deepbox mcp`: the command line of the MCP server (mcp/server_command.h).
#include <fcntl.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "agent/mcp/config.h"
#include "cli/cli.h"
#include "cli/mcp/server_command.h"
#include "cli/provider_flags.h"
#include "common/io.h"
#include "common/unique_fd.h"
#include "mcp/jwt_assertion.h"
#include "mcp/oauth.h"

namespace deepbox::cli {
namespace {

struct McpLoginArgs {
  std::string server;  // a URL, or the name of an HTTP server in the MCP configs
  std::vector<std::string> mcp_configs;
  std::string client_id;
  std::string client_secret_file;
  bool client_credentials = false;
  std::string private_key_file;
  std::string signing_alg;
  bool logout = false;
};

// SERVER as a URL: itself when it is one, else the url of the HTTP server of
// that name in the user's MCP config, ./.mcp.json and --mcp-config files.
Result<std::string> ResolveMcpServerUrl(const McpLoginArgs& args) {
  if (args.server.rfind("http://", 0) == 0 || args.server.rfind("https://", 0) == 0) {
    return args.server;
  }
  std::vector<agent::McpConfigText> project;
  UniqueFd fd(::open(".mcp.json", O_RDONLY | O_CLOEXEC));
  if (fd.valid()) {
    auto text = ReadAll(fd.get(), ".mcp.json", 16u << 20);
    if (!text) return tl::unexpected(text.error());
    project.push_back({".mcp.json", *text});
  }
  auto set = agent::LoadMcpConfigs(agent::DefaultMcpConfigPaths(), project, args.mcp_configs,
                                   agent::McpProcessEnv());
  if (!set) return tl::unexpected(set.error());
  for (const auto& s : set->servers) {
    if (s.name != args.server) continue;
    if (!s.http) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "MCP server '" + s.name + "' (" + s.source +
                           ") is a stdio server: OAuth is for HTTP servers");
    }
    return s.url;
  }
  return MakeError(ErrorCode::kNotFound,
                   "no MCP server named '" + args.server +
                       "' in the MCP configs (give its URL, or --mcp-config FILE)");
}

// A secret or a private key from a file on this host (64 KiB at most).
Result<std::string> ReadSecretFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return tl::unexpected(SyscallError("open", errno, path));
  return ReadAll(fd.get(), path, 64u << 10);
}

int RunMcpLogin(const McpLoginArgs& args) {
  auto url = ResolveMcpServerUrl(args);
  if (!url) return ReportError(url.error());
  auto path = mcp::DefaultOAuthStorePath();
  if (!path) return ReportError(path.error());
  auto store = std::make_shared<mcp::FileOAuthStore>(*path);
  if (args.logout) {
    if (auto st = store->Remove(*url); !st) return ReportError(st.error());
    std::fprintf(stderr, "deepbox: forgot the OAuth tokens of %s\n", url->c_str());
    return kExitOk;
  }
  mcp::OAuthOptions o;
  o.store = store;
  o.client_id = args.client_id;
  if (!args.client_secret_file.empty()) {
    auto secret = ReadSecretFile(args.client_secret_file);
    if (!secret) return ReportError(secret.error());
    while (!secret->empty() && (secret->back() == '\n' || secret->back() == '\r')) {
      secret->pop_back();
    }
    o.client_secret = *secret;
  }
  if (args.client_credentials) {
    if (args.client_id.empty() ||
        args.client_secret_file.empty() == args.private_key_file.empty()) {
      return ReportError(Error{ErrorCode::kInvalidArgument,
                               "--client-credentials needs --client-id and either "
                               "--client-secret-file or --private-key-file"});
    }
    if (!args.private_key_file.empty()) {
      auto key = ReadSecretFile(args.private_key_file);
      if (!key) return ReportError(key.error());
      // A key that cannot sign is reported before any request.
      if (auto alg = mcp::JwtAlgorithmForKey(*key); !alg) {
        return ReportError(
            Error{alg.error().code, args.private_key_file + ": " + alg.error().message});
      }
      o.private_key_pem = *key;
    }
    o.client_credentials = true;
    o.signing_alg = args.signing_alg;
    mcp::OAuthSession session(*url, std::move(o));
    if (auto st = session.Login(); !st) return ReportError(st.error());
    std::fprintf(stderr,
                 "deepbox: authorized as client %s; the client's credentials and tokens for %s "
                 "are in %s (mode 0600)\n",
                 args.client_id.c_str(), url->c_str(), path->c_str());
    return kExitOk;
  }
  auto agent = mcp::MakeLoopbackUserAgent([](const std::string& authorization_url) {
    std::fprintf(stderr,
                 "deepbox: open this URL in a browser on this machine to authorize deepbox:\n\n"
                 "  %s\n\nwaiting for the authorization (5 minutes)...\n",
                 authorization_url.c_str());
  });
  if (!agent) return ReportError(agent.error());
  o.user_agent = std::move(*agent);
  mcp::OAuthSession session(*url, std::move(o));
  if (auto st = session.Login(); !st) return ReportError(st.error());
  std::fprintf(stderr, "deepbox: authorized; the tokens of %s are in %s (mode 0600)\n",
               url->c_str(), path->c_str());
  return kExitOk;
}

void RegisterMcpLoginCommands(CLI::App& mcp_cmd) {
  for (bool logout : {false, true}) {
    auto args = std::make_shared<McpLoginArgs>();
    args->logout = logout;
    CLI::App* cmd = mcp_cmd.add_subcommand(
        logout ? "logout" : "login",
        logout ? "Forget the OAuth tokens deepbox keeps for an MCP server"
               : "Authorize deepbox with an MCP server that asks for OAuth (`deepbox run`\n"
                 "then uses, and refreshes, the tokens without asking). Prints an URL to open\n"
                 "in a browser; a listener on 127.0.0.1 receives the authorization. The tokens\n"
                 "stay on this machine in a 0600 file in the user's state directory\n"
                 "($DEEPBOX_MCP_OAUTH_FILE overrides it); they never enter a sandbox.");
    cmd->add_option("server", args->server,
                    "The server: its URL, or its name in the MCP configs (the user's,\n"
                    "./.mcp.json, --mcp-config)")
        ->required();
    cmd->add_option("--mcp-config", args->mcp_configs, "An MCP config file to look names up in");
    if (!logout) {
      cmd->add_option("--client-id", args->client_id,
                      "A client id registered with the authorization server beforehand (else\n"
                      "deepbox registers itself when the server allows it)");
      cmd->add_option("--client-secret-file", args->client_secret_file,
                      "A file holding that client's secret");
      cmd->add_flag("--client-credentials", args->client_credentials,
                    "Machine to machine: the OAuth client credentials grant (no browser,\n"
                    "no user) with --client-id and --client-secret-file or\n"
                    "--private-key-file. The client's secret or key is kept with the\n"
                    "tokens (0600, on this host), so `deepbox run` gets new tokens alone");
      cmd->add_option("--private-key-file", args->private_key_file,
                      "With --client-credentials: a PEM private key (EC P-256/384/521 or\n"
                      "RSA) whose public key the authorization server has; deepbox signs\n"
                      "a JWT assertion with it (private_key_jwt) instead of sending a secret");
      cmd->add_option("--signing-alg", args->signing_alg,
                      "The JWT assertion's algorithm (default: the key's own: ES256, ES384,\n"
                      "ES512 or RS256)");
    }
    cmd->callback([args] { SetExitCode(RunMcpLogin(*args)); });
  }
}

}  // namespace

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
  // Hidden (no group): for scripts/mcp-conformance.sh only.
  cmd->add_flag("--conformance-fixture", args->conformance_fixture,
                "Serve the MCP conformance suite's fixture tools instead of sandboxes")
      ->group("");
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
  cmd->add_option("--image", args->image,
                  "The OCI image of the local sandboxes clients create (pulled on first use);\n"
                  "a sandbox_create call may name another. Default: the host's own root");
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
  RegisterMcpLoginCommands(*cmd);
  cmd->callback([cmd, args] {
    if (cmd->get_subcommands().empty()) SetExitCode(mcp::RunMcp(*args));
  });
}

}  // namespace deepbox::cli
