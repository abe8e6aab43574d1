#include "oci/registries_conf.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/io.h"
#include "common/unique_fd.h"

// toml++ reports parse errors as values, not exceptions (this is its only
// translation unit).
#define TOML_EXCEPTIONS 0
#include <toml++/toml.h>

namespace deepbox::oci {
namespace {

constexpr size_t kMaxConfBytes = 1 << 20;

// host[:port] with a '.' or a ':', or "localhost": what reference.h takes
// for a registry rather than a Docker Hub namespace.
bool IsRegistryHost(std::string_view host) {
  if (host.empty()) return false;
  return host.find_first_of(".:") != std::string_view::npos || host == "localhost";
}

bool IsRegistryLocation(std::string_view location) {
  if (location.empty() || location.ends_with('/') || location.find("://") != std::string::npos ||
      location.find_first_of(" \t\n") != std::string::npos) {
    return false;
  }
  return IsRegistryHost(location.substr(0, location.find('/')));
}

Error ConfError(const std::string& file, const toml::node* at, std::string what) {
  std::string where = file;
  if (at != nullptr && at->source().begin.line > 0) {
    where = fmt::format("{}:{}", file, at->source().begin.line);
  }
  return Error{ErrorCode::kInvalidArgument, fmt::format("{}: {}", where, what)};
}

Result<std::string> GetString(const toml::table& t, const char* key, const std::string& file) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return std::string();
  if (!n->is_string()) {
    return tl::unexpected(ConfError(file, n, fmt::format("'{}' must be a string", key)));
  }
  return n->as_string()->get();
}

Result<bool> GetBool(const toml::table& t, const char* key, const std::string& file) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  if (!n->is_boolean()) {
    return tl::unexpected(ConfError(file, n, fmt::format("'{}' must be true or false", key)));
  }
  return n->as_boolean()->get();
}

Result<RegistryMirror> ParseMirror(const toml::node& node, bool by_digest_only,
                                   const std::string& file) {
  const toml::table* t = node.as_table();
  if (t == nullptr) return tl::unexpected(ConfError(file, &node, "a mirror must be a table"));
  RegistryMirror m;
  auto location = GetString(*t, "location", file);
  if (!location) return tl::unexpected(location.error());
  if (!IsRegistryLocation(*location)) {
    return tl::unexpected(ConfError(
        file, &node,
        fmt::format("mirror location '{}' is not host[:port][/namespace...] (no scheme, the "
                    "host with a '.' or a ':', or localhost)",
                    location->substr(0, 200))));
  }
  m.location = std::move(*location);
  auto insecure = GetBool(*t, "insecure", file);
  if (!insecure) return tl::unexpected(insecure.error());
  m.insecure = *insecure;
  auto pull_from = GetString(*t, "pull-from-mirror", file);
  if (!pull_from) return tl::unexpected(pull_from.error());
  if (pull_from->empty() || *pull_from == "all") {
    m.pull_from = by_digest_only ? PullFromMirror::kDigestOnly : PullFromMirror::kAll;
  } else if (*pull_from == "digest-only") {
    m.pull_from = PullFromMirror::kDigestOnly;
  } else if (*pull_from == "tag-only") {
    if (by_digest_only) {
      return tl::unexpected(ConfError(
          file, &node, "pull-from-mirror = \"tag-only\" under mirror-by-digest-only = true"));
    }
    m.pull_from = PullFromMirror::kTagOnly;
  } else {
    return tl::unexpected(ConfError(
        file, &node,
        fmt::format("pull-from-mirror is '{}'; expected \"all\", \"digest-only\" or \"tag-only\"",
                    pull_from->substr(0, 100))));
  }
  return m;
}

Result<RegistryEntry> ParseRegistry(const toml::node& node, const std::string& file) {
  const toml::table* t = node.as_table();
  if (t == nullptr) {
    return tl::unexpected(ConfError(file, &node, "[[registry]] entries must be tables"));
  }
  RegistryEntry e;
  e.file = file;
  auto prefix = GetString(*t, "prefix", file);
  if (!prefix) return tl::unexpected(prefix.error());
  auto location = GetString(*t, "location", file);
  if (!location) return tl::unexpected(location.error());
  e.prefix = prefix->empty() ? *location : *prefix;
  e.location = std::move(*location);
  if (e.prefix.empty()) {
    return tl::unexpected(ConfError(file, &node, "a [[registry]] needs a prefix or a location"));
  }
  if (e.prefix.starts_with("*.")) {
    if (!e.location.empty()) {
      return tl::unexpected(
          ConfError(file, &node,
                    fmt::format("prefix '{}' is a wildcard: it cannot have a location", e.prefix)));
    }
    if (e.prefix.size() < 3 || e.prefix.find_first_of("/:*", 2) != std::string::npos) {
      return tl::unexpected(ConfError(
          file, &node, fmt::format("wildcard prefix '{}' is not *.host", e.prefix.substr(0, 200))));
    }
  } else {
    if (!IsRegistryLocation(e.prefix)) {
      return tl::unexpected(ConfError(
          file, &node,
          fmt::format("prefix '{}' does not start with a registry host (a '.' or a ':' in it, or "
                      "localhost)",
                      e.prefix.substr(0, 200))));
    }
    if (e.location.empty()) e.location = e.prefix;
    if (!IsRegistryLocation(e.location)) {
      return tl::unexpected(ConfError(file, &node,
                                      fmt::format("location '{}' is not host[:port][/namespace...]",
                                                  e.location.substr(0, 200))));
    }
  }
  auto insecure = GetBool(*t, "insecure", file);
  if (!insecure) return tl::unexpected(insecure.error());
  e.insecure = *insecure;
  auto blocked = GetBool(*t, "blocked", file);
  if (!blocked) return tl::unexpected(blocked.error());
  e.blocked = *blocked;
  auto by_digest = GetBool(*t, "mirror-by-digest-only", file);
  if (!by_digest) return tl::unexpected(by_digest.error());
  if (const toml::node* mirrors = t->get("mirror"); mirrors != nullptr) {
    const toml::array* list = mirrors->as_array();
    if (list == nullptr) {
      return tl::unexpected(ConfError(file, mirrors, "'mirror' must be an array of tables"));
    }
    for (const toml::node& m : *list) {
      auto mirror = ParseMirror(m, *by_digest, file);
      if (!mirror) return tl::unexpected(mirror.error());
      e.mirrors.push_back(std::move(*mirror));
    }
  }
  return e;
}

// How much of `name` (registry/repository[:tag][@digest]) the entry's prefix
// matches: 0 for no match. A host prefix must be followed by '/', a longer
// one by '/', ':' or '@', or end there; "*.host" matches subdomains of host.
size_t MatchLength(const RegistryEntry& e, const ImageReference& ref, const std::string& name) {
  if (e.prefix.starts_with("*.")) {
    const std::string host = ref.HostName();
    std::string_view suffix = std::string_view(e.prefix).substr(1);
    return host.size() > suffix.size() && host.ends_with(suffix) ? e.prefix.size() : 0;
  }
  if (!name.starts_with(e.prefix)) return 0;
  if (name.size() == e.prefix.size()) return e.prefix.size();
  char next = name[e.prefix.size()];
  bool host_only = e.prefix.find('/') == std::string::npos;
  if (next == '/' || (!host_only && (next == ':' || next == '@'))) return e.prefix.size();
  return 0;
}

Result<ImageReference> Rewrite(const RegistryEntry& e, const ImageReference& ref,
                               const std::string& name, const std::string& location) {
  // A wildcard entry's mirrors replace the registry; others the prefix.
  size_t replaced = e.prefix.starts_with("*.") ? ref.registry.size() : e.prefix.size();
  std::string rewritten = location + name.substr(replaced);
  auto parsed = ParseImageReference(rewritten);
  if (!parsed) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        fmt::format("{}: {} becomes '{}' at '{}', which is not an image name: {}", e.file, name,
                    rewritten.substr(0, 300), location, parsed.error().message));
  }
  return parsed;
}

bool FileExists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

Status ReadConfFile(const std::string& path, RegistriesConf& conf) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd) return MakeSyscallError("open", errno, path);
  auto text = ReadAll(fd.get(), path, kMaxConfBytes);
  if (!text) return tl::unexpected(text.error());
  return ParseRegistriesConf(*text, path, conf);
}

// A drop-in directory's *.conf files in name order; none when it is missing.
Status ReadDropIns(const std::string& dir, RegistriesConf& conf) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT || errno == ENOTDIR) return {};
    return MakeSyscallError("opendir", errno, dir);
  }
  std::vector<std::string> names;
  while (dirent* ent = readdir(d)) {
    std::string_view n = ent->d_name;
    if (n.size() > 5 && n.ends_with(".conf") && n[0] != '.') names.emplace_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    std::string path = dir + "/" + n;
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // sub-directories
    if (auto s = ReadConfFile(path, conf); !s) return s;
  }
  return {};
}

}  // namespace

Status ParseRegistriesConf(std::string_view text, const std::string& file, RegistriesConf& conf) {
  toml::parse_result parsed = toml::parse(text, file);
  if (!parsed) {
    const toml::parse_error& err = parsed.error();
    return MakeError(
        ErrorCode::kInvalidArgument,
        fmt::format("{}:{}: not valid TOML: {}", file, err.source().begin.line, err.description()));
  }
  const toml::table& top = parsed.table();
  if (const toml::node* v1 = top.get("registries"); v1 != nullptr && v1->is_table()) {
    return tl::unexpected(ConfError(
        file, v1,
        "this is the version 1 format ([registries.search] ...), which deepbox does not read; "
        "write [[registry]] tables (containers-registries.conf(5), version 2)"));
  }
  conf.files.push_back(file);
  const toml::node* list = top.get("registry");
  if (list == nullptr) return {};
  const toml::array* entries = list->as_array();
  if (entries == nullptr) {
    return tl::unexpected(
        ConfError(file, list, "'registry' must be an array of [[registry]] tables"));
  }
  for (const toml::node& node : *entries) {
    auto entry = ParseRegistry(node, file);
    if (!entry) return tl::unexpected(entry.error());
    auto same = std::find_if(conf.registries.begin(), conf.registries.end(),
                             [&](const RegistryEntry& e) { return e.prefix == entry->prefix; });
    if (same != conf.registries.end()) {
      *same = std::move(*entry);
    } else {
      conf.registries.push_back(std::move(*entry));
    }
  }
  return {};
}

Result<RegistriesConf> LoadRegistriesConf(const EnvGetter& env) {
  RegistriesConf conf;
  std::string home = UserHomeDir(env);
  std::string config_home = env("XDG_CONFIG_HOME");
  if (config_home.empty() || config_home[0] != '/') {
    config_home = home.empty() ? std::string() : home + "/.config";
  }
  std::string user_main = config_home.empty() ? "" : config_home + "/containers/registries.conf";
  std::string user_dir = user_main.empty() ? "" : user_main + ".d";
  bool read_user_main = false;
  if (std::string named = env("CONTAINERS_REGISTRIES_CONF"); !named.empty()) {
    if (auto s = ReadConfFile(named, conf); !s) {
      Error e = s.error();
      e.message = fmt::format("{} (named by CONTAINERS_REGISTRIES_CONF)", e.message);
      return tl::unexpected(e);
    }
  } else if (!user_main.empty() && FileExists(user_main)) {
    if (auto s = ReadConfFile(user_main, conf); !s) return tl::unexpected(s.error());
    read_user_main = true;
  } else if (FileExists("/etc/containers/registries.conf")) {
    if (auto s = ReadConfFile("/etc/containers/registries.conf", conf); !s)
      return tl::unexpected(s.error());
  }
  if (!read_user_main) {
    if (auto s = ReadDropIns("/etc/containers/registries.conf.d", conf); !s)
      return tl::unexpected(s.error());
  }
  if (!user_dir.empty()) {
    if (auto s = ReadDropIns(user_dir, conf); !s) return tl::unexpected(s.error());
  }
  return conf;
}

Result<std::vector<PullSource>> ResolvePullSources(const RegistriesConf& conf,
                                                   const ImageReference& ref) {
  const std::string name = ref.ToString();
  const RegistryEntry* best = nullptr;
  size_t best_len = 0;
  for (const auto& e : conf.registries) {
    size_t len = MatchLength(e, ref, name);
    if (len > best_len) {
      best = &e;
      best_len = len;
    }
  }
  std::vector<PullSource> sources;
  if (best == nullptr) {
    sources.push_back(PullSource{ref, false, false});
    return sources;
  }
  if (best->blocked) {
    return MakeError(
        ErrorCode::kPermissionDenied,
        fmt::format("image {}: registry '{}' is blocked by {}", name, best->prefix, best->file));
  }
  const bool by_digest = !ref.digest.empty();
  for (const auto& m : best->mirrors) {
    if (m.pull_from == PullFromMirror::kDigestOnly && !by_digest) continue;
    if (m.pull_from == PullFromMirror::kTagOnly && by_digest) continue;
    auto mirrored = Rewrite(*best, ref, name, m.location);
    if (!mirrored) return tl::unexpected(mirrored.error());
    sources.push_back(PullSource{std::move(*mirrored), m.insecure, true});
  }
  if (best->location.empty()) {  // a wildcard: the name itself
    sources.push_back(PullSource{ref, best->insecure, false});
  } else {
    auto primary = Rewrite(*best, ref, name, best->location);
    if (!primary) return tl::unexpected(primary.error());
    sources.push_back(PullSource{std::move(*primary), best->insecure, false});
  }
  return sources;
}

}  // namespace deepbox::oci
