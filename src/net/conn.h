// A byte stream over a socket (TCP or unix), optionally wrapped in TLS, with
// deadlines on every read and write. The fd is non-blocking and every wait is a
// poll(), so a stuck peer can never hang a thread past its deadline, and a
// shutdown can interrupt idle waits through a cancel fd.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/unique_fd.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace deepbox::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline Deadline DeadlineAfter(std::chrono::milliseconds d) {
  if (d.count() <= 0) return Deadline::max();
  return Clock::now() + d;
}

// Where to connect or listen: "unix:/path", "HOST:PORT", "[v6]:PORT", ":PORT",
// or (listen only) "fd:N", an inherited listening socket.
struct Endpoint {
  bool is_unix = false;
  bool is_fd = false;
  std::string path;  // unix
  std::string host;  // tcp
  int port = 0;      // tcp
  int fd = -1;       // fd

  static Result<Endpoint> Parse(std::string_view spec);
  std::string ToString() const;
};

struct TlsServerConfig {
  std::string cert_pem;
  std::string key_pem;
  std::string client_ca_pem;  // non-empty: client certificates verified against it
  bool require_client_cert = false;
};

struct TlsClientConfig {
  std::string ca_pem;   // PEM bundle; empty = system CAs
  std::string ca_file;  // path alternative to ca_pem
  // With ca_pem or ca_file: trust the system CAs as well (a registry's own
  // CA added to the usual ones), instead of only the given ones.
  bool also_system_cas = false;
  std::string client_cert_pem;  // mTLS
  std::string client_key_pem;
  bool insecure_skip_verify = false;
  std::string server_name;  // SNI / verification name override; default = URL host
};

class TlsContext {
 public:
  static Result<std::shared_ptr<TlsContext>> ForServer(const TlsServerConfig& config);
  static Result<std::shared_ptr<TlsContext>> ForClient(const TlsClientConfig& config);
  ~TlsContext();
  SSL_CTX* get() const { return ctx_; }
  bool verify_peer() const { return verify_peer_; }

 private:
  explicit TlsContext(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* ctx_;
  bool verify_peer_ = true;
};

// Frees OpenSSL's per-thread state; threads that used TLS call it before they
// end (detached threads would otherwise leave it to process exit).
void ReleaseThreadTlsState();

class Conn {
 public:
  Conn() = default;
  explicit Conn(UniqueFd fd);
  Conn(Conn&&) noexcept;
  Conn& operator=(Conn&&) noexcept;
  ~Conn();

  static Result<Conn> Connect(const Endpoint& endpoint, Deadline deadline);

  Status StartTlsClient(const TlsContext& ctx, const std::string& server_name, Deadline deadline);
  Status StartTlsServer(const TlsContext& ctx, Deadline deadline);

  // Returns 0 at end of stream. TIMEOUT when the deadline passes, CANCELLED when
  // the cancel fd becomes readable.
  Result<size_t> ReadSome(char* data, size_t size, Deadline deadline);
  Status WriteAll(std::string_view data, Deadline deadline);
  // Writes `count` pieces in order, as one gathered write where possible
  // (sendmsg): a peer waiting for a message wakes once, not once per piece.
  Status WriteAllGather(const std::string_view* parts, size_t count, Deadline deadline);

  // An eventfd/pipe whose readability interrupts waits (server shutdown).
  void set_cancel_fd(int fd) { cancel_fd_ = fd; }
  int cancel_fd() const { return cancel_fd_; }
  // Writes also fail (TIMEOUT) once the peer has accepted no byte for this
  // long, whatever their deadline: a bound on a stalled reader that lets a
  // slow but moving one take as long as it needs. Zero: deadlines only.
  void set_write_stall_timeout(std::chrono::milliseconds timeout) { write_stall_ = timeout; }
  // True if the peer has closed or reset the connection (non-blocking check).
  bool PeerClosed() const;
  void ShutdownWrite();
  int fd() const { return fd_.get(); }
  bool valid() const { return fd_.valid(); }
  bool is_tls() const { return ssl_ != nullptr; }

 private:
  Status WaitFor(short events, Deadline deadline);
  // Waits until the socket can take more of a write (`events`), at most until
  // `deadline` or `write_stall_` after `blocked_since` (the end of the last
  // progress).
  Status WaitToWrite(short events, Deadline deadline, Deadline blocked_since);
  UniqueFd fd_;
  SSL* ssl_ = nullptr;
  int cancel_fd_ = -1;
  std::chrono::milliseconds write_stall_{0};
};

// A listening socket. For unix sockets a stale socket file is replaced and the
// new one gets `unix_mode` (default owner-only). An "fd:N" endpoint adopts an
// inherited listening socket (it must be one: SO_ACCEPTCONN), makes it
// close-on-exec so no child inherits it, and never unlinks anything.
class Listener {
 public:
  static Result<Listener> Bind(const Endpoint& endpoint, int unix_mode = 0600, int backlog = 512);
  // Blocks until a connection arrives, the deadline passes, or cancel_fd fires.
  Result<UniqueFd> Accept(int cancel_fd);
  int port() const { return port_; }  // actual TCP port (useful with port 0)
  const Endpoint& endpoint() const { return endpoint_; }
  int fd() const { return fd_.get(); }
  void Close();

 private:
  UniqueFd fd_;
  Endpoint endpoint_;
  int port_ = 0;
  bool tcp_ = false;
};

}  // namespace deepbox::net
