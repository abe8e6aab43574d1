#include "agent/middleware_subagents.h"

#include "agent/format.h"
#include "agent/text.h"
#include "common/strings.h"

namespace deepbox::agent {

const char kGeneralPurposeName[] = "general-purpose";
// deepagents 0.7.32's text (DEFAULT_GENERAL_PURPOSE_DESCRIPTION), verbatim.
const char kGeneralPurposeDescription[] =
    "General-purpose agent for researching complex questions, searching for files and content, "
    "and executing multi-step tasks. When you are searching for a keyword or file and are not "
    "confident that you will find the right match in the first few tries use this agent to "
    "perform the search for you. This agent has access to all tools as the main agent.";
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

const char kTaskSandboxArgDescription[] =
    "Where the subagent works: \"shared\" (the default) in your sandbox, its file changes "
    "visible to you; \"fork\" in a new sandbox holding a copy of your files as they are now, "
    "so that nothing it does changes your files (it is deleted when the subagent ends; only its "
    "report comes back). Use fork to try out an approach, or several in parallel, safely.";

namespace {

class TaskTool : public Tool {
 public:
  TaskTool(std::vector<std::pair<std::string, std::string>> agents, SubagentRunner runner,
           TaskToolOptions options)
      : agents_(std::move(agents)), runner_(std::move(runner)), options_(options) {
    std::string list;
    for (const auto& [name, desc] : agents_) {
      if (!list.empty()) list += "\n";
      list += "- " + name + ": " + desc;
    }
    spec_.name = "task";
    // deepagents 0.7.32's task tool (TASK_TOOL_DESCRIPTION, TaskToolSchema), verbatim.
    spec_.description =
        "Launch an ephemeral subagent to handle a complex, multi-step task.\n\n"
        "Available agent types and the tools they have access to:\n" +
        list +
        "\n\nSpecify subagent_type to select the agent. Usage notes:\n"
        "- Launch multiple agents concurrently when their tasks are independent, using a single "
        "message with multiple tool calls.\n"
        "- Each invocation is stateless by default: the agent sees only the prompt you give it "
        "and returns a single final report. Put full detail in the prompt and state exactly what "
        "it should return \u2014 unless an agent type below says it inherits your conversation "
        "instead.\n"
        "- The agent's report is not shown to the user; relay a summary yourself.\n"
        "- Tell the agent whether to create content, analyze, or only research, since it can't "
        "necessarily see the user's intent unless it inherits your conversation, as noted per "
        "agent type below.\n"
        "- If an agent's description says to use it proactively, do so without waiting to be "
        "asked.\n"
        "- When only general-purpose is available, use it for any complex, context-heavy task; "
        "it has the same capabilities as the main agent.";
    spec_.input_schema = SchemaObject(
        {{"description", SchemaString("A detailed description of the task for the subagent to "
                                      "perform autonomously. Include all necessary context and "
                                      "specify the expected output format.")},
         {"subagent_type", SchemaString("The type of subagent to use. Must be one of the "
                                        "available agent types listed in the tool "
                                        "description.")}},
        {"description", "subagent_type"});
    if (options_.offer_fork) {
      json::object sandbox = SchemaString(kTaskSandboxArgDescription);
      sandbox["enum"] = json::array{"shared", "fork"};
      spec_.input_schema["properties"].as_object()["sandbox"] = std::move(sandbox);
    }
  }

  const ToolSpec& spec() const override { return spec_; }
  std::string MainArgument(const json::object& args) const override {
    return ArgString(args, "subagent_type") + ": " + ArgString(args, "description");
  }
  ToolScheduling Scheduling(const json::object&, std::string_view) const override {
    return {options_.parallel ? "" : "\x01task"};
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
    // (The schema's enum has checked the value.)
    const bool fork = options_.offer_fork && ArgString(args, "sandbox") == "fork";
    auto result = runner_(type, ArgString(args, "description"), fork, ctx);
    if (!result) {
      return ToolResult::Err("Error: sub-agent '" + type + "' failed: " + result.error().message);
    }
    return ToolResult::Ok(std::move(*result));
  }

 private:
  ToolSpec spec_;
  std::vector<std::pair<std::string, std::string>> agents_;
  SubagentRunner runner_;
  TaskToolOptions options_;
};

}  // namespace

ToolPtr MakeTaskTool(std::vector<std::pair<std::string, std::string>> agents, SubagentRunner runner,
                     TaskToolOptions options) {
  return std::make_shared<TaskTool>(std::move(agents), std::move(runner), options);
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
