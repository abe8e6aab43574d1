// Test support: a DeepAgent over the real sandbox daemon and a scripted model.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/deep_agent.h"
#include "agent/testing/scripted_model.h"
#include "agent/testing/test_sandbox.h"
#include "agent/testing/tool_runner.h"

namespace deepbox::agent::testing {

// Collects events (thread-safe).
class EventLog {
 public:
  EventCallback callback() {
    return [this](const AgentEvent& ev) {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(ev);
      events_.back().interrupt = nullptr;
    };
  }
  std::vector<AgentEvent> events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  std::vector<AgentEvent> of(EventType t) const {
    std::vector<AgentEvent> out;
    for (const auto& e : events()) {
      if (e.type == t) out.push_back(e);
    }
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::vector<AgentEvent> events_;
};

// The options of an agent on `model` in `sandbox`, everything else default.
inline DeepAgentOptions Options(std::shared_ptr<ChatModel> model, Sandbox& sandbox) {
  DeepAgentOptions o;
  o.model = std::move(model);
  o.sandbox = &sandbox;
  return o;
}

inline std::unique_ptr<DeepAgent> MakeAgent(DeepAgentOptions o) {
  auto a = DeepAgent::Create(std::move(o));
  EXPECT_TRUE(a) << (a ? "" : a.error().ToString());
  return a ? std::move(*a) : nullptr;
}

// The tool messages of a message list.
inline std::vector<Message> ToolMessages(const std::vector<Message>& msgs) {
  std::vector<Message> out;
  for (const auto& m : msgs) {
    if (m.role == Role::kTool) out.push_back(m);
  }
  return out;
}

}  // namespace deepbox::agent::testing
