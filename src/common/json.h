// Thin helpers over Boost.JSON, the project's one JSON library.
#pragma once

#include <boost/json.hpp>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace deepbox {

namespace json = boost::json;

// Parses text; a syntax error becomes INVALID_ARGUMENT naming the position.
Result<json::value> ParseJson(std::string_view text);
Result<json::object> ParseJsonObject(std::string_view text);
// Serializes; strings inside are assumed valid UTF-8 (use JsonString to ensure).
std::string ToJson(const json::value& value);
// A json::string holding `text` made valid UTF-8.
json::string JsonString(std::string_view text);

// Typed field access with clear INVALID_ARGUMENT errors ("field 'path' must be a string").
Result<std::string> GetString(const json::object& obj, std::string_view key);
std::optional<std::string> GetOptString(const json::object& obj, std::string_view key);
Result<std::optional<std::string>> GetOptStringChecked(const json::object& obj,
                                                       std::string_view key);
Result<std::optional<int64_t>> GetOptInt(const json::object& obj, std::string_view key);
Result<std::optional<bool>> GetOptBool(const json::object& obj, std::string_view key);

// A JSON number as an integer when it is one exactly: int64, uint64 up to
// INT64_MAX, or an integral double in range (1e400 parses as infinity; casting
// that is undefined behaviour). Anything else, including strings, is nullopt.
std::optional<int64_t> JsonToInt64(const json::value& value);

// {"error": {"code": "NOT_FOUND", "message": "..."}}
json::object ErrorToJson(const Error& error);

// Nested lookups in JSON objects; nullptr / "" when a step is missing. (The
// json::object overloads matter: binding an object to `const json::value&`
// would copy it into a temporary and return a dangling pointer.)
const json::value* Find(const json::value& v, std::initializer_list<std::string_view> path);
const json::value* Find(const json::object& o, std::initializer_list<std::string_view> path);
std::string FindString(const json::value& v, std::initializer_list<std::string_view> path);
std::string FindString(const json::object& o, std::initializer_list<std::string_view> path);

}  // namespace deepbox
