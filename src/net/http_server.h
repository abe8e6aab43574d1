// A small, robust HTTP/1.1 server: thread per connection, keep-alive, chunked
// streaming responses, TLS optional, unix or TCP listeners. Handlers are plain
// blocking functions, which keeps the daemon's code simple; every socket wait
// has a deadline (ServerOptions) and shutdown interrupts idle connections.
// Nothing is queued for a slow reader: a streamed response goes to the socket
// as the handler produces it, so a slow reader blocks its handler (and e.g.
// the command whose output it streams) instead of growing a buffer; a Send()
// response is held once, as the handler built it.
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
  // bytes arrive, with no size cap (the body deadline below still applies).
  // For uploads of any size in bounded memory.
  std::function<bool(const Request& head)> stream_request_body;
  size_t max_header_bytes = 64u << 10;
  // Called with every request's head (method, path, query, headers; no body)
  // before a byte of its body is read or a 100 Continue is sent. A response
  // it returns is sent at once with `Connection: close` and the handler is not
  // called: the body is never read (what the client still sends is discarded
  // for a moment so that it sees the answer, then the connection closes). For
  // checks such as authentication that must cost a refused client no buffer.
  std::function<std::optional<Response>(const Request& head)> authorize_head;
  // Buffered (not streamed) request bodies of all connections together hold
  // at most this many bytes at once: a connection reserves its body's bytes
  // as they arrive and releases them when its handler returns. The request
  // that would cross it gets 503 and the connection closes. 0: no cap.
  size_t max_buffered_body_bytes = size_t{1} << 30;
  // Connections at once from one peer IP address (TCP; IPv4-mapped IPv6
  // counts as IPv4); beyond it a new connection gets 503 and is closed.
  // 0: no cap (behind a proxy every client has the proxy's address).
  size_t max_connections_per_peer = 0;

  // Deadlines, one per phase of a request, so that a slow or silent client
  // holds its connection (and thread) for a bounded time while a large
  // transfer at any sane rate is never cut. Zero disables one.
  //
  // A kept-alive connection waits this long for the first byte of its next
  // request, then is closed without an answer.
  std::chrono::milliseconds idle_timeout{60000};
  // The request line and headers must be complete this long after their
  // first byte (on a new connection: after accept, which also bounds the TLS
  // handshake and a client that never sends). 408, then close: a slowloris
  // client dripping header bytes cannot keep a connection.
  std::chrono::milliseconds header_timeout{20000};
  // The body: no silence longer than body_timeout, and at least body_min_rate
  // bytes/s after a grace of body_timeout, with at most body_timeout of
  // credit banked by a client that was ahead of the rate (a token bucket:
  // each byte pushes the deadline for the next one 1/body_min_rate s further,
  // but never beyond now + body_timeout). 408, then close. So a client that
  // sent most of a body fast cannot then hold its connection and buffer for
  // hours with a byte a minute. Not a whole-body deadline by default:
  // streamed uploads have no size cap, so any fixed time would cut a big
  // enough one. And not a silence bound alone: that lets a client hold a
  // connection forever with one byte per body_timeout (slow POST). The rate
  // bound is Apache mod_reqtimeout's MinRate. Time a streaming handler spends
  // between its reads counts too (it is never near 1 KiB/s).
  std::chrono::milliseconds body_timeout{60000};
  uint64_t body_min_rate = 1024;  // bytes/s; 0: the silence bound only
  // A buffered body (capped by max_body_bytes) must be complete this long
  // after it starts, whatever its rate. 408, then close. Zero: none.
  std::chrono::milliseconds buffered_body_deadline{0};
  // Writes: the connection is cut when the peer accepts no byte for this long
  // (a stalled reader). A bound on progress, not on the whole response, so a
  // large download to a slow but moving reader completes. The kernel accepts
  // data in socket-buffer-sized steps, so a reader slower than about
  // (socket buffer / 4) / write_timeout (tens of KiB per write_timeout) counts
  // as stalled: 1 byte/s is.
  std::chrono::milliseconds write_timeout{60000};
  size_t max_connections = 1024;  // beyond it new connections get 503 and are closed
  // A cleartext connection whose first bytes are the HTTP/2 client preface
  // ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n": HTTP/2 with prior knowledge, what
  // gRPC's insecure channels send) is handed to this on its thread, with the
  // bytes already read, instead of being parsed as HTTP/1.1; the server
  // closes it when this returns. The connection's cancel fd
  // (Conn::cancel_fd) turns readable when Stop() begins. Null: such a
  // connection gets 400 like any malformed request. The preface counts as a
  // request's head for header_timeout.
  std::function<void(Conn& conn, std::string_view received)> serve_h2_prior_knowledge;
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
  // Bytes of buffered request bodies held now (see max_buffered_body_bytes).
  size_t buffered_body_bytes() const;
  // The numeric address the TCP listener is bound to ("127.0.0.1", "::1",
  // "0.0.0.0", "::"); nullopt for a unix socket.
  std::optional<std::string> bound_address() const;

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepbox::net
