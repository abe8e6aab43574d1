// Plain HTTP/1.1 message types shared by the server and the client. Nothing
// here includes Boost.Beast: Beast stays inside http_server.cc/http_client.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace deepbox::net {

// Ordered, case-insensitive header list (names keep their spelling).
class Headers {
 public:
  void Add(std::string name, std::string value) {
    entries_.emplace_back(std::move(name), std::move(value));
  }
  // Replaces every header of that name.
  void Set(std::string name, std::string value);
  void Remove(std::string_view name);
  std::optional<std::string> Get(std::string_view name) const;
  bool Has(std::string_view name) const { return Get(name).has_value(); }
  const std::vector<std::pair<std::string, std::string>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::string, std::string>> entries_;
};

bool EqualsIgnoreCase(std::string_view a, std::string_view b);

// A request body read as it arrives, for routes the server streams (see
// ServerOptions::stream_request_body): uploads of any size in bounded memory.
class BodyReader {
 public:
  virtual ~BodyReader() = default;
  // Reads up to `size` bytes into `data`; 0 at the end of the body. A
  // malformed or truncated body or a silent client is an error (INVALID_ARGUMENT,
  // UNAVAILABLE, TIMEOUT, CANCELLED), after which the connection is closed.
  virtual Result<size_t> Read(char* data, size_t size) = 0;
  // The announced length (nullopt for a chunked body).
  virtual std::optional<uint64_t> content_length() const = 0;
};

struct Request {
  std::string method;    // "GET", "POST", ...
  std::string target;    // raw request target: "/v1/files/a%20b?mode=0644"
  std::string path;      // percent-decoded path, no query: "/v1/files/a b"
  std::string raw_path;  // path as sent, still encoded (for routes that decode per segment)
  std::vector<std::pair<std::string, std::string>> query;  // decoded
  Headers headers;
  std::string body;
  // Set instead of `body` for streamed routes; valid during the handler only.
  BodyReader* body_reader = nullptr;

  std::optional<std::string> Query(std::string_view name) const;
  std::optional<std::string> Header(std::string_view name) const { return headers.Get(name); }
};

struct Response {
  int status = 200;
  Headers headers;
  std::string body;

  static Response Json(int status, std::string body);
  static Response Text(int status, std::string body);
};

}  // namespace deepbox::net
