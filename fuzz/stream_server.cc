#include "fuzz/stream_server.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace deepbox::fuzz {

StreamServer::StreamServer(std::string_view tag, Listen listen) : dir_(tag), listen_(listen) {
  socket_path_ = dir_.Path("sock");
  auto endpoint =
      net::Endpoint::Parse(listen == Listen::kUnix ? "unix:" + socket_path_ : "127.0.0.1:0");
  if (!endpoint) Fail("fixture: " + endpoint.error().ToString());
  net::ServerOptions options;
  options.header_timeout = std::chrono::milliseconds(5000);
  options.body_timeout = std::chrono::milliseconds(5000);
  options.idle_timeout = std::chrono::milliseconds(5000);
  auto s = net::HttpServer::Create(
      *endpoint, [this](net::Request& req, net::ResponseWriter& w) { Handle(req, w); }, options);
  if (!s) Fail("fixture: " + s.error().ToString());
  server_ = std::move(*s);
  server_->Start();
}

std::string StreamServer::url() const {
  if (listen_ == Listen::kUnix) return "unix:" + socket_path_;
  return "http://127.0.0.1:" + std::to_string(server_->port());
}

void StreamServer::Script(int status, std::string content_type, std::string body, unsigned seed,
                          int answers) {
  std::lock_guard lock(mu_);
  status_ = status;
  content_type_ = std::move(content_type);
  body_ = std::move(body);
  seed_ = seed;
  answers_left_ = answers;
  requests_ = 0;
}

int StreamServer::requests() const {
  std::lock_guard lock(mu_);
  return requests_;
}

void StreamServer::Handle(net::Request&, net::ResponseWriter& writer) {
  std::unique_lock lock(mu_);
  ++requests_;
  if (answers_left_ <= 0) {
    lock.unlock();
    (void)writer.Send(net::Response::Json(403, "{}"));
    return;
  }
  --answers_left_;
  const int status = status_;
  net::Headers headers;
  headers.Set("Content-Type", content_type_);
  const std::string body = body_;
  uint32_t state = seed_ * 2654435761u + 7;
  lock.unlock();
  if (!writer.BeginStream(status, headers)) return;
  std::string_view rest = body;
  while (!rest.empty()) {
    state = state * 1103515245u + 12345u;
    size_t n = std::min(rest.size(), size_t{1} + (state >> 16) % 97);
    if (!writer.WriteChunk(rest.substr(0, n))) return;
    rest.remove_prefix(n);
  }
  (void)writer.EndStream();
}

}  // namespace deepbox::fuzz
