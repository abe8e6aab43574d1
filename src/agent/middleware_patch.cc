#include "agent/middleware_patch.h"

#include <set>

#include "agent/format.h"

namespace deepbox::agent {

void PatchToolCallsMiddleware::BeforeAgent(RunEnv& env) {
  PatchTrailingDanglingCalls(env.state, env.append);
}

size_t PatchTrailingDanglingCalls(const AgentState& state,
                                  const std::function<void(Message)>& append) {
  const auto& msgs = state.messages;
  size_t i = msgs.size();
  std::set<std::string> answered;
  while (i > 0 && msgs[i - 1].role == Role::kTool) {
    answered.insert(msgs[i - 1].tool_call_id);
    --i;
  }
  if (i == 0 || msgs[i - 1].role != Role::kAssistant) return 0;
  std::vector<Message> patches;
  for (const auto& c : msgs[i - 1].tool_calls) {
    if (answered.count(c.id)) continue;
    std::string name = c.name.empty() ? "unknown" : c.name;
    patches.push_back(Message::Tool(c.id, name, DanglingToolCallMessage(name, c.id)));
  }
  for (auto& p : patches) append(std::move(p));
  return patches.size();
}

}  // namespace deepbox::agent
