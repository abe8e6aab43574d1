// HTTP/1.1 client with keep-alive pooling, TLS (system CAs, custom CA, mTLS),
// unix sockets, deadlines, and streaming response bodies (SSE, watches,
// NDJSON). Thread-safe: concurrent requests use separate pooled connections.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "net/conn.h"
#include "net/http.h"

namespace deepbox::net {

struct ClientOptions {
  std::chrono::milliseconds connect_timeout{10000};
  // Longest silence while waiting for response bytes (0 = unbounded).
  std::chrono::milliseconds read_idle_timeout{300000};
  TlsClientConfig tls;
  size_t max_idle_connections = 16;
  size_t max_response_bytes = 512u << 20;  // non-streaming responses only
  Headers default_headers;                 // sent with every request
  std::string user_agent = "deepbox/0.1";
};

struct ClientRequest {
  std::string method = "GET";
  std::string target = "/";  // path + optional query, already encoded
  Headers headers;
  std::string body;
  // Instead of `body`: the body is pulled from body_source as it is sent, in
  // bounded memory. It fills `buf` (up to `size` bytes) and returns the count,
  // 0 at the end, or an error that aborts the request. With body_length the
  // request carries a Content-Length (the source must then yield exactly that
  // many bytes), otherwise it is chunked. Such a request always uses a fresh
  // connection and is never retried (the source cannot be rewound). If the
  // server answers before the body is all sent (an early error such as 413 or
  // a full disk), sending stops and that answer is returned.
  std::function<Result<size_t>(char* buf, size_t size)> body_source;
  std::optional<uint64_t> body_length;
  // Whole-request deadline (0 = none beyond read_idle_timeout).
  std::chrono::milliseconds timeout{0};
  // Optional fd (eventfd/pipe): once readable, waits for response bytes end at
  // once with CANCELLED (e.g. Ctrl-C during a silent model call).
  int cancel_fd = -1;
};

// Whether an error of Send/SendStreaming says that no connection could be
// made: nothing of the request was sent, so sending it again is safe.
bool NothingSent(const Error& error);

class HttpClient {
 public:
  // base_url: "http://host:port", "https://host", or "unix:/path/to.sock".
  // A path in base_url is prefixed to every request target.
  static Result<std::unique_ptr<HttpClient>> Create(std::string_view base_url,
                                                    ClientOptions options = {});
  ~HttpClient();

  Result<Response> Send(const ClientRequest& request);

  // Streams the body: on_head sees status and headers (body empty) and may
  // return false to stop; on_data receives body bytes as they arrive (chunked
  // framing removed) and may return false to stop. The returned Response has
  // the head and an empty body.
  Result<Response> SendStreaming(const ClientRequest& request,
                                 const std::function<bool(const Response& head)>& on_head,
                                 const std::function<bool(std::string_view data)>& on_data);

  // Drops idle pooled connections (e.g. after the server restarted).
  void CloseIdle();
  const std::string& base_url() const;

  struct Impl;

 private:
  explicit HttpClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepbox::net
