// Registry credentials from the files Docker, Podman and skopeo write:
// $REGISTRY_AUTH_FILE, else $DOCKER_CONFIG/config.json, else
// ~/.docker/config.json. In that file, as docker and skopeo read it:
// credHelpers.<host> names the credential helper for a registry, else
// credsStore the default one (oci/credential_helper.h runs it); else, or
// when the helper has none, the inline form auths.<host>.auth (base64 of
// "user:password") or auths.<host>.username/password.
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
  // An identity token (an OAuth refresh token a credential helper keeps,
  // username "<token>"): exchanged at the registry's token service for an
  // access token (grant_type=refresh_token) instead of a login.
  std::string identity_token;
};

using EnvFn = std::function<const char*(const char*)>;

// The credentials for `registry` ("docker.io", "localhost:5000") from the
// first auth file that exists. nullopt: none there (anonymous pulls). A file
// that exists but does not parse, or an entry that does not decode, is an
// INVALID_ARGUMENT naming the file.
Result<std::optional<RegistryCredentials>> LookupCredentials(std::string_view registry,
                                                             const EnvFn& env = nullptr);

// The inline credentials (auths) from one file's text (`file` only names it
// in messages); credential helpers are not consulted.
Result<std::optional<RegistryCredentials>> CredentialsFromAuthFile(std::string_view text,
                                                                   std::string_view registry,
                                                                   std::string_view file);

// The same with the file's credential helpers (credHelpers, credsStore),
// looked up in `helper_path` (empty: $PATH).
Result<std::optional<RegistryCredentials>> ResolveCredentials(std::string_view text,
                                                              std::string_view registry,
                                                              std::string_view file,
                                                              const std::string& helper_path);

}  // namespace deepbox::oci
