// Path handling for the agent's file tools.
//
// Mapping (deepbox's answer to deepagents' virtual paths): the agent sees
// real sandbox paths. An absolute path is used as-is inside the sandbox
// (e.g. "/workspace/fib.py"); a relative path is taken relative to the
// workspace root (Sandbox::root()), so "fib.py" is "/workspace/fib.py". The
// system prompt tells the model its working directory is the root and to use
// absolute paths under it. Validation follows deepagents' validate_path: a
// ".." component or a leading "~" is refused with
// "Path traversal not allowed: <p>", Windows drive paths are refused, and the
// path is normalized (duplicate slashes, "." components, trailing slash).
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"

namespace deepbox::agent {

// deepagents validate_path(): Error (INVALID_ARGUMENT) whose message is the
// exact deepagents text (without the tool's "Error: " prefix). The result is
// normalized and '/'-prefixed (relative input "a/b" becomes "/a/b").
Result<std::string> ValidatePath(std::string_view path);

// ValidatePath, but a relative path is resolved against `root` first.
Result<std::string> ResolveToolPath(std::string_view path, std::string_view root);

// POSIX normpath for absolute paths: collapses "//" and ".", drops a trailing
// slash; ".." pops a component (never above "/").
std::string NormalizeAbsolute(std::string_view path);

// deepagents sanitize_tool_call_id: ".", "/" and "\" become "_".
std::string SanitizeToolCallId(std::string_view id);

// Joins a directory and a child name with exactly one slash.
std::string JoinPath(std::string_view dir, std::string_view name);

// True when `path` equals `dir` or lies beneath it (component-wise).
bool PathIsWithin(std::string_view path, std::string_view dir);

}  // namespace deepbox::agent
