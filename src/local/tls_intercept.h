// One intercepted HTTPS connection of the egress proxy (egress_proxy.h): the
// sandbox's TLS to a secret host ends here, with a leaf of the sandbox's own
// CA (sandbox_ca.h), and a second, fully verified TLS goes upstream; between
// the two, the requests' placeholders become the secrets' values
// (secret_rewrite.h) where the rules allow it.
//
// Order: the upstream handshake comes first, offering what the client's
// ClientHello offered (of h2 and http/1.1), so the client's ALPN gets the
// protocol the upstream chose and both legs speak the same one. A failed
// upstream handshake (an unverifiable certificate, a name mismatch, no TLS)
// still completes the client's handshake and answers HTTP/1.1 502 with the
// reason, so the sandbox's tool prints why instead of a bare reset.
// HTTP/1.x: requests are parsed (head, then the body exactly as the head
// frames it, then the next head: keep-alive and pipelining work); each head
// is rewritten; an Upgrade (WebSocket) or a CONNECT inside switches the rest
// of the connection to a plain relay. Responses pass unparsed.
// HTTP/2: frames from the client pass through H2RequestRewriter, frames from
// the upstream are observed (its SETTINGS) and passed unchanged.
// A refused request (malformed, oversized, header splitting) ends the
// connection: the first request of a connection gets a 400 with the reason,
// a later one (a response may be on its way) just the close.
//
// Both legs use memory BIOs over non-blocking sockets, so one thread and one
// poll() drive the connection, as Relay() does for tunnels; ciphertext queued
// for a socket (1 MiB: the other leg is not read meanwhile) and read ahead
// from one (256 KiB: the rest stays in the socket) are bounded. It ends when
// both legs have closed, on stop_fd or cancel_fd (a policy change), after
// idle_timeout without traffic, or on an error.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "local/egress_log.h"
#include "local/sandbox_ca.h"
#include "local/secret_rewrite.h"

namespace deepbox::local {

struct InterceptRequest {
  int client_fd = -1;        // the sandbox's side, after "200 Connection established"
  int upstream_fd = -1;      // connected to host:port
  std::string client_hello;  // bytes already read from the client (its ClientHello, maybe more)
  std::vector<std::string> client_alpn;  // what the ClientHello offered
  std::string host;
  int port = 443;
  SandboxCa* ca = nullptr;
  std::shared_ptr<SSL_CTX> upstream_ctx;
  const std::vector<SecretBinding>* secrets = nullptr;
  bool substitute_query = false;
  int stop_fd = -1;
  int cancel_fd = -1;
  std::chrono::milliseconds handshake_timeout{30000};
  std::chrono::milliseconds idle_timeout{600000};
  // One event per request (method, protocol, secrets substituted or withheld).
  std::function<void(EgressEvent)> on_request;
};

struct InterceptOutcome {
  std::string protocol;               // "h2" | "http/1.1" ("" if no handshake completed)
  uint64_t bytes_up = 0;              // plaintext from the client
  uint64_t bytes_down = 0;            // plaintext from the upstream
  std::vector<std::string> secrets;   // names substituted on the connection
  std::vector<std::string> withheld;  // names seen but not substituted
  std::string error;                  // why it ended early ("" = a normal end)
  bool refused = false;               // error is a refusal (policy or malformed request)
};

InterceptOutcome InterceptTls(const InterceptRequest& request);

}  // namespace deepbox::local
