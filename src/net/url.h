// URL parsing and percent-encoding for the HTTP client and server.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace deepbox::net {

struct Url {
  std::string scheme;  // "http", "https", "unix"
  std::string host;    // no brackets for IPv6
  int port = 0;        // defaulted from the scheme when absent
  std::string path;    // encoded path, "/" when empty ("unix": the socket path)
  std::string query;   // encoded, without '?'
};

// Accepts http://, https://, and unix:/path/to.sock.
Result<Url> ParseUrl(std::string_view text);

std::string PercentEncode(std::string_view text, bool keep_slash = false);
// Decodes %XX; '+' is left alone unless form_encoding.
Result<std::string> PercentDecode(std::string_view text, bool form_encoding = false);
// "a=1&b=x%20y" -> {{"a","1"},{"b","x y"}}
std::vector<std::pair<std::string, std::string>> ParseQuery(std::string_view query);
std::string BuildQuery(const std::vector<std::pair<std::string, std::string>>& params);

}  // namespace deepbox::net
