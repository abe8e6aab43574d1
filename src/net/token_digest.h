// Bearer tokens checked against a digest instead of the token itself: a
// sandbox daemon on Kubernetes is given only the SHA-256 of its claim's token
// (through a pod annotation, deploy/k8s/README.md), so nothing the pod holds
// lets anyone drive it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace deepbox::net {

// The header a client sends a sandbox daemon's token in (kept apart from
// Authorization, which a sandbox router consumes for its own token).
inline constexpr std::string_view kSandboxdTokenHeader = "X-Sandboxd-Token";
inline constexpr std::string_view kTokenVerifierPrefix = "sha256:";

std::string Sha256(std::string_view data);  // 32 raw bytes
std::string HmacSha256(std::string_view key, std::string_view data);
// RFC 4648 §5 alphabet, no padding.
std::string Base64UrlEncode(std::string_view data);
// "sha256:" + base64url(SHA-256(token)): 50 characters.
std::string TokenVerifier(std::string_view token);
// The 32-byte digest of a verifier (surrounding whitespace ignored); nullopt
// for anything else.
std::optional<std::string> ParseTokenVerifier(std::string_view text);
// Whether SHA-256(token) equals `digest`, in time independent of where they differ.
bool TokenMatchesDigest(std::string_view token, std::string_view digest);
// Constant-time equality for secrets (the sizes are not secret).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace deepbox::net
