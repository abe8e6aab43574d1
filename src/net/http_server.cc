#include "net/http_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "common/json.h"
#include "net/beast_stream.h"
#include "net/url.h"

namespace deepbox::net {

namespace http = boost::beast::http;
using internal::BeastStream;

struct HttpServer::Impl {
  Listener listener;
  Handler handler;
  ServerOptions options;
  UniqueFd cancel_fd;  // eventfd: readable once Stop() begins
  std::atomic<bool> stopping{false};
  std::thread accept_thread;

  std::mutex mu;
  std::condition_variable cv;
  size_t active = 0;
  // Connections per peer address (only with max_connections_per_peer).
  std::map<std::string, size_t> per_peer;
  // Bytes of buffered bodies held (max_buffered_body_bytes).
  std::atomic<size_t> buffered{0};

  void AcceptLoop();
  void Finished(const std::string& peer);
  void ServeConnection(Conn conn);
};

namespace {

constexpr size_t kInitialReadBuffer = 16 << 10;

enum class BodyState { kDone, kPending, kTimedOut };

constexpr std::string_view kBodyTooSlow =
    "the request body did not arrive in time (body deadline: the server's body timeout and "
    "minimum rate, and its whole-body deadline if it has one)";

// The answer to a body the body deadline cut (the connection then closes).
Response RequestTimeout() {
  return Response::Json(408,
                        ToJson(ErrorToJson(Error(ErrorCode::kTimeout, std::string(kBodyTooSlow)))));
}

// Every write of a response is bounded by the connection's write stall
// timeout (ServerOptions::write_timeout, set on the Conn), not by a deadline
// for the whole response.
class ConnWriter : public ResponseWriter {
 public:
  // `body_state` (optional) says how reading the request body went: if it was
  // not read to its end, the connection cannot carry another request and is
  // closed; if the body deadline cut it, the answer is the server's 408.
  ConnWriter(Conn& conn, const ServerOptions& options, bool head, bool keep_alive,
             std::function<BodyState()> body_state = nullptr)
      : conn_(conn),
        stream_(conn),
        options_(options),
        head_(head),
        keep_alive_(keep_alive),
        body_state_(std::move(body_state)) {}

  Status Send(const Response& handler_response) override {
    if (started_) return MakeError(ErrorCode::kInternal, "response already started");
    started_ = true;
    const BodyState body = body_state_ ? body_state_() : BodyState::kDone;
    if (body != BodyState::kDone) keep_alive_ = false;
    // The handler's answer to a body that did not come in time (its read
    // failed) is replaced by the server's own.
    const Response timed_out = body == BodyState::kTimedOut ? RequestTimeout() : Response{};
    const Response& response = body == BodyState::kTimedOut ? timed_out : handler_response;
    boost::system::error_code ec;
    if (head_) {
      http::response<http::empty_body> res{static_cast<http::status>(response.status), 11};
      CopyHeaders(response.headers, res);
      res.content_length(response.body.size());
      res.keep_alive(keep_alive_);
      http::write(stream_, res, ec);
    } else {
      http::response<http::string_body> res{static_cast<http::status>(response.status), 11};
      CopyHeaders(response.headers, res);
      res.body() = response.body;
      res.prepare_payload();
      res.keep_alive(keep_alive_);
      http::write(stream_, res, ec);
    }
    if (ec) {
      failed_ = true;
      return tl::unexpected(stream_.last_error());
    }
    finished_ = true;
    return {};
  }

  Status BeginStream(int status, const Headers& headers) override {
    if (started_) return MakeError(ErrorCode::kInternal, "response already started");
    started_ = true;
    streaming_ = true;
    if (body_state_ && body_state_() != BodyState::kDone) keep_alive_ = false;
    http::response<http::empty_body> res{static_cast<http::status>(status), 11};
    CopyHeaders(headers, res);
    res.chunked(true);
    res.keep_alive(keep_alive_);
    http::response_serializer<http::empty_body> sr{res};
    boost::system::error_code ec;
    http::write_header(stream_, sr, ec);
    if (ec) {
      failed_ = true;
      return tl::unexpected(stream_.last_error());
    }
    return {};
  }

  Status WriteChunk(std::string_view data) override {
    if (!streaming_ || failed_) return MakeError(ErrorCode::kInternal, "no open stream");
    if (data.empty()) return {};
    std::string frame = fmt::format("{:x}\r\n", data.size());
    frame.append(data);
    frame += "\r\n";
    auto s = conn_.WriteAll(frame, Deadline::max());
    if (!s) failed_ = true;
    return s;
  }

  Status EndStream() override {
    if (!streaming_ || failed_) return MakeError(ErrorCode::kInternal, "no open stream");
    auto s = conn_.WriteAll("0\r\n\r\n", Deadline::max());
    if (!s) {
      failed_ = true;
      return s;
    }
    finished_ = true;
    return {};
  }

  bool ClientGone() const override { return conn_.PeerClosed(); }
  bool started() const override { return started_; }
  bool finished() const { return finished_ && !failed_; }
  bool keep_alive() const { return keep_alive_; }

 private:
  template <class Msg>
  void CopyHeaders(const Headers& headers, Msg& res) {
    res.set(http::field::server, options_.server_header);
    for (const auto& [k, v] : headers.entries()) res.insert(k, v);
  }

  Conn& conn_;
  BeastStream stream_;
  const ServerOptions& options_;
  bool head_;
  bool keep_alive_;
  std::function<BodyState()> body_state_;
  bool started_ = false;
  bool streaming_ = false;
  bool finished_ = false;
  bool failed_ = false;
};

// Closes after an answer given before the client finished sending: stop
// writing, then read and discard what is still coming for a moment, so the
// client reads the answer instead of a connection reset (a close with unread
// input makes the kernel send RST, which can destroy the answer in flight).
void LingeringClose(Conn& conn) {
  conn.ShutdownWrite();
  const Deadline until = DeadlineAfter(std::chrono::milliseconds(2000));
  char sink[64 * 1024];
  for (size_t total = 0; total < (256u << 20);) {
    auto n = conn.ReadSome(sink, sizeof sink, until);
    if (!n || *n == 0) return;
    total += *n;
  }
}

void SendSimpleError(Conn& conn, int status, std::string_view message, const ServerOptions& opts,
                     bool linger = false) {
  ConnWriter w(conn, opts, false, false);
  ErrorCode code = status == 413   ? ErrorCode::kResourceExhausted
                   : status == 503 ? ErrorCode::kUnavailable
                   : status == 408 ? ErrorCode::kTimeout
                                   : ErrorCode::kInvalidArgument;
  (void)w.Send(Response::Json(status, ToJson(ErrorToJson(Error(code, std::string(message))))));
  if (linger) LingeringClose(conn);
}

// The body deadline (ServerOptions::body_timeout, body_min_rate and, for a
// buffered body, buffered_body_deadline): when the next byte of the body is
// due. A token bucket: the first byte is due body_timeout after the start;
// each byte received pushes the deadline 1/min_rate s further, but never
// beyond now + body_timeout, so a client ahead of the rate banks at most
// body_timeout of credit (not received/min_rate: hours for a big body sent
// fast, which a client could then spend dripping a byte a minute).
class BodyClock {
 public:
  BodyClock(const ServerOptions& options, bool buffered)
      : silence_(options.body_timeout),
        min_rate_(options.body_min_rate),
        whole_(buffered ? options.buffered_body_deadline : std::chrono::milliseconds(0)) {}
  // The body starts now (after the headers, or after a 100 Continue).
  void Start() {
    start_ = Clock::now();
    due_ = silence_.count() > 0 ? start_ + silence_ : Deadline::max();
  }
  void Received(size_t n) {
    if (n == 0 || silence_.count() <= 0) return;
    const Deadline cap = Clock::now() + silence_;
    if (min_rate_ == 0) {
      due_ = cap;
      return;
    }
    // n / min_rate seconds, in double and capped at ~30 years so that no
    // length overflows the clock.
    const double seconds = std::min(static_cast<double>(n) / static_cast<double>(min_rate_), 1e9);
    const auto credit =
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    due_ = due_ >= cap || cap - due_ <= credit ? cap : due_ + credit;
  }
  Deadline Next() const {
    if (whole_.count() > 0) return std::min(due_, start_ + whole_);
    return due_;
  }

 private:
  std::chrono::milliseconds silence_;
  uint64_t min_rate_;
  std::chrono::milliseconds whole_;
  Deadline start_{};
  Deadline due_ = Deadline::max();
};

// A request's share of ServerOptions::max_buffered_body_bytes, reserved as
// its body arrives and given back when it ends.
class BodyBudget {
 public:
  BodyBudget(std::atomic<size_t>& used, size_t cap) : used_(used), cap_(cap) {}
  BodyBudget(const BodyBudget&) = delete;
  BodyBudget& operator=(const BodyBudget&) = delete;
  ~BodyBudget() { used_.fetch_sub(held_); }
  bool Reserve(size_t n) {
    size_t now = used_.load();
    do {
      if (cap_ != 0 && (now > cap_ || n > cap_ - now)) return false;
    } while (!used_.compare_exchange_weak(now, now + n));
    held_ += n;
    return true;
  }
  size_t cap() const { return cap_; }

 private:
  std::atomic<size_t>& used_;
  size_t cap_;
  size_t held_ = 0;
};

using BodyParser = http::request_parser<http::buffer_body>;

// Reads a request body from the parser as the handler asks for it.
class ParserBodyReader : public BodyReader {
 public:
  ParserBodyReader(Conn& conn, BeastStream& stream, boost::beast::flat_buffer& buffer,
                   BodyParser& parser, const ServerOptions& options, bool send_continue)
      : conn_(conn),
        stream_(stream),
        buffer_(buffer),
        parser_(parser),
        clock_(options, /*buffered=*/false),
        send_continue_(send_continue) {
    clock_.Start();
  }

  Result<size_t> Read(char* data, size_t size) override {
    if (failed_) return tl::unexpected(*failed_);
    if (size == 0) return size_t{0};
    if (send_continue_) {  // the handler wants the body: now ask for it
      send_continue_ = false;
      (void)conn_.WriteAll("HTTP/1.1 100 Continue\r\n\r\n", Deadline::max());
      clock_.Start();  // the client waited for this before sending
    }
    while (!parser_.is_done()) {
      parser_.get().body().data = data;
      parser_.get().body().size = size;
      boost::system::error_code ec;
      stream_.set_deadline(clock_.Next());
      http::read_some(stream_, buffer_, parser_, ec);
      if (ec == http::error::need_buffer) ec = {};
      size_t n = size - parser_.get().body().size;
      clock_.Received(n);
      if (ec) {
        Error e = stream_.last_error();
        if (e.code == ErrorCode::kTimeout) {
          timed_out_ = true;
          e.message = std::string(kBodyTooSlow);
        } else if (e.code != ErrorCode::kCancelled) {
          e = Error(ErrorCode::kInvalidArgument,
                    "the request body ended early or is malformed: " + ec.message());
        }
        failed_ = e;
        return tl::unexpected(e);
      }
      if (n > 0) return n;
    }
    return size_t{0};
  }
  std::optional<uint64_t> content_length() const override {
    auto cl = parser_.content_length();
    if (!cl) return std::nullopt;
    return static_cast<uint64_t>(*cl);
  }
  BodyState state() const {
    if (timed_out_) return BodyState::kTimedOut;
    return parser_.is_done() && !failed_ ? BodyState::kDone : BodyState::kPending;
  }

 private:
  Conn& conn_;
  BeastStream& stream_;
  boost::beast::flat_buffer& buffer_;
  BodyParser& parser_;
  BodyClock clock_;
  bool send_continue_;
  bool timed_out_ = false;
  std::optional<Error> failed_;
};

// Reads a whole body of at most `limit` bytes (RESOURCE_EXHAUSTED beyond it:
// 413), holding its bytes in `budget` (UNAVAILABLE when the server's is used
// up: 503).
Result<std::string> ReadWholeBody(BeastStream& stream, boost::beast::flat_buffer& buffer,
                                  BodyParser& parser, size_t limit, BodyClock& clock,
                                  BodyBudget& budget) {
  std::string body;
  // Grows with what arrives: an announced length alone must not cost memory.
  if (auto cl = parser.content_length()) {
    body.reserve(static_cast<size_t>(std::min<uint64_t>(*cl, uint64_t{1} << 20)));
  }
  char scratch[64 * 1024];
  while (!parser.is_done()) {
    parser.get().body().data = scratch;
    parser.get().body().size = sizeof scratch;
    boost::system::error_code ec;
    stream.set_deadline(clock.Next());
    http::read_some(stream, buffer, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    size_t n = sizeof scratch - parser.get().body().size;
    clock.Received(n);
    if (ec) {
      Error e = stream.last_error();
      if (e.code == ErrorCode::kTimeout) {
        return MakeError(ErrorCode::kTimeout, std::string(kBodyTooSlow));
      }
      if (e.code == ErrorCode::kCancelled) return tl::unexpected(e);
      return MakeError(ErrorCode::kInvalidArgument, "malformed HTTP request: " + ec.message());
    }
    if (body.size() + n > limit) {
      return MakeError(ErrorCode::kResourceExhausted,
                       fmt::format("request body exceeds {} bytes", limit));
    }
    if (!budget.Reserve(n)) {
      return MakeError(ErrorCode::kUnavailable,
                       fmt::format("the server is holding as many request bodies as it may ({} "
                                   "bytes in all); try again later",
                                   budget.cap()));
    }
    body.append(scratch, n);
  }
  return body;
}

// The numeric IP address of a socket's own end (getsockname) or its peer's
// (getpeername); "" for a unix socket. With `unmap`, an IPv4-mapped IPv6
// address is given as IPv4.
std::string SocketAddress(int fd, bool peer, bool unmap) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  auto* sa = reinterpret_cast<sockaddr*>(&ss);
  if ((peer ? ::getpeername(fd, sa, &len) : ::getsockname(fd, sa, &len)) != 0) return "";
  char text[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, text, sizeof text);
  } else if (ss.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr;
    if (unmap && IN6_IS_ADDR_V4MAPPED(&a)) {
      ::inet_ntop(AF_INET, &a.s6_addr[12], text, sizeof text);
    } else {
      ::inet_ntop(AF_INET6, &a, text, sizeof text);
    }
  }
  return text;
}

// Starts `fn` on a detached thread. Unlike std::thread, a failure (EAGAIN:
// the pids cgroup, RLIMIT_NPROC or memory are exhausted, which a sandbox's
// processes can cause) is a value, not an exception that would end the
// daemon.
Status StartDetachedThread(std::function<void()> fn) {
  auto* heap = new std::function<void()>(std::move(fn));
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  int rc = pthread_create(
      &thread, &attr,
      [](void* arg) -> void* {
        std::unique_ptr<std::function<void()>> f(static_cast<std::function<void()>*>(arg));
        (*f)();
        return nullptr;
      },
      heap);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    delete heap;
    return MakeSyscallError("pthread_create", rc);
  }
  return {};
}

}  // namespace

void HttpServer::Impl::AcceptLoop() {
  for (;;) {
    auto fd = listener.Accept(cancel_fd.get());
    if (!fd) {
      if (fd.error().code == ErrorCode::kCancelled || stopping) return;
      // EMFILE and friends: back off briefly rather than spin.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    Conn conn(std::move(*fd));
    conn.set_write_stall_timeout(options.write_timeout);
    const std::string peer = options.max_connections_per_peer > 0
                                 ? SocketAddress(conn.fd(), /*peer=*/true, /*unmap=*/true)
                                 : std::string();
    {
      std::lock_guard lock(mu);
      if (active >= options.max_connections) {
        SendSimpleError(conn, 503, "too many connections", options);
        continue;
      }
      if (!peer.empty()) {
        size_t& from_peer = per_peer[peer];
        if (from_peer >= options.max_connections_per_peer) {
          SendSimpleError(conn, 503,
                          fmt::format("too many connections from {} (at most {} at once)", peer,
                                      options.max_connections_per_peer),
                          options);
          continue;
        }
        ++from_peer;
      }
      ++active;
    }
    // The connection lives on the heap until its thread has it, so that a
    // thread that cannot start leaves it here to be answered.
    auto shared = std::make_shared<Conn>(std::move(conn));
    auto started = StartDetachedThread([this, shared, peer] {
      ServeConnection(std::move(*shared));
      if (options.tls) ReleaseThreadTlsState();
      Finished(peer);
    });
    if (!started) {
      SendSimpleError(*shared, 503, "cannot serve this connection: " + started.error().message,
                      options);
      Finished(peer);
    }
  }
}

void HttpServer::Impl::Finished(const std::string& peer) {
  std::lock_guard lock(mu);
  if (!peer.empty()) {
    auto it = per_peer.find(peer);
    if (it != per_peer.end() && --it->second == 0) per_peer.erase(it);
  }
  --active;
  cv.notify_all();
}

void HttpServer::Impl::ServeConnection(Conn conn) {
  const Deadline accepted = Clock::now();
  conn.set_cancel_fd(cancel_fd.get());
  conn.set_write_stall_timeout(options.write_timeout);
  auto after = [](Deadline from, std::chrono::milliseconds d) {
    return d.count() <= 0 ? Deadline::max() : from + d;
  };
  if (options.tls) {
    if (!conn.StartTlsServer(*options.tls, after(accepted, options.header_timeout))) return;
  }
  BeastStream stream(conn);
  boost::beast::flat_buffer buffer;
  // Room for a typical request in one read (Beast reads at most the free
  // capacity, and a small buffer means one recv per few hundred bytes).
  buffer.reserve(kInitialReadBuffer);
  if (!options.tls && options.serve_h2_prior_knowledge) {
    // Read until the bytes can no longer be the HTTP/2 preface (an HTTP/1.1
    // request differs at its first byte but for "P...", at the fourth at
    // most); what was read stays in `buffer` for the HTTP/1.1 parser.
    constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    stream.set_deadline(after(accepted, options.header_timeout));
    for (;;) {
      std::string_view got(static_cast<const char*>(buffer.data().data()), buffer.size());
      const size_t n = std::min(got.size(), kPreface.size());
      if (got.substr(0, n) != kPreface.substr(0, n)) break;
      if (n == kPreface.size()) {
        options.serve_h2_prior_knowledge(conn, got);
        return;
      }
      boost::system::error_code ec;
      size_t r = stream.read_some(buffer.prepare(kInitialReadBuffer), ec);
      buffer.commit(r);
      if (ec || r == 0) return;  // closed, silent too long, or shutting down
    }
  }
  for (bool first = true; !stopping; first = false) {
    // The header deadline runs from the request's first byte; a new
    // connection's first request is due from accept (a client that connects
    // and stays silent is a slow header too).
    Deadline header_deadline = after(accepted, options.header_timeout);
    boost::system::error_code ec;
    if (!first) {
      if (buffer.size() == 0) {
        // Kept alive, nothing pipelined: wait for the next request to begin.
        stream.set_deadline(DeadlineAfter(options.idle_timeout));
        size_t n = stream.read_some(buffer.prepare(kInitialReadBuffer), ec);
        buffer.commit(n);
        if (ec || n == 0) return;  // idle too long, closed, or shutting down: no answer
      }
      header_deadline = after(Clock::now(), options.header_timeout);
    }
    BodyParser parser;
    parser.header_limit(static_cast<std::uint32_t>(options.max_header_bytes));
    parser.body_limit(boost::none);  // checked below, per route
    stream.set_deadline(header_deadline);
    http::read_header(stream, buffer, parser, ec);
    if (ec) {
      if (ec == http::error::header_limit) {
        SendSimpleError(conn, 431, "request headers too large", options);
      } else if (ec == boost::asio::error::timed_out) {
        // Part of a request came, too slowly: say so (a connection that sent
        // nothing is just closed).
        if (buffer.size() > 0) {
          SendSimpleError(conn, 408, "the request headers did not arrive in time", options,
                          /*linger=*/true);
        }
      } else if (ec != boost::asio::error::eof && ec != boost::asio::error::connection_aborted &&
                 ec != http::error::end_of_stream) {
        SendSimpleError(conn, 400, "malformed HTTP request: " + ec.message(), options);
      }
      return;
    }
    const auto& head = parser.get();
    // Before the request, so that its body is freed before the bytes are
    // given back.
    BodyBudget budget(buffered, options.max_buffered_body_bytes);
    Request req;
    req.method = std::string(head.method_string());
    req.target = std::string(head.target());
    auto q = req.target.find('?');
    req.raw_path = req.target.substr(0, q);
    auto decoded = PercentDecode(req.raw_path);
    if (!decoded) {
      SendSimpleError(conn, 400, "bad percent-encoding in request path", options);
      return;
    }
    req.path = std::move(*decoded);
    if (q != std::string::npos) req.query = ParseQuery(std::string_view(req.target).substr(q + 1));
    for (const auto& field : head) {
      req.headers.Add(std::string(field.name_string()), std::string(field.value()));
    }
    auto expect = head[http::field::expect];
    const bool wants_continue =
        EqualsIgnoreCase(std::string_view(expect.data(), expect.size()), "100-continue");
    bool keep_alive = head.keep_alive() && !stopping;
    if (options.authorize_head) {
      if (auto refusal = options.authorize_head(req)) {
        // Refused on its head: answered and closed, the body never read.
        ConnWriter writer(conn, options, req.method == "HEAD", /*keep_alive=*/false);
        (void)writer.Send(*refusal);
        if (!parser.is_done() && !wants_continue) LingeringClose(conn);
        return;
      }
    }
    const bool streamed =
        !parser.is_done() && options.stream_request_body && options.stream_request_body(req);

    if (streamed) {
      ParserBodyReader reader(conn, stream, buffer, parser, options, wants_continue);
      req.body_reader = &reader;
      ConnWriter writer(conn, options, req.method == "HEAD", keep_alive,
                        [&reader] { return reader.state(); });
      handler(req, writer);
      req.body_reader = nullptr;
      if (!writer.started()) {
        (void)writer.Send(Response::Json(
            500, R"({"error":{"code":"INTERNAL","message":"handler sent no response"}})"));
      }
      if (reader.state() != BodyState::kDone) {  // answered before the whole body came
        LingeringClose(conn);
        return;
      }
      if (!writer.finished() || !writer.keep_alive()) return;
      continue;
    }

    if (auto cl = parser.content_length(); cl && *cl > options.max_body_bytes) {
      // Refused before the body is sent (with 100-continue) or read.
      SendSimpleError(conn, 413,
                      fmt::format("request body exceeds {} bytes", options.max_body_bytes), options,
                      /*linger=*/!wants_continue);
      return;
    }
    BodyClock clock(options, /*buffered=*/true);
    if (wants_continue && !parser.is_done()) {
      (void)conn.WriteAll("HTTP/1.1 100 Continue\r\n\r\n", Deadline::max());
    }
    clock.Start();
    auto body = ReadWholeBody(stream, buffer, parser, options.max_body_bytes, clock, budget);
    if (!body) {
      if (body.error().code == ErrorCode::kResourceExhausted) {
        SendSimpleError(conn, 413, body.error().message, options, /*linger=*/true);
      } else if (body.error().code == ErrorCode::kUnavailable) {
        SendSimpleError(conn, 503, body.error().message, options, /*linger=*/true);
      } else if (body.error().code == ErrorCode::kTimeout) {
        SendSimpleError(conn, 408, body.error().message, options, /*linger=*/true);
      } else if (body.error().code == ErrorCode::kInvalidArgument) {
        SendSimpleError(conn, 400, body.error().message, options);
      }
      return;
    }
    req.body = std::move(*body);
    ConnWriter writer(conn, options, req.method == "HEAD", keep_alive);
    handler(req, writer);
    if (!writer.started()) {
      (void)writer.Send(Response::Json(
          500, R"({"error":{"code":"INTERNAL","message":"handler sent no response"}})"));
    }
    if (!writer.finished() || !keep_alive) return;
  }
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<HttpServer>> HttpServer::Create(const Endpoint& endpoint, Handler handler,
                                                       ServerOptions options) {
  auto impl = std::make_unique<Impl>();
  auto listener = Listener::Bind(endpoint, options.unix_socket_mode);
  if (!listener) return tl::unexpected(listener.error());
  impl->listener = std::move(*listener);
  impl->handler = std::move(handler);
  impl->options = std::move(options);
  impl->cancel_fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!impl->cancel_fd) return MakeSyscallError("eventfd", errno);
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::~HttpServer() {
  Stop();
  // Connection threads hold raw pointers to impl_: wait for every one.
  std::unique_lock lock(impl_->mu);
  impl_->cv.wait(lock, [&] { return impl_->active == 0; });
}

void HttpServer::Start() {
  impl_->accept_thread = std::thread([this] { impl_->AcceptLoop(); });
}

void HttpServer::Run() { impl_->AcceptLoop(); }

void HttpServer::Stop(std::chrono::milliseconds grace) {
  bool was = impl_->stopping.exchange(true);
  if (!was) {
    uint64_t one = 1;
    (void)::write(impl_->cancel_fd.get(), &one, sizeof one);
  }
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  if (!was) impl_->listener.Close();
  std::unique_lock lock(impl_->mu);
  impl_->cv.wait_for(lock, grace, [&] { return impl_->active == 0; });
}

int HttpServer::port() const { return impl_->listener.port(); }
const Endpoint& HttpServer::endpoint() const { return impl_->listener.endpoint(); }
size_t HttpServer::active_connections() const {
  std::lock_guard lock(impl_->mu);
  return impl_->active;
}
size_t HttpServer::buffered_body_bytes() const { return impl_->buffered.load(); }
std::optional<std::string> HttpServer::bound_address() const {
  std::string address = SocketAddress(impl_->listener.fd(), /*peer=*/false, /*unmap=*/false);
  if (address.empty()) return std::nullopt;
  return address;
}

}  // namespace deepbox::net
