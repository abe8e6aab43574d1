// Test support: a ChatModel answering from a queue of scripted responses (the
// model is a remote service; the harness under test is real). Records every
// request. Thread-safe (sub-agents call it from worker threads).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "agent/model/model.h"

namespace deepbox::agent::testing {

// A tool call for scripted responses.
ToolCall Call(std::string id, std::string name, json::object input);

class ScriptedModel : public ChatModel {
 public:
  using Responder = std::function<Result<ModelResponse>(const ModelRequest&)>;

  explicit ScriptedModel(ModelProfile profile = {}) : profile_(profile) {}

  // Queue a text answer / a tool-call turn / an error / a custom responder.
  ScriptedModel& Text(std::string text, Usage usage = {});
  ScriptedModel& Tools(std::vector<ToolCall> calls, std::string text = "", Usage usage = {});
  ScriptedModel& Fail(Error error);
  ScriptedModel& Respond(Responder fn);
  // The next call blocks until request.cancel is set, then fails CANCELLED.
  ScriptedModel& BlockUntilCancelled();

  std::string name() const override { return "scripted:test"; }
  ModelProfile profile() const override { return profile_; }
  Result<ModelResponse> Generate(const ModelRequest& request,
                                 const StreamCallbacks& callbacks) override;

  std::vector<ModelRequest> requests() const;
  size_t calls() const;
  size_t remaining() const;

 private:
  ModelProfile profile_;
  mutable std::mutex mu_;
  std::deque<Responder> script_;
  std::vector<ModelRequest> requests_;
};

}  // namespace deepbox::agent::testing
