#include "agent/middleware_subagents.h"

#include "agent/format.h"
#include "agent/text.h"

namespace deepbox::agent {

const char kGeneralPurposeName[] = "general-purpose";
const char kGeneralPurposeDescription[] =
    "General-purpose agent for researching complex questions, searching for files and content, "
    "and carrying out multi-step tasks. When a keyword or file search may take several "
    "attempts, delegate it to this agent. It has the same tools as the main agent.";
const char kDefaultSubagentPrompt[] =
    "You are a sub-agent working on one task for a calling agent, with the standard tools "
    "available to complete it. The calling agent sees only your final message, not your "
    "intermediate steps, tool results or todo list, so make your final message the complete "
    "answer.";
const char kTaskSystemPrompt[] =
    "## `task` (sub-agents)\n\n"
    "The `task` tool starts a sub-agent that works in its own, isolated context and returns "
    "only its final report. Use it for complex, multi-step work that can be described "
    "independently, for broad searches or research that would otherwise fill your context, "
    "and run several in one response when they are independent. Do not use it for simple "
    "tasks you can finish in a few tool calls. Give each sub-agent a complete description, "
    "including everything it needs to know and exactly what it should return; relay the "
    "relevant results to the user yourself.";

namespace {

class TaskTool : public Tool {
 public:
  TaskTool(std::vector<std::pair<std::string, std::string>> agents, SubagentRunner runner,
           bool parallel)
      : agents_(std::move(agents)), runner_(std::move(runner)), parallel_(parallel) {
    std::string list;
    for (const auto& [name, desc] : agents_) {
      if (!list.empty()) list += "\n";
      list += "- " + name + ": " + desc;
    }
    spec_.name = "task";
    spec_.description =
        "Launch a short-lived sub-agent to carry out a complex, multi-step task in its own, "
        "isolated context window.\n\n"
        "Available agent types:\n" +
        list +
        "\n\nUsage notes:\n"
        "- Choose the agent with subagent_type.\n"
        "- Independent tasks can run concurrently: put several task calls in one response.\n"
        "- Each call is stateless: the sub-agent sees only the description you write and "
        "returns one final report. Include all the context it needs and say exactly what it "
        "should return.\n"
        "- The report is not shown to the user; summarize what matters for them yourself.\n"
        "- Say whether the sub-agent should create or change things, analyze, or only "
        "research, since it cannot see the user's request.\n"
        "- If an agent's description says to use it proactively, do so without being asked.\n"
        "- When general-purpose is the only type, use it for any complex or context-heavy "
        "task; it has the same tools as you.";
    spec_.input_schema = SchemaObject(
        {{"description", SchemaString("A detailed description of the task for the sub-agent "
                                      "to do on its own, with all the context it needs and the "
                                      "expected output format.")},
         {"subagent_type", SchemaString("Which sub-agent to use: one of the types listed in "
                                        "this tool's description.")}},
        {"description", "subagent_type"});
  }

  const ToolSpec& spec() const override { return spec_; }
  std::string MainArgument(const json::object& args) const override {
    return ArgString(args, "subagent_type") + ": " + ArgString(args, "description");
  }
  ToolScheduling Scheduling(const json::object&, std::string_view) const override {
    return {parallel_ ? "" : "\x01task"};
  }

  ToolResult Invoke(ToolContext& ctx, const json::object& args) override {
    std::string type = ArgString(args, "subagent_type");
    bool known = false;
    std::vector<std::string> names;
    for (const auto& [name, desc] : agents_) {
      names.push_back(name);
      known = known || name == type;
    }
    if (!known) return ToolResult::Ok(UnknownSubagentMessage(type, names));
    auto result = runner_(type, ArgString(args, "description"), ctx);
    if (!result) {
      return ToolResult::Err("Error: sub-agent '" + type + "' failed: " + result.error().message);
    }
    return ToolResult::Ok(std::move(*result));
  }

 private:
  ToolSpec spec_;
  std::vector<std::pair<std::string, std::string>> agents_;
  SubagentRunner runner_;
  bool parallel_;
};

}  // namespace

ToolPtr MakeTaskTool(std::vector<std::pair<std::string, std::string>> agents, SubagentRunner runner,
                     bool parallel) {
  return std::make_shared<TaskTool>(std::move(agents), std::move(runner), parallel);
}

std::string SubagentFinalText(const std::vector<Message>& messages) {
  for (auto it = messages.rbegin(); it != messages.rend(); ++it) {
    if (it->role != Role::kAssistant) continue;
    std::string_view text = TrimRight(it->text);
    if (!text.empty()) return std::string(text);
  }
  return "";
}

}  // namespace deepbox::agent
