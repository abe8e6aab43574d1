// YAML (kubeconfig files, manifests) to JSON, the way Kubernetes reads it:
// plain scalars are resolved with the YAML 1.2 core schema (null, bool, int,
// float, else string), quoted and block scalars are always strings. Input
// size, nesting depth and alias expansion are capped.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json.h"

namespace deepbox::k8s {

struct YamlLimits {
  size_t max_bytes = 16u << 20;
  int max_depth = 128;
  size_t max_nodes = 1u << 20;  // after alias expansion
};

// Every document of a YAML stream ("---" separated). `source` names the input
// in errors: "kubeconfig /x/config: line 3, column 5: ...".
Result<std::vector<json::value>> YamlToJsonDocuments(std::string_view text, std::string_view source,
                                                     const YamlLimits& limits = {});

// Exactly one document (an empty stream gives null).
Result<json::value> YamlToJson(std::string_view text, std::string_view source,
                               const YamlLimits& limits = {});

// Core-schema resolution of one plain scalar: "true" -> true, "0x1f" -> 31,
// "1e3" -> 1000.0, "~" -> null, "yes" -> "yes".
json::value ResolvePlainScalar(std::string_view text);

}  // namespace deepbox::k8s
