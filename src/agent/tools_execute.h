// The deepagents `execute` tool over Sandbox::ExecStream: runs a shell
// command in the workspace root, streams its output to the caller, and
// answers with the combined output plus
// "\n[Command succeeded|failed with exit code N]" and, when the output was
// capped, "\n[Output was truncated due to size limits]".
//
// Exit codes: a signal N reports 128+N; a timeout reports 124 (as the
// deepagents partner sandboxes do) after "Command timed out after N seconds";
// a command that could not start reports 127 with the reason.
#pragma once

#include <chrono>
#include <cstdint>

#include "agent/tool.h"

namespace deepbox::agent {

struct ExecuteToolOptions {
  // Used when the model gives no timeout; 0 = the sandbox daemon's default.
  int64_t default_timeout_seconds = 0;
  int64_t max_timeout_seconds = 3600;  // larger requests are refused
  size_t max_output_bytes = 1 << 20;   // combined output kept (then truncated)
};

ToolPtr MakeExecuteTool(ExecuteToolOptions options = {});

}  // namespace deepbox::agent
