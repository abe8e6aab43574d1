// OAuth 2.1 for the MCP client's Streamable HTTP connections (MCP
// authorization, 2025-11-25): a server that answers 401 (or 403
// insufficient_scope) with `WWW-Authenticate: Bearer ...` gets a token.
//
//  1. Protected Resource Metadata (RFC 9728): the challenge's
//     resource_metadata URL, else /.well-known/oauth-protected-resource/<path>
//     then /.well-known/oauth-protected-resource at the server's origin. Its
//     `resource` must be the server's URL or a prefix of it (same origin).
//  2. Authorization server metadata: RFC 8414 then OpenID discovery, with the
//     issuer's path inserted after the well-known prefix (and OpenID's
//     path-appended form); never the root when the issuer has a path.
//  3. The client: stored registration, else pre-registered credentials, else a
//     client ID metadata document URL when the server supports those, else
//     dynamic client registration (RFC 7591).
//  4. Authorization code with PKCE S256, `state`, and the `resource` indicator
//     (RFC 8707) through an AuthorizationUserAgent (the user's browser and a
//     loopback redirect listener, or the conformance harness's redirects).
//  5. The token endpoint with client_secret_basic, client_secret_post or none,
//     whichever the registration or the server's metadata says; refresh
//     tokens are used before a new authorization.
//  Machine to machine (the client credentials extension, SEP-1046): steps 1
//  and 2, then grant_type=client_credentials with a pre-registered client id
//  and its secret (client_secret_basic or _post) or its private key
//  (private_key_jwt, a JWT assertion: jwt_assertion.h); no user, no browser,
//  and a new token whenever the server rejects the old one.
//  2025-03-26 servers (no protected resource metadata): the server's origin is
//  the authorization server; its RFC 8414 metadata, else (every metadata URL
//  answering 404) the default /authorize, /token and /register there.
//  Scopes: the challenge's `scope`, else the metadata's scopes_supported, else
//  none; a 403 insufficient_scope asks again with the union (step-up), at
//  most max_authorizations per request.
//
// Tokens live in an OAuthStore on the host (FileOAuthStore: a 0600 file in the
// user's state directory); they are sent to the MCP server only, never put in
// a sandbox.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/user_state_dir.h"

namespace deepbox::mcp {

// The parameters of a `Bearer` challenge (the first one in the header).
struct BearerChallenge {
  std::string error;  // "invalid_token", "insufficient_scope", ...
  std::string error_description;
  std::string scope;
  std::string resource_metadata;
};
std::optional<BearerChallenge> ParseBearerChallenge(std::string_view header);

// What deepbox remembers for one MCP server URL.
struct OAuthCredentials {
  std::string issuer;  // the authorization server the client is registered with
  std::string client_id;
  std::string client_secret;
  // "client_secret_basic", "client_secret_post", "private_key_jwt", "none"
  std::string token_endpoint_auth_method;
  std::string grant_type;       // "" (authorization code) or "client_credentials"
  std::string private_key_pem;  // private_key_jwt's key
  std::string signing_alg;      // its JWS algorithm ("" = the key's own)
  std::string redirect_uri;     // the registered one
  std::string token_endpoint;
  std::string resource;
  std::string access_token;
  std::string refresh_token;
  std::string scope;
  int64_t expires_at = 0;  // unix seconds; 0 = unknown
};

class OAuthStore {
 public:
  virtual ~OAuthStore() = default;
  virtual Result<std::optional<OAuthCredentials>> Load(const std::string& server_url) = 0;
  virtual Status Save(const std::string& server_url, const OAuthCredentials& credentials) = 0;
  virtual Status Remove(const std::string& server_url) = 0;
};

// A JSON file of every server's credentials, mode 0600 in a 0700 directory,
// replaced atomically (written beside it, then renamed).
class FileOAuthStore : public OAuthStore {
 public:
  explicit FileOAuthStore(std::string path) : path_(std::move(path)) {}
  Result<std::optional<OAuthCredentials>> Load(const std::string& server_url) override;
  Status Save(const std::string& server_url, const OAuthCredentials& credentials) override;
  Status Remove(const std::string& server_url) override;
  const std::string& path() const { return path_; }

 private:
  Result<json::object> ReadAll();
  Status WriteAll(const json::object& all);
  std::string path_;
  std::mutex mu_;
};

// The default FileOAuthStore path: $DEEPBOX_MCP_OAUTH_FILE when absolute, else
// mcp-oauth.json in the user's state directory (common/user_state_dir.h).
Result<std::string> DefaultOAuthStorePath(const EnvGetter& env);
// The same with the process's environment.
Result<std::string> DefaultOAuthStorePath();

// Stands in for the user's browser in the authorization code flow.
class AuthorizationUserAgent {
 public:
  virtual ~AuthorizationUserAgent() = default;
  // The redirect URI to register and send.
  virtual Result<std::string> RedirectUri() = 0;
  // Has the user visit authorization_url; returns the URL the authorization
  // server redirected back to (with code and state, or error).
  virtual Result<std::string> Authorize(const std::string& authorization_url) = 0;
};

// The real one: a listener on 127.0.0.1 (an ephemeral port) receives the
// redirect; show_url tells the user the URL to open (and may open a browser).
Result<std::unique_ptr<AuthorizationUserAgent>> MakeLoopbackUserAgent(
    std::function<void(const std::string& url)> show_url,
    std::chrono::milliseconds wait = std::chrono::minutes(5));

struct OAuthOptions {
  std::string client_name = "deepbox";
  // Pre-registered credentials (client_secret may be empty: a public client).
  std::string client_id;
  std::string client_secret;
  // An https URL serving this client's metadata document, used as client_id
  // when the authorization server advertises client_id_metadata_document_supported.
  std::string client_id_metadata_url;
  // The client credentials grant instead of a user's authorization: client_id
  // with client_secret, or with private_key_pem (private_key_jwt). The store
  // keeps them (0600, on the host), so later sessions get tokens without them.
  bool client_credentials = false;
  std::string private_key_pem;
  std::string signing_alg;            // "" = the key's own (jwt_assertion.h)
  std::shared_ptr<OAuthStore> store;  // null: tokens last as long as the session
  // null: no interactive authorization (stored or refreshed tokens only; the
  // error then says to run `deepbox mcp login`).
  std::shared_ptr<AuthorizationUserAgent> user_agent;
  // Authorization flows for one request before it fails (401, then step-ups).
  int max_authorizations = 3;
  std::chrono::milliseconds http_timeout{30000};
};

// The OAuth state of one MCP server connection. Thread-safe.
class OAuthSession {
 public:
  OAuthSession(std::string server_url, OAuthOptions options);

  // "Bearer <token>", or "" before there is one.
  std::string AuthorizationHeader();
  // After the server answered `status` (401 or 403) with `www_authenticate`:
  // refreshes or (re)authorizes. OK means: send the request again.
  // `authorizations` counts the flows already run for this request.
  Status HandleChallenge(int status, std::string_view www_authenticate, int& authorizations);
  // Authorizes without waiting for a challenge (`deepbox mcp login`): probes
  // the server for its challenge and runs the flow.
  Status Login();

 private:
  Status Authorize(const BearerChallenge& challenge);
  // grant_type=client_credentials at token_endpoint (the caller discovered it).
  Status ClientCredentialsGrant(const std::string& issuer, const std::string& token_endpoint,
                                const std::vector<std::string>& auth_methods,
                                const std::vector<std::string>& signing_algs,
                                const std::string& resource, const std::string& scope);
  Status Refresh();
  Status LoadStored();

  const std::string server_url_;
  OAuthOptions options_;
  std::mutex mu_;
  bool loaded_ = false;
  std::optional<OAuthCredentials> credentials_;
};

// Factory the client options carry: one session per server URL, sharing the
// options (store, user agent).
using OAuthSessionFactory = std::function<std::shared_ptr<OAuthSession>(const std::string& url)>;
OAuthSessionFactory MakeOAuthSessionFactory(OAuthOptions options);

// --- the pieces, exposed for tests ---

// RFC 9728 well-known URLs for a server URL, in the order they are tried.
std::vector<std::string> ProtectedResourceMetadataUrls(const std::string& server_url);
// RFC 8414 / OpenID discovery URLs for an issuer, in the order they are tried.
std::vector<std::string> AuthorizationServerMetadataUrls(const std::string& issuer);
// Whether the metadata's `resource` may stand for server_url.
bool ResourceMatches(const std::string& resource, const std::string& server_url);
// base64url(SHA-256(verifier)).
std::string PkceChallenge(std::string_view verifier);
// The union of two space-separated scope lists, in order of first appearance.
std::string UnionScopes(std::string_view a, std::string_view b);

}  // namespace deepbox::mcp
