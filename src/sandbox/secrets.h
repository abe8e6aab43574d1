// Secrets a sandbox can use but never read (`--secret NAME=SOURCE@HOST[,HOST...]`).
//
// The sandbox gets a placeholder in $NAME ("deepbox-secret-" and 32 random
// hex digits, new for every sandbox); the host-side egress proxy replaces the
// placeholder with the real value in requests to the secret's hosts only
// (local/egress_proxy.h, local/secret_rewrite.h). The value is read here, on
// the caller's side, and handed to the provider; it never enters the
// sandbox, its records or an error message.
//
// SOURCE, where the value comes from (read once, at create):
//   env:VAR      the caller's environment variable VAR
//   file:PATH    the file's content (at most 64 KiB)
//   cmd:COMMAND  the standard output of `/bin/sh -c COMMAND` (its stderr is
//                the caller's; exit status 0 within 30 s, output <= 64 KiB),
//                e.g. cmd:gh auth token, cmd:pass show pypi
// One trailing newline ("\n" or "\r\n") is removed from file and command
// output. The value must then be 1..8192 bytes without control bytes (tab
// aside) or surrounding whitespace: it goes into an HTTP/1 or HTTP/2 header
// (local/secret_rewrite.h checks the same). HOSTs are names as in `--network allow=` (lower case,
// "*.example.com" for every subdomain), without ports: HTTPS (443) to them is
// intercepted, plain HTTP never receives a secret (it would cross the network
// in clear text).
// A ";query" suffix (NAME=SOURCE@HOST;query) lets the value go into the URL
// query too (?token=...), off by default: URLs end up in logs.
// Pure parsing and formatting (fuzzed with the network policy); resolving
// runs the source.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace deepbox {

inline constexpr std::string_view kSecretPlaceholderPrefix = "deepbox-secret-";
inline constexpr size_t kMaxSecretValueBytes = 8192;
inline constexpr size_t kMaxSecrets = 64;

struct SecretSource {
  enum class Kind { kEnv, kFile, kCommand };
  Kind kind = Kind::kEnv;
  std::string ref;               // the variable, path or command
  std::string ToString() const;  // "env:VAR" | "file:PATH" | "cmd:COMMAND"
};

// A parsed --secret flag (no value yet).
struct SecretSpec {
  std::string name;  // the sandbox's environment variable: [A-Za-z_][A-Za-z0-9_]*
  SecretSource source;
  std::vector<std::string> hosts;  // lower case, validated like allow entries, no port
  bool in_query = false;           // ";query"
};

// "NAME=SOURCE@HOST[,HOST...][;query]" (the last '@' separates the hosts,
// so a command may contain '@').
Result<SecretSpec> ParseSecretSpec(std::string_view text);

// A secret ready to hand to a provider: the value read, the placeholder made.
struct SecretGrant {
  std::string name;
  std::vector<std::string> hosts;
  std::string placeholder;  // MakeSecretPlaceholder()
  std::string value;        // the real secret: never logged, never in an error
  bool in_query = false;    // also in URL queries
};

// Checks a value for use in an HTTP header (see above); the error never
// quotes it.
Status ValidateSecretValue(std::string_view value);
// "deepbox-secret-" + 32 lower-case hex digits from the kernel's CSPRNG.
std::string MakeSecretPlaceholder();
bool IsSecretPlaceholder(std::string_view text);

// Reads the value from its source (above), validates it and makes the
// placeholder. Errors name the secret and the source, never the value.
Result<SecretGrant> ResolveSecret(
    const SecretSpec& spec, std::chrono::milliseconds command_timeout = std::chrono::seconds(30));
// ParseSecretSpec + ResolveSecret for each flag; two secrets with one name
// are refused.
Result<std::vector<SecretGrant>> ResolveSecretFlags(const std::vector<std::string>& flags);

// Whether `host` (any case, optional trailing dot) is one of `hosts`.
bool SecretHostMatches(const std::vector<std::string>& hosts, std::string_view host);

}  // namespace deepbox
