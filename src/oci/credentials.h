// Registry credentials from the files Docker, Podman and skopeo write:
// $REGISTRY_AUTH_FILE, else $DOCKER_CONFIG/config.json, else
// ~/.docker/config.json. Only the inline form is read: auths.<host>.auth
// (base64 of "user:password") or auths.<host>.username/password. Credential
// helpers (credsStore, credHelpers) are not run.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace deepbox::oci {

struct RegistryCredentials {
  std::string username;
  std::string password;
};

using EnvFn = std::function<const char*(const char*)>;

// The credentials for `registry` ("docker.io", "localhost:5000") from the
// first auth file that exists. nullopt: none there (anonymous pulls). A file
// that exists but does not parse, or an entry that does not decode, is an
// INVALID_ARGUMENT naming the file.
Result<std::optional<RegistryCredentials>> LookupCredentials(std::string_view registry,
                                                             const EnvFn& env = nullptr);

// The same from one file's text (`file` only names it in messages).
Result<std::optional<RegistryCredentials>> CredentialsFromAuthFile(std::string_view text,
                                                                   std::string_view registry,
                                                                   std::string_view file);

}  // namespace deepbox::oci
