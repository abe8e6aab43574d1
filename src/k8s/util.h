// Small helpers shared by the Kubernetes provider: the controller's name
// hash, label validation, object names. (RFC 3339 times: common/time.h;
// JSON path lookups: common/json.h.)
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/random.h"
#include "common/time.h"

namespace deepbox::k8s {

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

// IPv4 preferred, IPv4-mapped IPv6 normalised, invalid entries skipped; "" if none.
std::string SelectPodIp(const std::vector<std::string>& ips);

}  // namespace deepbox::k8s
