#include "agent/middleware_hitl.h"

#include "agent/format.h"
#include "agent/paths.h"
#include "agent/text.h"
#include "common/json.h"

namespace deepbox::agent {
namespace {

// Whether a file-tool call touches a path guarded by an "ask" rule.
bool PermissionAsks(const ToolCall& call, const PermissionSet& perms, const std::string& root) {
  struct Shape {
    FsOperation op;
    const char* arg;
    bool bulk;
  };
  static const std::map<std::string, Shape> kShapes = {
      {"ls", {FsOperation::kRead, "path", true}},
      {"read_file", {FsOperation::kRead, "file_path", false}},
      {"write_file", {FsOperation::kWrite, "file_path", false}},
      {"edit_file", {FsOperation::kWrite, "file_path", false}},
      {"delete", {FsOperation::kWrite, "file_path", true}},
      {"glob", {FsOperation::kRead, "path", true}},
      {"grep", {FsOperation::kRead, "path", true}},
  };
  auto it = kShapes.find(call.name);
  if (it == kShapes.end()) return false;
  const Shape& s = it->second;
  std::optional<std::string> raw = ArgOptString(call.input, s.arg);
  if (!raw) {
    if (!s.bulk) return false;
    raw = root;  // a pathless bulk call searches the whole workspace
  }
  auto path = ResolveToolPath(*raw, root);
  if (!path) return false;
  if (!s.bulk) return perms.Check(s.op, *path) == PermissionMode::kAsk;
  if (perms.SubtreeMayAsk(s.op, *path)) return true;
  if (call.name == "glob") {
    // An absolute glob pattern reaches its own subtree whatever `path` says.
    if (auto pattern = ArgOptString(call.input, "pattern"); pattern && pattern->starts_with("/")) {
      return perms.SubtreeMayAsk(s.op, NormalizeAbsolute(*pattern));
    }
  }
  return false;
}

std::string DescribeAction(const std::string& prefix, const ToolCall& call) {
  return (prefix.empty() ? std::string(kDefaultInterruptDescription) : prefix) +
         "\n\nTool: " + call.name + "\nArgs: " + ToJson(call.input);
}

}  // namespace

std::optional<InterruptRequest> BuildInterruptRequest(
    const std::vector<ToolCall>& calls, const std::map<std::string, InterruptConfig>& interrupt_on,
    const PermissionSet* permissions, const std::string& root) {
  InterruptRequest req;
  for (const auto& call : calls) {
    std::optional<InterruptConfig> config;
    if (auto it = interrupt_on.find(call.name); it != interrupt_on.end()) {
      config = it->second;
    } else if (permissions && PermissionAsks(call, *permissions, root)) {
      config = InterruptConfig{};
    }
    if (!config) continue;
    req.action_requests.push_back(
        {call.id, call.name, call.input, DescribeAction(config->description, call)});
    req.review_configs.push_back({call.name, config->allowed_decisions});
  }
  if (req.action_requests.empty()) return std::nullopt;
  return req;
}

Status ValidateDecisions(const InterruptRequest& request, const std::vector<Decision>& decisions) {
  if (decisions.size() != request.action_requests.size()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "Number of human decisions (" + std::to_string(decisions.size()) +
                         ") does not match number of hanging tool calls (" +
                         std::to_string(request.action_requests.size()) + ").");
  }
  for (size_t i = 0; i < decisions.size(); ++i) {
    const auto& allowed = request.review_configs[i].allowed_decisions;
    bool ok = false;
    for (auto t : allowed) ok = ok || t == decisions[i].type;
    if (!ok) {
      std::string list = "[";
      for (size_t k = 0; k < allowed.size(); ++k) {
        if (k) list += ", ";
        list += "'" + std::string(DecisionTypeName(allowed[k])) + "'";
      }
      list += "]";
      return MakeError(ErrorCode::kInvalidArgument,
                       "Decision type '" + std::string(DecisionTypeName(decisions[i].type)) +
                           "' is not allowed for tool '" + request.action_requests[i].name +
                           "'. Expected one of " + list + " based on the tool's configuration.");
    }
  }
  return {};
}

Status HumanInTheLoopMiddleware::AfterModel(ModelTurn& turn, RunEnv& env) {
  // On Resume the pending request comes back as it was asked, whatever the
  // configuration says now.
  std::optional<InterruptRequest> request;
  if (const InterruptRequest* pending = turn.resuming()) {
    request = *pending;
  } else {
    request = BuildInterruptRequest(turn.message().tool_calls, interrupt_on_, ask_rules_.get(),
                                    env.config.sandbox->root());
  }
  if (!request) return {};
  std::optional<std::vector<Decision>> decisions = turn.Interrupt(*request);
  if (!decisions) return {};  // paused
  if (auto st = ValidateDecisions(*request, *decisions); !st) return st;
  if (ApplyDecisions(*request, *decisions, turn.message(), turn.results())) turn.MessageChanged();
  return {};
}

bool ApplyDecisions(const InterruptRequest& request, const std::vector<Decision>& decisions,
                    Message& assistant, std::map<std::string, ToolResult>& preset) {
  bool edited = false;
  for (size_t i = 0; i < request.action_requests.size() && i < decisions.size(); ++i) {
    const ActionRequest& action = request.action_requests[i];
    const Decision& d = decisions[i];
    ToolCall* call = nullptr;
    for (auto& c : assistant.tool_calls) {
      if (c.id == action.tool_call_id) call = &c;
    }
    if (!call) continue;
    switch (d.type) {
      case DecisionType::kApprove:
        break;
      case DecisionType::kEdit:
        if (d.edited_name && !d.edited_name->empty()) call->name = *d.edited_name;
        call->input = d.edited_args;
        edited = true;
        break;
      case DecisionType::kReject:
        preset[call->id] = ToolResult::Err(
            d.message.empty() ? DefaultRejectMessage(call->name, call->id) : d.message);
        break;
      case DecisionType::kRespond:
        preset[call->id] = ToolResult::Ok(d.message);
        break;
    }
  }
  return edited;
}

}  // namespace deepbox::agent
