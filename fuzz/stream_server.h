// A real HTTP server on a unix socket (or loopback TCP) that answers every request with the
// bytes the current fuzz input holds, streamed in chunks: what the model
// clients' stream decoders and the Kubernetes watch client read in
// production, through their real HTTP clients.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "net/http_server.h"

namespace deepbox::fuzz {

class StreamServer {
 public:
  enum class Listen { kUnix, kLoopbackTcp };
  explicit StreamServer(std::string_view tag, Listen listen = Listen::kUnix);
  // "unix:/tmp/.../sock", or "http://127.0.0.1:PORT" for clients (the
  // Kubernetes one) that take only http(s) URLs.
  std::string url() const;

  // The next requests get `status`, `content_type` and `body` cut into pieces
  // (sizes from `seed`); after `answers` requests, 403 with an empty JSON
  // object (the client must then stop: watches would reconnect forever).
  void Script(int status, std::string content_type, std::string body, unsigned seed,
              int answers = 1);
  int requests() const;

 private:
  void Handle(net::Request& request, net::ResponseWriter& writer);

  TempTree dir_;
  std::string socket_path_;
  Listen listen_;
  mutable std::mutex mu_;
  int status_ = 200;
  std::string content_type_;
  std::string body_;
  unsigned seed_ = 0;
  int answers_left_ = 0;
  int requests_ = 0;
  std::unique_ptr<net::HttpServer> server_;
};

}  // namespace deepbox::fuzz
