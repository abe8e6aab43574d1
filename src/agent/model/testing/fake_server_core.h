// Internal to the fakes: the HTTP(S) server, the script queue and the request
// log shared by FakeAnthropicServer and FakeOpenAiServer.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/model/testing/scripted_turn.h"
#include "net/http_server.h"

namespace deepbox::agent::testing::internal {

class FakeServerCore {
 public:
  // Starts serving on 127.0.0.1 (an ephemeral port) at once; aborts the test
  // program if the loopback listener cannot be created.
  FakeServerCore(bool tls, int port, std::string url_path, net::Handler handler);
  ~FakeServerCore();
  // Stops serving and waits for in-flight handlers (idempotent). Owners call
  // it before destroying what their handlers use.
  void Shutdown();

  void Enqueue(ScriptedTurn turn);
  std::optional<ScriptedTurn> Pop();
  RecordedRequest Record(const net::Request& request);

  std::string url() const;
  std::string ca_file() const { return ca_file_; }
  std::string ca_pem() const { return ca_pem_; }
  std::vector<RecordedRequest> requests() const;
  size_t request_count() const;
  size_t pending_turns() const;
  bool stopping() const { return stopping_.load(); }
  int next_id() { return ++ids_; }

  // Writes `data` as one chunk or in `write_bytes` slices.
  static bool Write(net::ResponseWriter& w, std::string_view data, size_t write_bytes);

 private:
  std::string url_path_;
  std::string ca_file_;
  std::string ca_pem_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> ids_{0};
  mutable std::mutex mu_;
  std::deque<ScriptedTurn> turns_;
  std::vector<RecordedRequest> requests_;
  std::unique_ptr<net::HttpServer> server_;
};

}  // namespace deepbox::agent::testing::internal
