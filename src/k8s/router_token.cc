#include "k8s/router_token.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/base64.h"
#include "common/json.h"
#include "common/strings.h"
#include "net/token_digest.h"

namespace deepbox::k8s {

namespace {

constexpr std::string_view kScopedVersion = "v1";
constexpr std::string_view kScopedMacContext = "agent-sandbox/scoped-token/v1.";

std::optional<std::string> FromBase64Url(std::string_view text) {
  std::string s(text);
  if (s.find_first_of("+/=") != std::string::npos) return std::nullopt;
  std::replace(s.begin(), s.end(), '-', '+');
  std::replace(s.begin(), s.end(), '_', '/');
  while (s.size() % 4 != 0) s.push_back('=');
  return Base64Decode(s);
}

std::string SignScoped(std::string_view secret, std::string_view payload) {
  return net::HmacSha256(secret, fmt::format("{}{}", kScopedMacContext, payload));
}

struct SplitToken {
  std::string_view payload;
  std::string_view signature;
};

std::optional<SplitToken> SplitScoped(std::string_view token) {
  auto first = token.find('.');
  if (first == std::string_view::npos || token.substr(0, first) != kScopedVersion) {
    return std::nullopt;
  }
  std::string_view rest = token.substr(first + 1);
  auto second = rest.find('.');
  if (second == std::string_view::npos || rest.find('.', second + 1) != std::string_view::npos) {
    return std::nullopt;
  }
  return SplitToken{rest.substr(0, second), rest.substr(second + 1)};
}

std::optional<ScopedRouterToken> ReadPayload(std::string_view payload) {
  auto raw = FromBase64Url(payload);
  if (!raw) return std::nullopt;
  auto obj = ParseJsonObject(*raw);
  if (!obj) return std::nullopt;
  const auto* ns = obj->if_contains("ns");
  const auto* name = obj->if_contains("name");
  const auto* exp = obj->if_contains("exp");
  std::optional<int64_t> expires = exp != nullptr ? JsonToInt64(*exp) : std::nullopt;
  if (ns == nullptr || !ns->is_string() || name == nullptr || !name->is_string() || !expires) {
    return std::nullopt;
  }
  return ScopedRouterToken{std::string(ns->get_string()), std::string(name->get_string()),
                           *expires};
}

}  // namespace

Result<std::string> MintScopedRouterToken(std::string_view secret, const ScopedRouterToken& scope) {
  std::string_view key = Trim(secret);
  if (key.size() < kMinScopedTokenSecret) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("the router's scoped-token secret must be at least {} bytes "
                                 "(after trimming whitespace), not {}",
                                 kMinScopedTokenSecret, key.size()));
  }
  if (scope.namespace_name.empty() || scope.sandbox_name.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "a scoped router token needs a namespace and a sandbox name");
  }
  json::object claims;
  claims["ns"] = scope.namespace_name;
  claims["name"] = scope.sandbox_name;
  claims["exp"] = scope.expires;
  std::string payload = net::Base64UrlEncode(ToJson(claims));
  return fmt::format("{}.{}.{}", kScopedVersion, payload,
                     net::Base64UrlEncode(SignScoped(key, payload)));
}

std::optional<ScopedRouterToken> ReadScopedRouterToken(std::string_view token) {
  auto parts = SplitScoped(token);
  if (!parts) return std::nullopt;
  return ReadPayload(parts->payload);
}

Result<ScopedRouterToken> VerifyScopedRouterToken(std::string_view secret, std::string_view token,
                                                  SystemTime now) {
  auto unauthenticated = [](std::string_view why) {
    return MakeError(ErrorCode::kUnauthenticated, fmt::format("scoped router token: {}", why));
  };
  auto parts = SplitScoped(token);
  if (!parts) return unauthenticated("malformed");
  auto sig = FromBase64Url(parts->signature);
  if (!sig || !net::ConstantTimeEquals(*sig, SignScoped(Trim(secret), parts->payload))) {
    return unauthenticated("signature mismatch");
  }
  auto scope = ReadPayload(parts->payload);
  if (!scope) return unauthenticated("malformed claims");
  if (std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count() >=
      scope->expires) {
    return unauthenticated("expired");
  }
  return *scope;
}

}  // namespace deepbox::k8s
