#include "net/conn.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "net/openssl_loader.h"

namespace deepbox::net {
namespace {

std::string OpenSslErrors(const LibOpenSsl& openssl) {
  std::string out;
  unsigned long e;
  while ((e = openssl.ERR_get_error()) != 0) {
    char buf[256];
    openssl.ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown TLS error" : out;
}

int PollTimeoutMs(Deadline deadline) {
  if (deadline == Deadline::max()) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() < 0) return 0;
  return static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30));
}

Status SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return MakeSyscallError("fcntl(O_NONBLOCK)", errno);
  }
  return {};
}

// Loads a PEM bundle (one or more certificates) into an X509 store.
Status AddPemToStore(const LibOpenSsl& openssl, X509_STORE* store, const std::string& pem,
                     std::string_view what) {
  BIO* bio = openssl.BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  int added = 0;
  while (X509* cert = openssl.PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    openssl.X509_STORE_add_cert(store, cert);
    openssl.X509_free(cert);
    ++added;
  }
  openssl.BIO_free(bio);
  openssl.ERR_clear_error();
  if (added == 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{}: no PEM certificate found", what));
  }
  return {};
}

Status UseCertAndKey(const LibOpenSsl& openssl, SSL_CTX* ctx, const std::string& cert_pem,
                     const std::string& key_pem) {
  BIO* cbio = openssl.BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert = openssl.PEM_read_bio_X509(cbio, nullptr, nullptr, nullptr);
  if (cert == nullptr) {
    openssl.BIO_free(cbio);
    return MakeError(ErrorCode::kInvalidArgument, "certificate: not a PEM certificate");
  }
  int ok = openssl.SSL_CTX_use_certificate(ctx, cert);
  openssl.X509_free(cert);
  // Remaining certificates in the PEM form the chain.
  while (X509* extra = openssl.PEM_read_bio_X509(cbio, nullptr, nullptr, nullptr)) {
    // SSL_CTX_add_extra_chain_cert, a macro over SSL_CTX_ctrl; takes `extra`.
    openssl.SSL_CTX_ctrl(ctx, SSL_CTRL_EXTRA_CHAIN_CERT, 0, extra);
  }
  openssl.BIO_free(cbio);
  openssl.ERR_clear_error();
  if (ok != 1)
    return MakeError(ErrorCode::kInvalidArgument, "certificate: " + OpenSslErrors(openssl));
  BIO* kbio = openssl.BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = openssl.PEM_read_bio_PrivateKey(kbio, nullptr, nullptr, nullptr);
  openssl.BIO_free(kbio);
  if (key == nullptr) return MakeError(ErrorCode::kInvalidArgument, "private key: not a PEM key");
  ok = openssl.SSL_CTX_use_PrivateKey(ctx, key);
  openssl.EVP_PKEY_free(key);
  if (ok != 1 || openssl.SSL_CTX_check_private_key(ctx) != 1) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "private key does not match certificate: " + OpenSslErrors(openssl));
  }
  return {};
}

// A context for a TLS server or client (TLS 1.2 at least), OpenSSL loaded
// first; the caller owns it (TlsContext).
Result<SSL_CTX*> NewSslContext(bool server) {
  auto loaded = LoadLibOpenSsl(server ? "a TLS server" : "a TLS client");
  if (!loaded) return tl::unexpected(loaded.error());
  const LibOpenSsl& openssl = **loaded;
  SSL_CTX* ctx =
      openssl.SSL_CTX_new(server ? openssl.TLS_server_method() : openssl.TLS_client_method());
  if (ctx == nullptr) {
    return MakeError(ErrorCode::kInternal, "SSL_CTX_new: " + OpenSslErrors(openssl));
  }
  // SSL_CTX_set_min_proto_version, a macro over SSL_CTX_ctrl.
  openssl.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, nullptr);
  return ctx;
}

// OpenSSL writes with write(2), which raises SIGPIPE when the peer is gone.
// While a guard lives, SIGPIPE is blocked on this thread; any SIGPIPE the
// guarded calls generated is consumed before it is unblocked, so no process
// using this library can die of it (plain sockets use MSG_NOSIGNAL instead).
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_set_);
    sigaddset(&pipe_set_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set_, &old_set_);
  }
  ~SigpipeGuard() {
    int saved = errno;
    if (!sigismember(&old_set_, SIGPIPE)) {
      timespec zero{0, 0};
      while (sigtimedwait(&pipe_set_, nullptr, &zero) > 0) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_set_, nullptr);
    errno = saved;
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_set_;
  sigset_t old_set_;
};

// Since when a write has been waiting for the peer: set at the first wait
// after progress, so the fast path (the socket takes the bytes) reads no clock.
class StallClock {
 public:
  void Progress() { since_ = Deadline{}; }
  Deadline Blocked() {
    if (since_ == Deadline{}) since_ = Clock::now();
    return since_;
  }

 private:
  Deadline since_{};
};

}  // namespace

// ---------------------------------------------------------------- Endpoint

Result<Endpoint> Endpoint::Parse(std::string_view spec) {
  Endpoint ep;
  if (spec.starts_with("fd:")) {
    std::string_view num = spec.substr(3);
    int fd = -1;
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), fd);
    if (num.empty() || ec != std::errc() || p != num.data() + num.size() || fd < 0) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("bad fd endpoint '{}': expected fd:N", spec));
    }
    ep.is_fd = true;
    ep.fd = fd;
    return ep;
  }
  if (spec.starts_with("unix:")) {
    ep.is_unix = true;
    ep.path = std::string(spec.substr(5));
    if (ep.path.empty())
      return MakeError(ErrorCode::kInvalidArgument, "unix: endpoint needs a path");
    if (ep.path.size() >= sizeof(sockaddr_un{}.sun_path)) {
      return MakeError(
          ErrorCode::kInvalidArgument,
          fmt::format("unix socket path too long ({} bytes): {}", ep.path.size(), ep.path));
    }
    return ep;
  }
  std::string_view port_text;
  if (spec.starts_with("[")) {
    auto close = spec.find(']');
    if (close == std::string_view::npos || close + 1 >= spec.size() || spec[close + 1] != ':') {
      return MakeError(ErrorCode::kInvalidArgument, fmt::format("bad address '{}'", spec));
    }
    ep.host = std::string(spec.substr(1, close - 1));
    port_text = spec.substr(close + 2);
  } else {
    auto colon = spec.rfind(':');
    if (colon == std::string_view::npos) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("bad address '{}': expected HOST:PORT or unix:/path", spec));
    }
    ep.host = std::string(spec.substr(0, colon));
    port_text = spec.substr(colon + 1);
  }
  if (ep.host.empty()) ep.host = "0.0.0.0";
  int port = -1;
  auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || p != port_text.data() + port_text.size() || port < 0 || port > 65535) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("bad port in '{}'", spec));
  }
  ep.port = port;
  return ep;
}

std::string Endpoint::ToString() const {
  if (is_fd) return fmt::format("fd:{}", fd);
  if (is_unix) return "unix:" + path;
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

// ---------------------------------------------------------------- TlsContext

// A context exists only once OpenSSL was loaded.
TlsContext::~TlsContext() { LoadedLibOpenSsl()->SSL_CTX_free(ctx_); }

Result<std::shared_ptr<TlsContext>> TlsContext::ForServer(const TlsServerConfig& config) {
  auto made = NewSslContext(/*server=*/true);
  if (!made) return tl::unexpected(made.error());
  SSL_CTX* raw = *made;
  std::shared_ptr<TlsContext> ctx(new TlsContext(raw));
  const LibOpenSsl& openssl = *LoadedLibOpenSsl();  // NewSslContext loaded it
  if (auto s = UseCertAndKey(openssl, raw, config.cert_pem, config.key_pem); !s)
    return tl::unexpected(s.error());
  if (!config.client_ca_pem.empty()) {
    if (auto s = AddPemToStore(openssl, openssl.SSL_CTX_get_cert_store(raw), config.client_ca_pem,
                               "client CA");
        !s) {
      return tl::unexpected(s.error());
    }
    int mode = SSL_VERIFY_PEER;
    if (config.require_client_cert) mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    openssl.SSL_CTX_set_verify(raw, mode, nullptr);
  }
  return ctx;
}

Result<std::shared_ptr<TlsContext>> TlsContext::ForClient(const TlsClientConfig& config) {
  auto made = NewSslContext(/*server=*/false);
  if (!made) return tl::unexpected(made.error());
  SSL_CTX* raw = *made;
  std::shared_ptr<TlsContext> ctx(new TlsContext(raw));
  const LibOpenSsl& openssl = *LoadedLibOpenSsl();  // NewSslContext loaded it
  if (config.insecure_skip_verify) {
    ctx->verify_peer_ = false;
    openssl.SSL_CTX_set_verify(raw, SSL_VERIFY_NONE, nullptr);
  } else {
    openssl.SSL_CTX_set_verify(raw, SSL_VERIFY_PEER, nullptr);
    if (!config.ca_pem.empty()) {
      if (auto s = AddPemToStore(openssl, openssl.SSL_CTX_get_cert_store(raw), config.ca_pem,
                                 "CA certificate");
          !s) {
        return tl::unexpected(s.error());
      }
    } else if (!config.ca_file.empty()) {
      if (openssl.SSL_CTX_load_verify_locations(raw, config.ca_file.c_str(), nullptr) != 1) {
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("CA file '{}': {}", config.ca_file, OpenSslErrors(openssl)));
      }
    }
    const bool own_cas = !config.ca_pem.empty() || !config.ca_file.empty();
    if ((!own_cas || config.also_system_cas) &&
        openssl.SSL_CTX_set_default_verify_paths(raw) != 1) {
      return MakeError(ErrorCode::kInternal, "loading system CAs: " + OpenSslErrors(openssl));
    }
  }
  if (!config.client_cert_pem.empty()) {
    if (auto s = UseCertAndKey(openssl, raw, config.client_cert_pem, config.client_key_pem); !s) {
      return tl::unexpected(s.error());
    }
  }
  return ctx;
}

// ---------------------------------------------------------------- Conn

void ReleaseThreadTlsState() {
  // Nothing to free on a thread of a process that never loaded OpenSSL.
  if (const LibOpenSsl* openssl = LoadedLibOpenSsl()) openssl->OPENSSL_thread_stop();
}

Conn::Conn(UniqueFd fd) : fd_(std::move(fd)) {}
Conn::Conn(Conn&& o) noexcept
    : fd_(std::move(o.fd_)), ssl_(std::exchange(o.ssl_, nullptr)), cancel_fd_(o.cancel_fd_) {}
Conn& Conn::operator=(Conn&& o) noexcept {
  if (this != &o) {
    if (ssl_ != nullptr) LoadedLibOpenSsl()->SSL_free(ssl_);
    fd_ = std::move(o.fd_);
    ssl_ = std::exchange(o.ssl_, nullptr);
    cancel_fd_ = o.cancel_fd_;
  }
  return *this;
}
Conn::~Conn() {
  if (ssl_ != nullptr) LoadedLibOpenSsl()->SSL_free(ssl_);
}

Status Conn::WaitFor(short events, Deadline deadline) {
  for (;;) {
    // Only reads are cancellable: a shutdown interrupts idle keep-alive waits
    // but lets in-flight responses finish writing.
    bool cancellable = cancel_fd_ >= 0 && (events & POLLIN);
    pollfd fds[2] = {{fd_.get(), events, 0}, {cancel_fd_, POLLIN, 0}};
    int n = ::poll(fds, cancellable ? 2 : 1, PollTimeoutMs(deadline));
    if (n < 0) {
      if (errno == EINTR) continue;
      return MakeSyscallError("poll", errno);
    }
    if (n == 0) return MakeError(ErrorCode::kTimeout, "connection timed out");
    if (cancellable && (fds[1].revents & POLLIN)) {
      return MakeError(ErrorCode::kCancelled, "connection cancelled (server shutting down)");
    }
    return {};  // readable/writable or error: the next syscall reports which
  }
}

Status Conn::WaitToWrite(short events, Deadline deadline, Deadline blocked_since) {
  if (write_stall_.count() > 0 && blocked_since + write_stall_ < deadline) {
    if (auto w = WaitFor(events, blocked_since + write_stall_); !w) {
      if (w.error().code != ErrorCode::kTimeout) return w;
      return MakeError(ErrorCode::kTimeout,
                       fmt::format("the peer accepted no data for {} ms (stalled reader)",
                                   write_stall_.count()));
    }
    return {};
  }
  return WaitFor(events, deadline);
}

Result<Conn> Conn::Connect(const Endpoint& endpoint, Deadline deadline) {
  if (endpoint.is_fd) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("cannot connect to {}: fd endpoints are for listening only",
                                 endpoint.ToString()));
  }
  if (endpoint.is_unix) {
    // The socket file may live in a directory the peer controls (a sandbox's
    // run dir): never follow a symlink planted in its place. Open the final
    // component without following it, check it is a socket, and connect to
    // that very inode through /proc/self/fd (no race between check and use).
    UniqueFd target(::open(endpoint.path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!target) return MakeSyscallError("open(O_PATH|O_NOFOLLOW)", errno, endpoint.path);
    struct stat st {};
    if (::fstat(target.get(), &st) != 0) return MakeSyscallError("fstat", errno, endpoint.path);
    if (!S_ISSOCK(st.st_mode)) {
      return MakeError(ErrorCode::kPermissionDenied,
                       fmt::format("'{}' is not a unix socket (a symlink or other file was "
                                   "found in its place); refusing to connect",
                                   endpoint.path));
    }
    std::string via = fmt::format("/proc/self/fd/{}", target.get());
    // Blocking connect: a unix connect completes at once or fails (EAGAIN when
    // the backlog is full, which we retry until the deadline).
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return MakeSyscallError("socket(AF_UNIX)", errno);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, via.c_str(), via.size() + 1);
    while (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN && Clock::now() < deadline) {
        ::usleep(1000);
        continue;
      }
      return MakeSyscallError("connect", errno, endpoint.path);
    }
    if (auto s = SetNonBlocking(fd.get()); !s) return tl::unexpected(s.error());
    return Conn(std::move(fd));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port = std::to_string(endpoint.port);
  int rc = ::getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("cannot resolve '{}': {}", endpoint.host, gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(res, freeaddrinfo);
  Error last(ErrorCode::kUnavailable, "no address");
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) {
      last = SyscallError("socket", errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last = SyscallError("connect", errno, endpoint.ToString());
        continue;
      }
      Conn probe{UniqueFd(fd.release())};
      if (auto w = probe.WaitFor(POLLOUT, deadline); !w) {
        last = w.error();
        last.message = fmt::format("connect({}): {}", endpoint.ToString(), last.message);
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(probe.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last = SyscallError("connect", err, endpoint.ToString());
        continue;
      }
      return probe;
    }
    return Conn(std::move(fd));
  }
  return tl::unexpected(last);
}

Status Conn::StartTlsClient(const TlsContext& ctx, const std::string& server_name,
                            Deadline deadline) {
  const LibOpenSsl& openssl = *LoadedLibOpenSsl();  // ctx exists: OpenSSL is loaded
  ssl_ = openssl.SSL_new(ctx.get());
  if (ssl_ == nullptr) return MakeError(ErrorCode::kInternal, "SSL_new: " + OpenSslErrors(openssl));
  openssl.SSL_set_fd(ssl_, fd_.get());
  in6_addr v6;
  in_addr v4;
  bool is_ip = inet_pton(AF_INET, server_name.c_str(), &v4) == 1 ||
               inet_pton(AF_INET6, server_name.c_str(), &v6) == 1;
  if (!is_ip && !server_name.empty()) {
    // SSL_set_tlsext_host_name, a macro over SSL_ctrl.
    openssl.SSL_ctrl(ssl_, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                     const_cast<char*>(server_name.c_str()));
  }
  if (ctx.verify_peer() && !server_name.empty()) {
    X509_VERIFY_PARAM* param = openssl.SSL_get0_param(ssl_);
    if (is_ip) {
      openssl.X509_VERIFY_PARAM_set1_ip_asc(param, server_name.c_str());
    } else {
      openssl.X509_VERIFY_PARAM_set1_host(param, server_name.c_str(), 0);
    }
  }
  SigpipeGuard no_sigpipe;
  for (;;) {
    int r = openssl.SSL_connect(ssl_);
    if (r == 1) return {};
    int err = openssl.SSL_get_error(ssl_, r);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      if (auto w = WaitFor(err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline); !w) return w;
      continue;
    }
    long verify = openssl.SSL_get_verify_result(ssl_);
    std::string detail = verify != X509_V_OK ? openssl.X509_verify_cert_error_string(verify)
                                             : OpenSslErrors(openssl);
    // A refused certificate (chain or name) will not get better on a retry.
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("TLS handshake with '{}' failed: {}", server_name, detail),
                     verify != X509_V_OK ? std::string(kReasonTlsCertificate) : std::string());
  }
}

Status Conn::StartTlsServer(const TlsContext& ctx, Deadline deadline) {
  const LibOpenSsl& openssl = *LoadedLibOpenSsl();  // ctx exists: OpenSSL is loaded
  ssl_ = openssl.SSL_new(ctx.get());
  if (ssl_ == nullptr) return MakeError(ErrorCode::kInternal, "SSL_new: " + OpenSslErrors(openssl));
  openssl.SSL_set_fd(ssl_, fd_.get());
  SigpipeGuard no_sigpipe;
  for (;;) {
    int r = openssl.SSL_accept(ssl_);
    if (r == 1) return {};
    int err = openssl.SSL_get_error(ssl_, r);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      if (auto w = WaitFor(err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline); !w) return w;
      continue;
    }
    return MakeError(ErrorCode::kUnauthenticated, "TLS accept failed: " + OpenSslErrors(openssl));
  }
}

Result<size_t> Conn::ReadSome(char* data, size_t size, Deadline deadline) {
  for (;;) {
    if (ssl_ != nullptr) {
      const LibOpenSsl& openssl = *LoadedLibOpenSsl();  // ssl_ exists: OpenSSL is loaded
      openssl.ERR_clear_error();
      SigpipeGuard no_sigpipe;
      int r = openssl.SSL_read(ssl_, data, static_cast<int>(std::min<size_t>(size, 1 << 30)));
      if (r > 0) return static_cast<size_t>(r);
      int err = openssl.SSL_get_error(ssl_, r);
      if (err == SSL_ERROR_ZERO_RETURN) return 0;
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        if (auto w = WaitFor(err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline); !w) {
          return tl::unexpected(w.error());
        }
        continue;
      }
      if (err == SSL_ERROR_SYSCALL && errno == 0) return 0;  // peer closed without close_notify
      if (err == SSL_ERROR_SYSCALL) return MakeSyscallError("SSL_read", errno);
      return MakeError(ErrorCode::kUnavailable, "TLS read failed: " + OpenSslErrors(openssl));
    }
    ssize_t n = ::recv(fd_.get(), data, size, 0);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      if (auto w = WaitFor(POLLIN, deadline); !w) return tl::unexpected(w.error());
      continue;
    }
    return MakeSyscallError("recv", errno);
  }
}

Status Conn::WriteAll(std::string_view data, Deadline deadline) {
  StallClock stall;
  while (!data.empty()) {
    if (ssl_ != nullptr) {
      const LibOpenSsl& openssl = *LoadedLibOpenSsl();  // ssl_ exists: OpenSSL is loaded
      openssl.ERR_clear_error();
      SigpipeGuard no_sigpipe;
      int r = openssl.SSL_write(ssl_, data.data(),
                                static_cast<int>(std::min<size_t>(data.size(), 1 << 30)));
      if (r > 0) {
        data.remove_prefix(static_cast<size_t>(r));
        stall.Progress();
        continue;
      }
      int err = openssl.SSL_get_error(ssl_, r);
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        if (auto w = WaitToWrite(err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline,
                                 stall.Blocked());
            !w) {
          return w;
        }
        continue;
      }
      if (err == SSL_ERROR_SYSCALL) return MakeSyscallError("SSL_write", errno ? errno : EPIPE);
      return MakeError(ErrorCode::kUnavailable, "TLS write failed: " + OpenSslErrors(openssl));
    }
    ssize_t n = ::send(fd_.get(), data.data(), data.size(), MSG_NOSIGNAL);
    if (n >= 0) {
      data.remove_prefix(static_cast<size_t>(n));
      stall.Progress();
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      if (auto w = WaitToWrite(POLLOUT, deadline, stall.Blocked()); !w) return w;
      continue;
    }
    return MakeSyscallError("send", errno);
  }
  return {};
}

Status Conn::WriteAllGather(const std::string_view* parts, size_t count, Deadline deadline) {
  if (ssl_ != nullptr) {
    // One TLS record for small messages; big pieces go as they are.
    size_t total = 0;
    for (size_t i = 0; i < count; ++i) total += parts[i].size();
    if (total <= (64u << 10)) {
      std::string joined;
      joined.reserve(total);
      for (size_t i = 0; i < count; ++i) joined.append(parts[i]);
      return WriteAll(joined, deadline);
    }
    for (size_t i = 0; i < count; ++i) {
      if (auto s = WriteAll(parts[i], deadline); !s) return s;
    }
    return {};
  }
  constexpr size_t kMaxIov = 64;
  iovec iov[kMaxIov];
  size_t next = 0;  // first part not yet in iov
  size_t skip = 0;  // bytes of parts[next] already sent (partial write)
  StallClock stall;
  while (next < count) {
    size_t n = 0;
    for (size_t i = next; i < count && n < kMaxIov; ++i) {
      size_t off = i == next ? skip : 0;
      if (parts[i].size() == off) continue;
      iov[n].iov_base = const_cast<char*>(parts[i].data() + off);
      iov[n].iov_len = parts[i].size() - off;
      ++n;
    }
    if (n == 0) return {};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t sent = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        if (auto w = WaitToWrite(POLLOUT, deadline, stall.Blocked()); !w) return w;
        continue;
      }
      return MakeSyscallError("sendmsg", errno);
    }
    stall.Progress();
    auto left = static_cast<size_t>(sent);
    while (next < count) {
      size_t avail = parts[next].size() - skip;
      if (left < avail) {
        skip += left;
        break;
      }
      left -= avail;
      ++next;
      skip = 0;
    }
  }
  return {};
}

bool Conn::PeerClosed() const {
  pollfd p{fd_.get(), POLLRDHUP, 0};
  int n = ::poll(&p, 1, 0);
  return n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

void Conn::ShutdownWrite() {
  if (ssl_ != nullptr) {
    SigpipeGuard no_sigpipe;
    LoadedLibOpenSsl()->SSL_shutdown(ssl_);
  }
  ::shutdown(fd_.get(), SHUT_WR);
}

// ---------------------------------------------------------------- Listener

Result<Listener> Listener::Bind(const Endpoint& endpoint, int unix_mode, int backlog) {
  Listener l;
  l.endpoint_ = endpoint;
  if (endpoint.is_fd) {
    int accepting = 0, domain = 0;
    socklen_t len = sizeof accepting;
    if (::getsockopt(endpoint.fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0) {
      return MakeSyscallError("getsockopt(SO_ACCEPTCONN)", errno, endpoint.ToString());
    }
    if (!accepting) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("{} is not a listening socket", endpoint.ToString()));
    }
    len = sizeof domain;
    if (::getsockopt(endpoint.fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) {
      return MakeSyscallError("getsockopt(SO_DOMAIN)", errno, endpoint.ToString());
    }
    if (::fcntl(endpoint.fd, F_SETFD, FD_CLOEXEC) != 0) {
      return MakeSyscallError("fcntl(FD_CLOEXEC)", errno, endpoint.ToString());
    }
    int flags = ::fcntl(endpoint.fd, F_GETFL);
    if (flags < 0 || ::fcntl(endpoint.fd, F_SETFL, flags | O_NONBLOCK) != 0) {
      return MakeSyscallError("fcntl(O_NONBLOCK)", errno, endpoint.ToString());
    }
    l.fd_.reset(endpoint.fd);
    l.tcp_ = domain == AF_INET || domain == AF_INET6;
    if (l.tcp_) {
      sockaddr_storage ss{};
      socklen_t sl = sizeof ss;
      ::getsockname(l.fd_.get(), reinterpret_cast<sockaddr*>(&ss), &sl);
      l.port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    }
    return l;
  }
  if (endpoint.is_unix) {
    l.fd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!l.fd_) return MakeSyscallError("socket(AF_UNIX)", errno);
    struct stat st {};
    if (::lstat(endpoint.path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) {
        return MakeError(
            ErrorCode::kConflict,
            fmt::format("'{}' exists and is not a socket; refusing to replace it", endpoint.path));
      }
      ::unlink(endpoint.path.c_str());
    }
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, endpoint.path.c_str(), endpoint.path.size() + 1);
    // Create the socket with the final mode directly (no window where it is wider).
    mode_t old = ::umask(static_cast<mode_t>(~unix_mode & 0777));
    int rc = ::bind(l.fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    int saved = errno;
    ::umask(old);
    if (rc != 0) return MakeSyscallError("bind", saved, endpoint.path);
  } else {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    std::string port = std::to_string(endpoint.port);
    int rc = ::getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0) {
      return MakeError(
          ErrorCode::kInvalidArgument,
          fmt::format("cannot resolve listen host '{}': {}", endpoint.host, gai_strerror(rc)));
    }
    std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(res, freeaddrinfo);
    l.fd_.reset(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!l.fd_) return MakeSyscallError("socket", errno);
    int one = 1;
    ::setsockopt(l.fd_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(l.fd_.get(), res->ai_addr, res->ai_addrlen) != 0) {
      return MakeSyscallError("bind", errno, endpoint.ToString());
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ::getsockname(l.fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    l.port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                       : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    l.endpoint_.port = l.port_;
    l.tcp_ = true;
  }
  if (::listen(l.fd_.get(), backlog) != 0) return MakeSyscallError("listen", errno);
  return l;
}

Result<UniqueFd> Listener::Accept(int cancel_fd) {
  for (;;) {
    int fd = ::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      if (tcp_) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      }
      return UniqueFd(fd);
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN) return MakeSyscallError("accept4", errno);
    pollfd fds[2] = {{fd_.get(), POLLIN, 0}, {cancel_fd, POLLIN, 0}};
    int n = ::poll(fds, cancel_fd >= 0 ? 2 : 1, -1);
    if (n < 0 && errno != EINTR) return MakeSyscallError("poll", errno);
    if (cancel_fd >= 0 && (fds[1].revents & POLLIN)) {
      return MakeError(ErrorCode::kCancelled, "listener closed");
    }
  }
}

void Listener::Close() {
  if (fd_ && endpoint_.is_unix) ::unlink(endpoint_.path.c_str());
  fd_.reset();
}

}  // namespace deepbox::net
