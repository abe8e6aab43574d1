// Test-only: a real OCI registry (Debian's docker-registry, the CNCF
// distribution) started on loopback with a config file this writes: plain
// HTTP, or TLS with a CA made here and htpasswd (bcrypt) logins. Images are
// pushed with the registry API itself.
#pragma once

#include <memory>
#include <string>

#include "common/error.h"
#include "common/subprocess.h"
#include "common/testing/temp_dir.h"

namespace deepbox::net {
class HttpClient;
}

namespace deepbox::oci::testing {

struct TestRegistryOptions {
  bool tls = false;
  std::string username;  // non-empty: a login (htpasswd, or the token service's)
  std::string password;
  // Token auth instead of htpasswd: the registry sends clients to a token
  // service (a loopback HTTP server here) that checks the login and issues
  // ES256 JWTs signed with a key whose certificate the registry trusts.
  bool token_auth = false;
  // With token_auth: a refresh token the token service also accepts, in the
  // OAuth2 form (POST grant_type=refresh_token), as a credential helper's
  // identity token is exchanged. It answers access_token then.
  std::string identity_token;
};

class TestRegistry {
 public:
  // UNAVAILABLE when docker-registry or htpasswd is not installed
  // (scripts/install-deps.sh installs them).
  static Result<std::unique_ptr<TestRegistry>> Start(const TestRegistryOptions& options);
  ~TestRegistry();

  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }
  const std::string& ca_file() const { return ca_file_; }  // "" without TLS

  // Pushes a blob (monolithic upload); returns its digest.
  Result<std::string> PushBlob(const std::string& repository, const std::string& bytes);
  Status PushManifest(const std::string& repository, const std::string& reference,
                      const std::string& media_type, const std::string& body);
  // Replaces the bytes the registry stores for `digest` (same length): a
  // registry serving corrupt content.
  Status CorruptBlob(const std::string& digest, const std::string& bytes);
  // Stops the registry (it becomes unreachable).
  void Stop();
  // Tokens the token service issued (token_auth).
  int tokens_issued() const;

  struct TokenService;

 private:
  TestRegistry();
  // The Authorization header for pushing to `repository`.
  std::string PushAuthorization(const std::string& repository) const;
  std::string basic_authorization_;
  std::unique_ptr<TokenService> token_service_;
  deepbox::testing::TempDir dir_{"oci-registry"};
  int port_ = 0;
  std::string ca_file_;
  Subprocess process_;
  std::unique_ptr<net::HttpClient> client_;
};

}  // namespace deepbox::oci::testing
