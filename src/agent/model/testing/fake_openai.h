// Test support: a fake OpenAI-compatible chat completions server on loopback
// (HTTP or HTTPS): POST /v1/chat/completions with `Authorization: Bearer`,
// streaming `data: {chunk}` lines as OpenAI emits them (a role chunk, content
// deltas, tool_calls fragments by index with id/name first and arguments in
// pieces, a finish_reason chunk, the include_usage chunk, `data: [DONE]`),
// and OpenAI's error bodies ({"error":{"message","type","param","code"}}).
// It rejects (400, no turn consumed) a body without model/messages and tool
// messages that answer no preceding tool call; a wrong key gets 401
// invalid_api_key. Script it with ScriptedTurn like FakeAnthropicServer; the
// Anthropic stop reasons map back (end_turn -> stop, tool_use -> tool_calls,
// max_tokens -> length).
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

class FakeOpenAiServer {
 public:
  explicit FakeOpenAiServer(FakeServerOptions options = {});
  ~FakeOpenAiServer();
  FakeOpenAiServer(const FakeOpenAiServer&) = delete;
  FakeOpenAiServer& operator=(const FakeOpenAiServer&) = delete;

  void Enqueue(ScriptedTurn turn);
  void Enqueue(std::vector<ScriptedTurn> turns);

  std::string url() const;  // the OPENAI_BASE_URL: "http(s)://127.0.0.1:PORT/v1"
  std::string ca_file() const;
  std::string ca_pem() const;
  std::vector<RecordedRequest> requests() const;
  size_t request_count() const;
  size_t pending_turns() const;

 private:
  void Handle(net::Request& request, net::ResponseWriter& writer);
  FakeServerOptions options_;
  std::unique_ptr<internal::FakeServerCore> core_;
};

}  // namespace deepbox::agent::testing
