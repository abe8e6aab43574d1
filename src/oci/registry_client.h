// A client of the OCI distribution API (the registry side of `docker pull`):
// manifests and blobs of one repository, with the registry's authentication
// (the bearer-token flow a 401's WWW-Authenticate describes, or basic auth),
// redirects of blob downloads (to a CDN, without our credentials), and HTTP
// Range to resume a partial blob. TLS verifies against the system's CAs plus
// an optional CA file; plain HTTP is tried only for loopback registries or
// with `insecure`. Built on net::HttpClient.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "oci/credentials.h"
#include "oci/reference.h"

namespace deepbox::oci {

struct RegistryOptions {
  std::string ca_file;    // PEM CA(s) trusted on top of the system's (--registry-ca)
  bool insecure = false;  // plain HTTP allowed, and TLS certificates not verified
  // The credentials to offer; nullopt: LookupCredentials(registry), which
  // finds none for anonymous pulls.
  std::optional<RegistryCredentials> credentials;
  bool lookup_credentials = true;  // false: only `credentials` (tests)
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds read_idle_timeout{60000};
};

struct FetchedManifest {
  std::string media_type;
  std::string body;
  std::string digest;  // sha256 of body, checked against what was asked / announced
};

// Receives a blob: first the offset the registry serves from (the asked
// offset when it honoured the Range, else 0: the caller starts over), then
// the bytes. An error from either stops the download and is returned.
struct BlobSink {
  std::function<Status(uint64_t served_from)> start;
  std::function<Status(std::string_view data)> data;
};

class RegistryClient {
 public:
  // For ref's registry and repository. Nothing is sent until the first call.
  static Result<std::unique_ptr<RegistryClient>> Create(const ImageReference& ref,
                                                        RegistryOptions options = {});
  ~RegistryClient();

  // The manifest or index named by `reference` (a tag or a digest). Its
  // digest is verified: equal to `reference` when that is a digest, and to
  // the registry's Docker-Content-Digest when it sends one.
  Result<FetchedManifest> GetManifest(std::string_view reference);

  // Streams blob `digest` from byte `offset` (0: all of it) into `sink`.
  // Verifying what arrives is the caller's job (image_store.h).
  Status FetchBlob(std::string_view digest, uint64_t offset, const BlobSink& sink);

  // "https://host:port" once a request decided the scheme, else "".
  std::string base_url() const;

  struct Impl;

 private:
  explicit RegistryClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A WWW-Authenticate challenge: `Bearer realm="...",service="...",scope="..."`.
struct AuthChallenge {
  std::string scheme;  // "bearer", "basic" (lower case)
  std::string realm;
  std::string service;
  std::string scope;
};
// The first challenge of a header value; nullopt when it does not parse.
std::optional<AuthChallenge> ParseAuthChallenge(std::string_view header);

}  // namespace deepbox::oci
