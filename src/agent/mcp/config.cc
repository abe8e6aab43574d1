#include "agent/mcp/config.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/json.h"

namespace deepbox::agent {

McpEnvLookup McpProcessEnv() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

namespace {

bool VarChar(char c, bool first) {
  return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
         (!first && c >= '0' && c <= '9');
}

}  // namespace

std::string ExpandEnvVars(std::string_view text, const McpEnvLookup& env,
                          std::vector<std::string>* missing) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '$' && i + 1 < text.size() && text[i + 1] == '{') {
      size_t close = text.find('}', i + 2);
      if (close != std::string_view::npos) {
        std::string_view inner = text.substr(i + 2, close - i - 2);
        size_t n = 0;
        while (n < inner.size() && VarChar(inner[n], n == 0)) ++n;
        std::string_view name = inner.substr(0, n);
        std::string_view rest = inner.substr(n);
        bool has_default = rest.starts_with(":-");
        if (!name.empty() && (rest.empty() || has_default)) {
          auto v = env(name);
          if (v && !(has_default && v->empty())) {
            out += *v;
          } else if (has_default) {
            out += rest.substr(2);
          } else if (missing) {
            missing->emplace_back(name);
          }
          i = close + 1;
          continue;
        }
      }
    }
    out += text[i++];
  }
  return out;
}

namespace {

std::optional<std::string> Str(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v && v->is_string()) return std::string(v->get_string());
  return std::nullopt;
}

// One server entry; nullopt + `why` when it cannot be used.
std::optional<McpServerConfig> ParseServer(const std::string& name, const json::value& v,
                                           const std::string& source, const McpEnvLookup& env,
                                           std::string* why) {
  if (!v.is_object()) {
    *why = "must be an object";
    return std::nullopt;
  }
  const json::object& o = v.get_object();
  McpServerConfig s;
  s.name = name;
  s.source = source;
  std::vector<std::string> missing;
  bool unexpanded = false;  // ${...} in a file whose variables are not expanded
  auto expand = [&](std::string_view t) {
    if (env) return ExpandEnvVars(t, env, &missing);
    if (t.find("${") != std::string_view::npos) unexpanded = true;
    return std::string(t);
  };
  std::string type = Str(o, "type").value_or("");
  auto url = Str(o, "url");
  auto command = Str(o, "command");
  if (type == "sse") {
    *why =
        "the HTTP+SSE transport (type \"sse\") is deprecated and not supported; use "
        "Streamable HTTP (type \"http\")";
    return std::nullopt;
  }
  if (!type.empty() && type != "stdio" && type != "http" && type != "streamable_http" &&
      type != "streamable-http") {
    *why = fmt::format("unknown type \"{}\" (stdio or http)", type);
    return std::nullopt;
  }
  bool http = type == "http" || type == "streamable_http" || type == "streamable-http" ||
              (type.empty() && url && !command);
  s.http = http;
  if (http) {
    if (!url) {
      *why = "an http server needs \"url\"";
      return std::nullopt;
    }
    s.url = expand(*url);
    if (const json::value* h = o.if_contains("headers"); h && h->is_object()) {
      for (const auto& kv : h->get_object()) {
        if (!kv.value().is_string()) {
          *why = fmt::format("header \"{}\" must be a string", std::string(kv.key()));
          return std::nullopt;
        }
        s.headers[kv.key()] = expand(kv.value().get_string());
      }
    }
  } else {
    if (!command || command->empty()) {
      *why = "a stdio server needs \"command\"";
      return std::nullopt;
    }
    s.command.push_back(expand(*command));
    if (const json::value* a = o.if_contains("args")) {
      if (!a->is_array()) {
        *why = "\"args\" must be an array of strings";
        return std::nullopt;
      }
      for (const auto& x : a->get_array()) {
        if (!x.is_string()) {
          *why = "\"args\" must be an array of strings";
          return std::nullopt;
        }
        s.command.push_back(expand(x.get_string()));
      }
    }
    if (auto cwd = Str(o, "cwd")) s.cwd = expand(*cwd);
  }
  if (const json::value* e = o.if_contains("env")) {
    if (!e->is_object()) {
      *why = "\"env\" must be an object of strings";
      return std::nullopt;
    }
    for (const auto& kv : e->get_object()) {
      if (!kv.value().is_string()) {
        *why = fmt::format("env \"{}\" must be a string", std::string(kv.key()));
        return std::nullopt;
      }
      s.env[kv.key()] = expand(kv.value().get_string());
    }
  }
  if (const json::value* sb = o.if_contains("sandbox")) {
    if (!sb->is_bool()) {
      *why = "\"sandbox\" must be true or false";
      return std::nullopt;
    }
    s.sandbox = sb->get_bool();
    if (s.sandbox && http) {
      *why = "\"sandbox\": true is for stdio servers (an http server runs wherever its URL is)";
      return std::nullopt;
    }
  }
  if (unexpanded) {
    *why =
        "uses ${...}, which is expanded only in your own ~/.config/deepbox/.mcp.json and in "
        "files given with --mcp-config (a project's .mcp.json gets none of your environment); "
        "give this file with --mcp-config to use it";
    return std::nullopt;
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    *why = fmt::format(
        "environment variable{} {} not set (use ${{VAR:-default}} for a "
        "default)",
        missing.size() > 1 ? "s" : "", list);
    return std::nullopt;
  }
  return s;
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return MakeSyscallError("open", errno, path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Result<McpConfigSet> ParseMcpConfig(std::string_view text, const std::string& source,
                                    const McpEnvLookup& env) {
  auto doc = ParseJsonObject(text);
  if (!doc) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{}: {}", source, doc.error().message));
  }
  McpConfigSet set;
  const json::value* servers = doc->if_contains("mcpServers");
  if (!servers) return set;
  if (!servers->is_object()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{}: \"mcpServers\" must be an object", source));
  }
  for (const auto& kv : servers->get_object()) {
    std::string name(kv.key());
    std::string why;
    auto s = ParseServer(name, kv.value(), source, env, &why);
    if (s) {
      set.servers.push_back(std::move(*s));
    } else {
      set.problems.push_back(fmt::format("{}: server '{}': {}", source, name, why));
    }
  }
  return set;
}

std::vector<std::string> DefaultMcpConfigPaths() {
  std::vector<std::string> out;
  std::string config_home;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x) {
    config_home = x;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    config_home = std::string(h) + "/.config";
  }
  if (!config_home.empty()) out.push_back(config_home + "/deepbox/.mcp.json");
  return out;
}

Result<McpConfigSet> LoadMcpConfigs(const std::vector<std::string>& defaults,
                                    const std::vector<std::string>& explicit_files,
                                    const McpEnvLookup& env) {
  return LoadMcpConfigs(defaults, {}, explicit_files, env);
}

Result<McpConfigSet> LoadMcpConfigs(const std::vector<std::string>& defaults,
                                    const std::vector<McpConfigText>& unexpanded,
                                    const std::vector<std::string>& explicit_files,
                                    const McpEnvLookup& env) {
  std::map<std::string, McpServerConfig> by_name;
  McpConfigSet out;
  auto merge = [&](const McpConfigSet& set) {
    for (const auto& s : set.servers) by_name[s.name] = s;
    out.problems.insert(out.problems.end(), set.problems.begin(), set.problems.end());
  };
  for (const auto& path : defaults) {
    auto text = ReadFile(path);
    if (!text) continue;  // an absent default file is the common case
    auto set = ParseMcpConfig(*text, path, env);
    if (!set) {
      out.problems.push_back(set.error().message);
      continue;
    }
    merge(*set);
  }
  for (const auto& file : unexpanded) {
    auto set = ParseMcpConfig(file.text, file.source, McpEnvLookup{});
    if (!set) {
      out.problems.push_back(set.error().message);
      continue;
    }
    merge(*set);
  }
  for (const auto& path : explicit_files) {
    auto text = ReadFile(path);
    if (!text) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("--mcp-config {}: {}", path, text.error().message));
    }
    auto set = ParseMcpConfig(*text, path, env);
    if (!set) return tl::unexpected(set.error());
    merge(*set);
  }
  for (auto& [name, s] : by_name) out.servers.push_back(std::move(s));
  return out;
}

}  // namespace deepbox::agent
