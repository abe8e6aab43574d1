#include "oci/credentials.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "common/base64.h"
#include "common/io.h"
#include "common/json.h"
#include "common/unique_fd.h"
#include "common/user_state_dir.h"
#include "oci/credential_helper.h"
#include "oci/reference.h"

namespace deepbox::oci {

namespace {

constexpr size_t kMaxAuthFileBytes = 4u << 20;

// "https://host:5000/v2/" -> "host:5000"; Docker Hub's many spellings -> docker.io.
std::string AuthKeyHost(std::string_view key) {
  if (size_t scheme = key.find("://"); scheme != std::string_view::npos) {
    key = key.substr(scheme + 3);
  }
  key = key.substr(0, key.find('/'));
  std::string host(key);
  if (host == "index.docker.io" || host == "registry-1.docker.io" || host == "docker.io") {
    return std::string(kDockerHub);
  }
  return host;
}

}  // namespace

namespace {

// The inline entry (auths.<host>) of a parsed auth file.
Result<std::optional<RegistryCredentials>> InlineCredentials(const json::object& doc,
                                                             std::string_view registry,
                                                             std::string_view file) {
  const json::value* auths = doc.if_contains("auths");
  if (auths == nullptr || !auths->is_object()) return std::optional<RegistryCredentials>();
  for (const auto& [key, entry] : auths->as_object()) {
    if (AuthKeyHost(key) != registry || !entry.is_object()) continue;
    const json::object& e = entry.as_object();
    RegistryCredentials creds;
    if (auto auth = GetOptString(e, "auth"); auth && !auth->empty()) {
      auto decoded = Base64Decode(*auth);
      size_t colon = decoded ? decoded->find(':') : std::string::npos;
      if (!decoded || colon == std::string::npos) {
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("registry auth file {}: auths.{}.auth is not base64 of "
                                     "user:password",
                                     file, std::string(key)));
      }
      creds.username = decoded->substr(0, colon);
      creds.password = decoded->substr(colon + 1);
      return std::optional<RegistryCredentials>(std::move(creds));
    }
    auto user = GetOptString(e, "username");
    auto pass = GetOptString(e, "password");
    if (user && pass) {
      creds.username = *user;
      creds.password = *pass;
      return std::optional<RegistryCredentials>(std::move(creds));
    }
  }
  return std::optional<RegistryCredentials>();
}

Result<json::object> ParseAuthFile(std::string_view text, std::string_view file) {
  auto doc = ParseJsonObject(text);
  if (!doc) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("registry auth file {}: {}", file, doc.error().message));
  }
  return std::move(*doc);
}

}  // namespace

Result<std::optional<RegistryCredentials>> CredentialsFromAuthFile(std::string_view text,
                                                                   std::string_view registry,
                                                                   std::string_view file) {
  auto doc = ParseAuthFile(text, file);
  if (!doc) return tl::unexpected(doc.error());
  return InlineCredentials(*doc, registry, file);
}

Result<std::optional<RegistryCredentials>> ResolveCredentials(std::string_view text,
                                                              std::string_view registry,
                                                              std::string_view file,
                                                              const std::string& helper_path) {
  auto doc = ParseAuthFile(text, file);
  if (!doc) return tl::unexpected(doc.error());
  // The helper for this registry: credHelpers first, then credsStore.
  std::string helper;
  if (const json::value* per = doc->if_contains("credHelpers"); per && per->is_object()) {
    for (const auto& [key, name] : per->as_object()) {
      if (AuthKeyHost(key) == registry && name.is_string()) helper = std::string(name.as_string());
    }
  }
  if (helper.empty()) helper = GetOptString(*doc, "credsStore").value_or("");
  if (!helper.empty()) {
    CredentialHelperOptions options;
    options.path = helper_path;
    auto found = RunCredentialHelper(helper, registry, options);
    if (!found) {
      Error e = found.error();
      e.message = fmt::format("{} (named by {})", e.message, file);
      return tl::unexpected(e);
    }
    if (*found) return found;
  }
  return InlineCredentials(*doc, registry, file);
}

Result<std::optional<RegistryCredentials>> LookupCredentials(std::string_view registry,
                                                             const EnvFn& env_fn) {
  auto env = [&](const char* name) -> std::string {
    const char* v = env_fn ? env_fn(name) : std::getenv(name);
    return v == nullptr ? std::string() : std::string(v);
  };
  std::string file;
  if (std::string f = env("REGISTRY_AUTH_FILE"); !f.empty()) {
    file = f;
  } else if (std::string d = env("DOCKER_CONFIG"); !d.empty()) {
    file = d + "/config.json";
  } else {
    std::string home = UserHomeDir(env);
    if (home.empty()) return std::optional<RegistryCredentials>();
    file = home + "/.docker/config.json";
  }
  UniqueFd fd(open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd) {
    if (errno == ENOENT) return std::optional<RegistryCredentials>();
    return MakeSyscallError("open", errno, file);
  }
  auto text = ReadAll(fd.get(), file, kMaxAuthFileBytes);
  if (!text) return tl::unexpected(text.error());
  return ResolveCredentials(*text, registry, file, env("PATH"));
}

}  // namespace deepbox::oci
