// `deepbox run` configuration: command-line flags over environment variables
// over a config file (YAML or JSON) over defaults. Free of CLI11 so it can be
// tested; run_command.cc fills RunFlags.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/provider_flags.h"
#include "common/error.h"
#include "sandbox/registry.h"

namespace deepbox::run {

// What the command line said; nullopt / empty = not given.
struct RunFlags {
  std::optional<std::string> config_file;
  std::optional<std::string> sandbox;  // local | k8s
  std::optional<std::string> model;
  std::optional<std::string> approve;  // auto | manual
  std::vector<std::string> labels;     // K=V
  std::optional<int64_t> ttl_seconds;
  std::optional<int64_t> idle_suspend_seconds;
  bool keep_sandbox = false;
  bool fork_subagents = false;
  std::optional<std::string> thread_id;
  bool json = false;
  bool no_color = false;
  std::optional<int> max_steps;
  std::optional<std::string> network;  // local: none | public | allow=...
  std::optional<std::string> image;    // local: an OCI image (--image alone: the default)
  std::vector<std::string> secrets;    // --secret NAME=SOURCE@HOST[,HOST...]
  // The providers' settings given as flags (pool, memory, namespace,
  // warm-pool, ...).
  cli::ProviderSettingFlags provider_settings;
  std::optional<std::string> record_path;
  std::optional<std::string> threads_dir;
  std::optional<double> model_idle_timeout_seconds;
  std::optional<std::string> system_prompt;
  std::optional<std::string> task;
  std::vector<std::string> skills;        // host directories ("none" = no skills)
  std::vector<std::string> memory_files;  // host AGENTS.md files ("none" = no memory)
  std::optional<std::string> sandbox_id;  // continue in this (kept) sandbox
  std::vector<std::string> mcp_configs;   // --mcp-config FILE (.mcp.json format)
  bool no_mcp = false;                    // --no-mcp: no MCP servers at all
};

inline constexpr const char* kDefaultModel = "claude-sonnet-4-6";
// How long a sandbox kept after a run (or made by `deepbox mcp`) may stay
// unused before it is suspended (its files stay; the next use resumes it).
inline constexpr int64_t kDefaultIdleSuspendSeconds = 600;
inline constexpr int64_t kDefaultTtlSeconds = 3600;
inline constexpr int kDefaultMaxSteps = 1000;
// Longest silence on a model stream before the attempt is given up (and
// retried). Both APIs keep a live stream busy: Anthropic sends `ping` events
// between content, OpenAI-compatible servers stream tokens as they come, so 90
// s with no byte at all is a stalled connection or server; five minutes (the
// old value) times six attempts left a run silent for half an hour. A
// reasoning model that thinks silently for longer needs a larger value.
inline constexpr double kDefaultModelIdleTimeoutSeconds = 90;

// The effective settings.
struct RunConfig {
  std::string sandbox = "local";
  std::string model = kDefaultModel;
  std::string approve = "auto";
  std::map<std::string, std::string> labels;
  int64_t ttl_seconds = kDefaultTtlSeconds;
  // A kept sandbox (--keep-sandbox) is suspended after this long unused;
  // -1 = the default (kDefaultIdleSuspendSeconds when kept, else never).
  int64_t idle_suspend_seconds = -1;
  bool keep_sandbox = false;
  // The `task` tool offers `sandbox: "fork"` (a sub-agent in a fork of the
  // sandbox); off: the tool is deepagents' own.
  bool fork_subagents = false;
  std::string thread_id;  // "" = a new thread
  bool json = false;
  bool color = true;  // allowed (NO_COLOR / --no-color / config); a TTY is still required
  int max_steps = kDefaultMaxSteps;
  std::string network;  // "" = the host's default
  std::string image;    // local: the sandbox's OCI image ("" = the host's root); k8s: refused
  // --secret flags (sandbox/secrets.h), read when the sandbox is claimed;
  // not with --sandbox-id (an existing sandbox keeps its own).
  std::vector<std::string> secrets;
  // The providers' settings (sandbox/registry.h) by setting name: those
  // given as flags, and those of the config file (key warm_pool = setting
  // warm-pool). The provider reads its environment variables between the
  // two (RunProviderRequest). File settings of another provider than
  // `sandbox` are dropped (one file may serve both); flags of another are an
  // error.
  std::map<std::string, std::string> provider_settings;
  std::map<std::string, std::string> provider_file_settings;
  std::string record_path;
  std::string threads_dir;  // "" = DefaultThreadsDir()
  double model_idle_timeout_seconds = kDefaultModelIdleTimeoutSeconds;
  std::string system_prompt;
  // Model endpoints from the config file, used when the environment has none.
  std::optional<std::string> anthropic_base_url;
  std::optional<std::string> openai_base_url;
  std::optional<std::string> task;
  std::string config_file;  // the file read, if any
  // Host paths copied into the sandbox for the agent: skill directories
  // (<dir>/<name>/SKILL.md) and memory files (AGENTS.md). Without --skills /
  // --memory-file / their config keys: deepagents' default locations, those
  // that exist (kDefaultSkillsDirs, kDefaultMemoryFiles).
  std::vector<std::string> skills_dirs;
  std::vector<std::string> memory_files;
  bool skills_explicit = false;  // set by a flag or the config file (no defaults then)
  bool memory_explicit = false;
  // Without them: the working directory's .deepagents/skills and
  // .deepagents/AGENTS.md are wanted too. They are not in the lists above:
  // they are project files, read without following symlinks and used only
  // once the user trusted them (project_trust.h).
  bool project_skills = false;
  bool project_memory = false;
  std::string sandbox_id;  // "" = claim a new sandbox
  // MCP servers (src/agent/mcp/config.h): the default .mcp.json files plus
  // these, unless no_mcp.
  std::vector<std::string> mcp_configs;
  bool no_mcp = false;
};

// deepagents' locations (~ is $HOME; relative paths are the current
// directory's project, see RunConfig::project_skills): user level first, then
// the project's, which wins.
inline constexpr const char* kDefaultSkillsDirs[] = {"~/.deepagents/agent/skills",
                                                     ".deepagents/skills"};
inline constexpr const char* kDefaultMemoryFiles[] = {"~/.deepagents/agent/AGENTS.md",
                                                      ".deepagents/AGENTS.md"};

// Reads an environment variable (nullptr = unset); tests pass their own.
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup ProcessEnv();

// INVALID_ARGUMENT naming the flag, variable or file key at fault (the
// provider's settings are checked by the provider, sandbox/registry.h).
Result<RunConfig> ResolveRunConfig(const RunFlags& flags, const EnvLookup& env = ProcessEnv());

// What the run asks its provider for: the settings of `config.sandbox`'s
// provider given as flags, then its environment variables (`env`), then the
// config file's.
ProviderRequest RunProviderRequest(const RunConfig& config, const EnvLookup& env = ProcessEnv());

// Parses a config file's text (YAML; JSON is accepted as YAML) into `config`.
Status ApplyConfigFile(std::string_view text, std::string_view name, RunConfig& config);

// Where threads go without --threads-dir / DEEPBOX_THREADS_DIR / threads_dir:
// $DEEPBOX_STATE_DIR/threads when DEEPBOX_STATE_DIR is set (a user who moves
// deepbox's state elsewhere, e.g. to isolate a session, expects the threads to
// move with it), else $XDG_STATE_HOME/deepbox/threads, else
// ~/.local/state/deepbox/threads.
std::string DefaultThreadsDir(const EnvLookup& env = ProcessEnv());

// K=V -> (K, V), with the local provider's label rules.
Result<std::pair<std::string, std::string>> ParseLabelFlag(std::string_view label);

// The --help footer: every environment variable with its default.
extern const char kRunEnvironmentHelp[];
extern const char kRunConfigFileHelp[];

}  // namespace deepbox::run
