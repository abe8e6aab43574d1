// write_todos (LangChain TodoListMiddleware): replaces the agent's todo list
// and answers "Updated todo list to [{'content': ..., 'status': ...}, ...]"
// (Python repr). Statuses: pending | in_progress | completed. Calling it more
// than once in one turn is refused by the loop.
#pragma once

#include "agent/tool.h"

namespace deepbox::agent {

ToolPtr MakeWriteTodosTool();

// System prompt guidance for the todo list.
extern const char kTodoSystemPrompt[];

}  // namespace deepbox::agent
