#include "cli/run_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace deepbox::run {
namespace {

using ::testing::HasSubstr;

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

std::string WriteTemp(const std::string& text) {
  char path[] = "/tmp/deepbox-run-config-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  return path;
}

TEST(RunConfigTest, Defaults) {
  auto c = ResolveRunConfig({}, FakeEnv({}));
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->sandbox, "local");
  EXPECT_EQ(c->model, "claude-sonnet-4-6");
  EXPECT_EQ(c->approve, "auto");
  EXPECT_EQ(c->ttl_seconds, kDefaultTtlSeconds);
  EXPECT_EQ(c->max_steps, kDefaultMaxSteps);
  EXPECT_EQ(c->warm_pool, "deepagents-warmpool");
  EXPECT_TRUE(c->color);
  EXPECT_FALSE(c->task.has_value());
}

TEST(RunConfigTest, FlagsBeatEnvironmentBeatsFileBeatsDefaults) {
  std::string file = WriteTemp(
      "model: anthropic:from-file\nnamespace: file-ns\nwarm_pool: file-pool\nttl: 42\n"
      "labels: {team: ml}\nmax_steps: 7\ncolor: false\n");
  RunFlags flags;
  flags.config_file = file;
  auto env =
      FakeEnv({{"DEEPBOX_MODEL", "anthropic:from-env"}, {"AGENT_SANDBOX_NAMESPACE", "env-ns"}});
  auto c = ResolveRunConfig(flags, env);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->model, "anthropic:from-env");  // env over file
  EXPECT_EQ(c->namespace_name, "env-ns");     // env over file
  EXPECT_EQ(c->warm_pool, "file-pool");       // file over default
  EXPECT_EQ(c->ttl_seconds, 42);
  EXPECT_EQ(c->max_steps, 7);
  EXPECT_FALSE(c->color);
  EXPECT_EQ(c->labels.at("team"), "ml");

  flags.model = "replay:x.jsonl";
  flags.namespace_name = "flag-ns";
  flags.ttl_seconds = 5;
  flags.labels = {"team=infra", "a=b"};
  c = ResolveRunConfig(flags, env);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->model, "replay:x.jsonl");
  EXPECT_EQ(c->namespace_name, "flag-ns");
  EXPECT_EQ(c->ttl_seconds, 5);
  EXPECT_EQ(c->labels.at("team"), "infra");
  EXPECT_EQ(c->labels.at("a"), "b");
  std::remove(file.c_str());
}

TEST(RunConfigTest, McpConfigFilesMustExist) {
  RunFlags flags;
  flags.mcp_configs = {WriteTemp(R"({"mcpServers": {}})")};
  flags.no_mcp = true;
  auto c = ResolveRunConfig(flags, FakeEnv({}));
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->mcp_configs, flags.mcp_configs);
  EXPECT_TRUE(c->no_mcp);
  flags.mcp_configs.push_back("/nonexistent/servers.json");
  auto bad = ResolveRunConfig(flags, FakeEnv({}));
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, HasSubstr("--mcp-config /nonexistent/servers.json"));
}

TEST(RunConfigTest, ReadyTimeoutFromFileEnvironmentAndFlag) {
  EXPECT_EQ(ResolveRunConfig({}, FakeEnv({}))->ready_timeout_seconds, 180);
  std::string file = WriteTemp("ready_timeout: 600\n");
  RunFlags flags;
  flags.config_file = file;
  EXPECT_EQ(ResolveRunConfig(flags, FakeEnv({}))->ready_timeout_seconds, 600);
  auto env = FakeEnv({{"AGENT_SANDBOX_READY_TIMEOUT", "30"}});
  EXPECT_EQ(ResolveRunConfig(flags, env)->ready_timeout_seconds, 30);
  flags.ready_timeout_seconds = 5;
  EXPECT_EQ(ResolveRunConfig(flags, env)->ready_timeout_seconds, 5);

  flags.ready_timeout_seconds = 0;
  auto bad = ResolveRunConfig(flags, FakeEnv({}));
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.error().message, HasSubstr("--ready-timeout"));
  bad = ResolveRunConfig({}, FakeEnv({{"AGENT_SANDBOX_READY_TIMEOUT", "3m"}}));
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.error().message, HasSubstr("AGENT_SANDBOX_READY_TIMEOUT=3m"));
  std::string negative = WriteTemp("ready_timeout: -1\n");
  flags = {};
  flags.config_file = negative;
  bad = ResolveRunConfig(flags, FakeEnv({}));
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.error().message, HasSubstr("ready_timeout"));
  std::remove(file.c_str());
  std::remove(negative.c_str());
}

TEST(RunConfigTest, JsonConfigAndConfigFromEnvironment) {
  std::string file =
      WriteTemp(R"({"sandbox": "k8s", "keep_sandbox": true, "router_url": "http://r"})");
  auto c = ResolveRunConfig({}, FakeEnv({{"DEEPBOX_CONFIG", file}}));
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->sandbox, "k8s");
  EXPECT_TRUE(c->keep_sandbox);
  EXPECT_EQ(c->router_url, "http://r");
  EXPECT_EQ(c->config_file, file);
  std::remove(file.c_str());
}

TEST(RunConfigTest, NoColorAndBaseUrls) {
  std::string file = WriteTemp("anthropic_base_url: http://file\nopenai_base_url: http://o\n");
  RunFlags flags;
  flags.config_file = file;
  auto c =
      ResolveRunConfig(flags, FakeEnv({{"NO_COLOR", "1"}, {"ANTHROPIC_BASE_URL", "http://e"}}));
  ASSERT_TRUE(c.has_value());
  EXPECT_FALSE(c->color);
  EXPECT_FALSE(c->anthropic_base_url.has_value());  // the environment's wins (read by the client)
  EXPECT_EQ(c->openai_base_url.value_or(""), "http://o");
  // An empty NO_COLOR does not count.
  c = ResolveRunConfig({}, FakeEnv({{"NO_COLOR", ""}}));
  EXPECT_TRUE(c->color);
  std::remove(file.c_str());
}

TEST(RunConfigTest, Errors) {
  RunFlags flags;
  flags.sandbox = "docker";
  auto c = ResolveRunConfig(flags, FakeEnv({}));
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(c.error().message, HasSubstr("--sandbox"));

  flags = {};
  flags.labels = {"novalue"};
  EXPECT_FALSE(ResolveRunConfig(flags, FakeEnv({})).has_value());

  flags = {};
  flags.ttl_seconds = -1;
  EXPECT_THAT(ResolveRunConfig(flags, FakeEnv({})).error().message, HasSubstr("--ttl"));

  flags = {};
  flags.config_file = "/nonexistent/deepbox.yaml";
  EXPECT_THAT(ResolveRunConfig(flags, FakeEnv({})).error().message, HasSubstr("cannot read"));

  RunConfig rc;
  auto st = ApplyConfigFile("modle: x\n", "f.yaml", rc);
  ASSERT_FALSE(st.has_value());
  EXPECT_THAT(st.error().message, HasSubstr("modle"));
  EXPECT_THAT(st.error().message, HasSubstr("unknown setting"));
  st = ApplyConfigFile("ttl: soon\n", "f.yaml", rc);
  ASSERT_FALSE(st.has_value());
  EXPECT_THAT(st.error().message, HasSubstr("ttl"));
  st = ApplyConfigFile("[1, 2]", "f.yaml", rc);
  EXPECT_FALSE(st.has_value());
  st = ApplyConfigFile("a: [", "f.yaml", rc);
  EXPECT_FALSE(st.has_value());
  EXPECT_TRUE(ApplyConfigFile("", "empty.yaml", rc).has_value());
}

// Issue 17: `deepbox run` sandboxes had no limits and no way to ask for them.
TEST(RunConfigTest, LimitsHaveSafeDefaultsFileKeysAndFlags) {
  using local::lifecycle::DefaultSandboxLimits;
  auto c = ResolveRunConfig({}, FakeEnv({}));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->limits, DefaultSandboxLimits());
  EXPECT_EQ(c->limits.memory_bytes, 2ULL << 30);
  EXPECT_EQ(c->limits.max_processes, 512u);
  EXPECT_EQ(c->limits.cpu_cores, 2.0);
  EXPECT_EQ(c->limits.workspace_bytes, 10ULL << 30);
  EXPECT_FALSE(c->limits_explicit);

  std::string file = WriteTemp("memory: 4G\nmax_processes: 100\ncpus: 0.5\ndisk: 512M\n");
  RunFlags flags;
  flags.config_file = file;
  c = ResolveRunConfig(flags, FakeEnv({}));
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->limits.memory_bytes, 4ULL << 30);
  EXPECT_EQ(c->limits.max_processes, 100u);
  EXPECT_EQ(c->limits.cpu_cores, 0.5);
  EXPECT_EQ(c->limits.workspace_bytes, 512ULL << 20);
  EXPECT_TRUE(c->limits_explicit);

  // Flags win over the file; 0 / none lift a limit.
  flags.memory = "64m";
  flags.disk = "0";
  flags.cpus = "none";
  c = ResolveRunConfig(flags, FakeEnv({}));
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->limits.memory_bytes, 64ULL << 20);
  EXPECT_EQ(c->limits.max_processes, 100u);
  EXPECT_FALSE(c->limits.cpu_cores.has_value());
  EXPECT_FALSE(c->limits.workspace_bytes.has_value());
  std::remove(file.c_str());

  // A number in the file is bytes, as on the command line.
  RunConfig rc;
  ASSERT_TRUE(ApplyConfigFile("memory: 67108864\n", "f.yaml", rc).has_value());
  EXPECT_EQ(rc.limits.memory_bytes, 64ULL << 20);
}

TEST(RunConfigTest, BadLimitsAreUsageErrorsNamingTheirSource) {
  RunFlags flags;
  flags.memory = "1000";
  auto c = ResolveRunConfig(flags, FakeEnv({}));
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(c.error().message, HasSubstr("--memory 1000"));
  EXPECT_THAT(c.error().message, HasSubstr("too small"));
  flags = {};
  flags.cpus = "-1";
  EXPECT_THAT(ResolveRunConfig(flags, FakeEnv({})).error().message, HasSubstr("--cpus -1"));
  flags = {};
  flags.max_processes = "many";
  EXPECT_THAT(ResolveRunConfig(flags, FakeEnv({})).error().message,
              HasSubstr("--max-processes 'many'"));
  flags = {};
  flags.disk = "10X";
  EXPECT_THAT(ResolveRunConfig(flags, FakeEnv({})).error().message, HasSubstr("--disk '10X'"));

  RunConfig rc;
  auto st = ApplyConfigFile("disk: lots\n", "f.yaml", rc);
  ASSERT_FALSE(st.has_value());
  EXPECT_THAT(st.error().message, HasSubstr("config f.yaml: disk"));
  st = ApplyConfigFile("cpus: [1]\n", "f.yaml", rc);
  ASSERT_FALSE(st.has_value());
  EXPECT_THAT(st.error().message, HasSubstr("cpus"));

  // A limit asked for is never silently dropped: k8s sandboxes take the template's.
  flags = {};
  flags.sandbox = "k8s";
  EXPECT_TRUE(ResolveRunConfig(flags, FakeEnv({})).has_value());
  flags.memory = "4G";
  c = ResolveRunConfig(flags, FakeEnv({}));
  ASSERT_FALSE(c.has_value());
  EXPECT_THAT(c.error().message, HasSubstr("SandboxTemplate"));
}

TEST(RunConfigTest, HelpListsTheLimitKeys) {
  for (const char* key : {"memory", "max_processes", "cpus", "disk"}) {
    EXPECT_THAT(kRunConfigFileHelp, HasSubstr(key));
  }
}

TEST(RunConfigTest, SkillsAndMemoryDefaultsFlagsAndConfig) {
  char tmpl[] = "/tmp/deepbox-run-home-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::filesystem::path home = tmpl;
  std::filesystem::create_directories(home / ".deepagents/agent/skills");
  std::ofstream(home / ".deepagents/agent/AGENTS.md") << "memory\n";
  auto env = FakeEnv({{"HOME", home.string()}});
  // deepagents' default places, those that exist.
  auto c = ResolveRunConfig({}, env);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->skills_dirs, std::vector<std::string>{(home / ".deepagents/agent/skills").string()});
  EXPECT_EQ(c->memory_files,
            std::vector<std::string>{(home / ".deepagents/agent/AGENTS.md").string()});
  // Flags replace them; `none` means none; a missing one is an error.
  RunFlags flags;
  flags.skills = {home.string()};
  flags.memory_files = {"none"};
  c = ResolveRunConfig(flags, env);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->skills_dirs, std::vector<std::string>{home.string()});
  EXPECT_TRUE(c->memory_files.empty());
  flags.memory_files = {"~/nope.md"};
  c = ResolveRunConfig(flags, env);
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().message, "--memory-file ~/nope.md: not a readable file");
  // The config file: a path or a list, ~ expanded.
  std::string file = WriteTemp(
      "skills: [~/.deepagents/agent/skills]\nmemory_files: ~/.deepagents/agent/AGENTS.md\n");
  RunFlags from_file;
  from_file.config_file = file;
  c = ResolveRunConfig(from_file, env);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->skills_dirs.size(), 1u);
  EXPECT_EQ(c->memory_files.size(), 1u);
  std::remove(file.c_str());
  std::filesystem::remove_all(home);
}

TEST(RunConfigTest, TaskAndThreadAreCheckedUpFront) {
  RunFlags flags;
  flags.task = " \n ";
  auto c = ResolveRunConfig(flags, FakeEnv({}));
  ASSERT_FALSE(c.has_value());
  EXPECT_THAT(c.error().message, HasSubstr("TASK is empty"));
  flags.task = "ok";
  flags.thread_id = "../escape";
  c = ResolveRunConfig(flags, FakeEnv({}));
  ASSERT_FALSE(c.has_value());
  EXPECT_THAT(c.error().message,
              HasSubstr("--thread '../escape': not a valid thread id (use letters"));
  flags.thread_id = "th-ok_1.2";
  c = ResolveRunConfig(flags, FakeEnv({}));
  EXPECT_TRUE(c.has_value()) << c.error().message;
}

}  // namespace
}  // namespace deepbox::run
