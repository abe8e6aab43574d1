// MCP server configuration for deepbox's agent, in the `.mcp.json` format
// Claude Code writes (and dcode reads):
//
//   {"mcpServers": {
//      "files":  {"command": "npx", "args": ["-y", "server-x"], "env": {"K": "${K}"}},
//      "search": {"type": "http", "url": "https://h/mcp",
//                 "headers": {"Authorization": "Bearer ${TOKEN:-none}"}},
//      "untrusted": {"command": "python3", "args": ["server.py"], "sandbox": true}}}
//
// A server with `url` is Streamable HTTP ("type" "http", "streamable_http" or
// "streamable-http"); one with `command` is stdio. `${VAR}` and
// `${VAR:-default}` are expanded in command, args, env, cwd, url and headers
// of the user's own files (below) and --mcp-config files; an unset VAR
// without a default makes that server unusable (reported, the others load).
// A project's .mcp.json is never expanded: a server there that uses ${...}
// is reported and left out (a planted file must not send the user's API keys
// anywhere). deepbox's extension: `"sandbox": true` runs a stdio server inside
// the agent's sandbox instead of on the host.
//
// Files, later ones overriding servers of the same name:
// $XDG_CONFIG_HOME/deepbox/.mcp.json (default ~/.config/deepbox/.mcp.json),
// <project>/.mcp.json (only once the user trusted it: src/cli/project_trust.h),
// then each --mcp-config FILE.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace deepbox::agent {

struct McpServerConfig {
  std::string name;
  bool http = false;
  std::vector<std::string> command;  // stdio: the program and its arguments
  std::map<std::string, std::string> env;
  std::string cwd;
  std::string url;  // http
  std::map<std::string, std::string> headers;
  bool sandbox = false;  // stdio inside the sandbox
  std::string source;    // the file it came from
};

using McpEnvLookup = std::function<std::optional<std::string>(std::string_view name)>;
McpEnvLookup McpProcessEnv();

// ${VAR} / ${VAR:-default}; `missing` collects unset variables without a default.
std::string ExpandEnvVars(std::string_view text, const McpEnvLookup& env,
                          std::vector<std::string>* missing);

struct McpConfigSet {
  std::vector<McpServerConfig> servers;  // by name, sorted
  std::vector<std::string> problems;     // one line each: "file: server 'x': why"
};

// One file's servers; a malformed file is an error, a malformed server entry a
// problem. An empty `env` (McpEnvLookup{}) expands nothing: a server whose
// fields use ${...} is then a problem.
Result<McpConfigSet> ParseMcpConfig(std::string_view text, const std::string& source,
                                    const McpEnvLookup& env);

// The user's own default file (it may not exist); the project's .mcp.json is
// not among them: it is read and trusted by the caller (src/cli/project_trust.h).
std::vector<std::string> DefaultMcpConfigPaths();

// A file's text already read by the caller (the exact bytes it trusted).
struct McpConfigText {
  std::string source;
  std::string text;
};

// Loads `defaults` (missing files skipped, ${VAR} expanded), then `unexpanded`
// (nothing expanded: a project's .mcp.json), then `explicit_files` (which
// must exist and parse; expanded), merging by server name.
Result<McpConfigSet> LoadMcpConfigs(const std::vector<std::string>& defaults,
                                    const std::vector<McpConfigText>& unexpanded,
                                    const std::vector<std::string>& explicit_files,
                                    const McpEnvLookup& env);
Result<McpConfigSet> LoadMcpConfigs(const std::vector<std::string>& defaults,
                                    const std::vector<std::string>& explicit_files,
                                    const McpEnvLookup& env);

}  // namespace deepbox::agent
