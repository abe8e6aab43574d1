#include "agent/middleware_eviction.h"

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
  for (Message& m : request.messages) {
    if (m.role != Role::kUser || m.text.size() <= human_char_limit_) continue;
    if (CodePointCount(m.text) <= human_char_limit_) continue;
    std::string name = m.id.empty() ? "message_" + RandomHex(16) : SanitizeToolCallId(m.id);
    std::string path = JoinPath(JoinPath(sb->root(), "conversation_history"), name + ".md");
    if (!sb->Stat(path) && !sb->Write(path, m.text)) continue;
    m.text = TooLargeHumanMessage(path, CreateContentPreview(m.text));
  }
  return next(request);
}

}  // namespace deepbox::agent
