#include "mcp/protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/base64.h"
#include "common/version.h"

namespace deepbox::mcp {

const std::vector<std::string>& SupportedVersions() {
  static const std::vector<std::string> v = {std::string(kModernVersion), "2025-11-25",
                                             "2025-06-18"};
  return v;
}

const std::vector<std::string>& LegacyVersions() {
  static const std::vector<std::string> v = {"2025-11-25", "2025-06-18"};
  return v;
}

bool IsModernVersion(std::string_view version) { return version == kModernVersion; }

bool IsLegacyVersion(std::string_view version) {
  const auto& v = LegacyVersions();
  return std::find(v.begin(), v.end(), version) != v.end();
}

std::string NegotiateLegacyVersion(std::string_view requested) {
  if (IsLegacyVersion(requested)) return std::string(requested);
  return std::string(kLatestLegacyVersion);
}

bool IsAcceptedLegacyHeaderVersion(std::string_view version) {
  return IsLegacyVersion(version) || version == "2025-03-26";
}

namespace {

constexpr std::string_view kLogLevelNames[] = {"debug", "info",     "notice", "warning",
                                               "error", "critical", "alert",  "emergency"};

}  // namespace

std::optional<LogLevel> ParseLogLevel(std::string_view name) {
  for (size_t i = 0; i < std::size(kLogLevelNames); ++i) {
    if (kLogLevelNames[i] == name) return static_cast<LogLevel>(i);
  }
  return std::nullopt;
}

std::string_view LogLevelName(LogLevel level) { return kLogLevelNames[static_cast<size_t>(level)]; }

std::string SerializeLogMessage(LogLevel level, std::string_view logger, const json::value& data) {
  json::object p;
  p["level"] = LogLevelName(level);
  if (!logger.empty()) p["logger"] = logger;
  p["data"] = data;
  return SerializeNotification("notifications/message", p);
}

namespace {

const json::object* MetaOf(const json::object& params) {
  const json::value* meta = params.if_contains("_meta");
  return meta && meta->is_object() ? &meta->get_object() : nullptr;
}

}  // namespace

std::optional<std::string> MetaProtocolVersion(const json::object& params) {
  const json::object* meta = MetaOf(params);
  if (!meta) return std::nullopt;
  const json::value* v = meta->if_contains(kMetaProtocolVersion);
  if (!v || !v->is_string()) return std::nullopt;
  return std::string(v->get_string());
}

bool HasModernMeta(const json::object& params) { return MetaProtocolVersion(params).has_value(); }

RpcError UnsupportedVersionError(std::string_view requested) {
  json::object data;
  json::array supported;
  for (const auto& v : SupportedVersions()) supported.emplace_back(v);
  data["supported"] = std::move(supported);
  data["requested"] = JsonString(requested);
  return RpcError(kUnsupportedProtocolVersion, "Unsupported protocol version", std::move(data));
}

tl::expected<RequestMeta, RpcError> ReadModernMeta(const json::object& params) {
  const json::value* metav = params.if_contains("_meta");
  if (!metav || !metav->is_object()) {
    return tl::unexpected(
        RpcError(kInvalidParams, fmt::format("Invalid params: missing _meta with \"{}\" and \"{}\"",
                                             kMetaProtocolVersion, kMetaClientCapabilities)));
  }
  const json::object& meta = metav->get_object();
  const json::value* version = meta.if_contains(kMetaProtocolVersion);
  if (!version || !version->is_string()) {
    return tl::unexpected(RpcError(
        kInvalidParams, fmt::format("Invalid params: _meta[\"{}\"] must be a protocol version "
                                    "string",
                                    kMetaProtocolVersion)));
  }
  RequestMeta out;
  out.protocol_version = std::string(version->get_string());
  if (!IsModernVersion(out.protocol_version)) {
    return tl::unexpected(UnsupportedVersionError(out.protocol_version));
  }
  const json::value* caps = meta.if_contains(kMetaClientCapabilities);
  if (!caps || !caps->is_object()) {
    return tl::unexpected(RpcError(
        kInvalidParams,
        fmt::format("Invalid params: _meta[\"{}\"] must be an object", kMetaClientCapabilities)));
  }
  out.client_capabilities = caps->get_object();
  if (const json::value* info = meta.if_contains(kMetaClientInfo); info && info->is_object()) {
    out.client_info = info->get_object();
  }
  return out;
}

json::value JsonNumber(double value) {
  if (std::isfinite(value) && std::floor(value) == value && std::fabs(value) < 9007199254740992.0) {
    return static_cast<int64_t>(value);
  }
  return value;
}

json::value ProgressToken(const json::object& params) {
  const json::object* meta = MetaOf(params);
  if (!meta) return nullptr;
  const json::value* t = meta->if_contains("progressToken");
  if (!t || !IsValidId(*t)) return nullptr;  // a string or an integer, like an id
  return *t;
}

json::object ServerImplementation() {
  json::object o;
  o["name"] = "deepbox";
  o["title"] = "deepbox sandboxes";
  o["version"] = std::string(kVersion);
  return o;
}

namespace {

constexpr std::string_view kSentinelPrefix = "=?base64?";
constexpr std::string_view kSentinelSuffix = "?=";

bool IsPlain(std::string_view v) {
  if (v.empty()) return true;
  if (v.front() == ' ' || v.front() == '\t' || v.back() == ' ' || v.back() == '\t') return false;
  for (unsigned char c : v) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return !(v.starts_with(kSentinelPrefix) && v.ends_with(kSentinelSuffix));
}

}  // namespace

std::string EncodeHeaderValue(std::string_view value) {
  if (IsPlain(value)) return std::string(value);
  return std::string(kSentinelPrefix) + Base64Encode(value) + std::string(kSentinelSuffix);
}

std::optional<std::string> DecodeHeaderValue(std::string_view header) {
  if (header.size() >= kSentinelPrefix.size() + kSentinelSuffix.size() &&
      header.starts_with(kSentinelPrefix) && header.ends_with(kSentinelSuffix)) {
    std::string_view b64 = header.substr(
        kSentinelPrefix.size(), header.size() - kSentinelPrefix.size() - kSentinelSuffix.size());
    return Base64Decode(b64);
  }
  for (unsigned char c : header) {
    if ((c < 0x20 && c != '\t') || c == 0x7f) return std::nullopt;
  }
  return std::string(header);
}

}  // namespace deepbox::mcp
