// A client's JWT assertion for OAuth client authentication (private_key_jwt:
// RFC 7523 §2.2 and §3, OpenID Connect Core §9), what a machine-to-machine
// MCP client (the client credentials extension, SEP-1046) signs instead of
// sending a secret: the authorization server holds the public key only.
// Signed with OpenSSL; the private key is a PEM file on the host.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"

namespace deepbox::mcp {

struct JwtAssertionClaims {
  std::string issuer;    // iss: the client id
  std::string subject;   // sub: the client id
  std::string audience;  // aud: the authorization server's issuer
  std::chrono::seconds lifetime{300};
};

// The JWS algorithm a private key signs with: "ES256" (P-256), "ES384"
// (P-384), "ES512" (P-521), "RS256" (RSA of 2048 bits or more). Anything else
// is an error naming the key.
Result<std::string> JwtAlgorithmForKey(std::string_view private_key_pem);

// header.claims.signature (compact JWS): header {"alg","typ":"JWT"}, claims
// {iss, sub, aud, iat, exp, jti}. `alg` empty: the key's own; otherwise it
// must be the key's (a mismatch is an error, never a weaker algorithm).
// `now` is unix seconds.
Result<std::string> SignJwtAssertion(std::string_view private_key_pem, std::string_view alg,
                                     const JwtAssertionClaims& claims, int64_t now);

}  // namespace deepbox::mcp
