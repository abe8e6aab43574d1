// Test support: a fake Anthropic Messages API on loopback (HTTP or HTTPS)
// speaking the real wire protocol: POST /v1/messages with x-api-key and
// anthropic-version, SSE framing as the API emits it (event: + data: lines,
// a ping after message_start, content_block_start/delta/stop, message_delta,
// message_stop), the API's error bodies
// ({"type":"error","error":{"type":"rate_limit_error","message":"..."}}).
//
// It checks requests as the real API would, answering 400 without consuming
// a turn: the headers, a JSON body with model/max_tokens/messages, at most 4
// cache_control breakpoints, every tool_use answered by a tool_result in the
// next message and no tool_result without its tool_use. A wrong key gets
// 401 authentication_error "invalid x-api-key". With no turn left it answers
// 400 "fake Anthropic server: no scripted turn left ...".
//
//   FakeAnthropicServer server({.api_key = "sk-test"});
//   server.Enqueue(ScriptedTurn::ToolCalls({{"", "ls", {{"path", "/"}}}}));
//   server.Enqueue(ScriptedTurn::Text("Done."));
//   setenv("ANTHROPIC_BASE_URL", server.url().c_str(), 1);  // or ModelConfig
//   ... server.requests()[1].json["messages"] ...
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "agent/model/testing/scripted_turn.h"

namespace deepbox::net {
class ResponseWriter;
}

namespace deepbox::agent::testing {

namespace internal {
class FakeServerCore;
}

class FakeAnthropicServer {
 public:
  explicit FakeAnthropicServer(FakeServerOptions options = {});
  ~FakeAnthropicServer();
  FakeAnthropicServer(const FakeAnthropicServer&) = delete;
  FakeAnthropicServer& operator=(const FakeAnthropicServer&) = delete;

  void Enqueue(ScriptedTurn turn);
  void Enqueue(std::vector<ScriptedTurn> turns);

  std::string url() const;  // the ANTHROPIC_BASE_URL: "http(s)://127.0.0.1:PORT"
  std::string ca_file()
      const;  // TLS: PEM file of the test CA (ModelConfig::ca_file, SSL_CERT_FILE)
  std::string ca_pem() const;
  std::vector<RecordedRequest> requests() const;  // every request, rejected ones included
  size_t request_count() const;
  size_t pending_turns() const;

 private:
  void Handle(net::Request& request, net::ResponseWriter& writer);
  FakeServerOptions options_;
  std::unique_ptr<internal::FakeServerCore> core_;
};

// The request problems the real API would reject with 400 (empty = none);
// exposed so tests can check bodies built without a server.
std::string ValidateAnthropicRequest(const json::object& body);

}  // namespace deepbox::agent::testing
