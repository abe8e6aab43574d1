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
    spec_.description =
        "Create or replace your todo list for the current task, to plan multi-step work and "
        "show progress.\n\n"
        "Use it for complex tasks (three or more steps) or when the user lists several things "
        "to do; do not use it for trivial requests. Each call replaces the whole list. Statuses: "
        "pending, in_progress, completed. Mark a task in_progress before starting it and "
        "completed right after finishing it; only mark completed what is fully done. Never call "
        "it more than once in the same response.";
    json::object item;
    item["type"] = "object";
    json::object props;
    props["content"] = SchemaString("What needs to be done.");
    json::object status;
    status["type"] = "string";
    status["enum"] = json::array{"pending", "in_progress", "completed"};
    status["description"] = "pending, in_progress or completed.";
    props["status"] = status;
    item["properties"] = props;
    item["required"] = json::array{"content", "status"};
    json::object todos;
    todos["type"] = "array";
    todos["items"] = item;
    todos["description"] = "The complete, updated todo list.";
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
