#include "net/http_client.h"

#include <fmt/format.h>
#include <poll.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>

#include "net/beast_stream.h"
#include "net/url.h"

namespace deepbox::net {

namespace {
bool IsIdempotentMethod(std::string_view method) {
  return method == "GET" || method == "HEAD" || method == "PUT" || method == "DELETE" ||
         method == "OPTIONS" || method == "TRACE";
}
}  // namespace

namespace http = boost::beast::http;
using internal::BeastStream;

namespace {

constexpr std::string_view kCannotConnect = "cannot connect to ";

struct PooledConn {
  Conn conn;
  boost::beast::flat_buffer buffer;
};

}  // namespace

struct HttpClient::Impl {
  std::string base_url;
  Url url;
  Endpoint endpoint;
  std::string host_header;
  std::string path_prefix;
  ClientOptions options;
  std::shared_ptr<TlsContext> tls;

  std::mutex mu;
  std::deque<std::unique_ptr<PooledConn>> idle;

  Result<std::unique_ptr<PooledConn>> Checkout(bool& reused, bool fresh = false) {
    if (!fresh) {
      std::lock_guard lock(mu);
      while (!idle.empty()) {
        auto pc = std::move(idle.back());
        idle.pop_back();
        if (pc->conn.PeerClosed()) continue;  // server closed it while idle
        reused = true;
        return pc;
      }
    }
    reused = false;
    auto deadline = DeadlineAfter(options.connect_timeout);
    auto conn = Conn::Connect(endpoint, deadline);
    if (!conn) {
      Error e = conn.error();  // its sys_errno is connect's (ECONNREFUSED, ENOENT, ...)
      e.message = fmt::format("{}{}: {}", kCannotConnect, base_url, e.message);
      e.reason = std::string(kReasonConnectFailed);
      if (e.code != ErrorCode::kTimeout) e.code = ErrorCode::kUnavailable;
      return tl::unexpected(e);
    }
    if (tls) {
      std::string name = options.tls.server_name.empty() ? url.host : options.tls.server_name;
      if (auto s = conn->StartTlsClient(*tls, name, deadline); !s) return tl::unexpected(s.error());
    }
    auto pc = std::make_unique<PooledConn>();
    pc->conn = std::move(*conn);
    // Room for a typical response in one read (Beast reads at most the free
    // capacity).
    pc->buffer.reserve(16 << 10);
    return pc;
  }

  void Return(std::unique_ptr<PooledConn> pc) {
    std::lock_guard lock(mu);
    if (idle.size() < options.max_idle_connections) idle.push_back(std::move(pc));
  }

  // Sends req.body_source's bytes (framed as chunks without body_length).
  // Returns false when it stopped because the server has already answered (or
  // closed): the caller then reads that answer.
  static Result<bool> SendBody(Conn& conn, const ClientRequest& req, Deadline overall);

  // One attempt. `retryable` is set when the failure happened on a reused
  // connection before any response byte arrived (a stale keep-alive socket).
  Result<Response> Attempt(const ClientRequest& req,
                           const std::function<bool(const Response&)>* on_head,
                           const std::function<bool(std::string_view)>* on_data, bool& retryable);
};

Result<Response> HttpClient::Impl::Attempt(const ClientRequest& req,
                                           const std::function<bool(const Response&)>* on_head,
                                           const std::function<bool(std::string_view)>* on_data,
                                           bool& retryable) {
  retryable = false;
  bool reused = false;
  const bool streamed_body = static_cast<bool>(req.body_source);
  auto pc_or = Checkout(reused, /*fresh=*/streamed_body);
  if (!pc_or) return tl::unexpected(pc_or.error());
  std::unique_ptr<PooledConn> pc = std::move(*pc_or);
  pc->conn.set_cancel_fd(req.cancel_fd);
  BeastStream stream(pc->conn);
  Deadline overall = req.timeout.count() > 0 ? DeadlineAfter(req.timeout) : Deadline::max();
  auto step_deadline = [&] {
    Deadline idle = options.read_idle_timeout.count() > 0 ? DeadlineAfter(options.read_idle_timeout)
                                                          : Deadline::max();
    return std::min(idle, overall);
  };
  auto fail = [&](std::string_view what) {
    Error e = stream.last_error();
    if (e.code == ErrorCode::kCancelled) {
      e.message = fmt::format("{} {}{}: cancelled {}", req.method, base_url, req.target, what);
    } else if (e.code == ErrorCode::kTimeout) {
      e.message = fmt::format("{} {}{}: timed out {}", req.method, base_url, req.target, what);
    } else {
      e.code = ErrorCode::kUnavailable;
      e.message =
          fmt::format("{} {}{}: {} ({})", req.method, base_url, req.target, what, e.message);
    }
    return tl::unexpected(e);
  };

  boost::system::error_code ec;
  bool body_complete = true;  // false: the server answered before the body was all sent
  stream.set_deadline(
      std::min(overall, DeadlineAfter(options.connect_timeout + std::chrono::milliseconds(60000))));
  if (!streamed_body) {
    http::request<http::string_body> msg{http::string_to_verb(req.method), path_prefix + req.target,
                                         11};
    if (msg.method() == http::verb::unknown) msg.method_string(req.method);
    msg.set(http::field::host, host_header);
    msg.set(http::field::user_agent, options.user_agent);
    for (const auto& [k, v] : options.default_headers.entries()) msg.set(k, v);
    for (const auto& [k, v] : req.headers.entries()) msg.set(k, v);
    msg.body() = req.body;
    msg.prepare_payload();
    msg.keep_alive(true);
    http::write(stream, msg, ec);
    if (ec) {
      retryable = reused;
      return fail("sending the request");
    }
  } else {
    http::request<http::empty_body> msg{http::string_to_verb(req.method), path_prefix + req.target,
                                        11};
    if (msg.method() == http::verb::unknown) msg.method_string(req.method);
    msg.set(http::field::host, host_header);
    msg.set(http::field::user_agent, options.user_agent);
    for (const auto& [k, v] : options.default_headers.entries()) msg.set(k, v);
    for (const auto& [k, v] : req.headers.entries()) msg.set(k, v);
    if (req.body_length) {
      msg.content_length(*req.body_length);
    } else {
      msg.chunked(true);
    }
    msg.keep_alive(true);
    http::request_serializer<http::empty_body> sr{msg};
    http::write_header(stream, sr, ec);
    if (ec) return fail("sending the request");
    // When the server answered early, its answer is read below all the same.
    auto sent = SendBody(pc->conn, req, overall);
    if (!sent) {
      Error e = sent.error();
      e.message = fmt::format("{} {}{}: {}", req.method, base_url, req.target, e.message);
      return tl::unexpected(e);
    }
    body_complete = *sent;
  }

  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  if (req.method == "HEAD") parser.skip(true);
  stream.set_deadline(step_deadline());
  http::read_header(stream, pc->buffer, parser, ec);
  if (ec) {
    // The request went out: the server may have carried it out before the
    // connection broke (a sandbox's daemon killed mid-command). Only a
    // request whose repetition is harmless is sent again (RFC 9110
    // 9.2.2); an `exec` POST must never run twice.
    retryable = reused && stream.eof() && IsIdempotentMethod(req.method);
    return fail("waiting for the response");
  }
  Response out;
  out.status = static_cast<int>(parser.get().result_int());
  for (const auto& field : parser.get()) {
    out.headers.Add(std::string(field.name_string()), std::string(field.value()));
  }
  bool keep_alive = parser.get().keep_alive() && body_complete;
  if (on_head != nullptr && !(*on_head)(out)) return out;  // caller stopped; drop connection

  std::string body;
  // With a Content-Length (the usual case) the body is read straight into
  // `body`; otherwise (chunked, streaming) through a scratch buffer.
  // (Allocated up front only up to a bound: a large announced length grows
  // with the data that actually arrives.)
  constexpr uint64_t kMaxDirect = 16u << 20;
  const bool direct =
      on_data == nullptr && req.method != "HEAD" && !parser.is_done() &&
      parser.content_length().has_value() &&
      *parser.content_length() <= std::min<uint64_t>(kMaxDirect, options.max_response_bytes);
  if (direct) body.resize(static_cast<size_t>(*parser.content_length()));
  size_t filled = 0;
  std::unique_ptr<char[]> scratch;
  constexpr size_t kChunk = 64 * 1024;
  while (!parser.is_done()) {
    char* dst;
    size_t room;
    if (direct) {
      dst = body.data() + filled;
      room = body.size() - filled;
      if (room == 0) break;  // cannot happen: the parser is done at Content-Length
    } else {
      if (!scratch) scratch.reset(new char[kChunk]);
      dst = scratch.get();
      room = kChunk;
    }
    parser.get().body().data = dst;
    parser.get().body().size = room;
    stream.set_deadline(step_deadline());
    http::read_some(stream, pc->buffer, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec && !(ec == http::error::end_of_stream && parser.is_done())) {
      if (ec == http::error::partial_message || ec == boost::asio::error::eof) {
        return tl::unexpected(
            Error(ErrorCode::kUnavailable, fmt::format("{} {}{}: connection closed mid-response",
                                                       req.method, base_url, req.target)));
      }
      return fail("reading the response body");
    }
    size_t n = room - parser.get().body().size;
    if (n == 0) continue;
    if (direct) {
      filled += n;
      continue;
    }
    std::string_view piece(dst, n);
    if (on_data != nullptr) {
      if (!(*on_data)(piece)) return out;  // caller stopped; drop connection
    } else {
      if (body.size() + n > options.max_response_bytes) {
        return MakeError(ErrorCode::kResourceExhausted,
                         fmt::format("{} {}{}: response exceeds {} bytes", req.method, base_url,
                                     req.target, options.max_response_bytes));
      }
      body.append(piece);
    }
  }
  if (direct) body.resize(filled);
  out.body = std::move(body);
  pc->conn.set_cancel_fd(-1);
  if (keep_alive) Return(std::move(pc));
  return out;
}

namespace {
// True when the server has sent something (or closed): an early answer.
bool PeerSpoke(const Conn& conn) {
  pollfd p{conn.fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}
}  // namespace

Result<bool> HttpClient::Impl::SendBody(Conn& conn, const ClientRequest& req, Deadline overall) {
  constexpr size_t kPiece = 256 * 1024;
  std::unique_ptr<char[]> buf(new char[kPiece + 32]);
  const bool chunked = !req.body_length.has_value();
  uint64_t sent = 0;
  for (;;) {
    if (PeerSpoke(conn)) return false;
    // Room before the data for a chunk-size line.
    char* data = buf.get() + 16;
    auto n = req.body_source(data, kPiece);
    if (!n) return tl::unexpected(n.error());
    if (*n > kPiece) return MakeError(ErrorCode::kInternal, "body source overran its buffer");
    if (req.body_length && sent + *n > *req.body_length) {
      return MakeError(ErrorCode::kInternal,
                       fmt::format("the request body grew beyond its announced {} bytes "
                                   "(did the file change while being sent?)",
                                   *req.body_length));
    }
    if (*n == 0) {
      if (req.body_length && sent != *req.body_length) {
        return MakeError(ErrorCode::kInternal,
                         fmt::format("the request body ended after {} of its announced {} bytes "
                                     "(did the file change while being sent?)",
                                     sent, *req.body_length));
      }
      if (chunked) {
        auto s = conn.WriteAll("0\r\n\r\n", overall);
        if (!s) {
          if (PeerSpoke(conn)) return false;
          return tl::unexpected(s.error());
        }
      }
      return true;
    }
    std::string_view piece(data, *n);
    std::string head;
    if (chunked) {
      head = fmt::format("{:x}\r\n", *n);
      std::memcpy(data - head.size(), head.data(), head.size());
      std::memcpy(data + *n, "\r\n", 2);
      piece = std::string_view(data - head.size(), head.size() + *n + 2);
    }
    if (auto s = conn.WriteAll(piece, overall); !s) {
      // A server that answered and closed makes our write fail (EPIPE,
      // ECONNRESET): its answer may still be readable.
      if (s.error().code == ErrorCode::kTimeout || s.error().code == ErrorCode::kCancelled) {
        return tl::unexpected(s.error());
      }
      return false;
    }
    sent += *n;
  }
}

bool NothingSent(const Error& error) {
  return error.code == ErrorCode::kUnavailable && error.reason == kReasonConnectFailed;
}

HttpClient::HttpClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpClient::~HttpClient() = default;

Result<std::unique_ptr<HttpClient>> HttpClient::Create(std::string_view base_url,
                                                       ClientOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->base_url = std::string(base_url);
  auto url = ParseUrl(base_url);
  if (!url) return tl::unexpected(url.error());
  impl->url = *url;
  if (url->scheme == "unix") {
    impl->endpoint.is_unix = true;
    impl->endpoint.path = url->path;
    impl->host_header = "localhost";
  } else {
    impl->endpoint.host = url->host;
    impl->endpoint.port = url->port;
    bool default_port =
        (url->scheme == "http" && url->port == 80) || (url->scheme == "https" && url->port == 443);
    std::string host = url->host.find(':') != std::string::npos ? "[" + url->host + "]" : url->host;
    impl->host_header = default_port ? host : fmt::format("{}:{}", host, url->port);
    if (url->path != "/") {
      impl->path_prefix = url->path;
      while (impl->path_prefix.ends_with('/')) impl->path_prefix.pop_back();
    }
  }
  impl->options = std::move(options);
  if (url->scheme == "https") {
    auto ctx = TlsContext::ForClient(impl->options.tls);
    if (!ctx) return tl::unexpected(ctx.error());
    impl->tls = *ctx;
  }
  return std::unique_ptr<HttpClient>(new HttpClient(std::move(impl)));
}

namespace {
// The retry of a request whose reused connection failed: if no new one can
// be made, the server went away (it was not a stale idle connection), and the
// first failure (the request was sent, the connection broke) is what happened.
Result<Response> AfterRetry(Result<Response> first, Result<Response> again) {
  if (!again && NothingSent(again.error())) return first;
  return again;
}
}  // namespace

Result<Response> HttpClient::Send(const ClientRequest& request) {
  bool retryable = false;
  auto r = impl_->Attempt(request, nullptr, nullptr, retryable);
  if (!r && retryable) {
    r = AfterRetry(std::move(r), impl_->Attempt(request, nullptr, nullptr, retryable));
  }
  return r;
}

Result<Response> HttpClient::SendStreaming(const ClientRequest& request,
                                           const std::function<bool(const Response&)>& on_head,
                                           const std::function<bool(std::string_view)>& on_data) {
  bool retryable = false;
  auto r = impl_->Attempt(request, &on_head, &on_data, retryable);
  if (!r && retryable) {
    r = AfterRetry(std::move(r), impl_->Attempt(request, &on_head, &on_data, retryable));
  }
  return r;
}

void HttpClient::CloseIdle() {
  std::lock_guard lock(impl_->mu);
  impl_->idle.clear();
}

const std::string& HttpClient::base_url() const { return impl_->base_url; }

}  // namespace deepbox::net
