#include "common/json.h"

#include <fmt/format.h>

#include "common/parse_number.h"
#include "common/utf8.h"

namespace deepbox {

Result<json::value> ParseJson(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("invalid JSON: {}", ec.message()));
  }
  return v;
}

Result<json::object> ParseJsonObject(std::string_view text) {
  auto v = ParseJson(text);
  if (!v) return tl::unexpected(v.error());
  if (!v->is_object()) return MakeError(ErrorCode::kInvalidArgument, "JSON body must be an object");
  return std::move(v->as_object());
}

std::string ToJson(const json::value& value) { return json::serialize(value); }

json::string JsonString(std::string_view text) {
  if (IsValidUtf8(text)) return json::string(text);
  return json::string(SanitizeUtf8(text));
}

Result<std::string> GetString(const json::object& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->value().is_null()) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("field '{}' is required", key));
  }
  if (!it->value().is_string()) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("field '{}' must be a string", key));
  }
  return std::string(it->value().as_string());
}

std::optional<std::string> GetOptString(const json::object& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->value().is_string()) return std::nullopt;
  return std::string(it->value().as_string());
}

Result<std::optional<std::string>> GetOptStringChecked(const json::object& obj,
                                                       std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->value().is_null()) return std::optional<std::string>();
  if (!it->value().is_string()) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("field '{}' must be a string", key));
  }
  return std::optional<std::string>(std::string(it->value().as_string()));
}

Result<std::optional<int64_t>> GetOptInt(const json::object& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->value().is_null()) return std::optional<int64_t>();
  if (auto n = JsonToInt64(it->value())) return std::optional<int64_t>(*n);
  return MakeError(ErrorCode::kInvalidArgument, fmt::format("field '{}' must be an integer", key));
}

Result<std::optional<bool>> GetOptBool(const json::object& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->value().is_null()) return std::optional<bool>();
  if (!it->value().is_bool()) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("field '{}' must be a boolean", key));
  }
  return std::optional<bool>(it->value().as_bool());
}

std::optional<int64_t> JsonToInt64(const json::value& value) {
  if (value.is_int64()) return value.as_int64();
  if (value.is_uint64()) {
    if (value.as_uint64() > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(value.as_uint64());
  }
  if (value.is_double()) return DoubleToInt64(value.as_double());
  return std::nullopt;
}

json::object ErrorToJson(const Error& error) {
  json::object inner;
  inner["code"] = ErrorCodeName(error.code);
  inner["message"] = JsonString(error.message);
  if (!error.reason.empty()) inner["reason"] = error.reason;
  json::object out;
  out["error"] = std::move(inner);
  return out;
}

namespace {

const json::value* FindFrom(const json::value* cur, const std::string_view* begin,
                            const std::string_view* end) {
  for (auto it = begin; it != end; ++it) {
    const auto* obj = cur->if_object();
    if (obj == nullptr) return nullptr;
    auto found = obj->find(*it);
    if (found == obj->end()) return nullptr;
    cur = &found->value();
  }
  return cur;
}

std::string AsString(const json::value* v) {
  if (v == nullptr || !v->is_string()) return {};
  return std::string(v->get_string());
}

}  // namespace

const json::value* Find(const json::object& o, std::initializer_list<std::string_view> path) {
  if (path.size() == 0) return nullptr;
  auto first = o.find(*path.begin());
  if (first == o.end()) return nullptr;
  return FindFrom(&first->value(), path.begin() + 1, path.end());
}

std::string FindString(const json::object& o, std::initializer_list<std::string_view> path) {
  return AsString(Find(o, path));
}

const json::value* Find(const json::value& v, std::initializer_list<std::string_view> path) {
  return FindFrom(&v, path.begin(), path.end());
}

std::string FindString(const json::value& v, std::initializer_list<std::string_view> path) {
  return AsString(Find(v, path));
}

}  // namespace deepbox
