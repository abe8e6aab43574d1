#include "local/testing/tls_echo_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace deepbox::local::testing {
namespace {

constexpr int kIdleTimeoutMs = 60'000;  // a peer silent this long loses its connection
constexpr int kLingerMs = 1'000;        // reading what a peer still sends before the close
constexpr size_t kMaxHead = 64 * 1024;  // request head (and chunked trailers)
constexpr size_t kMaxChunkLine = 4096;  // a chunk-size line with its extensions
constexpr uint64_t kMaxBytes = uint64_t{64} << 30;  // /bytes/<N>
constexpr size_t kChunk = 64 * 1024;                // what one write carries at most
constexpr std::string_view kAlphabet = "abcdefghijklmnopqrstuvwxyz";

struct SslCtxFree {
  void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxFree>;
struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

std::string OpenSslErrors() {
  std::string out;
  for (unsigned long e; (e = ERR_get_error()) != 0;) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no OpenSSL error queued" : out;
}

// The ALPN select callback's argument when h2 may be chosen (nullptr: never).
char kOfferH2 = 1;

// Server preference: h2 (if allowed), then http/1.1, else no ALPN at all.
int SelectAlpn(SSL*, const unsigned char** out, unsigned char* out_len, const unsigned char* in,
               unsigned int in_len, void* arg) {
  const unsigned char* h1 = nullptr;
  for (unsigned int i = 0; i < in_len;) {
    unsigned int len = in[i];
    if (len == 0 || i + 1 + len > in_len) break;
    std::string_view proto(reinterpret_cast<const char*>(in + i + 1), len);
    if (proto == "h2" && arg != nullptr) {
      *out = in + i + 1;
      *out_len = static_cast<unsigned char>(len);
      return SSL_TLSEXT_ERR_OK;
    }
    if (proto == "http/1.1" && h1 == nullptr) h1 = in + i + 1;
    i += 1 + len;
  }
  if (h1 == nullptr) return SSL_TLSEXT_ERR_NOACK;
  *out = h1;
  *out_len = 8;
  return SSL_TLSEXT_ERR_OK;
}

Result<SslCtxPtr> MakeContext(const TlsEchoConfig& config) {
  ERR_clear_error();
  auto fail = [](std::string_view what) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "TLS echo server: " + std::string(what) + ": " + OpenSslErrors());
  };
  SslCtxPtr ctx(SSL_CTX_new(TLS_server_method()));
  if (ctx == nullptr) return fail("SSL_CTX_new");
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_RENEGOTIATION);
  // Writes may take part of a buffer, and a retry may pass the same bytes
  // from another address (the h2 output buffer grows between attempts).
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);

  BioPtr certs(BIO_new_mem_buf(config.cert_chain_pem.data(),
                               static_cast<int>(config.cert_chain_pem.size())));
  if (certs == nullptr) return fail("BIO_new_mem_buf");
  X509* leaf = PEM_read_bio_X509_AUX(certs.get(), nullptr, nullptr, nullptr);
  if (leaf == nullptr) return fail("no certificate in cert_chain_pem");
  int used = SSL_CTX_use_certificate(ctx.get(), leaf);
  X509_free(leaf);
  if (used != 1) return fail("SSL_CTX_use_certificate");
  while (X509* extra = PEM_read_bio_X509(certs.get(), nullptr, nullptr, nullptr)) {
    if (SSL_CTX_add0_chain_cert(ctx.get(), extra) != 1) {
      X509_free(extra);
      return fail("SSL_CTX_add0_chain_cert");
    }
  }
  ERR_clear_error();  // the end of the PEM data

  BioPtr key_bio(BIO_new_mem_buf(config.key_pem.data(), static_cast<int>(config.key_pem.size())));
  if (key_bio == nullptr) return fail("BIO_new_mem_buf");
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr);
  if (key == nullptr) return fail("no private key in key_pem");
  used = SSL_CTX_use_PrivateKey(ctx.get(), key);
  EVP_PKEY_free(key);
  if (used != 1) return fail("SSL_CTX_use_PrivateKey (a key that does not match the leaf?)");
  if (SSL_CTX_check_private_key(ctx.get()) != 1) return fail("the key does not match the leaf");

  SSL_CTX_set_alpn_select_cb(ctx.get(), SelectAlpn, config.offer_h2 ? &kOfferH2 : nullptr);
  return ctx;
}

// TLS over a non-blocking socket; every wait polls the socket and the stop
// fd (-1: none) for at most kIdleTimeoutMs.
class TlsIo {
 public:
  TlsIo(SSL* ssl, int fd, int stop_fd) : ssl_(ssl), fd_(fd), stop_fd_(stop_fd) {}

  bool Handshake() {
    for (;;) {
      ERR_clear_error();
      int r = SSL_accept(ssl_);
      if (r == 1) return true;
      if (!Retryable(r) || !Wait(want_)) return false;
    }
  }
  // > 0: bytes read; 0: nothing yet (want() says what to wait for); -1: the
  // end of the stream or an error.
  long TryRead(char* data, size_t size) {
    ERR_clear_error();
    size_t n = 0;
    int r = SSL_read_ex(ssl_, data, size, &n);
    if (r == 1) return static_cast<long>(n);
    return Retryable(r) ? 0 : -1;
  }
  // > 0: bytes written; 0: none yet (want()); -1: failed.
  long TryWrite(const char* data, size_t size) {
    ERR_clear_error();
    size_t n = 0;
    int r = SSL_write_ex(ssl_, data, size, &n);
    if (r == 1) return static_cast<long>(n);
    return Retryable(r) ? 0 : -1;
  }
  // Blocks for some bytes: > 0, or -1 at the end or on failure.
  long Read(char* data, size_t size) {
    for (;;) {
      long n = TryRead(data, size);
      if (n != 0) return n;
      if (!Wait(want_)) return -1;
    }
  }
  bool WriteAll(std::string_view data) {
    while (!data.empty()) {
      long n = TryWrite(data.data(), data.size());
      if (n < 0) return false;
      if (n == 0) {
        if (!Wait(want_)) return false;
        continue;
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Until the socket is ready for `events`: false on stop, timeout or error.
  bool Wait(short events, int timeout_ms = kIdleTimeoutMs) {
    pollfd p[2] = {{fd_, events, 0}, {stop_fd_, POLLIN, 0}};
    for (;;) {
      int r = ::poll(p, 2, timeout_ms);
      if (r < 0 && errno == EINTR) continue;
      return r > 0 && p[1].revents == 0;
    }
  }
  short want() const { return want_; }

  // close_notify (unless TLS failed), then what the peer still sends is read
  // for a moment: closing with unread bytes would reset the connection and
  // could destroy the last response before the peer reads it.
  void Close() {
    if (!fatal_) {
      ERR_clear_error();
      (void)SSL_shutdown(ssl_);
    }
    ::shutdown(fd_, SHUT_WR);
    char buf[16384];
    size_t drained = 0;
    while (drained < (size_t{1} << 20) && Wait(POLLIN, kLingerMs)) {
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      drained += static_cast<size_t>(n);
    }
    ERR_clear_error();
  }

 private:
  bool Retryable(int r) {
    switch (SSL_get_error(ssl_, r)) {
      case SSL_ERROR_WANT_READ:
        want_ = POLLIN;
        return true;
      case SSL_ERROR_WANT_WRITE:
        want_ = POLLOUT;
        return true;
      case SSL_ERROR_ZERO_RETURN:
        return false;
      default:
        fatal_ = true;  // no close_notify after SSL_ERROR_SSL / SYSCALL
        return false;
    }
  }

  SSL* ssl_;
  int fd_;
  int stop_fd_;
  short want_ = POLLIN;
  bool fatal_ = false;
};

// What the echo text shows of a request.
struct Request {
  std::string method;
  std::string path;
  uint64_t body_bytes = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::vector<std::pair<std::string, std::string>> trailers;
};

std::string EchoText(std::string_view protocol, uint64_t number, const Request& r) {
  std::string out = "protocol " + std::string(protocol) + " request " + std::to_string(number) +
                    "\nmethod " + r.method + "\npath " + r.path + "\nbody-bytes " +
                    std::to_string(r.body_bytes) + "\n";
  for (const auto& [name, value] : r.headers) out += "header " + name + ": " + value + "\n";
  for (const auto& [name, value] : r.trailers) out += "trailer " + name + ": " + value + "\n";
  return out;
}

// N of a "/bytes/<N>" path (the query ignored), or nullopt.
std::optional<uint64_t> BytesRequested(std::string_view path) {
  path = path.substr(0, path.find('?'));
  constexpr std::string_view kPrefix = "/bytes/";
  if (path.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  std::string_view digits = path.substr(kPrefix.size());
  if (digits.empty() || digits.size() > 12) return std::nullopt;
  uint64_t n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  if (n > kMaxBytes) return std::nullopt;
  return n;
}

// Bytes [offset, offset + size) of the /bytes pattern.
void FillPattern(uint64_t offset, char* out, size_t size) {
  static const std::string pattern = [] {
    std::string p;
    while (p.size() < kChunk + kAlphabet.size()) p += kAlphabet;
    return p;
  }();
  while (size > 0) {
    size_t n = std::min(size, kChunk);
    std::memcpy(out, pattern.data() + offset % kAlphabet.size(), n);
    out += n;
    offset += n;
    size -= n;
  }
}

// ---- HTTP/1.1 ----

bool IsTokenChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}
bool IsToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), IsTokenChar);
}
// A field value's bytes: HT, visible ASCII, space, obs-text.
bool IsFieldValue(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u == '\t' || (u >= 0x20 && u != 0x7f);
  });
}
std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}
std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
// "name: value" -> lower-case name and trimmed value; false if malformed
// (obs-fold included).
bool ParseField(std::string_view line, std::pair<std::string, std::string>* field) {
  size_t colon = line.find(':');
  if (colon == std::string_view::npos || !IsToken(line.substr(0, colon))) return false;
  std::string_view value = TrimOws(line.substr(colon + 1));
  if (!IsFieldValue(value)) return false;
  *field = {Lower(line.substr(0, colon)), std::string(value)};
  return true;
}
// Whether a comma-separated header value lists `token` (case-insensitive).
bool ListHas(std::string_view list, std::string_view token) {
  while (!list.empty()) {
    size_t comma = list.find(',');
    if (Lower(TrimOws(list.substr(0, comma))) == token) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

struct Head {
  Request request;
  bool http10 = false;
  bool close = false;
  bool expect_continue = false;
  bool chunked = false;
  uint64_t content_length = 0;
};

// The request line and header lines (CRLF-separated, without the empty
// line); false if malformed.
bool ParseHead(std::string_view text, Head* head) {
  size_t eol = text.find("\r\n");
  std::string_view line = text.substr(0, eol);
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return false;
  std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                   version = line.substr(sp2 + 1);
  if (!IsToken(method) || target.empty() ||
      !std::all_of(target.begin(), target.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
    return false;
  }
  if (version == "HTTP/1.0") {
    head->http10 = true;
  } else if (version != "HTTP/1.1") {
    return false;
  }
  head->request.method = std::string(method);
  head->request.path = std::string(target);
  bool keep_alive = false, has_length = false, has_te = false;
  while (eol != std::string_view::npos) {
    text.remove_prefix(eol + 2);
    eol = text.find("\r\n");
    line = text.substr(0, eol);
    std::pair<std::string, std::string> field;
    if (line.find_first_of("\r\n") != std::string_view::npos || !ParseField(line, &field)) {
      return false;
    }
    const std::string& name = field.first;
    const std::string& value = field.second;
    if (name == "content-length") {
      if (value.empty() || value.size() > 18 ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return false;
      }
      uint64_t n = std::stoull(value);
      if (has_length && n != head->content_length) return false;
      has_length = true;
      head->content_length = n;
    } else if (name == "transfer-encoding") {
      // Only chunked, last; anything else (gzip, chunked twice...) is refused.
      std::string lower = Lower(value);
      if (has_te || TrimOws(lower) != "chunked") return false;
      has_te = true;
      head->chunked = true;
    } else if (name == "connection") {
      if (ListHas(value, "close")) head->close = true;
      if (ListHas(value, "keep-alive")) keep_alive = true;
    } else if (name == "expect") {
      if (Lower(value) == "100-continue") head->expect_continue = true;
    }
    head->request.headers.push_back(std::move(field));
  }
  if (has_length && has_te) return false;
  if (head->http10 && !keep_alive) head->close = true;
  return true;
}

class Http1Conn {
 public:
  explicit Http1Conn(TlsIo& io) : io_(io) {}

  void Serve() {
    for (uint64_t number = 1;; ++number) {
      // Empty lines before a request line are ignored (RFC 9112 2.2).
      size_t end;
      for (;;) {
        while (buf_.compare(0, 2, "\r\n") == 0) buf_.erase(0, 2);
        end = buf_.find("\r\n\r\n");
        if (end != std::string::npos) break;
        if (buf_.size() > kMaxHead) return Refuse("431 Request Header Fields Too Large");
        if (!Fill()) return;
      }
      if (end + 4 > kMaxHead) return Refuse("431 Request Header Fields Too Large");
      Head head;
      if (!ParseHead(std::string_view(buf_).substr(0, end), &head)) {
        return Refuse("400 Bad Request");
      }
      buf_.erase(0, end + 4);
      if (head.expect_continue && !head.http10 && !io_.WriteAll("HTTP/1.1 100 Continue\r\n\r\n")) {
        return;
      }
      if (head.chunked) {
        switch (ReadChunked(&head.request)) {
          case Body::kOk:
            break;
          case Body::kEnd:
            return;
          case Body::kBad:
            return Refuse("400 Bad Request");
        }
      } else {
        if (!Skip(head.content_length)) return;
        head.request.body_bytes = head.content_length;
      }
      if (!Respond(head, number) || head.close) return;
    }
  }

 private:
  enum class Body { kOk, kEnd, kBad };

  bool Fill() {
    char tmp[16384];
    long n = io_.Read(tmp, sizeof(tmp));
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }
  // Discards `n` body bytes.
  bool Skip(uint64_t n) {
    while (n > 0) {
      if (buf_.empty() && !Fill()) return false;
      size_t take = static_cast<size_t>(std::min<uint64_t>(n, buf_.size()));
      buf_.erase(0, take);
      n -= take;
    }
    return true;
  }
  // The next CRLF-terminated line, without the CRLF.
  Body ReadLine(size_t limit, std::string* line) {
    size_t eol;
    while ((eol = buf_.find("\r\n")) == std::string::npos) {
      if (buf_.size() > limit + 1) return Body::kBad;  // "\r" may be the CRLF's start
      if (!Fill()) return Body::kEnd;
    }
    if (eol > limit) return Body::kBad;
    line->assign(buf_, 0, eol);
    buf_.erase(0, eol + 2);
    return Body::kOk;
  }
  Body ReadChunked(Request* request) {
    std::string line;
    for (;;) {
      if (Body b = ReadLine(kMaxChunkLine, &line); b != Body::kOk) return b;
      std::string_view size_text = TrimOws(std::string_view(line).substr(0, line.find(';')));
      if (size_text.empty() || size_text.size() > 15) return Body::kBad;
      uint64_t size = 0;
      for (char c : size_text) {
        int digit = (c >= '0' && c <= '9')   ? c - '0'
                    : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                    : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                             : -1;
        if (digit < 0) return Body::kBad;
        size = size * 16 + static_cast<uint64_t>(digit);
      }
      if (size == 0) break;
      if (!Skip(size)) return Body::kEnd;
      request->body_bytes += size;
      if (Body b = ReadLine(0, &line); b != Body::kOk) return b;  // the chunk's CRLF
    }
    size_t trailer_bytes = 0;
    for (;;) {
      if (Body b = ReadLine(kMaxHead, &line); b != Body::kOk) return b;
      if (line.empty()) return Body::kOk;
      trailer_bytes += line.size() + 2;
      std::pair<std::string, std::string> field;
      if (trailer_bytes > kMaxHead || !ParseField(line, &field)) return Body::kBad;
      request->trailers.push_back(std::move(field));
    }
  }

  bool Respond(const Head& head, uint64_t number) {
    const bool head_only = head.request.method == "HEAD";
    std::string response = "HTTP/1.1 200 OK\r\nContent-Type: ";
    std::optional<uint64_t> bytes = BytesRequested(head.request.path);
    std::string body;
    if (bytes) {
      response += "application/octet-stream\r\nContent-Length: " + std::to_string(*bytes);
    } else {
      body = EchoText("http/1.1", number, head.request);
      response += "text/plain\r\nContent-Length: " + std::to_string(body.size());
    }
    response += head.close ? "\r\nConnection: close\r\n\r\n" : "\r\n\r\n";
    if (head_only) return io_.WriteAll(response);
    if (!bytes) return io_.WriteAll(response + body);
    if (!io_.WriteAll(response)) return false;
    std::string chunk(kChunk, '\0');
    for (uint64_t offset = 0; offset < *bytes;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, *bytes - offset));
      FillPattern(offset, chunk.data(), n);
      if (!io_.WriteAll(std::string_view(chunk.data(), n))) return false;
      offset += n;
    }
    return true;
  }

  void Refuse(std::string_view status) {
    std::string body = std::string(status) + "\n";
    (void)io_.WriteAll("HTTP/1.1 " + std::string(status) +
                       "\r\nContent-Type: text/plain\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
  }

  TlsIo& io_;
  std::string buf_;
};

// ---- HTTP/2 ----

struct H2Stream {
  uint64_t number = 0;
  Request request;
  bool responded = false;
  std::string body;  // the echo text
  size_t body_sent = 0;
  bool pattern = false;  // /bytes/<N>
  uint64_t pattern_offset = 0;
  uint64_t pattern_left = 0;
};

class Http2Conn {
 public:
  explicit Http2Conn(TlsIo& io) : io_(io) {}
  ~Http2Conn() {
    if (session_ != nullptr) nghttp2_session_del(session_);
  }

  void Serve() {
    nghttp2_session_callbacks* callbacks = nullptr;
    if (nghttp2_session_callbacks_new(&callbacks) != 0) return;
    nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, OnBeginHeaders);
    nghttp2_session_callbacks_set_on_header_callback(callbacks, OnHeader);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, OnDataChunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, OnFrameRecv);
    nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, OnStreamClose);
    int rv = nghttp2_session_server_new(&session_, callbacks, this);
    nghttp2_session_callbacks_del(callbacks);
    if (rv != 0) return;
    // Windows large enough that an upload is not one round trip per 64 KiB.
    const nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 256},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20},
    };
    if (nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, 2) != 0 ||
        nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, 16 << 20) != 0) {
      return;
    }
    std::string out;
    char in[16384];
    for (;;) {
      bool progress = false;
      while (out.size() < kChunk) {
        const uint8_t* data = nullptr;
        ssize_t n = nghttp2_session_mem_send(session_, &data);
        if (n < 0) return;
        if (n == 0) break;
        out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
        progress = true;
      }
      const bool want_read = nghttp2_session_want_read(session_) != 0;
      if (out.empty() && !want_read && nghttp2_session_want_write(session_) == 0) return;
      short events = 0;
      if (!out.empty()) {
        long n = io_.TryWrite(out.data(), out.size());
        if (n < 0) return;
        if (n > 0) {
          out.erase(0, static_cast<size_t>(n));
          progress = true;
        } else {
          events |= io_.want();
        }
      }
      if (want_read) {
        long n = io_.TryRead(in, sizeof(in));
        if (n < 0) return;
        if (n > 0) {
          if (nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(in),
                                       static_cast<size_t>(n)) < 0) {
            return;  // a protocol error (a bad preface included): the connection ends
          }
          progress = true;
        } else {
          events |= io_.want();
        }
      }
      // Nothing to wait for (no read wanted, nothing to write): the session is over.
      if (!progress && (events == 0 || !io_.Wait(events))) return;
    }
  }

 private:
  static Http2Conn* Self(void* user_data) { return static_cast<Http2Conn*>(user_data); }
  H2Stream* Stream(int32_t id) {
    return static_cast<H2Stream*>(nghttp2_session_get_stream_user_data(session_, id));
  }

  static int OnBeginHeaders(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    Http2Conn* self = Self(user);
    auto stream = std::make_unique<H2Stream>();
    stream->number = ++self->requests_;
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, stream.get());
    self->streams_[frame->hd.stream_id] = std::move(stream);
    return 0;
  }
  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t name_len, const uint8_t* value, size_t value_len, uint8_t,
                      void* user) {
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    H2Stream* stream = Self(user)->Stream(frame->hd.stream_id);
    if (stream == nullptr) return 0;
    std::pair<std::string, std::string> field(
        std::string(reinterpret_cast<const char*>(name), name_len),
        std::string(reinterpret_cast<const char*>(value), value_len));
    if (frame->headers.cat == NGHTTP2_HCAT_HEADERS) {  // after the request's: trailers
      stream->request.trailers.push_back(std::move(field));
      return 0;
    }
    if (field.first == ":method") stream->request.method = field.second;
    if (field.first == ":path") stream->request.path = field.second;
    stream->request.headers.push_back(std::move(field));
    return 0;
  }
  static int OnDataChunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t*, size_t len,
                         void* user) {
    if (H2Stream* stream = Self(user)->Stream(stream_id)) stream->request.body_bytes += len;
    return 0;
  }
  static int OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
      Self(user)->Respond(frame->hd.stream_id);
    }
    return 0;
  }
  static int OnStreamClose(nghttp2_session*, int32_t stream_id, uint32_t, void* user) {
    Self(user)->streams_.erase(stream_id);
    return 0;
  }
  static ssize_t ReadBody(nghttp2_session*, int32_t, uint8_t* buf, size_t length,
                          uint32_t* data_flags, nghttp2_data_source* source, void*) {
    auto* stream = static_cast<H2Stream*>(source->ptr);
    size_t n;
    if (stream->pattern) {
      n = static_cast<size_t>(std::min<uint64_t>(length, stream->pattern_left));
      FillPattern(stream->pattern_offset, reinterpret_cast<char*>(buf), n);
      stream->pattern_offset += n;
      stream->pattern_left -= n;
      if (stream->pattern_left == 0) *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    } else {
      n = std::min(length, stream->body.size() - stream->body_sent);
      std::memcpy(buf, stream->body.data() + stream->body_sent, n);
      stream->body_sent += n;
      if (stream->body_sent == stream->body.size()) *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    }
    return static_cast<ssize_t>(n);
  }

  void Respond(int32_t stream_id) {
    H2Stream* stream = Stream(stream_id);
    if (stream == nullptr || stream->responded) return;
    stream->responded = true;
    std::string content_type = "text/plain", length;
    if (std::optional<uint64_t> bytes = BytesRequested(stream->request.path)) {
      stream->pattern = true;
      stream->pattern_left = *bytes;
      content_type = "application/octet-stream";
      length = std::to_string(*bytes);
    } else {
      stream->body = EchoText("h2", stream->number, stream->request);
      length = std::to_string(stream->body.size());
    }
    auto nv = [](const char* name, const std::string& value) {
      return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name)),
                        reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())),
                        std::strlen(name), value.size(), NGHTTP2_NV_FLAG_NONE};
    };
    const std::string status = "200";
    const nghttp2_nv headers[] = {nv(":status", status), nv("content-type", content_type),
                                  nv("content-length", length)};
    nghttp2_data_provider provider{};
    provider.source.ptr = stream;
    provider.read_callback = ReadBody;
    const bool head_only = stream->request.method == "HEAD";
    if (nghttp2_submit_response(session_, stream_id, headers, 3, head_only ? nullptr : &provider) !=
        0) {
      nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_INTERNAL_ERROR);
    }
  }

  TlsIo& io_;
  nghttp2_session* session_ = nullptr;
  uint64_t requests_ = 0;
  std::map<int32_t, std::unique_ptr<H2Stream>> streams_;
};

// Whether `fd` is a listening socket.
bool IsListening(int fd) {
  int listening = 0;
  socklen_t len = sizeof(listening);
  return ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening != 0;
}

// One connection, start to end: the handshake, then HTTP/1.1 or h2 by ALPN.
// `fd` is non-blocking; stop_fd (-1: none) readable ends every wait. SIGPIPE
// stays blocked on the calling thread (OpenSSL writes with write(2)): a
// connection thread's or process's own, and a pending one dies with it.
void ServeConnection(SSL_CTX* ctx, UniqueFd fd, int stop_fd) {
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, nullptr);
  // Like real servers (nginx's tcp_nodelay, Go's default): a response head
  // and its body go out as separate records, and Nagle would hold the body
  // until the client's delayed ACK (40 ms).
  int one = 1;
  (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr || SSL_set_fd(ssl, fd.get()) != 1) {
    SSL_free(ssl);
    ERR_clear_error();
    return;
  }
  TlsIo io(ssl, fd.get(), stop_fd);
  if (io.Handshake()) {
    const unsigned char* alpn = nullptr;
    unsigned int alpn_len = 0;
    SSL_get0_alpn_selected(ssl, &alpn, &alpn_len);
    if (alpn_len == 2 && std::memcmp(alpn, "h2", 2) == 0) {
      Http2Conn(io).Serve();
    } else {
      Http1Conn(io).Serve();
    }
  }
  io.Close();
  SSL_free(ssl);
  ERR_clear_error();
}

}  // namespace

[[noreturn]] void ServeTlsEcho(int listen_socket, const TlsEchoConfig& config) {
  auto ctx = MakeContext(config);
  if (!ctx) {
    std::fprintf(stderr, "ServeTlsEcho: %s\n", ctx.error().ToString().c_str());
    ::_exit(3);
  }
  if (!IsListening(listen_socket)) {
    std::fprintf(stderr, "ServeTlsEcho: fd %d is not a listening socket\n", listen_socket);
    ::_exit(3);
  }
  ::signal(SIGCHLD, SIG_IGN);  // the connection children reap themselves
  const pid_t server = ::getpid();
  for (;;) {
    pollfd p{listen_socket, POLLIN, 0};
    if (::poll(&p, 1, -1) < 0) continue;
    int c = ::accept4(listen_socket, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        ::usleep(10'000);
      }
      continue;
    }
    pid_t child = ::fork();
    if (child == 0) {
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != server) ::_exit(0);
      ::close(listen_socket);
      ServeConnection(ctx->get(), UniqueFd(c), -1);
      ::_exit(0);
    }
    ::close(c);
  }
}

struct TlsEchoServer::State {
  struct Connection {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  SslCtxPtr ctx;
  UniqueFd listener;
  UniqueFd stop;  // an eventfd: readable once the server stops
  std::thread acceptor;
  std::list<Connection> connections;  // the acceptor's, then the destructor's

  void Accept() {
    for (;;) {
      pollfd p[2] = {{listener.get(), POLLIN, 0}, {stop.get(), POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) continue;
      if (p[1].revents != 0) return;
      UniqueFd c(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!c) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        continue;
      }
      for (auto it = connections.begin(); it != connections.end();) {
        if (it->done->load()) {
          it->thread.join();
          it = connections.erase(it);
        } else {
          ++it;
        }
      }
      auto done = std::make_shared<std::atomic<bool>>(false);
      try {
        std::thread thread([ctx = ctx.get(), fd = c.get(), stop_fd = stop.get(), done] {
          ServeConnection(ctx, UniqueFd(fd), stop_fd);
          OPENSSL_thread_stop();
          done->store(true);
        });
        c.release();  // the thread's now
        connections.push_back({std::move(thread), std::move(done)});
      } catch (const std::system_error&) {
        // No thread: `c` closes the connection.
      }
    }
  }
};

Result<std::unique_ptr<TlsEchoServer>> TlsEchoServer::Start(UniqueFd listener,
                                                            TlsEchoConfig config) {
  if (!IsListening(listener.get())) {
    return MakeError(ErrorCode::kInvalidArgument, "TLS echo server: not a listening socket");
  }
  auto ctx = MakeContext(config);
  if (!ctx) return tl::unexpected(ctx.error());
  int flags = ::fcntl(listener.get(), F_GETFL);
  if (flags < 0 || ::fcntl(listener.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return MakeSyscallError("fcntl", errno, "the echo server's listener");
  }
  UniqueFd stop(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop) return MakeSyscallError("eventfd", errno);
  std::unique_ptr<TlsEchoServer> server(new TlsEchoServer());
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
    if (ss.ss_family == AF_INET) {
      server->port_ = ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      server->port_ = ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
    }
  }
  server->state_ = std::make_unique<State>();
  State* state = server->state_.get();
  state->ctx = std::move(*ctx);
  state->listener = std::move(listener);
  state->stop = std::move(stop);
  state->acceptor = std::thread([state] { state->Accept(); });
  return server;
}

TlsEchoServer::~TlsEchoServer() {
  if (state_ == nullptr) return;
  uint64_t one = 1;
  (void)!::write(state_->stop.get(), &one, sizeof(one));
  if (state_->acceptor.joinable()) state_->acceptor.join();
  for (auto& connection : state_->connections) connection.thread.join();
}

}  // namespace deepbox::local::testing
