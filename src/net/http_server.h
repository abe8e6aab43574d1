// A small, robust HTTP/1.1 server: thread per connection, keep-alive, chunked
// streaming responses, TLS optional, unix or TCP listeners. Handlers are plain
// blocking functions, which keeps the daemon's code simple; every socket wait
// has a deadline and shutdown interrupts idle connections.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"
#include "net/conn.h"
#include "net/http.h"

namespace deepbox::net {

// How a handler answers. Either Send() once, or BeginStream() then any number
// of WriteChunk() (each flushed to the socket at once) and EndStream().
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  virtual Status Send(const Response& response) = 0;
  virtual Status BeginStream(int status, const Headers& headers) = 0;
  virtual Status WriteChunk(std::string_view data) = 0;
  virtual Status EndStream() = 0;
  // True once the client has closed its side: a streaming handler stops early.
  virtual bool ClientGone() const = 0;
  virtual bool started() const = 0;
};

using Handler = std::function<void(Request& request, ResponseWriter& writer)>;

struct ServerOptions {
  size_t max_body_bytes = 256u << 20;  // larger buffered bodies get 413
  // Requests for which this returns true (it sees method, path, query and
  // headers) are not buffered: the handler reads request.body_reader as the
  // bytes arrive, with no size cap (read_timeout then bounds each silence,
  // not the whole body). For uploads of any size in bounded memory.
  std::function<bool(const Request& head)> stream_request_body;
  size_t max_header_bytes = 64u << 10;
  std::chrono::milliseconds idle_timeout{60000};  // keep-alive wait for the next request
  std::chrono::milliseconds read_timeout{60000};  // to receive one whole request
  std::chrono::milliseconds write_timeout{60000};
  size_t max_connections = 1024;    // beyond it new connections get 503 and are closed
  std::shared_ptr<TlsContext> tls;  // non-null: HTTPS
  int unix_socket_mode = 0600;
  std::string server_header = "deepbox";
};

class HttpServer {
 public:
  // Binds at once (so the caller knows the port, or gets the error); serving
  // starts with Start() or Run().
  static Result<std::unique_ptr<HttpServer>> Create(const Endpoint& endpoint, Handler handler,
                                                    ServerOptions options = {});
  ~HttpServer();

  // Serves on a background thread.
  void Start();
  // Serves on the calling thread until Stop().
  void Run();
  // Stops accepting, interrupts idle keep-alive connections, waits up to
  // `grace` for in-flight requests, then returns (their threads finish alone).
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));

  int port() const;
  const Endpoint& endpoint() const;
  size_t active_connections() const;

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepbox::net
