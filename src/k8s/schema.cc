#include "k8s/schema.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "k8s/util.h"
#include "k8s/yaml_json.h"

namespace deepbox::k8s {

namespace {

std::string Join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string_view TypeOf(const json::value& v) {
  switch (v.kind()) {
    case json::kind::object:
      return "object";
    case json::kind::array:
      return "array";
    case json::kind::string:
      return "string";
    case json::kind::bool_:
      return "boolean";
    case json::kind::int64:
    case json::kind::uint64:
      return "integer";
    case json::kind::double_:
      return "number";
    case json::kind::null:
      return "null";
  }
  return "?";
}

bool IsInteger(const json::value& v) { return v.is_int64() || v.is_uint64(); }
double AsNumber(const json::value& v) {
  if (v.is_int64()) return static_cast<double>(v.get_int64());
  if (v.is_uint64()) return static_cast<double>(v.get_uint64());
  return v.get_double();
}

bool TypeMatches(std::string_view type, const json::value& v) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_bool();
  if (type == "integer") return IsInteger(v);
  if (type == "number") return v.is_number();
  return true;  // no type: anything
}

bool FlagSet(const json::object& schema, std::string_view key) {
  auto it = schema.find(key);
  return it != schema.end() && it->value().is_bool() && it->value().get_bool();
}

class Validator {
 public:
  std::vector<std::string> problems;

  void Check(const json::object& schema, const json::value& v, const std::string& path) {
    if (v.is_null()) {
      if (!FlagSet(schema, "nullable")) return;  // the apiserver drops nulls
      return;
    }
    if (FlagSet(schema, "x-kubernetes-int-or-string")) {
      if (!IsInteger(v) && !v.is_string()) {
        Fail(path, fmt::format("must be an integer or a string, not {}", TypeOf(v)));
      }
      return;
    }
    if (auto any = schema.find("anyOf"); any != schema.end() && any->value().is_array()) {
      bool ok = false;
      for (const auto& alt : any->value().get_array()) {
        if (alt.is_object() && TypeMatches(FindString(alt, {"type"}), v)) ok = true;
      }
      if (!ok) {
        Fail(path, fmt::format("{} does not match any allowed type", TypeOf(v)));
        return;
      }
    }
    std::string type = FindString(schema, {"type"});
    if (!type.empty() && !TypeMatches(type, v)) {
      Fail(path, fmt::format("must be {} {}, not {}",
                             type == "integer" || type == "object" || type == "array" ? "an" : "a",
                             type, TypeOf(v)));
      return;
    }
    if (auto e = schema.find("enum"); e != schema.end() && e->value().is_array()) {
      bool found = false;
      for (const auto& option : e->value().get_array()) found |= option == v;
      if (!found) {
        std::vector<std::string> options;
        for (const auto& option : e->value().get_array()) options.push_back(ToJson(option));
        Fail(path, fmt::format("{} is not one of {}", ToJson(v), fmt::join(options, ", ")));
      }
    }
    if (v.is_string()) CheckString(schema, v.get_string(), path);
    if (v.is_number()) CheckNumber(schema, v, path);
    if (v.is_array()) {
      const json::value* items = Find(schema, {"items"});
      size_t i = 0;
      for (const auto& item : v.get_array()) {
        if (items != nullptr && items->is_object()) {
          Check(items->get_object(), item, fmt::format("{}[{}]", path, i));
        }
        ++i;
      }
      if (const auto* max = Find(schema, {"maxItems"});
          max && IsInteger(*max) && v.get_array().size() > AsNumber(*max)) {
        Fail(path, fmt::format("has more than {} items", ToJson(*max)));
      }
    }
    if (v.is_object()) CheckObject(schema, v.get_object(), path);
  }

  void CheckObjectMeta(const json::value& v, const std::string& path) {
    static const std::vector<std::string_view> kKnown = {"name",
                                                         "generateName",
                                                         "namespace",
                                                         "labels",
                                                         "annotations",
                                                         "uid",
                                                         "resourceVersion",
                                                         "generation",
                                                         "creationTimestamp",
                                                         "deletionTimestamp",
                                                         "deletionGracePeriodSeconds",
                                                         "ownerReferences",
                                                         "finalizers",
                                                         "managedFields",
                                                         "selfLink"};
    if (!v.is_object()) {
      Fail(path, fmt::format("must be an object, not {}", TypeOf(v)));
      return;
    }
    const auto& m = v.get_object();
    for (const auto& kv : m) {
      std::string_view key = kv.key();
      if (std::find(kKnown.begin(), kKnown.end(), key) == kKnown.end()) {
        Fail(Join(path, key), "unknown field");
        continue;
      }
      if ((key == "labels" || key == "annotations") && !kv.value().is_null()) {
        if (!kv.value().is_object()) {
          Fail(Join(path, key), "must be a map of strings");
          continue;
        }
        for (const auto& l : kv.value().get_object()) {
          if (!l.value().is_string()) {
            Fail(Join(Join(path, key), l.key()),
                 fmt::format("must be a string, not {} (quote it)", TypeOf(l.value())));
          }
        }
      }
      if ((key == "name" || key == "namespace" || key == "generateName") &&
          !kv.value().is_string()) {
        Fail(Join(path, key), fmt::format("must be a string, not {}", TypeOf(kv.value())));
      }
    }
    if (FindString(m, {"name"}).empty() && FindString(m, {"generateName"}).empty()) {
      Fail(Join(path, "name"), "missing required field");
    }
  }

 private:
  void Fail(const std::string& path, std::string what) {
    problems.push_back(fmt::format("{}: {}", path.empty() ? "(root)" : path, what));
  }

  void CheckString(const json::object& schema, json::string_view s, const std::string& path) {
    if (const auto* max = Find(schema, {"maxLength"});
        max && IsInteger(*max) && s.size() > AsNumber(*max)) {
      Fail(path, fmt::format("longer than {} characters", ToJson(*max)));
    }
    if (const auto* min = Find(schema, {"minLength"});
        min && IsInteger(*min) && s.size() < AsNumber(*min)) {
      Fail(path, fmt::format("shorter than {} characters", ToJson(*min)));
    }
    if (FindString(schema, {"format"}) == "date-time" && !ParseRfc3339(std::string(s))) {
      Fail(path, fmt::format("'{}' is not an RFC 3339 date-time", std::string(s)));
    }
  }

  void CheckNumber(const json::object& schema, const json::value& v, const std::string& path) {
    double d = AsNumber(v);
    std::string format = FindString(schema, {"format"});
    if (format == "int32" &&
        (d < std::numeric_limits<int32_t>::min() || d > std::numeric_limits<int32_t>::max())) {
      Fail(path, "out of the int32 range");
    }
    if (const auto* min = Find(schema, {"minimum"});
        min && min->is_number() && d < AsNumber(*min)) {
      Fail(path, fmt::format("must be at least {}", ToJson(*min)));
    }
    if (const auto* max = Find(schema, {"maximum"});
        max && max->is_number() && d > AsNumber(*max)) {
      Fail(path, fmt::format("must be at most {}", ToJson(*max)));
    }
  }

  void CheckObject(const json::object& schema, const json::object& obj, const std::string& path) {
    const json::value* props = Find(schema, {"properties"});
    const json::value* additional = Find(schema, {"additionalProperties"});
    bool preserve = FlagSet(schema, "x-kubernetes-preserve-unknown-fields");
    for (const auto& kv : obj) {
      std::string child = Join(path, kv.key());
      const json::value* sub = nullptr;
      if (props != nullptr && props->is_object()) {
        if (auto it = props->get_object().find(kv.key()); it != props->get_object().end()) {
          sub = &it->value();
        }
      }
      if (sub == nullptr && additional != nullptr && additional->is_object()) sub = additional;
      if (sub == nullptr) {
        if (!preserve &&
            !(additional != nullptr && additional->is_bool() && additional->get_bool())) {
          Fail(child, "unknown field");
        }
        continue;
      }
      if (sub->is_object()) Check(sub->get_object(), kv.value(), child);
    }
    if (const auto* req = Find(schema, {"required"}); req != nullptr && req->is_array()) {
      for (const auto& r : req->get_array()) {
        if (!r.is_string()) continue;
        auto it = obj.find(r.get_string());
        if (it == obj.end() || it->value().is_null()) {
          Fail(Join(path, r.get_string()), "missing required field");
        }
      }
    }
  }
};

}  // namespace

Status CrdSchemas::AddCrdYaml(std::string_view yaml, std::string_view source) {
  auto docs = YamlToJsonDocuments(yaml, source);
  if (!docs) return tl::unexpected(docs.error());
  int added = 0;
  for (const auto& doc : *docs) {
    if (!doc.is_object() || FindString(doc, {"kind"}) != "CustomResourceDefinition") continue;
    std::string group = FindString(doc, {"spec", "group"});
    std::string kind = FindString(doc, {"spec", "names", "kind"});
    const json::value* versions = Find(doc, {"spec", "versions"});
    if (group.empty() || kind.empty() || versions == nullptr || !versions->is_array()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("{}: not a CustomResourceDefinition with versions", source));
    }
    for (const auto& v : versions->get_array()) {
      const json::value* schema = Find(v, {"schema", "openAPIV3Schema"});
      if (schema == nullptr || !schema->is_object()) continue;
      const json::value* served = Find(v, {"served"});
      if (served != nullptr && served->is_bool() && !served->get_bool()) continue;
      const json::value* deprecated = Find(v, {"deprecated"});
      versions_[{group + "/" + FindString(v, {"name"}), kind}] = Version{
          *schema, deprecated != nullptr && deprecated->is_bool() && deprecated->get_bool()};
      ++added;
    }
  }
  if (added == 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{}: no CustomResourceDefinition schema found", source));
  }
  return {};
}

bool CrdSchemas::Knows(std::string_view api_version, std::string_view kind) const {
  return versions_.contains({std::string(api_version), std::string(kind)});
}

bool CrdSchemas::Deprecated(std::string_view api_version, std::string_view kind) const {
  auto it = versions_.find({std::string(api_version), std::string(kind)});
  return it != versions_.end() && it->second.deprecated;
}

const json::value* CrdSchemas::FieldSchema(std::string_view api_version, std::string_view kind,
                                           std::initializer_list<std::string_view> path) const {
  auto it = versions_.find({std::string(api_version), std::string(kind)});
  if (it == versions_.end()) return nullptr;
  const json::value* at = &it->second.schema;
  for (std::string_view step : path) {
    at = Find(*at, {"properties", step});
    if (at == nullptr) return nullptr;
  }
  return at;
}

std::vector<std::string> CrdSchemas::Validate(const json::value& object) const {
  if (!object.is_object()) return {"(root): a manifest document must be an object"};
  std::string api = FindString(object, {"apiVersion"});
  std::string kind = FindString(object, {"kind"});
  std::string name = FindString(object, {"metadata", "name"});
  std::string who =
      fmt::format("{} {}", kind.empty() ? "(no kind)" : kind, name.empty() ? "(no name)" : name);
  if (api.empty() || kind.empty()) return {who + ": apiVersion and kind are required"};
  auto it = versions_.find({api, kind});
  if (it == versions_.end()) {
    return {fmt::format("{}: no schema for apiVersion {} kind {}", who, api, kind)};
  }
  Validator v;
  const json::object& schema = it->second.schema.get_object();
  // The root schema declares metadata as a bare object: check it as ObjectMeta.
  json::object root = schema;
  if (auto* props = root.if_contains("properties"); props != nullptr && props->is_object()) {
    props->as_object().erase("metadata");
  }
  json::object copy = object.get_object();
  const json::value metadata = copy.contains("metadata") ? copy["metadata"] : json::value();
  copy.erase("metadata");
  v.Check(root, copy, "");
  if (metadata.is_null()) {
    v.problems.push_back("metadata: missing required field");
  } else {
    v.CheckObjectMeta(metadata, "metadata");
  }
  for (auto& p : v.problems) p = who + ": " + p;
  return v.problems;
}

Result<std::vector<std::string>> ValidateManifest(const CrdSchemas& schemas, std::string_view yaml,
                                                  std::string_view source) {
  auto docs = YamlToJsonDocuments(yaml, source);
  if (!docs) return tl::unexpected(docs.error());
  std::vector<std::string> problems;
  for (const auto& doc : *docs) {
    if (doc.is_null()) continue;
    for (auto& p : schemas.Validate(doc)) problems.push_back(fmt::format("{}: {}", source, p));
  }
  return problems;
}

}  // namespace deepbox::k8s
