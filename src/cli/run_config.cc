#include "cli/run_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "agent/text.h"
#include "agent/thread_store.h"
#include "cli/providers.h"
#include "common/strings.h"
#include "common/user_state_dir.h"
#include "local/lifecycle/selector.h"
#include "oci/default_image.h"
#include "oci/reference.h"
#include "sandbox/network_policy.h"
#include "sandbox/secrets.h"

namespace deepbox::run {

const char kRunEnvironmentHelp[] =
    "Environment (a flag wins over its variable, a variable over the config file):\n"
    "  ANTHROPIC_API_KEY        key for anthropic models (required for them; none = use\n"
    "                           --model replay:FILE)\n"
    "  ANTHROPIC_BASE_URL       Anthropic API URL (default https://api.anthropic.com)\n"
    "  OPENAI_API_KEY           key for openai:MODEL (required only for api.openai.com)\n"
    "  OPENAI_BASE_URL          OpenAI-compatible API URL (default https://api.openai.com/v1)\n"
    "  SSL_CERT_FILE            CA bundle (PEM) for HTTPS to the model (default: system CAs)\n"
    "  DEEPBOX_MODEL            --model (default claude-sonnet-4-6)\n"
    "  DEEPBOX_SANDBOX          --sandbox (default local)\n"
    "  DEEPBOX_CONFIG           --config (default: none)\n"
    "  DEEPBOX_STATE_DIR        local sandboxes' state directory (default /run/deepbox as\n"
    "                           root, else $XDG_RUNTIME_DIR/deepbox)\n"
    "  DEEPBOX_THREADS_DIR      --threads-dir: where threads are written (default\n"
    "                           $DEEPBOX_STATE_DIR/threads when DEEPBOX_STATE_DIR is set,\n"
    "                           else $XDG_STATE_HOME/deepbox/threads, else\n"
    "                           ~/.local/state/deepbox/threads)\n"
    "  DEEPBOX_MODEL_IDLE_TIMEOUT --model-idle-timeout in seconds (default 90)\n"
    "  DEEPBOX_SANDBOXD         the deepbox-sandboxd binary (default: next to deepbox)\n"
    "  KUBECONFIG               k8s: kubeconfig files, ':'-separated (default: in-cluster\n"
    "                           config in a pod, else ~/.kube/config); --kubeconfig wins\n"
    "  AGENT_SANDBOX_NAMESPACE  --namespace (default: the kubeconfig context's, else\n"
    "                           default)\n"
    "  AGENT_SANDBOX_WARMPOOL   --warm-pool (default deepagents-warmpool)\n"
    "  AGENT_SANDBOX_TEMPLATE   --template: claim from a pool of this SandboxTemplate\n"
    "                           (default: the warm pool's; --image selects one too)\n"
    "  AGENT_SANDBOX_ROUTER_URL --router-url (default: kubectl port-forward to\n"
    "                           svc/sandbox-router-svc in agent-sandbox-system)\n"
    "  AGENT_SANDBOX_ROUTER_TOKEN --router-token (default: none)\n"
    "  AGENT_SANDBOX_ROUTER_TOKEN_SECRET_FILE --router-token-secret-file (default:\n"
    "                           none): signs a router token per sandbox\n"
    "  AGENT_SANDBOX_READY_TIMEOUT --ready-timeout in seconds (default 180)\n"
    "  NO_COLOR                 non-empty: no colours (like --no-color)\n";

const char kRunConfigFileHelp[] =
    "Config file (--config FILE, YAML or JSON; every key optional): sandbox, model,\n"
    "approve, labels (a map), ttl, keep_sandbox, fork_subagents, max_steps, color, pool,\n"
    "network, memory, max_processes, cpus, disk, namespace, warm_pool, template, context,\n"
    "kubeconfig, router_url, router_token, router_token_secret_file, ready_timeout,\n"
    "record, threads_dir, model_idle_timeout, system_prompt,\n"
    "anthropic_base_url, openai_base_url, skills (a list of directories), memory_files\n"
    "(a list of AGENTS.md files). Example:\n"
    "  model: claude-sonnet-4-6\n"
    "  labels: {team: ml}\n"
    "  ttl: 1800\n"
    "  skills: [~/my-skills]\n"
    "  memory: 4G        # local sandbox limits; 0 = none\n"
    "  disk: 20G\n";

EnvLookup ProcessEnv() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

std::string DefaultThreadsDir(const EnvLookup& env) {
  if (const char* t = env("DEEPBOX_THREADS_DIR"); t != nullptr && *t != '\0') return t;
  if (const char* s = env("DEEPBOX_STATE_DIR"); s != nullptr && *s != '\0') {
    return std::string(s) + "/threads";
  }
  // "" when there is no home at all: CheckThreadsDir says what to set.
  return UserStateDir(
             [&](const char* name) {
               const char* v = env(name);
               return v == nullptr ? std::string() : std::string(v);
             },
             "threads", "DEEPBOX_THREADS_DIR")
      .value_or("");
}

Result<std::pair<std::string, std::string>> ParseLabelFlag(std::string_view label) {
  auto kv = local::lifecycle::ParseLabel(label);
  if (!kv) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--label {}: {}", label, kv.error().message));
  }
  return *kv;
}

namespace {

Error KeyError(std::string_view file, std::string_view key, std::string_view what) {
  return Error(ErrorCode::kInvalidArgument, fmt::format("config {}: {}: {}", file, key, what));
}

template <typename T>
Result<T> Scalar(const YAML::Node& node, std::string_view file, std::string_view key,
                 std::string_view expected) {
  if (!node.IsScalar())
    return tl::unexpected(KeyError(file, key, fmt::format("expected {}", expected)));
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    return tl::unexpected(
        KeyError(file, key, fmt::format("expected {}, got '{}'", expected, node.Scalar())));
  }
}

Status OneOf(std::string_view where, std::string_view value,
             std::initializer_list<std::string_view> allowed) {
  for (auto a : allowed) {
    if (value == a) return {};
  }
  std::string list;
  for (auto a : allowed) list += (list.empty() ? "" : " or ") + std::string(a);
  return MakeError(ErrorCode::kInvalidArgument,
                   fmt::format("{}: '{}' is not valid (use {})", where, value, list));
}

// "~/x" -> "$HOME/x" ("" when HOME is unknown).
std::string ExpandHome(const std::string& path, const std::optional<std::string>& home) {
  if (path == "~" || path.starts_with("~/")) {
    if (!home) return "";
    return *home + path.substr(1);
  }
  return path;
}

// Skill directories and memory files: the defaults that exist, or the ones
// asked for, which must exist ("none" alone = nothing).
Status ResolveHostPaths(RunConfig& c, const std::optional<std::string>& home) {
  struct Kind {
    std::vector<std::string>& list;
    bool explicit_;
    const char* flag;
    bool dir;
    std::vector<std::string> defaults;
  };
  Kind kinds[] = {
      {c.skills_dirs,
       c.skills_explicit,
       "--skills",
       true,
       {std::begin(kDefaultSkillsDirs), std::end(kDefaultSkillsDirs)}},
      {c.memory_files,
       c.memory_explicit,
       "--memory-file",
       false,
       {std::begin(kDefaultMemoryFiles), std::end(kDefaultMemoryFiles)}},
  };
  for (Kind& k : kinds) {
    std::vector<std::string> out;
    if (!k.explicit_) {
      for (const auto& d : k.defaults) {
        // The working directory's own (.deepagents/...): project files, read
        // later beneath a directory fd and only once trusted (project_trust.h).
        if (!d.starts_with("~")) {
          (k.dir ? c.project_skills : c.project_memory) = true;
          continue;
        }
        std::string p = ExpandHome(d, home);
        std::error_code ec;
        if (p.empty()) continue;
        if (k.dir ? std::filesystem::is_directory(p, ec) : std::filesystem::is_regular_file(p, ec))
          out.push_back(std::filesystem::absolute(p, ec).lexically_normal().string());
      }
      k.list = std::move(out);
      continue;
    }
    if (k.list.size() == 1 && k.list[0] == "none") {
      k.list.clear();
      continue;
    }
    for (const auto& given : k.list) {
      std::string p = ExpandHome(given, home);
      std::error_code ec;
      bool ok = !p.empty() && (k.dir ? std::filesystem::is_directory(p, ec)
                                     : std::filesystem::is_regular_file(p, ec));
      if (!ok) {
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("{} {}: {}", k.flag, given,
                                     k.dir ? "not a directory" : "not a readable file"));
      }
      out.push_back(std::filesystem::absolute(p, ec).lexically_normal().string());
    }
    k.list = std::move(out);
  }
  return {};
}

}  // namespace

Status ApplyConfigFile(std::string_view text, std::string_view name, RunConfig& c) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("config {}: not valid YAML or JSON: {}", name, e.what()));
  }
  if (root.IsNull()) return {};
  if (!root.IsMap()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("config {}: expected a mapping of settings", name));
  }
  std::map<std::string, std::string*> strings = {{"sandbox", &c.sandbox},
                                                 {"model", &c.model},
                                                 {"approve", &c.approve},
                                                 {"network", &c.network},
                                                 {"image", &c.image},
                                                 {"record", &c.record_path},
                                                 {"threads_dir", &c.threads_dir},
                                                 {"system_prompt", &c.system_prompt}};
  // The providers' settings, by their config keys (registry.h).
  cli::RegisterBuiltinProviders();
  std::map<std::string, std::string> provider_keys;  // config key -> setting name
  std::string provider_key_list;
  for (const auto& provider : ProviderRegistry::Global().Names()) {
    for (const auto& setting : ProviderRegistry::Global().Lookup(provider)->settings) {
      std::string key = ConfigKeyOf(setting.name);
      if (provider_keys.emplace(key, setting.name).second) provider_key_list += ", " + key;
    }
  }
  for (const auto& kv : root) {
    std::string key;
    try {
      key = kv.first.as<std::string>();
    } catch (const YAML::Exception&) {
      return MakeError(ErrorCode::kInvalidArgument, fmt::format("config {}: bad key", name));
    }
    const YAML::Node& v = kv.second;
    if (auto it = strings.find(key); it != strings.end()) {
      auto s = Scalar<std::string>(v, name, key, "a string");
      if (!s) return tl::unexpected(s.error());
      *it->second = *s;
    } else if (auto it = provider_keys.find(key); it != provider_keys.end()) {
      // Any scalar, as typed ("4G", 300): the provider parses it and names
      // this key in its errors.
      auto s = Scalar<std::string>(v, name, key, "a value");
      if (!s) return tl::unexpected(s.error());
      c.provider_file_settings[it->second] = *s;
    } else if (key == "anthropic_base_url" || key == "openai_base_url") {
      auto s = Scalar<std::string>(v, name, key, "a string");
      if (!s) return tl::unexpected(s.error());
      (key == "anthropic_base_url" ? c.anthropic_base_url : c.openai_base_url) = *s;
    } else if (key == "ttl") {
      auto n = Scalar<int64_t>(v, name, key, "a number of seconds");
      if (!n) return tl::unexpected(n.error());
      if (*n < 0) return tl::unexpected(KeyError(name, key, "must be >= 0"));
      c.ttl_seconds = *n;
    } else if (key == "model_idle_timeout") {
      auto n = Scalar<double>(v, name, key, "a number of seconds");
      if (!n) return tl::unexpected(n.error());
      if (!(*n > 0) || *n > 86400) {
        return tl::unexpected(KeyError(name, key, "must be > 0 and at most 86400 seconds"));
      }
      c.model_idle_timeout_seconds = *n;
    } else if (key == "max_steps") {
      auto n = Scalar<int>(v, name, key, "a number");
      if (!n) return tl::unexpected(n.error());
      if (*n <= 0) return tl::unexpected(KeyError(name, key, "must be > 0"));
      c.max_steps = *n;
    } else if (key == "keep_sandbox" || key == "color" || key == "fork_subagents") {
      auto b = Scalar<bool>(v, name, key, "true or false");
      if (!b) return tl::unexpected(b.error());
      (key == "color" ? c.color : key == "fork_subagents" ? c.fork_subagents : c.keep_sandbox) = *b;
    } else if (key == "skills" || key == "memory_files") {
      std::vector<std::string> list;
      if (v.IsScalar()) {
        auto one = Scalar<std::string>(v, name, key, "a path or a list of paths");
        if (!one) return tl::unexpected(one.error());
        list.push_back(*one);
      } else if (v.IsSequence()) {
        for (size_t i = 0; i < v.size(); ++i) {
          auto one = Scalar<std::string>(v[i], name, fmt::format("{}[{}]", key, i), "a path");
          if (!one) return tl::unexpected(one.error());
          list.push_back(*one);
        }
      } else {
        return tl::unexpected(KeyError(name, key, "expected a path or a list of paths"));
      }
      (key == "skills" ? c.skills_dirs : c.memory_files) = std::move(list);
      (key == "skills" ? c.skills_explicit : c.memory_explicit) = true;
    } else if (key == "labels") {
      if (!v.IsMap()) return tl::unexpected(KeyError(name, key, "expected a mapping K: V"));
      for (const auto& l : v) {
        std::string lk = l.first.as<std::string>("");
        auto lv = Scalar<std::string>(l.second, name, "labels." + lk, "a string");
        if (!lv) return tl::unexpected(lv.error());
        auto parsed = ParseLabelFlag(lk + "=" + *lv);
        if (!parsed) {
          return tl::unexpected(KeyError(name, "labels." + lk, parsed.error().message));
        }
        c.labels[parsed->first] = parsed->second;
      }
    } else {
      return tl::unexpected(KeyError(
          name, key,
          "unknown setting (known: sandbox, model, approve, labels, ttl, keep_sandbox, "
          "fork_subagents, max_steps, color, network, record, threads_dir, "
          "model_idle_timeout, system_prompt, anthropic_base_url, openai_base_url, skills, "
          "memory_files" +
              provider_key_list + ")"));
    }
  }
  return {};
}

Result<RunConfig> ResolveRunConfig(const RunFlags& flags, const EnvLookup& env) {
  cli::RegisterBuiltinProviders();
  auto get = [&](const char* name) -> std::optional<std::string> {
    const char* v = env(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
  RunConfig c;
  // 1. The config file.
  std::optional<std::string> file = flags.config_file ? flags.config_file : get("DEEPBOX_CONFIG");
  if (file) {
    std::ifstream in(*file);
    if (!in) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("config {}: cannot read the file", *file));
    }
    std::stringstream ss;
    ss << in.rdbuf();
    if (auto st = ApplyConfigFile(ss.str(), *file, c); !st) return tl::unexpected(st.error());
    c.config_file = *file;
  }
  // 2. The environment.
  if (auto v = get("DEEPBOX_SANDBOX")) c.sandbox = *v;
  if (auto v = get("DEEPBOX_MODEL")) c.model = *v;
  if (auto v = get("DEEPBOX_THREADS_DIR")) c.threads_dir = *v;
  if (auto v = get("DEEPBOX_MODEL_IDLE_TIMEOUT")) {
    double n = 0;
    auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
    if (ec != std::errc() || end != v->data() + v->size() || !(n > 0) || n > 86400) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("DEEPBOX_MODEL_IDLE_TIMEOUT={}: expected a number of seconds "
                                   "> 0 (at most 86400)",
                                   *v));
    }
    c.model_idle_timeout_seconds = n;
  }
  if (get("NO_COLOR")) c.color = false;
  if (get("ANTHROPIC_BASE_URL")) c.anthropic_base_url.reset();
  if (get("OPENAI_BASE_URL")) c.openai_base_url.reset();
  // 3. The flags.
  auto set = [](std::string& dst, const std::optional<std::string>& v) {
    if (v) dst = *v;
  };
  set(c.sandbox, flags.sandbox);
  set(c.model, flags.model);
  set(c.approve, flags.approve);
  set(c.network, flags.network);
  set(c.image, flags.image);
  c.secrets = flags.secrets;
  c.provider_settings = flags.provider_settings.given;
  set(c.record_path, flags.record_path);
  set(c.threads_dir, flags.threads_dir);
  set(c.system_prompt, flags.system_prompt);
  set(c.thread_id, flags.thread_id);
  for (const auto& l : flags.labels) {
    auto kv = ParseLabelFlag(l);
    if (!kv) return tl::unexpected(kv.error());
    c.labels[kv->first] = kv->second;
  }
  if (flags.ttl_seconds) {
    if (*flags.ttl_seconds < 0) {
      return MakeError(ErrorCode::kInvalidArgument, "--ttl: must be >= 0 (0 = no TTL)");
    }
    c.ttl_seconds = *flags.ttl_seconds;
  }
  if (flags.idle_suspend_seconds) {
    if (*flags.idle_suspend_seconds < 0) {
      return MakeError(ErrorCode::kInvalidArgument, "--idle-suspend: must be >= 0 (0 = never)");
    }
    c.idle_suspend_seconds = *flags.idle_suspend_seconds;
  }
  if (flags.model_idle_timeout_seconds) {
    double n = *flags.model_idle_timeout_seconds;
    if (!(n > 0) || n > 86400) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "--model-idle-timeout: give seconds > 0 (at most 86400)");
    }
    c.model_idle_timeout_seconds = n;
  }
  if (flags.max_steps) {
    if (*flags.max_steps <= 0) {
      return MakeError(ErrorCode::kInvalidArgument, "--max-steps: must be > 0");
    }
    c.max_steps = *flags.max_steps;
  }
  if (flags.keep_sandbox) c.keep_sandbox = true;
  if (flags.fork_subagents) c.fork_subagents = true;
  if (flags.json) c.json = true;
  if (flags.no_color) c.color = false;
  c.task = flags.task;
  if (!flags.skills.empty()) {
    c.skills_dirs = flags.skills;
    c.skills_explicit = true;
  }
  if (!flags.memory_files.empty()) {
    c.memory_files = flags.memory_files;
    c.memory_explicit = true;
  }
  if (flags.sandbox_id) c.sandbox_id = *flags.sandbox_id;
  c.mcp_configs = flags.mcp_configs;
  c.no_mcp = flags.no_mcp;
  // A missing --mcp-config file is a usage error before any sandbox is claimed.
  for (const auto& file : c.mcp_configs) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("--mcp-config {}: not a readable file", file));
    }
  }
  // Checked here, before anything is claimed.
  if (c.task && IsBlank(*c.task)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "TASK is empty: give a task, or leave it out for the interactive prompt "
                     "(or to read it from stdin)");
  }
  if (!c.thread_id.empty() && !agent::ValidThreadId(c.thread_id)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--thread '{}': not a valid thread id (use {})", c.thread_id,
                                 agent::kThreadIdRules));
  }
  if (auto st = ResolveHostPaths(c, get("HOME")); !st) return tl::unexpected(st.error());
  if (c.threads_dir.empty()) c.threads_dir = DefaultThreadsDir(env);
  // Validation.
  const ProviderRegistry& providers = ProviderRegistry::Global();
  const ProviderRegistration* provider = providers.Lookup(c.sandbox);
  if (provider == nullptr) {
    std::string known;
    for (const auto& n : providers.Names()) known += (known.empty() ? "" : " or ") + n;
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--sandbox: '{}' is not valid (use {})", c.sandbox, known));
  }
  if (auto st = OneOf("--approve", c.approve, {"auto", "manual"}); !st) {
    return tl::unexpected(st.error());
  }
  for (const auto& secret : c.secrets) {
    if (auto spec = ParseSecretSpec(secret); !spec) {
      return MakeError(ErrorCode::kInvalidArgument, "--secret: " + spec.error().message);
    }
  }
  if (!c.secrets.empty() && !c.sandbox_id.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "--secret: a new sandbox's (--sandbox-id continues in one that has its own)");
  }
  if (!c.network.empty()) {
    if (auto p = ParseNetworkPolicy(c.network); !p) {
      return MakeError(ErrorCode::kInvalidArgument, "--network: " + p.error().message);
    }
  }
  // On Kubernetes --image selects the SandboxTemplate that runs it (and a warm
  // pool of it) when the claim is made (k8s/template_image.h); it must at
  // least be an image reference.
  if (!c.image.empty() && c.sandbox == "k8s") {
    if (auto ref = oci::ParseImageReference(c.image); !ref) {
      return MakeError(ErrorCode::kInvalidArgument, "--image: " + ref.error().message);
    }
  }
  if (!c.image.empty() && !c.sandbox_id.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "--image: a new sandbox's (--sandbox-id continues in one that has its own)");
  }
  if (c.model.empty()) return MakeError(ErrorCode::kInvalidArgument, "--model: empty model spec");
  // A setting asked for on the command line is never silently ignored: a
  // limit or pool of local sandboxes means nothing to a claim, whose
  // SandboxTemplate decides.
  for (const auto& [name, value] : c.provider_settings) {
    if (FindSetting(*provider, name) != nullptr) continue;
    std::string owners = cli::ProvidersWithSetting(name);
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--{}: a setting of {} sandboxes, and this run uses {} ones "
                                 "(--sandbox){}",
                                 name, owners.empty() ? "other" : owners, c.sandbox,
                                 c.sandbox == "k8s" ? "; a claim gets the resources of its "
                                                      "SandboxTemplate"
                                                    : ""));
  }
  // The provider's own check of every value, before anything is claimed.
  if (auto st = providers.Check(c.sandbox, RunProviderRequest(c, env)); !st) {
    return tl::unexpected(st.error());
  }
  return c;
}

ProviderRequest RunProviderRequest(const RunConfig& config, const EnvLookup& env) {
  ProviderRequest request;
  const ProviderRegistration* provider = ProviderRegistry::Global().Lookup(config.sandbox);
  if (provider == nullptr) return request;
  for (const auto& [name, value] : config.provider_settings) {
    if (FindSetting(*provider, name) != nullptr) request.settings[name] = value;
  }
  for (const auto& [name, value] : config.provider_file_settings) {
    if (FindSetting(*provider, name) != nullptr) request.file_settings[name] = value;
  }
  request.file_name = config.config_file;
  request.getenv = env;
  return request;
}

}  // namespace deepbox::run
