#include "net/http_server.h"

#include <fmt/format.h>
#include <sys/eventfd.h>

#include <atomic>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
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

  void AcceptLoop();
  void ServeConnection(Conn conn);
};

namespace {

constexpr size_t kInitialReadBuffer = 16 << 10;

class ConnWriter : public ResponseWriter {
 public:
  ConnWriter(Conn& conn, const ServerOptions& options, bool head, bool keep_alive)
      : conn_(conn), stream_(conn), options_(options), head_(head), keep_alive_(keep_alive) {}

  Status Send(const Response& response) override {
    if (started_) return MakeError(ErrorCode::kInternal, "response already started");
    started_ = true;
    stream_.set_deadline(DeadlineAfter(options_.write_timeout));
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
    stream_.set_deadline(DeadlineAfter(options_.write_timeout));
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
    auto s = conn_.WriteAll(frame, DeadlineAfter(options_.write_timeout));
    if (!s) failed_ = true;
    return s;
  }

  Status EndStream() override {
    if (!streaming_ || failed_) return MakeError(ErrorCode::kInternal, "no open stream");
    auto s = conn_.WriteAll("0\r\n\r\n", DeadlineAfter(options_.write_timeout));
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
  bool started_ = false;
  bool streaming_ = false;
  bool finished_ = false;
  bool failed_ = false;
};

void SendSimpleError(Conn& conn, int status, std::string_view message, const ServerOptions& opts) {
  ConnWriter w(conn, opts, false, false);
  ErrorCode code = status == 413   ? ErrorCode::kResourceExhausted
                   : status == 503 ? ErrorCode::kUnavailable
                                   : ErrorCode::kInvalidArgument;
  (void)w.Send(Response::Json(status, ToJson(ErrorToJson(Error(code, std::string(message))))));
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
    {
      std::lock_guard lock(mu);
      if (active >= options.max_connections) {
        SendSimpleError(conn, 503, "too many connections", options);
        continue;
      }
      ++active;
    }
    std::thread([this, c = std::move(conn)]() mutable {
      ServeConnection(std::move(c));
      if (options.tls) ReleaseThreadTlsState();
      std::lock_guard lock(mu);
      --active;
      cv.notify_all();
    }).detach();
  }
}

void HttpServer::Impl::ServeConnection(Conn conn) {
  conn.set_cancel_fd(cancel_fd.get());
  if (options.tls) {
    if (!conn.StartTlsServer(*options.tls, DeadlineAfter(options.read_timeout))) return;
  }
  BeastStream stream(conn);
  boost::beast::flat_buffer buffer;
  // Room for a typical request in one read (Beast reads at most the free
  // capacity, and a small buffer means one recv per few hundred bytes).
  buffer.reserve(kInitialReadBuffer);
  while (!stopping) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(options.max_header_bytes));
    parser.body_limit(options.max_body_bytes);
    boost::system::error_code ec;
    stream.set_deadline(DeadlineAfter(options.idle_timeout));
    http::read_header(stream, buffer, parser, ec);
    if (ec) {
      if (ec == http::error::header_limit) {
        SendSimpleError(conn, 431, "request headers too large", options);
      } else if (ec == http::error::body_limit) {
        SendSimpleError(conn, 413,
                        fmt::format("request body exceeds {} bytes", options.max_body_bytes),
                        options);
      } else if (ec != boost::asio::error::eof && ec != boost::asio::error::timed_out &&
                 ec != boost::asio::error::connection_aborted && ec != http::error::end_of_stream) {
        SendSimpleError(conn, 400, "malformed HTTP request: " + ec.message(), options);
      }
      return;
    }
    auto expect = parser.get()[http::field::expect];
    if (EqualsIgnoreCase(std::string_view(expect.data(), expect.size()), "100-continue")) {
      (void)conn.WriteAll("HTTP/1.1 100 Continue\r\n\r\n", DeadlineAfter(options.write_timeout));
    }
    stream.set_deadline(DeadlineAfter(options.read_timeout));
    http::read(stream, buffer, parser, ec);
    if (ec) {
      if (ec == http::error::body_limit) {
        SendSimpleError(conn, 413,
                        fmt::format("request body exceeds {} bytes", options.max_body_bytes),
                        options);
      } else if (ec != boost::asio::error::eof && ec != boost::asio::error::timed_out &&
                 ec != boost::asio::error::connection_aborted) {
        SendSimpleError(conn, 400, "malformed HTTP request: " + ec.message(), options);
      }
      return;
    }
    auto msg = parser.release();
    Request req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    auto q = req.target.find('?');
    req.raw_path = req.target.substr(0, q);
    auto decoded = PercentDecode(req.raw_path);
    if (!decoded) {
      SendSimpleError(conn, 400, "bad percent-encoding in request path", options);
      return;
    }
    req.path = std::move(*decoded);
    if (q != std::string::npos) req.query = ParseQuery(std::string_view(req.target).substr(q + 1));
    for (const auto& field : msg) {
      req.headers.Add(std::string(field.name_string()), std::string(field.value()));
    }
    req.body = std::move(msg.body());
    bool keep_alive = msg.keep_alive() && !stopping;
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

}  // namespace deepbox::net
