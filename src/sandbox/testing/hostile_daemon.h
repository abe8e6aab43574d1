// Test support: an HTTP server on a unix socket that speaks the daemon's API
// with whatever answers a test scripts (wrong kinds, huge or negative numbers,
// invalid UTF-8, truncated JSON, control sequences), to drive host-side
// consumers of SandboxdClient against a hostile daemon (issue 16). By default
// it answers /deepbox/v1/info and /deepbox/v1/health like a real daemon and
// 404 elsewhere.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/testing/temp_dir.h"
#include "net/http_server.h"
#include "sandbox/sandboxd_client.h"

namespace deepbox::testing {

class HostileDaemon {
 public:
  static Result<std::unique_ptr<HostileDaemon>> Start();
  ~HostileDaemon();

  // Every request to `path` (no query) is answered with `status` and `body`
  // (sent as application/json, whatever it holds).
  void Answer(const std::string& path, std::string body, int status = 200);
  // Requests to `path` get a chunked 200 answer: each chunk written and flushed
  // in turn (e.g. NDJSON events of exec/stream).
  void AnswerStream(const std::string& path, std::vector<std::string> chunks);

  // "METHOD /path body" of every request so far, in order.
  std::vector<std::string> requests();

  std::string unix_url() const { return "unix:" + socket_; }
  const std::string& socket_path() const { return socket_; }
  Result<std::unique_ptr<SandboxdClient>> Connect(SandboxdClientOptions options = {}) const;

 private:
  HostileDaemon() = default;
  void Handle(net::Request& request, net::ResponseWriter& writer);

  struct Canned {
    int status = 200;
    std::string body;
    std::vector<std::string> chunks;
    bool stream = false;
  };
  std::optional<TempDir> dir_;  // removed after the server stopped
  std::string socket_;
  std::mutex mu_;
  std::map<std::string, Canned> answers_;
  std::vector<std::string> requests_;
  std::unique_ptr<net::HttpServer> server_;
};

}  // namespace deepbox::testing
