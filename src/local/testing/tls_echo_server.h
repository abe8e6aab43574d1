// Test-only: an HTTPS server that answers every request with what it
// received. It stands in for an upstream server with its own CA (the egress
// proxy's tests): a test sees exactly which header values arrived, over which
// protocol, and how many requests shared the connection.
//
// TLS 1.2+ (OpenSSL). ALPN: "h2" when the client offers it and offer_h2 is
// set, else "http/1.1" when offered, else none (then HTTP/1.1).
//   HTTP/1.1: keep-alive (until "Connection: close", or HTTP/1.0 without
//             "Connection: keep-alive"); pipelining works; bodies by
//             Content-Length or chunked ("Expect: 100-continue" gets its 100).
//             A malformed head (both Content-Length and Transfer-Encoding,
//             obs-fold, a transfer coding other than chunked...) gets 400, a
//             head over 64 KiB 431, and the connection closes.
//   HTTP/2:   nghttp2's server session; any number of streams on the
//             connection; nghttp2 does the flow control both ways.
// Each request is answered once its body has ended: 200, Content-Type
// text/plain, Content-Length, and the echo text (HEAD: no body):
//   protocol <h2|http/1.1> request <n: 1-based, on this connection>
//   method <METHOD>
//   path <request target, query included>
//   body-bytes <n>
//   header <lower-case name>: <value>     one per received header, in order
//                                         (h2: pseudo-headers included, e.g.
//                                         "header :authority: echo.test:443")
//   trailer <lower-case name>: <value>    trailers of a chunked or h2 body
// Every line ends in "\n"; values are as received (h1: without the OWS around
// them). Requests are numbered as they arrive (h2: in the order their streams
// open).
// Except GET/HEAD/... on "/bytes/<N>" (query ignored, N <= 64 GiB): N bytes
// of the repeating pattern "abcdefghijklmnopqrstuvwxyz" (byte i is
// 'a' + i % 26), application/octet-stream, generated as sent (never
// buffered): for throughput benchmarks.
// A failed handshake, a protocol error or a peer silent for 60 s ends that
// connection only; the server keeps serving. Connections have TCP_NODELAY,
// as real servers' do (a response's head and body are separate records).
#pragma once

#include <memory>
#include <string>

#include "common/error.h"
#include "common/unique_fd.h"

namespace deepbox::local::testing {

struct TlsEchoConfig {
  std::string cert_chain_pem;  // the leaf first, then its intermediates
  std::string key_pem;
  bool offer_h2 = true;  // false: ALPN never selects "h2"
};

// Serves `listen_socket` (a listening TCP socket) for ever: one forked child
// per connection (it dies with this process: PR_SET_PDEATHSIG), SIGCHLD
// ignored. For a forked server process, e.g. TestWorld's WorldServer:
//   WorldServer(netns, [] { return BindAny(SOCK_STREAM, 443); },
//               [config](int s) { ServeTlsEcho(s, config); });
// Only from a single-threaded process (it forks and runs C++ in the child).
// A config OpenSSL refuses, or not a listening socket: a message on stderr,
// _exit(3).
[[noreturn]] void ServeTlsEcho(int listen_socket, const TlsEchoConfig& config);

// The same server in this process: a thread accepting, a thread per
// connection. The destructor stops both (an eventfd every wait polls) and
// joins them.
class TlsEchoServer {
 public:
  // `listener`: a listening TCP socket (made non-blocking here).
  static Result<std::unique_ptr<TlsEchoServer>> Start(UniqueFd listener, TlsEchoConfig config);
  ~TlsEchoServer();
  TlsEchoServer(const TlsEchoServer&) = delete;
  TlsEchoServer& operator=(const TlsEchoServer&) = delete;

  // The listener's TCP port (0 for another kind of socket).
  int port() const { return port_; }

 private:
  struct State;
  TlsEchoServer() = default;
  std::unique_ptr<State> state_;
  int port_ = 0;
};

}  // namespace deepbox::local::testing
