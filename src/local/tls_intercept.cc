#include "local/tls_intercept.h"

#include <fmt/format.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include "common/strings.h"
#include "local/egress_proxy.h"
#include "net/openssl_loader.h"

namespace deepbox::local {

namespace {

// OpenSSL's functions (net/openssl_loader.h: loaded on first use).
const net::LibOpenSsl& OpenSsl() { return net::RequireLibOpenSsl(); }

constexpr size_t kHighWater = 1u << 20;    // ciphertext queued for one socket
constexpr size_t kReadAhead = 256u << 10;  // ciphertext read from a socket, not yet decrypted
constexpr size_t kMaxRequestHead = 64 * 1024;

int64_t InterceptNowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Ciphertext waiting for a socket. Sent from an offset rather than erased
// from the front: a partial send of a megabyte queue would otherwise move
// the rest of it every time.
class SendQueue {
 public:
  size_t size() const { return bytes_.size() - sent_; }
  bool empty() const { return size() == 0; }
  const char* data() const { return bytes_.data() + sent_; }
  void append(const char* p, size_t n) { bytes_.append(p, n); }
  void consume(size_t n) {
    sent_ += n;
    if (sent_ == bytes_.size()) {
      bytes_.clear();
      sent_ = 0;
    } else if (sent_ >= kCompactAt) {
      bytes_.erase(0, sent_);
      sent_ = 0;
    }
  }

 private:
  static constexpr size_t kCompactAt = 256u << 10;
  std::string bytes_;
  size_t sent_ = 0;
};

// One TLS leg: an SSL over two memory BIOs, and the socket they stand for.
struct Leg {
  int fd = -1;
  SslPtr ssl;
  BIO* rbio = nullptr;  // owned by ssl
  BIO* wbio = nullptr;
  SendQueue out;  // ciphertext for the socket
  bool sock_eof = false;
  bool tls_closed = false;  // the peer's close_notify, or EOF
  bool shut_sent = false;   // our close_notify queued
  bool wr_shut = false;     // shutdown(SHUT_WR) done

  Status Init(SSL_CTX* ctx, bool server) {
    ssl.reset(OpenSsl().SSL_new(ctx));
    if (!ssl) return MakeError(ErrorCode::kInternal, "SSL_new failed");
    rbio = OpenSsl().BIO_new(OpenSsl().BIO_s_mem());
    wbio = OpenSsl().BIO_new(OpenSsl().BIO_s_mem());
    if (!rbio || !wbio) {
      OpenSsl().BIO_free(rbio);
      OpenSsl().BIO_free(wbio);
      return MakeError(ErrorCode::kInternal, "BIO_new failed");
    }
    // BIO_set_mem_eof_return (a macro over BIO_ctrl): empty = "retry", until
    // the socket's EOF.
    OpenSsl().BIO_ctrl(rbio, BIO_C_SET_BUF_MEM_EOF_RETURN, -1, nullptr);
    OpenSsl().SSL_set_bio(ssl.get(), rbio, wbio);
    // A peer closing its socket without close_notify is an end, not an
    // error: most HTTP clients do that.
    OpenSsl().SSL_set_options(ssl.get(), SSL_OP_IGNORE_UNEXPECTED_EOF);
    if (server) {
      OpenSsl().SSL_set_accept_state(ssl.get());
    } else {
      OpenSsl().SSL_set_connect_state(ssl.get());
    }
    return {};
  }
  // Takes what the socket has, up to kReadAhead undecrypted: the rest waits
  // in the socket (TCP holds the peer back) until SSL_read has taken this.
  // False on a socket error.
  bool ReadSocket() {
    char buf[32768];
    for (;;) {
      if (!tls_closed && OpenSsl().BIO_ctrl_pending(rbio) >= kReadAhead) return true;
      ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n > 0) {
        if (!tls_closed)
          OpenSsl().BIO_write(rbio, buf, static_cast<int>(n));  // else never read: dropped
        if (static_cast<size_t>(n) < sizeof(buf)) return true;
        continue;
      }
      if (n == 0) {
        sock_eof = true;
        OpenSsl().BIO_ctrl(rbio, BIO_C_SET_BUF_MEM_EOF_RETURN, 0, nullptr);
        return true;
      }
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
  }
  // Moves what SSL wrote into the queue: straight from the memory BIO's
  // buffer, which is then emptied (one copy, not two).
  void CollectOut() {
    char* data = nullptr;
    long n = OpenSsl().BIO_ctrl(wbio, BIO_CTRL_INFO, 0, &data);  // BIO_get_mem_data
    if (n <= 0) return;
    out.append(data, static_cast<size_t>(n));
    (void)OpenSsl().BIO_ctrl(wbio, BIO_CTRL_RESET, 0, nullptr);  // BIO_reset
  }
  bool WriteSocket() {
    while (!out.empty()) {
      ssize_t n = send(fd, out.data(), out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        out.consume(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    return true;
  }
  // Queues plaintext for the peer.
  bool Write(std::string_view data) {
    while (!data.empty()) {
      int n = OpenSsl().SSL_write(ssl.get(), data.data(),
                                  static_cast<int>(std::min<size_t>(data.size(), 1 << 30)));
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    CollectOut();
    return true;
  }
  void QueueClose() {
    if (shut_sent) return;
    shut_sent = true;
    OpenSsl().SSL_shutdown(ssl.get());
    CollectOut();
  }
};

// Waits for `fd` (events) or stop/cancel until the deadline: 1 ready, 0
// timeout, -1 stop, cancel or error.
int WaitIo(int fd, short events, int stop_fd, int cancel_fd, int64_t deadline_ms) {
  for (;;) {
    int64_t left = deadline_ms - InterceptNowMs();
    if (left <= 0) return 0;
    pollfd p[3] = {{fd, events, 0}, {stop_fd, POLLIN, 0}, {cancel_fd, POLLIN, 0}};
    int rc = poll(p, 3, static_cast<int>(std::min<int64_t>(left, 60000)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return -1;
    if (rc == 0) continue;
    if (p[1].revents || p[2].revents) return -1;
    return 1;
  }
}

Status Handshake(Leg& leg, std::string_view call, int stop_fd, int cancel_fd, int64_t deadline) {
  for (;;) {
    OpenSsl().ERR_clear_error();
    int rc = OpenSsl().SSL_do_handshake(leg.ssl.get());
    int err = rc == 1 ? SSL_ERROR_NONE : OpenSsl().SSL_get_error(leg.ssl.get(), rc);
    std::optional<Error> failure;
    if (rc != 1 && err != SSL_ERROR_WANT_READ) {
      failure = TlsHandshakeError(leg.ssl.get(), rc, call);
    }
    leg.CollectOut();
    while (!leg.out.empty()) {  // e.g. an alert: it goes out even when failing
      if (!leg.WriteSocket()) break;
      if (leg.out.empty()) break;
      if (WaitIo(leg.fd, POLLOUT, stop_fd, cancel_fd, deadline) <= 0) break;
    }
    if (failure) return tl::unexpected(*failure);
    if (rc == 1) return {};
    if (leg.sock_eof) {
      return MakeError(ErrorCode::kUnavailable, fmt::format("{}: the peer closed the connection "
                                                            "during the TLS handshake",
                                                            call));
    }
    int w = WaitIo(leg.fd, POLLIN, stop_fd, cancel_fd, deadline);
    if (w == 0) return MakeError(ErrorCode::kTimeout, fmt::format("{}: timed out", call));
    if (w < 0) return MakeError(ErrorCode::kCancelled, fmt::format("{}: stopped", call));
    if (!leg.ReadSocket()) return MakeSyscallError("recv", errno, std::string(call));
  }
}

std::string AlpnOf(SSL* ssl) {
  const unsigned char* p = nullptr;
  unsigned int n = 0;
  OpenSsl().SSL_get0_alpn_selected(ssl, &p, &n);
  return p ? std::string(reinterpret_cast<const char*>(p), n) : std::string();
}

void AddNames(std::vector<std::string>* to, const std::vector<std::string>& from) {
  for (const auto& n : from) {
    if (std::find(to->begin(), to->end(), n) == to->end()) to->push_back(n);
  }
}

// The client's HTTP/1.x request stream: heads rewritten, bodies framed.
class Http1Requests {
 public:
  Http1Requests(const InterceptRequest& r, InterceptOutcome* outcome) : r_(r), outcome_(outcome) {}

  // Plaintext from the client -> plaintext for the upstream. An error is a refusal.
  Status Feed(std::string_view in, std::string* out) {
    while (!in.empty()) {
      if (raw_) {
        out->append(in);
        return {};
      }
      if (!in_body_) {
        size_t before = head_.size();
        head_.append(in);
        size_t end = head_.find("\r\n\r\n", before >= 3 ? before - 3 : 0);
        if (end == std::string::npos) {
          if (head_.size() > kMaxRequestHead) {
            return MakeError(ErrorCode::kInvalidArgument, "request head larger than 64 KiB");
          }
          return {};
        }
        std::string rest = head_.substr(end + 4);
        head_.resize(end + 4);
        if (auto st = ForwardHead(out); !st) return st;
        head_.clear();
        in = {};
        leftover_ = std::move(rest);
        in = leftover_;
        continue;
      }
      size_t used = body_.Consume(in);
      if (body_.failed()) {
        return MakeError(ErrorCode::kInvalidArgument, "a broken chunked request body");
      }
      out->append(in.substr(0, used));
      in.remove_prefix(used);
      if (body_.done()) in_body_ = false;
    }
    return {};
  }
  int requests() const { return requests_; }

 private:
  Status ForwardHead(std::string* out) {
    ++requests_;
    RewriteReport report;
    auto rewritten =
        RewriteHttp1RequestHead(head_, r_.host, *r_.secrets, r_.substitute_query, &report);
    std::string method = head_.substr(0, std::min(head_.find(' '), size_t{16}));
    EgressEvent e;
    e.event = "request";
    e.host = r_.host;
    e.port = r_.port;
    e.sni = r_.host;
    e.method = method;
    e.protocol = "http/1.1";
    e.intercepted = true;
    if (!rewritten) {
      e.verdict = "refused";
      e.rule = rewritten.error().message;
      if (r_.on_request) r_.on_request(e);
      return tl::unexpected(rewritten.error());
    }
    auto framer = RequestBodyFramer(*rewritten);
    if (!framer) {
      e.verdict = "refused";
      e.rule = framer.error().message;
      if (r_.on_request) r_.on_request(e);
      return tl::unexpected(framer.error());
    }
    e.verdict = "allowed";
    e.secrets = report.substituted;
    e.withheld = report.withheld;
    AddNames(&outcome_->secrets, report.substituted);
    AddNames(&outcome_->withheld, report.withheld);
    if (r_.on_request) r_.on_request(e);
    out->append(*rewritten);
    body_ = *framer;
    in_body_ = !body_.done();
    // After an upgrade (WebSocket) or a tunnel the bytes are no longer HTTP/1.
    std::string lower = AsciiLower(*rewritten);
    if (method == "CONNECT" || lower.find("\r\nupgrade:") != std::string::npos) raw_ = true;
    return {};
  }

  const InterceptRequest& r_;
  InterceptOutcome* outcome_;
  std::string head_;
  std::string leftover_;
  HttpBodyFramer body_ = HttpBodyFramer::None();
  bool in_body_ = false;
  bool raw_ = false;
  int requests_ = 0;
};

std::string BadGateway(std::string_view why) {
  std::string body = fmt::format("deepbox egress proxy: {}\n", why);
  return fmt::format(
      "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n"
      "Content-Length: {}\r\n\r\n{}",
      body.size(), body);
}

std::string BadRequest(std::string_view why) {
  std::string body = fmt::format("deepbox egress proxy: {}\n", why);
  return fmt::format(
      "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n"
      "Content-Length: {}\r\n\r\n{}",
      body.size(), body);
}

// Sends what is queued on both legs, briefly (the connection is ending).
void FlushBoth(Leg& a, Leg& b, int stop_fd, int cancel_fd) {
  int64_t deadline = InterceptNowMs() + 2000;
  for (Leg* leg : {&a, &b}) {
    while (!leg->out.empty()) {
      if (!leg->WriteSocket() || leg->out.empty()) break;
      if (WaitIo(leg->fd, POLLOUT, stop_fd, cancel_fd, deadline) <= 0) break;
    }
  }
}

}  // namespace

InterceptOutcome InterceptTls(const InterceptRequest& r) {
  InterceptOutcome outcome;
  const int64_t hs_deadline = InterceptNowMs() + r.handshake_timeout.count();
  Leg up, client;
  up.fd = r.upstream_fd;
  client.fd = r.client_fd;

  // 1. Upstream, verified, offering what the client offered.
  std::vector<std::string> offer;
  for (const char* proto : {"h2", "http/1.1"}) {
    if (std::find(r.client_alpn.begin(), r.client_alpn.end(), proto) != r.client_alpn.end()) {
      offer.push_back(proto);
    }
  }
  if (r.client_alpn.empty()) offer.push_back("http/1.1");
  std::string upstream_error;
  if (auto st = up.Init(r.upstream_ctx.get(), /*server=*/false); !st) {
    upstream_error = st.error().message;
  } else if (auto prep = PrepareUpstream(up.ssl.get(), r.host, offer); !prep) {
    upstream_error = prep.error().message;
  } else if (auto hs = Handshake(up, "TLS to " + r.host, r.stop_fd, r.cancel_fd, hs_deadline);
             !hs) {
    upstream_error = hs.error().message;
  }
  std::string protocol = upstream_error.empty() ? AlpnOf(up.ssl.get()) : "";
  if (protocol != "h2") protocol = "http/1.1";

  // 2. The client, with our leaf for its SNI.
  auto ctx = r.ca->ServerContext(r.host);
  if (!ctx) {
    outcome.error = ctx.error().message;
    return outcome;
  }
  if (auto st = client.Init(ctx->get(), /*server=*/true); !st) {
    outcome.error = st.error().message;
    return outcome;
  }
  bool client_h1_ok = r.client_alpn.empty() || std::find(r.client_alpn.begin(), r.client_alpn.end(),
                                                         "http/1.1") != r.client_alpn.end();
  if (upstream_error.empty()) {
    (void)SetServerAlpn(client.ssl.get(), AlpnOf(up.ssl.get()));
  } else if (client_h1_ok && !r.client_alpn.empty()) {
    (void)SetServerAlpn(client.ssl.get(), "http/1.1");
  }
  OpenSsl().BIO_write(client.rbio, r.client_hello.data(), static_cast<int>(r.client_hello.size()));
  if (auto hs = Handshake(client, "TLS from the sandbox", r.stop_fd, r.cancel_fd, hs_deadline);
      !hs) {
    outcome.error = upstream_error.empty() ? hs.error().message : upstream_error;
    outcome.refused = !upstream_error.empty();
    return outcome;
  }
  if (!upstream_error.empty()) {
    outcome.error = upstream_error;
    if (client_h1_ok) {
      client.Write(BadGateway(upstream_error));
      client.QueueClose();
      FlushBoth(client, up, r.stop_fd, r.cancel_fd);
    }
    return outcome;
  }
  outcome.protocol = protocol;

  // 3. The requests.
  Http1Requests h1(r, &outcome);
  std::unique_ptr<H2RequestRewriter> h2;
  if (protocol == "h2") {
    h2 = std::make_unique<H2RequestRewriter>(r.host, *r.secrets, r.substitute_query);
  }
  auto fail = [&](std::string why, bool refused) {
    outcome.error = std::move(why);
    outcome.refused = refused;
  };
  char buf[32768];
  int64_t last_traffic = InterceptNowMs();
  for (;;) {
    // Move what the TLS layers already hold, until both would wait.
    bool progress = true;
    while (progress && outcome.error.empty()) {
      progress = false;
      if (!client.tls_closed && up.out.size() < kHighWater) {
        OpenSsl().ERR_clear_error();
        int n = OpenSsl().SSL_read(client.ssl.get(), buf, sizeof(buf));
        if (n > 0) {
          progress = true;
          outcome.bytes_up += static_cast<uint64_t>(n);
          std::string to_up;
          std::string_view got(buf, static_cast<size_t>(n));
          if (h2) {
            RewriteReport report;
            auto st = h2->FromClient(got, &to_up, &report);
            AddNames(&outcome.secrets, report.substituted);
            AddNames(&outcome.withheld, report.withheld);
            for (auto& req : report.requests) {
              EgressEvent e;
              e.event = "request";
              e.verdict = "allowed";
              e.host = r.host;
              e.port = r.port;
              e.sni = r.host;
              e.method = std::move(req.method);
              e.protocol = "h2";
              e.intercepted = true;
              e.secrets = std::move(req.substituted);
              e.withheld = std::move(req.withheld);
              if (r.on_request) r.on_request(std::move(e));
            }
            if (!st) {
              fail(st.error().message, true);
              break;
            }
          } else if (auto st = h1.Feed(got, &to_up); !st) {
            fail(st.error().message, true);
            if (h1.requests() <= 1 && outcome.bytes_down == 0) {
              client.Write(BadRequest(st.error().message));
            }
            break;
          }
          if (!to_up.empty() && !up.Write(to_up)) {
            fail("TLS write to the upstream failed", false);
            break;
          }
        } else {
          int err = OpenSsl().SSL_get_error(client.ssl.get(), n);
          if (err == SSL_ERROR_ZERO_RETURN) {
            client.tls_closed = true;
            progress = true;
          } else if (err != SSL_ERROR_WANT_READ) {
            fail(TlsHandshakeError(client.ssl.get(), n, "TLS from the sandbox").message, false);
            break;
          }
        }
      }
      if (!up.tls_closed && client.out.size() < kHighWater) {
        OpenSsl().ERR_clear_error();
        int n = OpenSsl().SSL_read(up.ssl.get(), buf, sizeof(buf));
        if (n > 0) {
          progress = true;
          outcome.bytes_down += static_cast<uint64_t>(n);
          std::string_view got(buf, static_cast<size_t>(n));
          if (h2) {
            if (auto st = h2->FromServer(got); !st) {
              fail("the upstream's HTTP/2: " + st.error().message, false);
              break;
            }
          }
          if (!client.Write(got)) {
            fail("TLS write to the sandbox failed", false);
            break;
          }
        } else {
          int err = OpenSsl().SSL_get_error(up.ssl.get(), n);
          if (err == SSL_ERROR_ZERO_RETURN) {
            up.tls_closed = true;
            progress = true;
          } else if (err != SSL_ERROR_WANT_READ) {
            fail(TlsHandshakeError(up.ssl.get(), n, "TLS to " + r.host).message, false);
            break;
          }
        }
      }
    }
    // A leg not read because the other's queue was full may still hold
    // records in its BIO (its socket read dry): once the queue drains below
    // the mark it must be read again, not after the socket's next event
    // (there may be none: the end of a download, a flow-controlled h2 peer).
    const bool client_gated = !client.tls_closed && up.out.size() >= kHighWater;
    const bool up_gated = !up.tls_closed && client.out.size() >= kHighWater;
    if (!outcome.error.empty()) {
      client.QueueClose();
      up.QueueClose();
      FlushBoth(client, up, r.stop_fd, r.cancel_fd);
      return outcome;
    }
    // A leg that ended passes its end on (close_notify, then our write side).
    if (client.tls_closed) up.QueueClose();
    if (up.tls_closed) client.QueueClose();
    for (Leg* leg : {&client, &up}) {
      leg->CollectOut();  // what SSL_read itself queued (a KeyUpdate's answer, alerts)
      if (!leg->WriteSocket()) {
        fail(SyscallError("send", errno, leg == &client ? "to the sandbox" : "upstream").message,
             false);
        return outcome;
      }
      if (leg->shut_sent && leg->out.empty() && !leg->wr_shut) {
        shutdown(leg->fd, SHUT_WR);
        leg->wr_shut = true;
      }
    }
    if (client.tls_closed && up.tls_closed && client.out.empty() && up.out.empty()) {
      return outcome;
    }
    if ((client_gated && up.out.size() < kHighWater) ||
        (up_gated && client.out.size() < kHighWater)) {
      continue;
    }
    pollfd p[4] = {
        {client.fd, 0, 0}, {up.fd, 0, 0}, {r.stop_fd, POLLIN, 0}, {r.cancel_fd, POLLIN, 0}};
    if (!client.sock_eof && up.out.size() < kHighWater) p[0].events |= POLLIN;
    if (!client.out.empty()) p[0].events |= POLLOUT;
    if (!up.sock_eof && client.out.size() < kHighWater) p[1].events |= POLLIN;
    if (!up.out.empty()) p[1].events |= POLLOUT;
    int64_t idle_left = last_traffic + r.idle_timeout.count() - InterceptNowMs();
    if (idle_left <= 0) {
      fail("idle for too long", false);
      return outcome;
    }
    int rc = poll(p, 4, static_cast<int>(std::min<int64_t>(idle_left, 60000)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) {
      fail(SyscallError("poll", errno).message, false);
      return outcome;
    }
    if (p[2].revents) {
      fail("the proxy is stopping", false);
      return outcome;
    }
    if (p[3].revents) {
      fail("closed by a change of the network policy", true);
      return outcome;
    }
    if (rc == 0) continue;
    last_traffic = InterceptNowMs();
    // A socket's EOF with nothing more to decrypt is the leg's end too.
    if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && !client.sock_eof && !client.ReadSocket()) {
      fail(SyscallError("recv", errno, "from the sandbox").message, false);
      return outcome;
    }
    if ((p[1].revents & (POLLIN | POLLHUP | POLLERR)) && !up.sock_eof && !up.ReadSocket()) {
      fail(SyscallError("recv", errno, "upstream").message, false);
      return outcome;
    }
  }
}

}  // namespace deepbox::local
