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

ToolResult EvictionMiddleware::WrapToolCall(ToolCallRequest& request, RunEnv& env,
                                            const ToolCallFn& next) {
  ToolResult result = next(request);
  const ToolCall& call = request.call;
  if (char_limit_ == 0) return result;
  if (IsFilesystemToolName(call.name)) return result;
  if (request.tool && !request.tool->Evictable()) return result;
  if (result.text.size() <= char_limit_) return result;  // bytes >= code points
  if (CodePointCount(result.text) <= char_limit_) return result;
  Sandbox* sb = env.config.sandbox;
  std::string path = EvictionPath(sb->root(), call.id);
  if (!sb->Write(path, result.text)) return result;
  result.text = TooLargeToolMessage(call.id, path, CreateContentPreview(result.text));
  return result;
}

Result<ModelResponse> EvictionMiddleware::WrapModelCall(ModelCallRequest& request, RunEnv& env,
                                                        const ModelCallFn& next) {
  if (human_char_limit_ == 0) return next(request);
  Sandbox* sb = env.config.sandbox;
  // This request only: the edit puts the original texts back after the call.
  MessageEdit edit(request);
  const std::vector<Message>& messages = request.messages();
  auto evict = [&](size_t i) {
    const Message& m = messages[i];
    if (m.role != Role::kUser || m.text.size() <= human_char_limit_) return;
    if (CodePointCount(m.text) <= human_char_limit_) return;
    std::string name = m.id.empty() ? "message_" + RandomHex(16) : SanitizeToolCallId(m.id);
    std::string path = JoinPath(JoinPath(sb->root(), "conversation_history"), name + ".md");
    if (!sb->Stat(path) && !sb->Write(path, m.text)) return;
    edit.SetText(i, TooLargeHumanMessage(path, CreateContentPreview(m.text)));
  };
  if (MessageView* view = request.view()) {
    for (size_t i : view->user_indexes()) evict(i);  // the view knows where they are
  } else {
    for (size_t i = 0; i < messages.size(); ++i) evict(i);
  }
  return next(request);
}

}  // namespace deepbox::agent
