// Sandbox-scoped tokens for the upstream Go sandbox router's
// `--authz-mode=scoped-token` (agent-sandbox PR #1243, v1 format): a bearer
// token "v1.<payload>.<signature>" where payload is the base64url (no padding)
// of {"ns":NAMESPACE,"name":SANDBOX,"exp":UNIX_SECONDS} and signature the
// base64url of HMAC-SHA256(secret, "agent-sandbox/scoped-token/v1." +
// payload), the secret being the router's --authz-scoped-token-secret-file
// with surrounding whitespace trimmed (at least 32 bytes). The router grants
// a request only to the sandbox (X-Sandbox-Namespace, X-Sandbox-ID) the token
// names, and refuses (403) requests carrying the routing hints it cannot
// trust with such a token: X-Sandbox-Pod-IP and X-Sandbox-UID.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/time.h"

namespace deepbox::k8s {

inline constexpr size_t kMinScopedTokenSecret = 32;

struct ScopedRouterToken {
  std::string namespace_name;
  std::string sandbox_name;
  int64_t expires = 0;  // Unix seconds
};

// Mints the token for NAMESPACE/SANDBOX valid until `expires`. INVALID_ARGUMENT
// for a secret shorter than 32 bytes (after trimming) or empty names.
Result<std::string> MintScopedRouterToken(std::string_view secret, const ScopedRouterToken& scope);

// The scope a token names, if it has the v1 scoped-token shape (its signature
// is not checked: only the router holds the secret). nullopt for any other
// bearer token (the Python router's ROUTER_AUTH_TOKEN, a Kubernetes token).
std::optional<ScopedRouterToken> ReadScopedRouterToken(std::string_view token);

// Checks a token against the secret (for the test router): the scope it
// grants, or UNAUTHENTICATED (malformed, forged or expired at `now`).
Result<ScopedRouterToken> VerifyScopedRouterToken(std::string_view secret, std::string_view token,
                                                  SystemTime now);

}  // namespace deepbox::k8s
