// Small helpers shared by the Kubernetes provider: RFC 3339 times, the
// controller's name hash, label validation and random claim names.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/random.h"

namespace deepbox::k8s {

using SystemTime = std::chrono::system_clock::time_point;

// "2026-08-22T00:27:14Z", "2026-08-22T00:27:14.5+02:00".
Result<SystemTime> ParseRfc3339(std::string_view text);
// "%Y-%m-%dT%H:%M:%SZ" (whole seconds, UTC): the SDK's shutdownTime format.
std::string FormatRfc3339(SystemTime t);
// Python's datetime.now(UTC).isoformat(): "2026-08-22T00:27:14.123456+00:00".
std::string FormatIsoMicros(SystemTime t);

// FNV-1a 32-bit of `name` as 8 lowercase hex digits (agents.x-k8s.io NameHash).
std::string NameHash(std::string_view name);

// RandomHex: common/random.h.

// Label keys and values as the upstream SDK checks them client-side
// (RFC 1123 prefix, name segment <= 63 chars of [-A-Za-z0-9_.]).
Status ValidateLabels(const std::map<std::string, std::string>& labels);
// `text` as a label value: itself when it is one (<= 63 of [-A-Za-z0-9_.],
// alphanumeric at both ends), else a cleaned-up prefix and its NameHash
// ("default/claim-1" -> "default_claim-1-<8 hex>").
std::string LabelValueFor(std::string_view text);

// A DNS-1123 subdomain (<= 253 chars of [a-z0-9.-], alphanumeric at both
// ends): what Kubernetes allows as an object name, so never "", "." or "..",
// and nothing that could break out of a URL path or an HTTP header.
bool IsObjectName(std::string_view name);

// A credential that can go in an HTTP header ("Bearer <token>"): 1 to
// kMaxHeaderToken bytes of printable ASCII, no spaces or control characters.
inline constexpr size_t kMaxHeaderToken = 60000;
bool IsHeaderToken(std::string_view token);

// Nested lookups in JSON objects; nullptr / "" when a step is missing. (The
// json::object overloads matter: binding an object to `const json::value&`
// would copy it into a temporary and return a dangling pointer.)
const json::value* Find(const json::value& v, std::initializer_list<std::string_view> path);
const json::value* Find(const json::object& o, std::initializer_list<std::string_view> path);
std::string FindString(const json::value& v, std::initializer_list<std::string_view> path);
std::string FindString(const json::object& o, std::initializer_list<std::string_view> path);

// IPv4 preferred, IPv4-mapped IPv6 normalised, invalid entries skipped; "" if none.
std::string SelectPodIp(const std::vector<std::string>& ips);

}  // namespace deepbox::k8s
