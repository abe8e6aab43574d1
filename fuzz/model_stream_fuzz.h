// One fuzz input through a chat model's stream decoder: shared by the
// Anthropic and OpenAI targets, which differ only in the client and the
// status a server answers with when it is overloaded.
// Input: a flags byte (bits 0-5: how the body is cut into HTTP chunks; bit 6:
// answer `error_status` instead of 200; bit 7: application/json instead of
// text/event-stream), then the response body. Properties: Generate ends in a
// response or an error (no crash, no hang, no sanitizer report), and a
// response is the assistant's with a stop reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "agent/model/model.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/stream_server.h"

namespace deepbox::fuzz {

inline int FuzzModelStream(agent::ChatModel& model, StreamServer& server, int error_status,
                           const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  server.Script(flags & 64 ? error_status : 200,
                flags & 128 ? "application/json" : "text/event-stream",
                std::string(reinterpret_cast<const char*>(data) + 1, size - 1), flags & 63);
  agent::ModelRequest request;
  request.system = "fuzz";
  agent::Message user;
  user.role = agent::Role::kUser;
  user.text = "hi";
  request.messages.push_back(user);
  std::string streamed;
  agent::StreamCallbacks callbacks;
  callbacks.on_text_delta = [&](std::string_view d) { streamed.append(d); };
  auto response = model.Generate(request, callbacks);
  if (response) {
    FUZZ_CHECK(!response->stop_reason.empty(), "a response without a stop reason");
    FUZZ_CHECK(response->message.role == agent::Role::kAssistant,
               "a response that is not the assistant's");
  }
  return 0;
}

}  // namespace deepbox::fuzz
