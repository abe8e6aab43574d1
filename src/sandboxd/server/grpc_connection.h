// gRPC over cleartext HTTP/2 with prior knowledge (what grpcio's insecure
// channels speak), for upstream clients that run commands with
// process.v1.ProcessService (the k8s-agent-sandbox SDK's sandboxd runtime).
// net::HttpServer hands over a connection whose first bytes are the HTTP/2
// client preface (ServerOptions::serve_h2_prior_knowledge); this serves it
// until the client leaves. Unary calls only: each request message is read
// whole (capped), the handler runs on a thread of its own per call, and its
// reply goes back as gRPC's response headers, one message and trailers (or
// trailers only for an error).
//
// One thread owns the HTTP/2 session (libnghttp2, loaded on first use:
// nghttp2_loader.h) and the socket; call threads only hand their reply back
// through an eventfd. When the client resets a stream or the connection ends,
// the call's cancel fd becomes readable (a command is killed) and the
// connection waits for every call thread before it returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "net/conn.h"
#include "net/http.h"

namespace deepbox::sandboxd {

// gRPC status codes (grpc/doc/statuscodes.md).
enum class GrpcStatus : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kUnauthenticated = 16,
};

struct GrpcCall {
  std::string method;     // the :path, "/process.v1.ProcessService/Execute"
  net::Headers metadata;  // every request header but the pseudo-headers
  // grpc-timeout, the call's deadline as a duration from its arrival.
  std::optional<std::chrono::milliseconds> timeout;
  std::string message;  // the one request message (uncompressed)
  int cancel_fd = -1;   // readable once the client cancelled or left
};

struct GrpcReply {
  GrpcStatus status = GrpcStatus::kOk;
  std::string status_message;  // grpc-message
  std::string message;         // the response message (status OK only)
};

using GrpcHandler = std::function<GrpcReply(const GrpcCall& call)>;
// Called with a call's method and metadata as soon as its headers are
// complete, before a byte of its message is read: a reply refuses the call
// (its message is never buffered). For the token check.
using GrpcAuthorizer = std::function<std::optional<GrpcReply>(const std::string& method,
                                                              const net::Headers& metadata)>;

struct GrpcServerOptions {
  // Larger request messages get RESOURCE_EXHAUSTED as soon as their length
  // prefix arrives, before a byte of them is buffered (grpcio's default cap
  // on received messages is the same 4 MiB).
  size_t max_message_bytes = 4u << 20;
  // Calls at once per connection (SETTINGS_MAX_CONCURRENT_STREAMS). Calls
  // whose stream was reset but whose thread still ends count too, so that
  // resetting streams at once (HTTP/2 "rapid reset") cannot pile up threads.
  uint32_t max_concurrent_calls = 100;
  // A request's headers (names, values and 32 bytes each, as HTTP/2 counts).
  size_t max_header_bytes = 64u << 10;
  // A connection with no call running and no byte received for this long is
  // closed (GOAWAY), even with streams open (a request that never ends).
  // Zero: never.
  std::chrono::milliseconds idle_timeout{60000};
  GrpcAuthorizer authorize;  // null: every call goes on
};

// The HTTP/2 client preface: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".
inline constexpr std::string_view kHttp2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Serves `conn` (cleartext) whose first bytes, `received`, begin with the
// preface, until the client closes it, a protocol error, or `shutdown_fd`
// becomes readable (then GOAWAY: running calls finish, no new one starts).
// Without libnghttp2 the client gets a GOAWAY that says so.
void ServeGrpcConnection(net::Conn& conn, std::string_view received,
                         const GrpcServerOptions& options, const GrpcHandler& handler,
                         int shutdown_fd);

// "<1-8 digits><H|M|S|m|u|n>" (grpc-timeout), rounded up to milliseconds;
// nullopt when malformed.
std::optional<std::chrono::milliseconds> ParseGrpcTimeout(std::string_view value);
// grpc-message's percent-encoding (bytes outside 0x20..0x7e, and '%').
std::string PercentEncodeGrpcMessage(std::string_view message);

}  // namespace deepbox::sandboxd
