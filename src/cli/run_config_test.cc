#include "cli/run_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "cli/run_agent_files.h"
#include "common/testing/temp_dir.h"
#include "local/lifecycle/registration.h"

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

// The value of a provider's setting as the run's provider would read it
// (flags, then `env`, then the config file), for `provider`.
std::optional<std::string> Setting(RunConfig config, const EnvLookup& env, const char* provider,
                                   const char* name) {
  config.sandbox = provider;
  return SettingValue(RunProviderRequest(config, env), *ProviderRegistry::Global().Lookup(provider),
                      name);
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
  EXPECT_TRUE(c->provider_settings.empty());
  EXPECT_TRUE(c->provider_file_settings.empty());
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
  EXPECT_EQ(c->model, "anthropic:from-env");                     // env over file
  EXPECT_EQ(Setting(*c, env, "k8s", "namespace"), "env-ns");     // env over file
  EXPECT_EQ(Setting(*c, env, "k8s", "warm-pool"), "file-pool");  // file over default
  EXPECT_EQ(c->ttl_seconds, 42);
  EXPECT_EQ(c->max_steps, 7);
  EXPECT_FALSE(c->color);
  EXPECT_EQ(c->labels.at("team"), "ml");

  flags.model = "replay:x.jsonl";
  flags.provider_settings.given["namespace"] = "flag-ns";
  flags.sandbox = "k8s";
  flags.ttl_seconds = 5;
  flags.labels = {"team=infra", "a=b"};
  c = ResolveRunConfig(flags, env);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->model, "replay:x.jsonl");
  EXPECT_EQ(Setting(*c, env, "k8s", "namespace"), "flag-ns");
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
  auto none = FakeEnv({});
  EXPECT_EQ(Setting(*ResolveRunConfig({}, none), none, "k8s", "ready-timeout"), std::nullopt);
  std::string file = WriteTemp("ready_timeout: 600\n");
  RunFlags flags;
  flags.config_file = file;
  flags.sandbox = "k8s";
  EXPECT_EQ(Setting(*ResolveRunConfig(flags, none), none, "k8s", "ready-timeout"), "600");
  auto env = FakeEnv({{"AGENT_SANDBOX_READY_TIMEOUT", "30"}});
  EXPECT_EQ(Setting(*ResolveRunConfig(flags, env), env, "k8s", "ready-timeout"), "30");
  flags.provider_settings.given["ready-timeout"] = "5";
  EXPECT_EQ(Setting(*ResolveRunConfig(flags, env), env, "k8s", "ready-timeout"), "5");

  // Each bad value is refused before anything is claimed, naming where it came from.
  flags.provider_settings.given["ready-timeout"] = "0";
  auto bad = ResolveRunConfig(flags, none);
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.error().message, HasSubstr("--ready-timeout"));
  RunFlags k8s;
  k8s.sandbox = "k8s";
  bad = ResolveRunConfig(k8s, FakeEnv({{"AGENT_SANDBOX_READY_TIMEOUT", "3m"}}));
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.error().message, HasSubstr("AGENT_SANDBOX_READY_TIMEOUT"));
  EXPECT_THAT(bad.error().message, HasSubstr("'3m'"));
  std::string negative = WriteTemp("ready_timeout: -1\n");
  k8s.config_file = negative;
  bad = ResolveRunConfig(k8s, none);
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.error().message, HasSubstr("config " + negative + ": ready_timeout"));
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
  EXPECT_EQ(Setting(*c, FakeEnv({}), "k8s", "router-url"), "http://r");
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

// Issue 24: --image is the local sandbox's image; on Kubernetes it selects the
// SandboxTemplate that runs it (when claiming), and must be a reference; the
// config file's `image` key works too.
TEST(RunConfigTest, ImageIsLocalAndSelectsATemplateOnKubernetes) {
  RunFlags flags;
  flags.image = "registry.example:5000/team/tools:1";
  auto c = ResolveRunConfig(flags, FakeEnv({}));
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->image, "registry.example:5000/team/tools:1");
  flags.sandbox = "k8s";
  auto k8s = ResolveRunConfig(flags, FakeEnv({}));
  ASSERT_TRUE(k8s.has_value()) << k8s.error().message;
  EXPECT_EQ(k8s->image, "registry.example:5000/team/tools:1");
  flags.image = "Not/An:Image:Ref";
  k8s = ResolveRunConfig(flags, FakeEnv({}));
  ASSERT_FALSE(k8s.has_value());
  EXPECT_EQ(k8s.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(k8s.error().message, HasSubstr("--image"));
  RunConfig rc;
  ASSERT_TRUE(ApplyConfigFile("image: python:3.12-slim-bookworm\n", "f.yaml", rc).has_value());
  EXPECT_EQ(rc.image, "python:3.12-slim-bookworm");
}

// Issue 17: `deepbox run` sandboxes had no limits and no way to ask for them.
TEST(RunConfigTest, LimitsHaveSafeDefaultsFileKeysAndFlags) {
  using local::lifecycle::DefaultSandboxLimits;
  using local::lifecycle::LimitsFrom;
  auto none = FakeEnv({});
  auto c = ResolveRunConfig({}, none);
  ASSERT_TRUE(c.has_value());
  auto limits = LimitsFrom(RunProviderRequest(*c, none));
  ASSERT_TRUE(limits.has_value());
  EXPECT_EQ(*limits, DefaultSandboxLimits());
  EXPECT_EQ(limits->memory_bytes, 2ULL << 30);
  EXPECT_EQ(limits->max_processes, 512u);
  EXPECT_EQ(limits->cpu_cores, 2.0);
  EXPECT_EQ(limits->workspace_bytes, 10ULL << 30);

  std::string file = WriteTemp("memory: 4G\nmax_processes: 100\ncpus: 0.5\ndisk: 512M\n");
  RunFlags flags;
  flags.config_file = file;
  c = ResolveRunConfig(flags, none);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  limits = LimitsFrom(RunProviderRequest(*c, none));
  ASSERT_TRUE(limits.has_value());
  EXPECT_EQ(limits->memory_bytes, 4ULL << 30);
  EXPECT_EQ(limits->max_processes, 100u);
  EXPECT_EQ(limits->cpu_cores, 0.5);
  EXPECT_EQ(limits->workspace_bytes, 512ULL << 20);

  // Flags win over the file; 0 / none lift a limit.
  flags.provider_settings.given = {{"memory", "64m"}, {"disk", "0"}, {"cpus", "none"}};
  c = ResolveRunConfig(flags, none);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  limits = LimitsFrom(RunProviderRequest(*c, none));
  ASSERT_TRUE(limits.has_value());
  EXPECT_EQ(limits->memory_bytes, 64ULL << 20);
  EXPECT_EQ(limits->max_processes, 100u);
  EXPECT_FALSE(limits->cpu_cores.has_value());
  EXPECT_FALSE(limits->workspace_bytes.has_value());
  std::remove(file.c_str());

  // A number in the file is bytes, as on the command line.
  RunConfig rc;
  ASSERT_TRUE(ApplyConfigFile("memory: 67108864\n", "f.yaml", rc).has_value());
  limits = LimitsFrom(RunProviderRequest(rc, none));
  ASSERT_TRUE(limits.has_value());
  EXPECT_EQ(limits->memory_bytes, 64ULL << 20);
}

TEST(RunConfigTest, BadLimitsAreUsageErrorsNamingTheirSource) {
  auto none = FakeEnv({});
  auto with = [](const char* name, const char* value) {
    RunFlags flags;
    flags.provider_settings.given[name] = value;
    return flags;
  };
  auto c = ResolveRunConfig(with("memory", "1000"), none);
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(c.error().message, HasSubstr("--memory 1000"));
  EXPECT_THAT(c.error().message, HasSubstr("too small"));
  EXPECT_THAT(ResolveRunConfig(with("cpus", "-1"), none).error().message, HasSubstr("--cpus -1"));
  EXPECT_THAT(ResolveRunConfig(with("max-processes", "many"), none).error().message,
              HasSubstr("--max-processes 'many'"));
  EXPECT_THAT(ResolveRunConfig(with("disk", "10X"), none).error().message,
              HasSubstr("--disk '10X'"));

  std::string file = WriteTemp("disk: lots\n");
  RunFlags flags;
  flags.config_file = file;
  c = ResolveRunConfig(flags, none);
  ASSERT_FALSE(c.has_value());
  EXPECT_THAT(c.error().message, HasSubstr("config " + file + ": disk 'lots'"));
  std::remove(file.c_str());
  RunConfig rc;
  auto st = ApplyConfigFile("cpus: [1]\n", "f.yaml", rc);
  ASSERT_FALSE(st.has_value());
  EXPECT_THAT(st.error().message, HasSubstr("config f.yaml: cpus"));

  // A limit asked for is never silently dropped: k8s sandboxes take the template's.
  flags = {};
  flags.sandbox = "k8s";
  EXPECT_TRUE(ResolveRunConfig(flags, none).has_value());
  flags.provider_settings.given["memory"] = "4G";
  c = ResolveRunConfig(flags, none);
  ASSERT_FALSE(c.has_value());
  EXPECT_THAT(c.error().message, HasSubstr("--memory: a setting of local sandboxes"));
  EXPECT_THAT(c.error().message, HasSubstr("SandboxTemplate"));
  // Nor a k8s one on a local run.
  flags = with("warm-pool", "mine");
  c = ResolveRunConfig(flags, none);
  ASSERT_FALSE(c.has_value());
  EXPECT_THAT(c.error().message, HasSubstr("--warm-pool: a setting of k8s sandboxes"));
  // One config file may hold both providers' settings: the other one's are
  // not used.
  file = WriteTemp("namespace: team-a\nmemory: 4G\n");
  flags = {};
  flags.config_file = file;
  c = ResolveRunConfig(flags, none);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(RunProviderRequest(*c, none).file_settings,
            (std::map<std::string, std::string>{{"memory", "4G"}}));
  std::remove(file.c_str());
}

// Every provider setting is a config key and every variable is in the help.
TEST(RunConfigTest, HelpListsEveryProviderSettingAndVariable) {
  ASSERT_TRUE(ResolveRunConfig({}, FakeEnv({})).has_value());  // registers the providers
  for (const auto& provider : ProviderRegistry::Global().Names()) {
    for (const auto& setting : ProviderRegistry::Global().Lookup(provider)->settings) {
      std::string key = ConfigKeyOf(setting.name);
      EXPECT_THAT(kRunConfigFileHelp, HasSubstr(key));
      RunConfig rc;
      EXPECT_TRUE(ApplyConfigFile(key + ": x\n", "f.yaml", rc).has_value()) << key;
      EXPECT_EQ(rc.provider_file_settings.at(setting.name), "x");
      if (!setting.env.empty()) {
        EXPECT_THAT(kRunEnvironmentHelp, HasSubstr(setting.env));
      }
    }
  }
}

TEST(RunConfigTest, SkillsAndMemoryDefaultsFlagsAndConfig) {
  deepbox::testing::TempDir tmp("deepbox-run-home");
  const std::filesystem::path& home = tmp.path();
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
}

// Issue 21 M7: the working directory's .deepagents/ is a project file, never
// among the host paths read by path (those follow symlinks): it is read by
// ReadProjectInputs, beneath a directory fd, once trusted.
TEST(RunConfigTest, ProjectSkillsAndMemoryAreNotReadByPath) {
  deepbox::testing::TempDir tmp("deepbox-run-proj");
  const std::filesystem::path& proj = tmp.path();
  std::filesystem::create_directories(proj / ".deepagents/skills/s");
  std::ofstream(proj / ".deepagents/AGENTS.md") << "memory\n";
  auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(proj);
  auto c = ResolveRunConfig({}, FakeEnv({{"HOME", "/nonexistent-home"}}));
  std::filesystem::current_path(cwd);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_TRUE(c->skills_dirs.empty());
  EXPECT_TRUE(c->memory_files.empty());
  EXPECT_TRUE(c->project_skills);
  EXPECT_TRUE(c->project_memory);
  // Given explicitly, they are the user's own choice: read as given.
  RunFlags flags;
  flags.skills = {(proj / ".deepagents/skills").string()};
  flags.memory_files = {(proj / ".deepagents/AGENTS.md").string()};
  c = ResolveRunConfig(flags, FakeEnv({}));
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->skills_dirs.size(), 1u);
  EXPECT_EQ(c->memory_files.size(), 1u);
  EXPECT_FALSE(c->project_skills);
  EXPECT_FALSE(c->project_memory);
}

// Issue 29 L6: the model stream's idle timeout is a flag, a variable and a key.
TEST(RunConfigTest, ModelIdleTimeout) {
  auto c = ResolveRunConfig({}, FakeEnv({}));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->model_idle_timeout_seconds, 90);
  EXPECT_LT(c->model_idle_timeout_seconds, 300);
  c = ResolveRunConfig({}, FakeEnv({{"DEEPBOX_MODEL_IDLE_TIMEOUT", "12.5"}}));
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->model_idle_timeout_seconds, 12.5);
  RunFlags flags;
  flags.model_idle_timeout_seconds = 3;
  c = ResolveRunConfig(flags, FakeEnv({{"DEEPBOX_MODEL_IDLE_TIMEOUT", "12.5"}}));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->model_idle_timeout_seconds, 3);
  flags.model_idle_timeout_seconds = 0;
  c = ResolveRunConfig(flags, FakeEnv({}));
  ASSERT_FALSE(c.has_value());
  EXPECT_THAT(c.error().message, HasSubstr("--model-idle-timeout"));
  c = ResolveRunConfig({}, FakeEnv({{"DEEPBOX_MODEL_IDLE_TIMEOUT", "90s"}}));
  ASSERT_FALSE(c.has_value());
  EXPECT_THAT(c.error().message, HasSubstr("DEEPBOX_MODEL_IDLE_TIMEOUT=90s"));
  std::string file = WriteTemp("model_idle_timeout: 45\n");
  RunFlags from_file;
  from_file.config_file = file;
  c = ResolveRunConfig(from_file, FakeEnv({}));
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->model_idle_timeout_seconds, 45);
  std::remove(file.c_str());
  EXPECT_THAT(kRunEnvironmentHelp, HasSubstr("DEEPBOX_MODEL_IDLE_TIMEOUT"));
}

// Issue 29 L12: threads follow DEEPBOX_STATE_DIR unless DEEPBOX_THREADS_DIR is
// set; the help says where they go.
TEST(RunConfigTest, ThreadsDirFollowsTheStateDir) {
  EXPECT_EQ(DefaultThreadsDir(FakeEnv({{"HOME", "/h"}})), "/h/.local/state/deepbox/threads");
  EXPECT_EQ(DefaultThreadsDir(FakeEnv({{"HOME", "/h"}, {"XDG_STATE_HOME", "/x"}})),
            "/x/deepbox/threads");
  EXPECT_EQ(DefaultThreadsDir(FakeEnv({{"HOME", "/h"}, {"DEEPBOX_STATE_DIR", "/s"}})),
            "/s/threads");
  EXPECT_EQ(
      DefaultThreadsDir(FakeEnv({{"DEEPBOX_STATE_DIR", "/s"}, {"DEEPBOX_THREADS_DIR", "/t"}})),
      "/t");
  // Without HOME: never a shared directory such as /tmp (another user could
  // make it first), but the one rule of common/user_state_dir.h.
  if (::geteuid() == 0) {
    EXPECT_EQ(DefaultThreadsDir(FakeEnv({})), "/var/lib/deepbox/threads");
  } else {
    EXPECT_FALSE(DefaultThreadsDir(FakeEnv({})).starts_with("/tmp"));
  }
  auto no_dir = CheckThreadsDir("");
  ASSERT_FALSE(no_dir);
  EXPECT_NE(no_dir.error().message.find("set DEEPBOX_THREADS_DIR"), std::string::npos);
  auto c = ResolveRunConfig({}, FakeEnv({{"DEEPBOX_STATE_DIR", "/s"}}));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->threads_dir, "/s/threads");
  EXPECT_THAT(kRunEnvironmentHelp, HasSubstr("DEEPBOX_THREADS_DIR"));
  EXPECT_THAT(kRunEnvironmentHelp, HasSubstr("~/.local/state/deepbox/threads"));
  EXPECT_THAT(kRunEnvironmentHelp, HasSubstr("$DEEPBOX_STATE_DIR/threads"));
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
