// Docker credential helpers: the programs `docker login` stores secrets in
// (docker-credential-pass, -secretservice, -ecr-login, -gcloud, ...), named
// by `credHelpers` (per registry) or `credsStore` (the default) of a
// Docker/Podman auth file. The protocol: `docker-credential-NAME get`, the
// server URL on stdin, a JSON object {"ServerURL","Username","Secret"} on
// stdout; exit status != 0 with "credentials not found" when it has none.
// The helper runs on the host as this user (it is the user's own
// configuration, as for docker and skopeo); what it answers never reaches a
// sandbox.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "oci/credentials.h"

namespace deepbox::oci {

struct CredentialHelperOptions {
  // PATH to look the helper up in; empty: this process's $PATH.
  std::string path;
  std::chrono::milliseconds timeout{30000};
};

// The server URL a helper is asked about for `registry`: Docker Hub's
// historical "https://index.docker.io/v1/", else the registry's host[:port].
std::string CredentialHelperServerUrl(std::string_view registry);

// Runs `docker-credential-<helper> get` for `registry`. nullopt: the helper
// has no credentials for it. A username of "<token>" is an identity token
// (an OAuth refresh token), returned in `identity_token`. Errors: the helper
// name is not a plain name, the program is not found, it timed out, failed,
// or answered something that is not the protocol's JSON (the message names
// the helper and never holds what it printed on stdout: that may be a secret).
Result<std::optional<RegistryCredentials>> RunCredentialHelper(
    std::string_view helper, std::string_view registry, const CredentialHelperOptions& options);

}  // namespace deepbox::oci
