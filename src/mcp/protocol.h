// MCP protocol revisions and the per-request envelope.
//
// Two generations ("eras") are spoken:
//   modern  2026-07-28: no handshake; every request carries
//           _meta["io.modelcontextprotocol/protocolVersion"] and
//           ["io.modelcontextprotocol/clientCapabilities"]; every result carries
//           resultType (and serverInfo in _meta); server/discover is mandatory.
//   legacy  2025-11-25 and 2025-06-18: an initialize handshake fixes the
//           version and capabilities for the connection (stdio) or session
//           (HTTP Mcp-Session-Id).
// On HTTP, modern requests mirror method, name and version into headers
// (Mcp-Method, Mcp-Name, MCP-Protocol-Version), which must match the body.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "mcp/jsonrpc.h"

namespace deepbox::mcp {

inline constexpr std::string_view kModernVersion = "2026-07-28";
inline constexpr std::string_view kLatestLegacyVersion = "2025-11-25";

// Every version deepbox speaks, newest first: 2026-07-28, 2025-11-25, 2025-06-18.
const std::vector<std::string>& SupportedVersions();
// Versions reachable through initialize, newest first.
const std::vector<std::string>& LegacyVersions();
bool IsModernVersion(std::string_view version);
bool IsLegacyVersion(std::string_view version);
// The version an initialize answers with: the client's if supported, else the
// newest legacy version (the client then decides whether to continue).
std::string NegotiateLegacyVersion(std::string_view requested);
// An MCP-Protocol-Version header accepted on a legacy HTTP session: a
// version initialize reaches, or 2025-03-26, which the official SDKs still
// speak and put on requests (the conformance suite's raw requests too).
// initialize never negotiates 2025-03-26: it requires JSON-RPC batches.
bool IsAcceptedLegacyHeaderVersion(std::string_view version);

// Logging (legacy sessions: logging/setLevel, notifications/message), in
// RFC 5424's order of severity.
enum class LogLevel { kDebug, kInfo, kNotice, kWarning, kError, kCritical, kAlert, kEmergency };
std::optional<LogLevel> ParseLogLevel(std::string_view name);
std::string_view LogLevelName(LogLevel level);
// notifications/message {level, logger, data}, serialized.
std::string SerializeLogMessage(LogLevel level, std::string_view logger, const json::value& data);

// _meta keys.
inline constexpr std::string_view kMetaProtocolVersion = "io.modelcontextprotocol/protocolVersion";
inline constexpr std::string_view kMetaClientCapabilities =
    "io.modelcontextprotocol/clientCapabilities";
inline constexpr std::string_view kMetaClientInfo = "io.modelcontextprotocol/clientInfo";
inline constexpr std::string_view kMetaServerInfo = "io.modelcontextprotocol/serverInfo";

// The modern envelope of one request.
struct RequestMeta {
  std::string protocol_version;
  json::object client_capabilities;
  json::object client_info;  // empty when not sent
};

// Whether params carry a modern protocol version (a string at
// _meta["io.modelcontextprotocol/protocolVersion"]): such a request is
// served statelessly whatever came before on the connection.
bool HasModernMeta(const json::object& params);
// The version string there, if any (also for unsupported versions).
std::optional<std::string> MetaProtocolVersion(const json::object& params);

// Validates the modern envelope: -32602 when a required field is missing or
// malformed, -32022 (data {supported, requested}) for a version deepbox does
// not speak in the modern era.
tl::expected<RequestMeta, RpcError> ReadModernMeta(const json::object& params);

// _meta.progressToken (a string or an integer), or null.
json::value ProgressToken(const json::object& params);

RpcError UnsupportedVersionError(std::string_view requested);

// A JSON number that prints as an integer when the value is one (progress
// counts: 19, not 1.9E1).
json::value JsonNumber(double value);

// {"name":"deepbox","title":...,"version":...}
json::object ServerImplementation();

// Headers: values that are not plain visible ASCII travel in the base64
// sentinel form "=?base64?...?=" (RFC 9110 field values, MCP Value Encoding).
std::string EncodeHeaderValue(std::string_view value);
// The decoded value; nullopt if it is neither plain nor a valid sentinel.
std::optional<std::string> DecodeHeaderValue(std::string_view header);

}  // namespace deepbox::mcp
