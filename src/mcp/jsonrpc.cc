#include "mcp/jsonrpc.h"

#include <fmt/format.h>

#include <cmath>

namespace deepbox::mcp {
namespace {

ParseFailure Invalid(std::string message, json::value id = nullptr) {
  return ParseFailure{RpcError(kInvalidRequest, std::move(message)), std::move(id)};
}

// A number beyond double's range parses as infinity, which JSON cannot
// express: echoing it (an error's data, a tool's arguments) would send the
// peer invalid JSON. (Boost.JSON caps nesting depth, so the recursion is
// bounded.)
bool HasNonFiniteNumber(const json::value& v) {
  if (v.is_double()) return !std::isfinite(v.get_double());
  if (v.is_array()) {
    for (const auto& e : v.get_array()) {
      if (HasNonFiniteNumber(e)) return true;
    }
  }
  if (v.is_object()) {
    for (const auto& kv : v.get_object()) {
      if (HasNonFiniteNumber(kv.value())) return true;
    }
  }
  return false;
}

}  // namespace

bool IsValidId(const json::value& id) {
  if (id.is_string()) return true;
  if (id.is_int64()) return true;
  if (id.is_uint64()) return id.get_uint64() <= static_cast<uint64_t>(INT64_MAX);
  return false;
}

std::string IdKey(const json::value& id) { return ToJson(id); }

tl::expected<Message, ParseFailure> ParseMessage(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) {
    return tl::unexpected(
        ParseFailure{RpcError(kParseError, fmt::format("Parse error: {}", ec.message())), nullptr});
  }
  if (HasNonFiniteNumber(v)) {
    return tl::unexpected(ParseFailure{
        RpcError(kParseError, "Parse error: a number is out of range (beyond double precision)"),
        nullptr});
  }
  if (v.is_array()) {
    return tl::unexpected(Invalid("Invalid Request: JSON-RPC batches are not supported by MCP"));
  }
  if (!v.is_object()) return tl::unexpected(Invalid("Invalid Request: not a JSON object"));
  json::object& o = v.get_object();
  // The id, when readable, goes into any error we answer.
  json::value id = nullptr;
  const json::value* idv = o.if_contains("id");
  if (idv && IsValidId(*idv)) id = *idv;

  const json::value* version = o.if_contains("jsonrpc");
  if (!version || !version->is_string() || version->get_string() != "2.0") {
    return tl::unexpected(Invalid("Invalid Request: \"jsonrpc\" must be \"2.0\"", id));
  }
  Message m;
  const json::value* method = o.if_contains("method");
  if (method) {
    if (!method->is_string()) {
      return tl::unexpected(Invalid("Invalid Request: \"method\" must be a string", id));
    }
    m.method = std::string(method->get_string());
    if (const json::value* p = o.if_contains("params")) {
      if (!p->is_object()) {
        return tl::unexpected(Invalid("Invalid Request: \"params\" must be an object", id));
      }
      m.params = p->get_object();
      m.has_params = true;
    }
    if (idv) {
      if (!IsValidId(*idv)) {
        return tl::unexpected(
            Invalid("Invalid Request: \"id\" must be a string or an integer (not null)"));
      }
      m.kind = MessageKind::kRequest;
      m.id = *idv;
    } else {
      m.kind = MessageKind::kNotification;
    }
    return m;
  }
  // A response: exactly one of result and error.
  const json::value* result = o.if_contains("result");
  const json::value* error = o.if_contains("error");
  if ((result == nullptr) == (error == nullptr)) {
    return tl::unexpected(Invalid(
        "Invalid Request: a message needs \"method\", or exactly one of \"result\" and \"error\"",
        id));
  }
  if (idv && !idv->is_null() && !IsValidId(*idv)) {
    return tl::unexpected(Invalid("Invalid Request: \"id\" must be a string or an integer"));
  }
  m.id = idv ? *idv : json::value(nullptr);
  if (result) {
    if (!result->is_object()) {
      return tl::unexpected(Invalid("Invalid Request: \"result\" must be an object", id));
    }
    if (m.id.is_null()) return tl::unexpected(Invalid("Invalid Request: a result needs an id"));
    m.kind = MessageKind::kResult;
    m.result = result->get_object();
    return m;
  }
  if (!error->is_object()) {
    return tl::unexpected(Invalid("Invalid Request: \"error\" must be an object", id));
  }
  const json::object& e = error->get_object();
  const json::value* code = e.if_contains("code");
  auto code_int = code ? JsonToInt64(*code) : std::nullopt;
  if (!code_int || *code_int < INT32_MIN || *code_int > INT32_MAX) {
    return tl::unexpected(Invalid("Invalid Request: error \"code\" must be an integer", id));
  }
  const json::value* msg = e.if_contains("message");
  if (!msg || !msg->is_string()) {
    return tl::unexpected(Invalid("Invalid Request: error \"message\" must be a string", id));
  }
  m.kind = MessageKind::kError;
  m.error.code = static_cast<int>(*code_int);
  m.error.message = std::string(msg->get_string());
  if (const json::value* d = e.if_contains("data")) m.error.data = *d;
  return m;
}

std::string SerializeRequest(const json::value& id, std::string_view method,
                             const json::object& params) {
  json::object o;
  o["jsonrpc"] = "2.0";
  o["id"] = id;
  o["method"] = method;
  o["params"] = params;
  return ToJson(o);
}

std::string SerializeNotification(std::string_view method, const json::object& params) {
  json::object o;
  o["jsonrpc"] = "2.0";
  o["method"] = method;
  if (!params.empty()) o["params"] = params;
  return ToJson(o);
}

std::string SerializeResult(const json::value& id, const json::object& result) {
  json::object o;
  o["jsonrpc"] = "2.0";
  o["id"] = id;
  o["result"] = result;
  return ToJson(o);
}

std::string SerializeError(const json::value& id, const RpcError& error) {
  json::object e;
  e["code"] = error.code;
  e["message"] = JsonString(error.message);
  if (!error.data.is_null()) e["data"] = error.data;
  json::object o;
  o["jsonrpc"] = "2.0";
  o["id"] = id;
  o["error"] = std::move(e);
  return ToJson(o);
}

}  // namespace deepbox::mcp
