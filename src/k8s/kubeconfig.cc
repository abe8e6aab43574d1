#include "k8s/kubeconfig.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "common/base64.h"
#include "common/strings.h"
#include "common/subprocess.h"
#include "k8s/util.h"
#include "k8s/yaml_json.h"

namespace deepbox::k8s {

namespace {

constexpr auto kTokenFileRefresh = std::chrono::seconds(60);
constexpr auto kExecTimeout = std::chrono::seconds(120);

std::optional<std::string> Env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

Result<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return MakeSyscallError("open", errno, path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return MakeSyscallError("read", errno, path);
  return ss.str();
}

bool FileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string DirName(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string Resolve(const std::string& file, const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  return DirName(file) + "/" + path;
}

// One named stanza (cluster, user or context) and the file that defined it.
struct Entry {
  std::string file;
  std::string kind;  // "cluster", "user", "context"
  std::string name;
  json::object body;

  std::string Where(std::string_view field) const {
    return fmt::format("kubeconfig {}: {} '{}' {}", file, kind, name, field);
  }
  tl::unexpected<Error> Fail(std::string_view field, std::string_view what) const {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("{}: {}", Where(field), what));
  }
  Result<std::string> Str(std::string_view field) const {
    auto it = body.find(field);
    if (it == body.end() || it->value().is_null()) return std::string();
    if (!it->value().is_string()) return Fail(field, "must be a string");
    return std::string(it->value().get_string());
  }
  Result<bool> Bool(std::string_view field) const {
    auto it = body.find(field);
    if (it == body.end() || it->value().is_null()) return false;
    if (!it->value().is_bool()) return Fail(field, "must be true or false");
    return it->value().get_bool();
  }
  // Inline *-data (base64) or a file path: returns the decoded bytes.
  Result<std::string> DataOrFile(std::string_view file_field, std::string_view data_field) const {
    auto data = Str(data_field);
    if (!data) return tl::unexpected(data.error());
    if (!data->empty()) {
      std::string compact;
      for (char c : *data) {
        if (!std::isspace(static_cast<unsigned char>(c))) compact.push_back(c);
      }
      auto decoded = Base64Decode(compact);
      if (!decoded) return Fail(data_field, "not valid base64");
      return *decoded;
    }
    auto path = Str(file_field);
    if (!path) return tl::unexpected(path.error());
    if (path->empty()) return std::string();
    std::string full = Resolve(file, *path);
    auto content = ReadWholeFile(full);
    if (!content) return Fail(file_field, content.error().message);
    return *content;
  }
};

struct Merged {
  std::vector<std::string> files;
  std::map<std::string, Entry> clusters;
  std::map<std::string, Entry> users;
  std::map<std::string, Entry> contexts;
  std::string current_context;
  std::string current_context_file;
  std::map<std::string, json::value> cluster_extensions;  // by cluster name

  std::string Files() const {
    std::string out;
    for (const auto& f : files) out += (out.empty() ? "" : ":") + f;
    return out;
  }
};

Status MergeList(const json::object& doc, const std::string& file, std::string_view list_key,
                 std::string_view item_key, std::string_view kind,
                 std::map<std::string, Entry>& into) {
  auto it = doc.find(list_key);
  if (it == doc.end() || it->value().is_null()) return {};
  if (!it->value().is_array()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("kubeconfig {}: {}: must be a list", file, list_key));
  }
  size_t index = 0;
  for (const auto& item : it->value().get_array()) {
    const auto* obj = item.if_object();
    if (obj == nullptr) {
      return MakeError(
          ErrorCode::kInvalidArgument,
          fmt::format("kubeconfig {}: {}[{}]: must be a mapping", file, list_key, index));
    }
    auto name_it = obj->find("name");
    if (name_it == obj->end() || !name_it->value().is_string() ||
        name_it->value().get_string().empty()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("kubeconfig {}: {}[{}].name: must be a non-empty string", file,
                                   list_key, index));
    }
    std::string name(name_it->value().get_string());
    Entry e{file, std::string(kind), name, {}};
    auto body_it = obj->find(item_key);
    if (body_it != obj->end() && !body_it->value().is_null()) {
      if (!body_it->value().is_object()) {
        return e.Fail(std::string(item_key), "must be a mapping");
      }
      e.body = body_it->value().get_object();
    }
    into.emplace(name, std::move(e));  // first definition wins
    ++index;
  }
  return {};
}

Result<Merged> LoadFiles(const std::vector<std::string>& files) {
  Merged m;
  for (const auto& file : files) {
    auto text = ReadWholeFile(file);
    if (!text) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("kubeconfig {}: {}", file, text.error().message));
    }
    auto doc = YamlToJson(*text, "kubeconfig " + file);
    if (!doc) return tl::unexpected(doc.error());
    m.files.push_back(file);
    if (doc->is_null()) continue;  // empty file
    if (!doc->is_object()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("kubeconfig {}: must be a mapping (a Config object)", file));
    }
    const auto& obj = doc->get_object();
    if (auto s = MergeList(obj, file, "clusters", "cluster", "cluster", m.clusters); !s) {
      return tl::unexpected(s.error());
    }
    if (auto s = MergeList(obj, file, "users", "user", "user", m.users); !s) {
      return tl::unexpected(s.error());
    }
    if (auto s = MergeList(obj, file, "contexts", "context", "context", m.contexts); !s) {
      return tl::unexpected(s.error());
    }
    if (auto it = obj.find("current-context"); it != obj.end() && !it->value().is_null()) {
      if (!it->value().is_string()) {
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("kubeconfig {}: current-context: must be a string", file));
      }
      if (m.current_context.empty() && !it->value().get_string().empty()) {
        m.current_context = std::string(it->value().get_string());
        m.current_context_file = file;
      }
    }
  }
  return m;
}

bool LooksLikePem(std::string_view data, std::string_view label_part) {
  auto begin = data.find("-----BEGIN ");
  if (begin == std::string_view::npos) return false;
  auto line_end = data.find("-----", begin + 11);
  if (line_end == std::string_view::npos) return false;
  return data.substr(begin, line_end - begin).find(label_part) != std::string_view::npos;
}

Result<ExecConfig> ParseExec(const Entry& user) {
  const auto* v = user.body.if_contains("exec");
  if (v == nullptr || !v->is_object()) return user.Fail("exec", "must be a mapping");
  Entry e{user.file, user.kind, user.name, v->get_object()};
  auto field = [&](std::string_view f) { return fmt::format("exec.{}", f); };
  ExecConfig out;
  out.origin = user.Where("exec");
  auto api = e.Str("apiVersion");
  if (!api) return user.Fail(field("apiVersion"), "must be a string");
  if (*api != "client.authentication.k8s.io/v1" && *api != "client.authentication.k8s.io/v1beta1") {
    return user.Fail(field("apiVersion"),
                     api->empty() ? "is required"
                                  : fmt::format("'{}' is not supported (use "
                                                "client.authentication.k8s.io/v1 or v1beta1)",
                                                *api));
  }
  out.api_version = *api;
  auto cmd = e.Str("command");
  if (!cmd) return user.Fail(field("command"), "must be a string");
  if (cmd->empty()) return user.Fail(field("command"), "is required");
  // Like client-go: a command with a path separator is relative to the kubeconfig.
  out.command = cmd->find('/') != std::string::npos ? Resolve(user.file, *cmd) : *cmd;
  if (auto it = e.body.find("args"); it != e.body.end() && !it->value().is_null()) {
    if (!it->value().is_array()) return user.Fail(field("args"), "must be a list of strings");
    for (const auto& a : it->value().get_array()) {
      if (!a.is_string()) return user.Fail(field("args"), "must be a list of strings");
      out.args.emplace_back(a.get_string());
    }
  }
  if (auto it = e.body.find("env"); it != e.body.end() && !it->value().is_null()) {
    if (!it->value().is_array()) return user.Fail(field("env"), "must be a list");
    for (const auto& item : it->value().get_array()) {
      const auto* o = item.if_object();
      const json::value* n = o ? o->if_contains("name") : nullptr;
      const json::value* val = o ? o->if_contains("value") : nullptr;
      if (n == nullptr || !n->is_string() || (val != nullptr && !val->is_string())) {
        return user.Fail(field("env"), "entries must have string 'name' and 'value'");
      }
      out.env.emplace_back(std::string(n->get_string()),
                           val ? std::string(val->get_string()) : std::string());
    }
  }
  auto hint = e.Str("installHint");
  if (!hint) return user.Fail(field("installHint"), "must be a string");
  out.install_hint = *hint;
  auto pci = e.Bool("provideClusterInfo");
  if (!pci) return user.Fail(field("provideClusterInfo"), "must be true or false");
  out.provide_cluster_info = *pci;
  auto mode = e.Str("interactiveMode");
  if (!mode) return user.Fail(field("interactiveMode"), "must be a string");
  if (!mode->empty()) {
    if (*mode != "Never" && *mode != "IfAvailable" && *mode != "Always") {
      return user.Fail(field("interactiveMode"),
                       fmt::format("'{}' is not one of Never, IfAvailable, Always", *mode));
    }
    out.interactive_mode = *mode;
  }
  return out;
}

Result<RestConfig> Build(const Merged& m, const KubeconfigOptions& options) {
  RestConfig cfg;
  std::string context_name = options.context.empty() ? m.current_context : options.context;
  if (context_name.empty()) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        fmt::format("kubeconfig {}: no current-context is set (pass a context)", m.Files()));
  }
  auto ctx_it = m.contexts.find(context_name);
  if (ctx_it == m.contexts.end()) {
    std::string where = options.context.empty()
                            ? fmt::format("kubeconfig {}: current-context", m.current_context_file)
                            : fmt::format("kubeconfig {}: context", m.Files());
    return MakeError(ErrorCode::kNotFound,
                     fmt::format("{}: context '{}' is not defined", where, context_name));
  }
  const Entry& ctx = ctx_it->second;
  cfg.context = context_name;
  auto cluster_name = ctx.Str("cluster");
  if (!cluster_name) return tl::unexpected(cluster_name.error());
  if (cluster_name->empty()) return ctx.Fail("cluster", "is required");
  auto user_name = ctx.Str("user");
  if (!user_name) return tl::unexpected(user_name.error());
  auto ns = ctx.Str("namespace");
  if (!ns) return tl::unexpected(ns.error());
  if (!ns->empty()) cfg.namespace_name = *ns;
  if (!options.namespace_override.empty()) cfg.namespace_name = options.namespace_override;

  auto cl_it = m.clusters.find(*cluster_name);
  if (cl_it == m.clusters.end()) {
    return ctx.Fail("cluster", fmt::format("cluster '{}' is not defined", *cluster_name));
  }
  const Entry& cluster = cl_it->second;
  cfg.source = "kubeconfig " + cluster.file;
  auto server = cluster.Str("server");
  if (!server) return tl::unexpected(server.error());
  if (server->empty()) return cluster.Fail("server", "is required");
  if (!server->starts_with("https://") && !server->starts_with("http://")) {
    return cluster.Fail("server", fmt::format("'{}' is not an http(s) URL", *server));
  }
  cfg.server = *server;
  while (cfg.server.size() > 8 && cfg.server.back() == '/') cfg.server.pop_back();
  auto ca = cluster.DataOrFile("certificate-authority", "certificate-authority-data");
  if (!ca) return tl::unexpected(ca.error());
  if (!ca->empty() && !LooksLikePem(*ca, "CERTIFICATE")) {
    bool inline_data = !cluster.Str("certificate-authority-data").value_or("").empty();
    return cluster.Fail(inline_data ? "certificate-authority-data" : "certificate-authority",
                        "not a PEM certificate");
  }
  cfg.tls.ca_pem = *ca;
  auto insecure = cluster.Bool("insecure-skip-tls-verify");
  if (!insecure) return tl::unexpected(insecure.error());
  cfg.tls.insecure_skip_verify = *insecure;
  auto sni = cluster.Str("tls-server-name");
  if (!sni) return tl::unexpected(sni.error());
  cfg.tls.server_name = *sni;

  // ExecCredential spec.cluster (used only with provideClusterInfo).
  cfg.exec_cluster_info["server"] = cfg.server;
  if (!sni->empty()) cfg.exec_cluster_info["tls-server-name"] = *sni;
  if (*insecure) cfg.exec_cluster_info["insecure-skip-tls-verify"] = true;
  if (!ca->empty()) cfg.exec_cluster_info["certificate-authority-data"] = Base64Encode(*ca);
  if (auto ext = cluster.body.find("extensions");
      ext != cluster.body.end() && ext->value().is_array()) {
    for (const auto& item : ext->value().get_array()) {
      if (FindString(item, {"name"}) == "client.authentication.k8s.io/exec") {
        if (const auto* c = Find(item, {"extension"})) cfg.exec_cluster_info["config"] = *c;
      }
    }
  }

  if (user_name->empty()) return cfg;  // anonymous
  auto us_it = m.users.find(*user_name);
  if (us_it == m.users.end()) {
    return ctx.Fail("user", fmt::format("user '{}' is not defined", *user_name));
  }
  const Entry& user = us_it->second;
  auto cert = user.DataOrFile("client-certificate", "client-certificate-data");
  if (!cert) return tl::unexpected(cert.error());
  auto key = user.DataOrFile("client-key", "client-key-data");
  if (!key) return tl::unexpected(key.error());
  bool cert_inline = !user.Str("client-certificate-data").value_or("").empty();
  bool key_inline = !user.Str("client-key-data").value_or("").empty();
  if (!cert->empty() && !LooksLikePem(*cert, "CERTIFICATE")) {
    return user.Fail(cert_inline ? "client-certificate-data" : "client-certificate",
                     "not a PEM certificate");
  }
  if (!key->empty() && !LooksLikePem(*key, "PRIVATE KEY")) {
    return user.Fail(key_inline ? "client-key-data" : "client-key", "not a PEM private key");
  }
  if (cert->empty() != key->empty()) {
    return user.Fail(cert->empty() ? "client-certificate" : "client-key",
                     "a client certificate and a client key must be given together");
  }
  cfg.tls.client_cert_pem = *cert;
  cfg.tls.client_key_pem = *key;
  auto token = user.Str("token");
  if (!token) return tl::unexpected(token.error());
  cfg.token = Trim(*token);
  auto token_file = user.Str("tokenFile");
  if (!token_file) return tl::unexpected(token_file.error());
  if (!token_file->empty()) {
    cfg.token_file = Resolve(user.file, *token_file);
    if (cfg.token.empty()) {
      auto t = ReadWholeFile(cfg.token_file);
      if (!t) return user.Fail("tokenFile", t.error().message);
      if (Trim(*t).empty())
        return user.Fail("tokenFile", fmt::format("'{}' is empty", cfg.token_file));
    }
  }
  auto username = user.Str("username");
  if (!username) return tl::unexpected(username.error());
  auto password = user.Str("password");
  if (!password) return tl::unexpected(password.error());
  cfg.username = *username;
  cfg.password = *password;
  if (user.body.contains("auth-provider")) {
    return user.Fail("auth-provider",
                     "auth-provider plugins are not supported; use an exec credential plugin");
  }
  if (const auto* v = user.body.if_contains("exec"); v != nullptr && !v->is_null()) {
    auto exec = ParseExec(user);
    if (!exec) return tl::unexpected(exec.error());
    cfg.exec = std::move(*exec);
  }
  return cfg;
}

}  // namespace

Result<RestConfig> LoadKubeconfig(const KubeconfigOptions& options) {
  std::vector<std::string> files;
  if (options.kubeconfig && !options.kubeconfig->empty()) {
    if (!FileExists(*options.kubeconfig)) {
      return MakeError(ErrorCode::kNotFound,
                       fmt::format("kubeconfig {}: file does not exist", *options.kubeconfig));
    }
    files.push_back(*options.kubeconfig);
  } else {
    std::string list =
        options.kubeconfig_env ? *options.kubeconfig_env : Env("KUBECONFIG").value_or("");
    if (!list.empty()) {
      std::vector<std::string> missing;
      for (std::string_view entry : Split(list, ':')) {
        const std::string f(entry);
        if (f.empty()) continue;
        if (std::find(files.begin(), files.end(), f) != files.end()) continue;
        if (FileExists(f)) {
          files.push_back(f);
        } else {
          missing.push_back(f);
        }
      }
      if (files.empty()) {
        return MakeError(
            ErrorCode::kNotFound,
            fmt::format("kubeconfig: none of the files in KUBECONFIG exist ({})", list));
      }
    } else {
      std::string home = options.home.empty() ? Env("HOME").value_or("") : options.home;
      std::string path = home + "/.kube/config";
      if (home.empty() || !FileExists(path)) {
        return MakeError(ErrorCode::kNotFound,
                         fmt::format("kubeconfig: no configuration found (KUBECONFIG is unset "
                                     "and {} does not exist)",
                                     path));
      }
      files.push_back(path);
    }
  }
  auto merged = LoadFiles(files);
  if (!merged) return tl::unexpected(merged.error());
  auto cfg = Build(*merged, options);
  if (cfg && options.kubeconfig) cfg->kubeconfig_path = *options.kubeconfig;
  return cfg;
}

bool InClusterAvailable(const InClusterOptions& options) {
  auto host = options.host ? options.host : Env("KUBERNETES_SERVICE_HOST");
  return host && !host->empty() && FileExists(options.service_account_dir + "/token");
}

Result<RestConfig> LoadInClusterConfig(const InClusterOptions& options) {
  auto host = options.host ? options.host : Env("KUBERNETES_SERVICE_HOST");
  auto port = options.port ? options.port : Env("KUBERNETES_SERVICE_PORT");
  if (!host || host->empty() || !port || port->empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
                     "must be set (not running in a pod?)");
  }
  RestConfig cfg;
  cfg.source = "in-cluster config";
  std::string h = host->find(':') != std::string::npos ? "[" + *host + "]" : *host;
  cfg.server = fmt::format("https://{}:{}", h, *port);
  const std::string& dir = options.service_account_dir;
  cfg.token_file = dir + "/token";
  auto token = ReadWholeFile(cfg.token_file);
  if (!token) {
    return MakeError(ErrorCode::kUnauthenticated,
                     fmt::format("in-cluster config: token: {}", token.error().message));
  }
  if (Trim(*token).empty()) {
    return MakeError(ErrorCode::kUnauthenticated,
                     fmt::format("in-cluster config: token: {} is empty", cfg.token_file));
  }
  auto ca = ReadWholeFile(dir + "/ca.crt");
  if (!ca) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("in-cluster config: ca.crt: {}", ca.error().message));
  }
  if (!LooksLikePem(*ca, "CERTIFICATE")) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        fmt::format("in-cluster config: ca.crt: {}/ca.crt is not a PEM certificate", dir));
  }
  cfg.tls.ca_pem = *ca;
  if (auto ns = ReadWholeFile(dir + "/namespace"); ns && !Trim(*ns).empty()) {
    cfg.namespace_name = Trim(*ns);
  }
  return cfg;
}

Result<RestConfig> LoadDefaultConfig(const KubeconfigOptions& options,
                                     const InClusterOptions& in_cluster) {
  bool explicit_config =
      (options.kubeconfig && !options.kubeconfig->empty()) ||
      !(options.kubeconfig_env ? *options.kubeconfig_env : Env("KUBECONFIG").value_or("")).empty();
  if (!explicit_config && options.context.empty() && InClusterAvailable(in_cluster)) {
    auto cfg = LoadInClusterConfig(in_cluster);
    if (cfg && !options.namespace_override.empty())
      cfg->namespace_name = options.namespace_override;
    return cfg;
  }
  return LoadKubeconfig(options);
}

// ------------------------------------------------------------------ credentials

CredentialSource::CredentialSource(RestConfig config, Clock clock)
    : config_(std::move(config)), clock_(std::move(clock)) {
  if (!clock_) clock_ = [] { return std::chrono::system_clock::now(); };
}

int CredentialSource::exec_runs() const {
  std::lock_guard lock(mu_);
  return exec_runs_;
}

void CredentialSource::Invalidate() {
  std::lock_guard lock(mu_);
  exec_cached_.reset();
  exec_expiry_.reset();
  file_token_read_.reset();
}

Result<Credentials> CredentialSource::Get() {
  std::lock_guard lock(mu_);
  Credentials c;
  c.username = config_.username;
  c.password = config_.password;
  if (!config_.token.empty()) {
    c.token = config_.token;
    return c;
  }
  if (!config_.token_file.empty()) {
    auto now = clock_();
    if (!file_token_read_ || now - *file_token_read_ >= kTokenFileRefresh) {
      auto t = ReadWholeFile(config_.token_file);
      if (t && !Trim(*t).empty()) {
        file_token_ = Trim(*t);
        file_token_read_ = now;
      } else if (file_token_.empty()) {
        return MakeError(ErrorCode::kUnauthenticated,
                         fmt::format("{}: token file {}: {}", config_.source, config_.token_file,
                                     t ? "empty" : t.error().message));
      }
    }
    c.token = file_token_;
    return c;
  }
  if (config_.exec) {
    if (exec_cached_ && (!exec_expiry_ || clock_() < *exec_expiry_)) return *exec_cached_;
    auto fresh = RunExec();
    if (!fresh) return fresh;
    fresh->username = c.username;
    fresh->password = c.password;
    exec_cached_ = *fresh;
    return fresh;
  }
  return c;
}

Result<Credentials> CredentialSource::RunExec() {
  const ExecConfig& ex = *config_.exec;
  ++exec_runs_;
  if (ex.interactive_mode == "Always") {
    return MakeError(ErrorCode::kUnauthenticated,
                     fmt::format("{}: the plugin needs an interactive terminal "
                                 "(interactiveMode: Always), which deepbox cannot provide",
                                 ex.origin));
  }
  json::object info;
  info["apiVersion"] = ex.api_version;
  info["kind"] = "ExecCredential";
  json::object spec;
  spec["interactive"] = false;
  if (ex.provide_cluster_info) spec["cluster"] = config_.exec_cluster_info;
  info["spec"] = std::move(spec);
  SubprocessOptions opts;
  opts.argv.push_back(ex.command);
  opts.argv.insert(opts.argv.end(), ex.args.begin(), ex.args.end());
  opts.env = ex.env;
  opts.env.emplace_back("KUBERNETES_EXEC_INFO", ToJson(info));
  auto fail = [&](std::string what) {
    return MakeError(ErrorCode::kUnauthenticated, fmt::format("{}: {}", ex.origin, what));
  };
  auto run = RunCommand(opts, kExecTimeout, 1u << 20);
  if (!run) {
    std::string msg = fmt::format("cannot run '{}': {}", ex.command, run.error().message);
    if (run.error().code == ErrorCode::kNotFound && !ex.install_hint.empty()) {
      msg += "\n" + ex.install_hint;
    }
    return fail(msg);
  }
  if (!run->exited_ok()) {
    std::string err(Trim(run->err));
    if (err.size() > 2000) err = "..." + err.substr(err.size() - 2000);
    return fail(fmt::format("'{}' {}{}{}", ex.command, DescribeWaitStatus(run->wait_status),
                            err.empty() ? "" : ": ", err));
  }
  auto doc = ParseJsonObject(run->out);
  if (!doc)
    return fail("plugin output is not an ExecCredential JSON object: " + doc.error().message);
  std::string api = FindString(*doc, {"apiVersion"});
  if (api != ex.api_version) {
    return fail(fmt::format("plugin returned apiVersion '{}', expected '{}'", api, ex.api_version));
  }
  if (FindString(*doc, {"kind"}) != "ExecCredential") {
    return fail("plugin output kind must be 'ExecCredential'");
  }
  const json::value* status = Find(*doc, {"status"});
  if (status == nullptr || !status->is_object()) return fail("plugin output has no status");
  Credentials c;
  c.token = FindString(*status, {"token"});
  c.client_cert_pem = FindString(*status, {"clientCertificateData"});
  c.client_key_pem = FindString(*status, {"clientKeyData"});
  if (c.client_cert_pem.empty() != c.client_key_pem.empty()) {
    return fail("plugin status must set clientCertificateData and clientKeyData together");
  }
  if (c.token.empty() && c.client_cert_pem.empty()) {
    return fail("plugin status has neither a token nor a client certificate");
  }
  if (!c.client_cert_pem.empty() && (!LooksLikePem(c.client_cert_pem, "CERTIFICATE") ||
                                     !LooksLikePem(c.client_key_pem, "PRIVATE KEY"))) {
    return fail("plugin clientCertificateData/clientKeyData must be PEM");
  }
  exec_expiry_.reset();
  std::string exp = FindString(*status, {"expirationTimestamp"});
  if (!exp.empty()) {
    auto t = ParseRfc3339(exp);
    if (!t) return fail("plugin status expirationTimestamp: " + t.error().message);
    exec_expiry_ = *t;
  }
  return c;
}

}  // namespace deepbox::k8s
