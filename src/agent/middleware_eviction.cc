#include "agent/middleware_eviction.h"

#include <utility>

#include "agent/format.h"
#include "agent/paths.h"
#include "agent/text.h"
#include "agent/tools_fs.h"

namespace deepbox::agent {

std::string EvictionMiddleware::EvictionPath(const std::string& root,
                                             const std::string& tool_call_id) {
  std::string id = tool_call_id.empty() ? "unknown" : SanitizeToolCallId(tool_call_id);
  return JoinPath(JoinPath(root, "large_tool_results"), id);
}

void EvictionMiddleware::AfterToolCall(const ToolCall& call, const Tool* tool, ToolResult& result,
                                       RunEnv& env) {
  if (char_limit_ == 0) return;
  if (IsFilesystemToolName(call.name)) return;
  if (tool && !tool->Evictable()) return;
  if (result.text.size() <= char_limit_) return;  // bytes >= code points
  if (CodePointCount(result.text) <= char_limit_) return;
  Sandbox* sb = env.config.sandbox;
  std::string path = EvictionPath(sb->root(), call.id);
  if (!sb->Write(path, result.text)) return;
  result.text = TooLargeToolMessage(call.id, path, CreateContentPreview(result.text));
}

Result<ModelResponse> EvictionMiddleware::WrapModelCall(ModelRequest& request, RunEnv& env,
                                                        const ModelCallFn& next) {
  if (human_char_limit_ == 0) return next(request);
  Sandbox* sb = env.config.sandbox;
  // This request only: the original texts are put back after the call.
  std::vector<std::pair<size_t, std::string>> saved;
  auto evict = [&](size_t i) {
    Message& m = request.messages[i];
    if (m.role != Role::kUser || m.text.size() <= human_char_limit_) return;
    if (CodePointCount(m.text) <= human_char_limit_) return;
    std::string name = m.id.empty() ? "message_" + RandomHex(16) : SanitizeToolCallId(m.id);
    std::string path = JoinPath(JoinPath(sb->root(), "conversation_history"), name + ".md");
    if (!sb->Stat(path) && !sb->Write(path, m.text)) return;
    std::string shown = TooLargeHumanMessage(path, CreateContentPreview(m.text));
    saved.emplace_back(i, std::exchange(m.text, std::move(shown)));
  };
  if (env.view && env.view->IsLent(request.messages)) {
    for (size_t i : env.view->user_indexes()) evict(i);  // the view knows where they are
  } else {
    for (size_t i = 0; i < request.messages.size(); ++i) evict(i);
  }
  auto resp = next(request);
  for (auto& [i, text] : saved) {
    if (i < request.messages.size()) request.messages[i].text = std::move(text);
  }
  return resp;
}

}  // namespace deepbox::agent
