#include "agent/tool.h"

#include <cmath>
#include <cstdlib>

#include "agent/py_repr.h"
#include "agent/text.h"
#include "common/parse_number.h"
#include "common/strings.h"

namespace deepbox::agent {

ToolScheduling Tool::Scheduling(const json::object&, std::string_view) const { return {}; }

std::string Tool::MainArgument(const json::object& args) const {
  for (const char* key : {"file_path", "path", "command", "pattern", "description"}) {
    if (auto v = ArgOptString(args, key)) return *v;
  }
  return "";
}

FunctionTool::FunctionTool(ToolSpec spec, Fn fn, bool parallel_safe)
    : spec_(std::move(spec)), fn_(std::move(fn)), parallel_safe_(parallel_safe) {}

ToolResult FunctionTool::Invoke(ToolContext& ctx, const json::object& args) {
  return fn_(ctx, args);
}

ToolScheduling FunctionTool::Scheduling(const json::object&, std::string_view) const {
  if (parallel_safe_) return {};
  return {"\x01user-tools"};
}

namespace {

std::optional<std::string> TypeName(const json::object& prop) {
  const json::value* t = prop.if_contains("type");
  if (!t) return std::nullopt;
  if (t->is_string()) return std::string(t->get_string());
  if (t->is_array()) {
    for (const auto& v : t->get_array()) {
      if (v.is_string() && v.get_string() != "null") return std::string(v.get_string());
    }
  }
  return std::nullopt;
}

bool Nullable(const json::object& prop) {
  const json::value* t = prop.if_contains("type");
  if (t && t->is_array()) {
    for (const auto& v : t->get_array()) {
      if (v.is_string() && v.get_string() == "null") return true;
    }
  }
  return false;
}

// pydantic writes `T | None` as {"anyOf": [T, {"type": "null"}], ...}: the
// non-null branch is what to check.
const json::object& NonNullBranch(const json::object& prop) {
  const json::value* any = prop.if_contains("anyOf");
  if (!any || !any->is_array()) return prop;
  for (const auto& branch : any->get_array()) {
    if (!branch.is_object()) continue;
    const json::value* t = branch.get_object().if_contains("type");
    if (t && t->is_string() && t->get_string() == "null") continue;
    return branch.get_object();
  }
  return prop;
}

bool AnyOfNull(const json::object& prop) {
  const json::value* any = prop.if_contains("anyOf");
  if (!any || !any->is_array()) return false;
  for (const auto& branch : any->get_array()) {
    if (!branch.is_object()) continue;
    const json::value* t = branch.get_object().if_contains("type");
    if (t && t->is_string() && t->get_string() == "null") return true;
  }
  return false;
}

std::optional<int64_t> AsInt(const json::value& v) {
  if (v.is_int64()) return v.get_int64();
  if (v.is_uint64()) return std::nullopt;  // above INT64_MAX
  if (v.is_double()) {
    double d = v.get_double();
    if (std::floor(d) == d && std::fabs(d) < 9e18) return static_cast<int64_t>(d);
    return std::nullopt;
  }
  if (v.is_string()) {
    std::string_view s = Trim(std::string_view(v.get_string()));
    if (s.starts_with('+')) s.remove_prefix(1);
    return ParseI64(s);  // nullopt when out of range, where strtoll saturated
  }
  return std::nullopt;
}

std::optional<bool> AsBool(const json::value& v) {
  if (v.is_bool()) return v.get_bool();
  if (v.is_int64() && (v.get_int64() == 0 || v.get_int64() == 1)) return v.get_int64() == 1;
  if (v.is_string()) {
    std::string s = AsciiLower(std::string_view(v.get_string()));
    if (s == "true" || s == "1" || s == "yes" || s == "on" || s == "t" || s == "y") return true;
    if (s == "false" || s == "0" || s == "no" || s == "off" || s == "f" || s == "n") {
      return false;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> ValidateToolArgs(const ToolSpec& spec, const json::object& args) {
  std::vector<std::string> errors;
  const json::value* props_v = spec.input_schema.if_contains("properties");
  const json::object* props = props_v && props_v->is_object() ? &props_v->get_object() : nullptr;
  if (const json::value* req = spec.input_schema.if_contains("required"); req && req->is_array()) {
    for (const auto& r : req->get_array()) {
      if (!r.is_string()) continue;
      if (!args.contains(r.get_string())) {
        errors.push_back(std::string(r.get_string()) + ": Field required");
      }
    }
  }
  if (props) {
    for (const auto& kv : args) {
      const json::value* pv = props->if_contains(kv.key());
      if (!pv || !pv->is_object()) continue;
      const json::object& prop = NonNullBranch(pv->get_object());
      const json::value& v = kv.value();
      std::string field(kv.key());
      if (v.is_null() && (Nullable(prop) || AnyOfNull(pv->get_object()))) continue;
      auto type = TypeName(prop);
      if (!type) continue;
      if (*type == "string") {
        if (!v.is_string()) {
          errors.push_back(field + ": Input should be a valid string");
          continue;
        }
        if (const json::value* e = prop.if_contains("enum"); e && e->is_array()) {
          bool ok = false;
          std::vector<std::string> opts;
          for (const auto& o : e->get_array()) {
            if (!o.is_string()) continue;
            opts.push_back("'" + std::string(o.get_string()) + "'");
            if (o.get_string() == v.get_string()) ok = true;
          }
          if (!ok) {
            std::string list;
            for (size_t i = 0; i < opts.size(); ++i) {
              if (i) list += (i + 1 == opts.size()) ? " or " : ", ";
              list += opts[i];
            }
            errors.push_back(field + ": Input should be " + list);
          }
        }
      } else if (*type == "integer") {
        auto n = AsInt(v);
        if (!n) {
          errors.push_back(field + ": Input should be a valid integer");
          continue;
        }
        if (const json::value* m = prop.if_contains("exclusiveMinimum"); m && AsInt(*m)) {
          if (*n <= *AsInt(*m)) {
            errors.push_back(field + ": Input should be greater than " +
                             std::to_string(*AsInt(*m)));
          }
        }
      } else if (*type == "boolean") {
        if (!AsBool(v)) errors.push_back(field + ": Input should be a valid boolean");
      } else if (*type == "array") {
        if (!v.is_array()) errors.push_back(field + ": Input should be a valid list");
      } else if (*type == "object") {
        if (!v.is_object()) errors.push_back(field + ": Input should be a valid dictionary");
      } else if (*type == "number") {
        if (!v.is_number()) errors.push_back(field + ": Input should be a valid number");
      }
    }
  }
  if (errors.empty()) return std::nullopt;
  std::string out = "Error invoking tool '" + spec.name + "' with kwargs " +
                    PyReprJson(json::value(args)) + " with error:\n";
  for (const auto& e : errors) out += " " + e + "\n";
  out += " Please fix the error and try again.";
  return out;
}

json::object SchemaObject(std::initializer_list<std::pair<std::string, json::object>> props,
                          std::initializer_list<std::string> required) {
  json::object schema;
  schema["type"] = "object";
  json::object p;
  for (const auto& [k, v] : props) p[k] = v;
  schema["properties"] = std::move(p);
  json::array req;
  for (const auto& r : required) req.emplace_back(r);
  schema["required"] = std::move(req);
  return schema;
}

json::object SchemaString(std::string description) {
  json::object o;
  o["type"] = "string";
  o["description"] = description;
  return o;
}

json::object SchemaInteger(std::string description, std::optional<int64_t> def) {
  json::object o;
  o["type"] = "integer";
  o["description"] = description;
  if (def) o["default"] = *def;
  return o;
}

json::object SchemaBoolean(std::string description, std::optional<bool> def) {
  json::object o;
  o["type"] = "boolean";
  o["description"] = description;
  if (def) o["default"] = *def;
  return o;
}

std::string ArgString(const json::object& args, std::string_view key, std::string def) {
  const json::value* v = args.if_contains(key);
  if (v && v->is_string()) return std::string(v->get_string());
  return def;
}

std::optional<std::string> ArgOptString(const json::object& args, std::string_view key) {
  const json::value* v = args.if_contains(key);
  if (v && v->is_string()) return std::string(v->get_string());
  return std::nullopt;
}

std::optional<int64_t> ArgOptInt(const json::object& args, std::string_view key) {
  const json::value* v = args.if_contains(key);
  if (!v || v->is_null()) return std::nullopt;
  return AsInt(*v);
}

bool ArgBool(const json::object& args, std::string_view key, bool def) {
  const json::value* v = args.if_contains(key);
  if (!v || v->is_null()) return def;
  return AsBool(*v).value_or(def);
}

}  // namespace deepbox::agent
