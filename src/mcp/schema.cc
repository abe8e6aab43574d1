#include "mcp/schema.h"

#include <fmt/format.h>

#include <cmath>

namespace deepbox::mcp {
namespace {

bool IsIntegral(const json::value& v) {
  if (v.is_int64() || v.is_uint64()) return true;
  if (v.is_double()) {
    double d = v.get_double();
    return std::isfinite(d) && std::floor(d) == d;
  }
  return false;
}

double AsDouble(const json::value& v) {
  if (v.is_int64()) return static_cast<double>(v.get_int64());
  if (v.is_uint64()) return static_cast<double>(v.get_uint64());
  if (v.is_double()) return v.get_double();
  return 0;
}

bool TypeMatches(const json::value& v, std::string_view type) {
  if (type == "string") return v.is_string();
  if (type == "integer") return IsIntegral(v);
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_bool();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "null") return v.is_null();
  return false;
}

std::string Where(const std::string& path) {
  return path.empty() ? std::string("the arguments") : "'" + path + "'";
}

std::string Article(std::string_view type) {
  return (type == "integer" || type == "object" || type == "array") ? "an" : "a";
}

size_t CodePoints(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string Short(const json::value& v) {
  std::string s = ToJson(v);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

void Validate(const json::value& v, const json::object& schema, const std::string& path,
              std::vector<std::string>& errors, int depth) {
  if (depth > 32) return;  // our schemas are shallow; bounds a hostile one
  if (const json::value* t = schema.if_contains("type")) {
    std::vector<std::string> types;
    if (t->is_string()) types.emplace_back(t->get_string());
    if (t->is_array()) {
      for (const auto& x : t->get_array()) {
        if (x.is_string()) types.emplace_back(x.get_string());
      }
    }
    bool ok = types.empty();
    for (const auto& ty : types) ok = ok || TypeMatches(v, ty);
    if (!ok) {
      std::string want;
      for (size_t i = 0; i < types.size(); ++i) {
        if (types[i] == "null") continue;
        if (!want.empty()) want += " or ";
        want += Article(types[i]) + " " + types[i];
      }
      bool nullable = std::find(types.begin(), types.end(), "null") != types.end();
      if (nullable) want += " (or null)";
      errors.push_back(fmt::format("{} must be {}, not {} {}", Where(path), want,
                                   Article(JsonTypeName(v)), JsonTypeName(v)));
      return;
    }
  }
  if (const json::value* e = schema.if_contains("enum"); e && e->is_array()) {
    bool found = false;
    std::string options;
    for (const auto& x : e->get_array()) {
      if (x == v) found = true;
      if (!options.empty()) options += ", ";
      options += ToJson(x);
    }
    if (!found) {
      errors.push_back(fmt::format("{} must be one of {}, not {}", Where(path), options, Short(v)));
    }
  }
  if (const json::value* c = schema.if_contains("const"); c && *c != v) {
    errors.push_back(fmt::format("{} must be {}", Where(path), ToJson(*c)));
  }
  if (v.is_number()) {
    double d = AsDouble(v);
    auto bound = [&](const char* key, auto bad, const char* what) {
      const json::value* b = schema.if_contains(key);
      if (b && b->is_number() && bad(d, AsDouble(*b))) {
        errors.push_back(
            fmt::format("{} must be {} {}, not {}", Where(path), what, ToJson(*b), Short(v)));
      }
    };
    bound(
        "minimum", [](double x, double b) { return x < b; }, "at least");
    bound(
        "maximum", [](double x, double b) { return x > b; }, "at most");
    bound(
        "exclusiveMinimum", [](double x, double b) { return x <= b; }, "greater than");
    bound(
        "exclusiveMaximum", [](double x, double b) { return x >= b; }, "less than");
  }
  if (v.is_string()) {
    size_t n = CodePoints(v.get_string());
    if (const json::value* m = schema.if_contains("minLength"); m && IsIntegral(*m)) {
      if (static_cast<double>(n) < AsDouble(*m)) {
        errors.push_back(
            fmt::format("{} must be at least {} characters long", Where(path), ToJson(*m)));
      }
    }
    if (const json::value* m = schema.if_contains("maxLength"); m && IsIntegral(*m)) {
      if (static_cast<double>(n) > AsDouble(*m)) {
        errors.push_back(
            fmt::format("{} must be at most {} characters long", Where(path), ToJson(*m)));
      }
    }
  }
  if (v.is_array()) {
    const json::array& a = v.get_array();
    if (const json::value* m = schema.if_contains("minItems"); m && IsIntegral(*m)) {
      if (static_cast<double>(a.size()) < AsDouble(*m)) {
        errors.push_back(fmt::format("{} must have at least {} items", Where(path), ToJson(*m)));
      }
    }
    if (const json::value* m = schema.if_contains("maxItems"); m && IsIntegral(*m)) {
      if (static_cast<double>(a.size()) > AsDouble(*m)) {
        errors.push_back(fmt::format("{} must have at most {} items", Where(path), ToJson(*m)));
      }
    }
    if (const json::value* items = schema.if_contains("items"); items && items->is_object()) {
      for (size_t i = 0; i < a.size(); ++i) {
        Validate(a[i], items->get_object(), fmt::format("{}[{}]", path, i), errors, depth + 1);
      }
    }
  }
  if (v.is_object()) {
    const json::object& o = v.get_object();
    const json::object* props = nullptr;
    if (const json::value* p = schema.if_contains("properties"); p && p->is_object()) {
      props = &p->get_object();
    }
    auto child = [&](std::string_view key) {
      return path.empty() ? std::string(key) : path + "." + std::string(key);
    };
    if (const json::value* req = schema.if_contains("required"); req && req->is_array()) {
      for (const auto& r : req->get_array()) {
        if (r.is_string() && !o.contains(r.get_string())) {
          errors.push_back(fmt::format("missing required argument '{}'", child(r.get_string())));
        }
      }
    }
    const json::value* additional = schema.if_contains("additionalProperties");
    std::vector<std::string> unknown;
    for (const auto& kv : o) {
      const json::value* ps = props ? props->if_contains(kv.key()) : nullptr;
      if (ps && ps->is_object()) {
        Validate(kv.value(), ps->get_object(), child(kv.key()), errors, depth + 1);
      } else if (additional && additional->is_bool() && !additional->get_bool()) {
        unknown.push_back(std::string(kv.key()));
      } else if (additional && additional->is_object()) {
        Validate(kv.value(), additional->get_object(), child(kv.key()), errors, depth + 1);
      }
    }
    for (const auto& k : unknown) {
      std::string allowed;
      if (props) {
        for (const auto& p : *props) {
          if (!allowed.empty()) allowed += ", ";
          allowed += std::string(p.key());
        }
      }
      errors.push_back(fmt::format("unknown argument '{}' (allowed: {})", child(k),
                                   allowed.empty() ? "none" : allowed));
    }
  }
}

}  // namespace

std::string JsonTypeName(const json::value& v) {
  if (v.is_string()) return "string";
  if (v.is_bool()) return "boolean";
  if (v.is_null()) return "null";
  if (v.is_object()) return "object";
  if (v.is_array()) return "array";
  if (IsIntegral(v)) return "integer";
  return "number";
}

std::vector<std::string> ValidateAgainstSchema(const json::value& instance,
                                               const json::object& schema) {
  std::vector<std::string> errors;
  Validate(instance, schema, "", errors, 0);
  return errors;
}

}  // namespace deepbox::mcp
