// Validates Kubernetes manifests against CustomResourceDefinition OpenAPI v3
// (structural) schemas: unknown fields, types, required fields, enums,
// int-or-string, integer formats and bounds, string lengths; metadata against
// ObjectMeta. (Regex `pattern`s are not checked.) Every problem names its path:
//   SandboxTemplate deepbox-sandbox-template: spec.podTemplate.spec.containers[0].imag: unknown
//   field
#pragma once

#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/json.h"

namespace deepbox::k8s {

class CrdSchemas {
 public:
  // Adds every version of every CustomResourceDefinition in a YAML stream.
  Status AddCrdYaml(std::string_view yaml, std::string_view source);
  bool Knows(std::string_view api_version, std::string_view kind) const;
  bool Deprecated(std::string_view api_version, std::string_view kind) const;
  // All problems with one object (empty = valid).
  std::vector<std::string> Validate(const json::value& object) const;
  // The schema of the field at `path` (property names from the root, e.g.
  // {"spec", "operatingMode"}); nullptr when the kind or the field is not
  // known. For tests that pin the facts the code relies on.
  const json::value* FieldSchema(std::string_view api_version, std::string_view kind,
                                 std::initializer_list<std::string_view> path) const;

 private:
  struct Version {
    json::value schema;
    bool deprecated = false;
  };
  std::map<std::pair<std::string, std::string>, Version> versions_;  // (apiVersion, kind)
};

// Validates every document of a manifest; the problems are prefixed with
// `source`. INVALID_ARGUMENT if the YAML itself does not parse.
Result<std::vector<std::string>> ValidateManifest(const CrdSchemas& schemas, std::string_view yaml,
                                                  std::string_view source);

}  // namespace deepbox::k8s
