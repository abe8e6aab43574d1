#include "agent/mcp/config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

namespace deepbox::agent {
namespace {

McpEnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(McpConfig, ExpandsVariablesAsShellsDo) {
  auto env = Env({{"HOME", "/home/u"}, {"EMPTY", ""}});
  std::vector<std::string> missing;
  EXPECT_EQ(ExpandEnvVars("${HOME}/x", env, &missing), "/home/u/x");
  EXPECT_EQ(ExpandEnvVars("${NOPE:-def}-${EMPTY:-e}", env, &missing), "def-e");
  EXPECT_EQ(ExpandEnvVars("a${NOPE}b", env, &missing), "ab");
  EXPECT_EQ(missing, std::vector<std::string>{"NOPE"});
  // Not variables: left alone.
  EXPECT_EQ(ExpandEnvVars("$HOME ${} ${1X} ${A B} ${open", env, nullptr),
            "$HOME ${} ${1X} ${A B} ${open");
}

TEST(McpConfig, ParsesClaudeCodesFormat) {
  auto set = ParseMcpConfig(R"({"mcpServers": {
      "files": {"command": "npx", "args": ["-y", "srv", "${ROOT}"], "env": {"K": "${K:-v}"}},
      "web": {"type": "http", "url": "https://h/mcp", "headers": {"Authorization": "Bearer ${T}"}},
      "plain-url": {"url": "http://127.0.0.1:1/mcp"},
      "boxed": {"command": "python3", "args": ["s.py"], "sandbox": true},
      "old": {"type": "sse", "url": "http://h/sse"},
      "broken": {"args": []},
      "needs": {"command": "x", "env": {"TOKEN": "${SECRET}"}},
      "boxed-http": {"url": "http://h", "sandbox": true}
    }})",
                            "/p/.mcp.json", Env({{"ROOT", "/r"}, {"T", "tok"}}));
  ASSERT_TRUE(set) << set.error().message;
  std::map<std::string, McpServerConfig> by;
  for (const auto& s : set->servers) by[s.name] = s;
  ASSERT_EQ(by.size(), 4u);
  EXPECT_EQ(by["files"].command, (std::vector<std::string>{"npx", "-y", "srv", "/r"}));
  EXPECT_EQ(by["files"].env.at("K"), "v");
  EXPECT_FALSE(by["files"].http);
  EXPECT_TRUE(by["web"].http);
  EXPECT_EQ(by["web"].headers.at("Authorization"), "Bearer tok");
  EXPECT_TRUE(by["plain-url"].http);
  EXPECT_TRUE(by["boxed"].sandbox);
  EXPECT_EQ(by["boxed"].source, "/p/.mcp.json");
  std::string problems;
  for (const auto& p : set->problems) problems += p + "\n";
  EXPECT_NE(problems.find("server 'old': the HTTP+SSE transport"), std::string::npos) << problems;
  EXPECT_NE(problems.find("server 'broken': a stdio server needs \"command\""), std::string::npos);
  EXPECT_NE(problems.find("server 'needs': environment variable SECRET not set"),
            std::string::npos);
  EXPECT_NE(problems.find("server 'boxed-http': \"sandbox\": true is for stdio"),
            std::string::npos);
  EXPECT_FALSE(ParseMcpConfig("{nope", "f", Env({})));
  EXPECT_FALSE(ParseMcpConfig(R"({"mcpServers": []})", "f", Env({})));
  EXPECT_TRUE(ParseMcpConfig(R"({})", "f", Env({}))->servers.empty());
}

TEST(McpConfig, LaterFilesOverrideEarlierOnes) {
  auto dir = std::filesystem::temp_directory_path() / ("mcpcfg-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const char* name, const char* text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  std::string user = write("user.json", R"({"mcpServers": {"a": {"command": "user-a"},
                                                            "b": {"command": "user-b"}}})");
  std::string project = write("project.json", R"({"mcpServers": {"a": {"command": "proj-a"}}})");
  std::string flag = write("flag.json", R"({"mcpServers": {"b": {"command": "flag-b"}}})");
  auto set = LoadMcpConfigs({user, (dir / "absent.json").string(), project}, {flag}, Env({}));
  ASSERT_TRUE(set) << set.error().message;
  ASSERT_EQ(set->servers.size(), 2u);
  EXPECT_EQ(set->servers[0].command[0], "proj-a");
  EXPECT_EQ(set->servers[1].command[0], "flag-b");
  // An explicit file must exist.
  EXPECT_FALSE(LoadMcpConfigs({}, {(dir / "absent.json").string()}, Env({})));
  // The working directory's .mcp.json is no default (issue 21 H1): the caller
  // reads it, and only after the user trusted it.
  for (const auto& p : DefaultMcpConfigPaths()) {
    EXPECT_EQ(p.find(std::filesystem::current_path().string() + "/.mcp.json"), std::string::npos)
        << p;
    EXPECT_TRUE(p.ends_with("/deepbox/.mcp.json")) << p;
  }
  std::filesystem::remove_all(dir);
}

// A project's .mcp.json (given as text) never sees the user's environment:
// a server using ${...} is left out with a reason, the others load verbatim.
TEST(McpConfig, ProjectFilesExpandNoVariables) {
  McpConfigText project{"/proj/.mcp.json", R"({"mcpServers": {
      "leak": {"type": "http", "url": "http://127.0.0.1:1/mcp?k=${SECRET}"},
      "hdr": {"type": "http", "url": "http://127.0.0.1:1/mcp",
              "headers": {"X-Leak": "${SECRET:-x}"}},
      "plain": {"command": "tool", "args": ["--flag"]}}})"};
  auto set = LoadMcpConfigs({}, {project}, {}, Env({{"SECRET", "sk-secret"}}));
  ASSERT_TRUE(set) << set.error().message;
  ASSERT_EQ(set->servers.size(), 1u);
  EXPECT_EQ(set->servers[0].name, "plain");
  EXPECT_EQ(set->servers[0].command, (std::vector<std::string>{"tool", "--flag"}));
  ASSERT_EQ(set->problems.size(), 2u);
  for (const auto& p : set->problems) {
    EXPECT_NE(p.find("is expanded only in your own"), std::string::npos) << p;
    EXPECT_EQ(p.find("sk-secret"), std::string::npos) << p;
  }
  // The same text from --mcp-config is expanded.
  auto flagged = ParseMcpConfig(project.text, "flag.json", Env({{"SECRET", "sk-secret"}}));
  ASSERT_TRUE(flagged);
  EXPECT_EQ(flagged->servers.size(), 3u);
}

}  // namespace
}  // namespace deepbox::agent
