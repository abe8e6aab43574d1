// JSON-RPC 2.0 framing as MCP uses it: one message per line (stdio) or per
// HTTP body. Parsing never throws and classifies every malformed input with
// the JSON-RPC error the peer should get (parse error, invalid request).
//
// MCP narrows JSON-RPC: ids are strings or integers (never null, never
// fractional), params is an object when present, batches are not allowed
// (removed in 2025-06-18).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"

namespace deepbox::mcp {

// Standard JSON-RPC codes.
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;
// MCP 2026-07-28 codes (the -32020..-32099 range is the spec's).
inline constexpr int kHeaderMismatch = -32020;
inline constexpr int kMissingRequiredClientCapability = -32021;
inline constexpr int kUnsupportedProtocolVersion = -32022;

struct RpcError {
  int code = kInternalError;
  std::string message;
  json::value data;  // null = absent

  RpcError() = default;
  RpcError(int c, std::string m, json::value d = nullptr)
      : code(c), message(std::move(m)), data(std::move(d)) {}
};

enum class MessageKind { kRequest, kNotification, kResult, kError };

struct Message {
  MessageKind kind = MessageKind::kRequest;
  json::value id;      // kRequest, kResult, kError (null when the peer could not tell)
  std::string method;  // kRequest, kNotification
  json::object params;
  bool has_params = false;
  json::object result;  // kResult
  RpcError error;       // kError

  bool is_request() const { return kind == MessageKind::kRequest; }
  bool is_notification() const { return kind == MessageKind::kNotification; }
  bool is_response() const { return kind == MessageKind::kResult || kind == MessageKind::kError; }
};

// Why a message could not be accepted, and the id to answer (null if unreadable).
struct ParseFailure {
  RpcError error;
  json::value id;
};

// One message. Anything that is not exactly a request, notification or
// response is a ParseFailure: -32700 for bytes that are not JSON, -32600 for
// JSON that is not a valid MCP JSON-RPC message (batches included).
tl::expected<Message, ParseFailure> ParseMessage(std::string_view text);

// True for a valid MCP request id: a string or an integer.
bool IsValidId(const json::value& id);
// The id for logs and maps: strings quoted, so "1" and 1 stay distinct.
std::string IdKey(const json::value& id);

// Serializers; the output is one line (JSON never contains a raw newline).
std::string SerializeRequest(const json::value& id, std::string_view method,
                             const json::object& params);
std::string SerializeNotification(std::string_view method, const json::object& params);
std::string SerializeResult(const json::value& id, const json::object& result);
std::string SerializeError(const json::value& id, const RpcError& error);

}  // namespace deepbox::mcp
