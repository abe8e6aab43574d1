#include "agent/testing/scripted_model.h"

#include <chrono>
#include <thread>

namespace deepbox::agent::testing {

ToolCall Call(std::string id, std::string name, json::object input) {
  ToolCall c;
  c.id = std::move(id);
  c.name = std::move(name);
  c.input = std::move(input);
  return c;
}

ScriptedModel& ScriptedModel::Text(std::string text, Usage usage) {
  return Respond([text, usage](const ModelRequest&) -> Result<ModelResponse> {
    ModelResponse r;
    r.message = Message::Assistant(text);
    r.usage = usage;
    r.stop_reason = "end_turn";
    r.model = "scripted";
    return r;
  });
}

ScriptedModel& ScriptedModel::Tools(std::vector<ToolCall> calls, std::string text, Usage usage) {
  return Respond([calls, text, usage](const ModelRequest&) -> Result<ModelResponse> {
    ModelResponse r;
    r.message = Message::Assistant(text, calls);
    r.usage = usage;
    r.stop_reason = "tool_use";
    r.model = "scripted";
    return r;
  });
}

ScriptedModel& ScriptedModel::Fail(Error error) {
  return Respond(
      [error](const ModelRequest&) -> Result<ModelResponse> { return tl::unexpected(error); });
}

ScriptedModel& ScriptedModel::Respond(Responder fn) {
  std::lock_guard<std::mutex> lock(mu_);
  script_.push_back(std::move(fn));
  return *this;
}

ScriptedModel& ScriptedModel::BlockUntilCancelled() {
  return Respond([](const ModelRequest& req) -> Result<ModelResponse> {
    while (!(req.cancel && req.cancel->load())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return MakeError(ErrorCode::kCancelled, "cancelled");
  });
}

Result<ModelResponse> ScriptedModel::Generate(const ModelRequest& request,
                                              const StreamCallbacks& callbacks) {
  Responder fn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(request);
    if (script_.empty()) {
      return MakeError(ErrorCode::kResourceExhausted, "scripted model: script exhausted");
    }
    fn = std::move(script_.front());
    script_.pop_front();
  }
  auto r = fn(request);
  if (r && callbacks.on_text_delta && !r->message.text.empty()) {
    callbacks.on_text_delta(r->message.text);
  }
  return r;
}

std::vector<ModelRequest> ScriptedModel::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

size_t ScriptedModel::calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_.size();
}

size_t ScriptedModel::remaining() const {
  std::lock_guard<std::mutex> lock(mu_);
  return script_.size();
}

}  // namespace deepbox::agent::testing
