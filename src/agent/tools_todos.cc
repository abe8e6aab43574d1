#include "agent/tools_todos.h"

#include "agent/py_repr.h"

namespace deepbox::agent {

const char kTodoSystemPrompt[] =
    "## `write_todos`\n\n"
    "You have a `write_todos` tool to plan and track multi-step work. Use it for tasks with "
    "three or more distinct steps, or when the user gives you a list of things to do; skip it "
    "for simple one- or two-step requests. Mark a task in_progress before you start it and "
    "completed as soon as it is done; do not batch status changes. Keep at least one task "
    "in_progress while work remains, revise the list as you learn more, and never call "
    "`write_todos` more than once in the same response.";

namespace {

class WriteTodosTool : public Tool {
 public:
  WriteTodosTool() {
    spec_.name = "write_todos";
    // langchain's TodoListMiddleware tool (what deepagents offers), verbatim.
    spec_.description =
        "Use this tool to create and manage a structured task list for your current work "
        "session. This helps you track progress and organize complex tasks.\n"
        "\n"
        "Only use this tool if you think it will be helpful in staying organized. If the "
        "user's request is trivial and takes less than 3 steps, it is better to NOT use "
        "this tool and just do the task directly.\n"
        "\n"
        "## When to Use This Tool\n"
        "\n"
        "Use this tool in these scenarios:\n"
        "\n"
        "1. Complex multi-step tasks - When a task requires 3 or more distinct steps or "
        "actions\n"
        "2. Non-trivial and complex tasks - Tasks that require careful planning or multiple "
        "operations\n"
        "3. User explicitly requests todo list - When the user directly asks you to use "
        "the todo list\n"
        "4. User provides multiple tasks - When users provide a list of things to be done "
        "(numbered or comma-separated)\n"
        "5. The plan may need future revisions or updates based on results from the first "
        "few steps\n"
        "\n"
        "## How to Use This Tool\n"
        "\n"
        "1. When you start working on a task - Mark it as in_progress BEFORE beginning work.\n"
        "2. After completing a task - Mark it as completed and add any new follow-up tasks "
        "discovered during implementation.\n"
        "3. You can also update future tasks, such as deleting them if they are no longer "
        "necessary, or adding new tasks that are necessary. Don't change previously completed "
        "tasks.\n"
        "4. You can make several updates to the todo list at once. For example, when you "
        "complete a task, you can mark the next task you need to start as in_progress.\n"
        "\n"
        "## When NOT to Use This Tool\n"
        "\n"
        "It is important to skip using this tool when:\n"
        "1. There is only a single, straightforward task\n"
        "2. The task is trivial and tracking it provides no benefit\n"
        "3. The task can be completed in less than 3 trivial steps\n"
        "4. The task is purely conversational or informational\n"
        "\n"
        "## Task States and Management\n"
        "\n"
        "1. **Task States**: Use these states to track progress:\n"
        "    - pending: Task not yet started\n"
        "    - in_progress: Currently working on (you can have multiple tasks in_progress "
        "at a time if they are not related to each other and can be run in parallel)\n"
        "    - completed: Task finished successfully\n"
        "\n"
        "2. **Task Management**:\n"
        "    - Update task status in real-time as you work\n"
        "    - Mark tasks complete IMMEDIATELY after finishing (don't batch completions)\n"
        "    - Complete current tasks before starting new ones\n"
        "    - Remove tasks that are no longer relevant from the list entirely\n"
        "    - IMPORTANT: When you write this todo list, you should mark your first task "
        "(or tasks) as in_progress immediately!.\n"
        "    - IMPORTANT: Unless all tasks are completed, you should always have at least "
        "one task in_progress.\n"
        "\n"
        "3. **Task Completion Requirements**:\n"
        "    - ONLY mark a task as completed when you have FULLY accomplished it\n"
        "    - If you encounter errors, blockers, or cannot finish, keep the task as in_progress\n"
        "    - When blocked, create a new task describing what needs to be resolved\n"
        "    - Never mark a task as completed if:\n"
        "        - There are unresolved issues or errors\n"
        "        - Work is partial or incomplete\n"
        "        - You encountered blockers that prevent completion\n"
        "        - You couldn't find necessary resources or dependencies\n"
        "        - Quality standards haven't been met\n"
        "\n"
        "4. **Task Breakdown**:\n"
        "    - Create specific, actionable items\n"
        "    - Break complex tasks into smaller, manageable steps\n"
        "    - Use clear, descriptive task names\n"
        "\n"
        "Being proactive with task management ensures you complete all requirements successfully\n"
        "Remember: If you only need to make a few tool calls to complete a task, and it "
        "is clear what you need to do, it is better to just do the task directly and NOT "
        "call this tool at all.\n"
        "\n"
        "## When You Finish\n"
        "\n"
        "`write_todos` tracks your work; it does not deliver the answer. Whatever the user "
        "asked for — computations, summaries, comparisons, data — must appear as text content "
        "in a message after your final `write_todos` call. Marking the last todo complete "
        "is not itself an answer to the user.";
    json::object item;
    item["type"] = "object";
    item["description"] = "A single todo item with content and status.";
    json::object props;
    json::object content;
    content["type"] = "string";
    props["content"] = content;
    json::object status;
    status["type"] = "string";
    status["enum"] = json::array{"pending", "in_progress", "completed"};
    props["status"] = status;
    item["properties"] = props;
    item["required"] = json::array{"content", "status"};
    json::object todos;
    todos["type"] = "array";
    todos["items"] = item;
    spec_.input_schema = SchemaObject({{"todos", todos}}, {"todos"});
  }

  const ToolSpec& spec() const override { return spec_; }
  bool Evictable() const override { return false; }
  ToolScheduling Scheduling(const json::object&, std::string_view) const override {
    return {"\x01todos"};
  }
  std::string MainArgument(const json::object& args) const override {
    const json::value* t = args.if_contains("todos");
    size_t n = t && t->is_array() ? t->get_array().size() : 0;
    return std::to_string(n) + (n == 1 ? " item" : " items");
  }

  ToolResult Invoke(ToolContext& ctx, const json::object& args) override {
    // Validated against the schema before Invoke; checked again here because a
    // wrong kind would be undefined behaviour, not an error.
    const json::value* list = args.if_contains("todos");
    if (!list || !list->is_array()) return ToolResult::Err("Error: 'todos' must be a list");
    const json::array& in = list->get_array();
    json::array todos;
    for (const auto& v : in) {
      if (!v.is_object()) {
        return ToolResult::Err("Error: each todo must be an object with content and status");
      }
      const json::object& o = v.get_object();
      const json::value* content = o.if_contains("content");
      const json::value* status = o.if_contains("status");
      if (!content || !content->is_string() || !status || !status->is_string()) {
        return ToolResult::Err("Error: each todo needs a string 'content' and 'status'");
      }
      std::string_view s = status->get_string();
      if (s != "pending" && s != "in_progress" && s != "completed") {
        return ToolResult::Err(
            "Error: todo status must be 'pending', 'in_progress' or "
            "'completed', got '" +
            std::string(s) + "'");
      }
      json::object item;
      item["content"] = *content;
      item["status"] = *status;
      todos.push_back(std::move(item));
    }
    if (ctx.state) ctx.state->todos = todos;
    if (ctx.on_todos) ctx.on_todos(todos);
    return ToolResult::Ok("Updated todo list to " + PyReprJson(json::value(todos)));
  }

 private:
  ToolSpec spec_;
};

}  // namespace

ToolPtr MakeWriteTodosTool() { return std::make_shared<WriteTodosTool>(); }

}  // namespace deepbox::agent
