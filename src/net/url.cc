#include "net/url.h"

#include <fmt/format.h>

#include <charconv>

namespace deepbox::net {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Result<Url> ParseUrl(std::string_view text) {
  Url url;
  if (text.starts_with("unix:")) {
    url.scheme = "unix";
    url.path = std::string(text.substr(5));
    if (url.path.starts_with("//")) url.path = url.path.substr(2);
    if (url.path.empty()) return MakeError(ErrorCode::kInvalidArgument, "unix: URL needs a path");
    return url;
  }
  auto sep = text.find("://");
  if (sep == std::string_view::npos) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("URL '{}' has no scheme (expected http:// or https://)", text));
  }
  url.scheme = std::string(text.substr(0, sep));
  for (auto& c : url.scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (url.scheme != "http" && url.scheme != "https") {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("URL '{}': unsupported scheme '{}'", text, url.scheme));
  }
  std::string_view rest = text.substr(sep + 3);
  size_t path_start = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, path_start);
  std::string_view tail = path_start == std::string_view::npos ? "" : rest.substr(path_start);
  if (auto at = authority.rfind('@'); at != std::string_view::npos) authority.remove_prefix(at + 1);
  std::string_view port_text;
  if (authority.starts_with("[")) {
    auto close = authority.find(']');
    if (close == std::string_view::npos) {
      return MakeError(ErrorCode::kInvalidArgument, fmt::format("URL '{}': bad IPv6 host", text));
    }
    url.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (after.starts_with(":")) port_text = after.substr(1);
  } else {
    auto colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      url.host = std::string(authority.substr(0, colon));
      port_text = authority.substr(colon + 1);
    } else {
      url.host = std::string(authority);
    }
  }
  if (url.host.empty())
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("URL '{}' has no host", text));
  url.port = url.scheme == "https" ? 443 : 80;
  if (!port_text.empty()) {
    int port = 0;
    auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || p != port_text.data() + port_text.size() || port <= 0 ||
        port > 65535) {
      return MakeError(ErrorCode::kInvalidArgument, fmt::format("URL '{}': bad port", text));
    }
    url.port = port;
  }
  if (auto hash = tail.find('#'); hash != std::string_view::npos) tail = tail.substr(0, hash);
  auto q = tail.find('?');
  url.path = std::string(tail.substr(0, q));
  if (q != std::string_view::npos) url.query = std::string(tail.substr(q + 1));
  if (url.path.empty()) url.path = "/";
  return url;
}

std::string PercentEncode(std::string_view text, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    auto c = static_cast<unsigned char>(ch);
    bool unreserved =
        std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/');
    if (unreserved) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

Result<std::string> PercentDecode(std::string_view text, bool form_encoding) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size() || HexValue(text[i + 1]) < 0 || HexValue(text[i + 2]) < 0) {
        return MakeError(ErrorCode::kInvalidArgument, "bad percent-encoding");
      }
      out.push_back(static_cast<char>(HexValue(text[i + 1]) * 16 + HexValue(text[i + 2])));
      i += 2;
    } else if (c == '+' && form_encoding) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> ParseQuery(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? "" : query.substr(amp + 1);
    if (part.empty()) continue;
    auto eq = part.find('=');
    std::string_view k = part.substr(0, eq);
    std::string_view v = eq == std::string_view::npos ? "" : part.substr(eq + 1);
    auto dk = PercentDecode(k, true);
    auto dv = PercentDecode(v, true);
    out.emplace_back(dk ? *dk : std::string(k), dv ? *dv : std::string(v));
  }
  return out;
}

std::string BuildQuery(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string out;
  for (const auto& [k, v] : params) {
    if (!out.empty()) out.push_back('&');
    out += PercentEncode(k);
    out.push_back('=');
    out += PercentEncode(v);
  }
  return out;
}

}  // namespace deepbox::net
