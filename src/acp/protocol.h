// The Agent Client Protocol (ACP) messages deepbox speaks, as plain
// functions over JSON: protocol version 1 as the official SDKs implement it
// (pinned: PyPI agent-client-protocol 0.12.1, whose schema.py is generated
// from the protocol's schema.json). Builders for what the agent sends
// (initialize result, session updates, permission requests), readers for
// what the client sends (capabilities, prompt content, permission answers),
// and the mapping between the sandbox's paths and the client's.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json.h"

namespace deepbox::acp {

inline constexpr int kProtocolVersion = 1;

// The session modes (session/set_mode): which changes wait for the user.
enum class ApprovalMode {
  kApproveAll,      // file changes and commands ask first
  kApproveExecute,  // commands ask; file changes are written through the editor
  kAuto,            // nothing asks
};
std::string_view ModeId(ApprovalMode mode);
std::optional<ApprovalMode> ParseModeId(std::string_view id);
// {"currentModeId": ..., "availableModes": [{id, name, description}...]}
json::object ModesJson(ApprovalMode current);

// What the client offers (initialize's clientCapabilities).
struct ClientCapabilities {
  bool read_text_file = false;
  bool write_text_file = false;
  bool terminal = false;
};
ClientCapabilities ParseClientCapabilities(const json::object& initialize_params);

// initialize's result: protocol version (the client's if we speak it, else
// ours), capabilities (loadSession, text and embedded-context prompts, stdio
// MCP servers only) and how the model key is supplied.
json::object InitializeResult(const json::object& params, std::string_view agent_version);

// The ACP tool kind of a deepbox tool ("read", "edit", "delete", "search",
// "execute", "think", "other").
std::string_view ToolKind(std::string_view tool_name);
// A short title: "Edit src/a.py", "Run `make test`", "Read README.md".
std::string ToolTitle(std::string_view tool_name, std::string_view main_argument);

json::object TextContent(std::string_view text);
// {"type": "diff", "path", "oldText" (null for a new file), "newText"}.
json::object DiffContent(std::string_view path, const std::optional<std::string>& old_text,
                         std::string_view new_text);

// {"type": "terminal", "terminalId"}: a terminal the client made
// (terminal/create) shown as the tool call's content.
json::object TerminalContent(std::string_view terminal_id);

// A session/update notification's params.
json::object SessionUpdate(std::string_view session_id, json::object update);
json::object MessageChunk(std::string_view kind,
                          std::string_view text);  // agent_/user_message_chunk
// "plan" from write_todos' todos ([{content, status}]).
json::object PlanUpdate(const json::array& todos);

// session/list's SessionInfo: the title is the first line of the session's
// first prompt, at most 80 bytes (cut on a UTF-8 boundary, "…" added);
// omitted when empty, as is an empty updated_at.
json::object SessionInfoJson(std::string_view session_id, std::string_view cwd,
                             std::string_view first_prompt, std::string_view updated_at);

// session/prompt's prompt: the text (text, resource_link and embedded
// resource blocks) and the images (image blocks with base64 data, in a
// type the model API takes: PNG, JPEG, GIF, WebP, at most 5 MiB each).
// Audio, and an image by URI only, are refused (the capabilities say so).
struct PromptImage {
  std::string mime_type;    // "image/png"
  std::string base64_data;  // as the client sent it (validated)
};
struct Prompt {
  std::string text;
  std::vector<PromptImage> images;
};
Result<Prompt> ParsePrompt(const json::object& params);
inline constexpr size_t kMaxPromptImageBytes = 5u << 20;  // decoded, per image

// session/request_permission's options and what the user chose.
json::array PermissionOptions();
enum class PermissionAnswer { kAllowOnce, kAllowAlways, kReject, kCancelled };
PermissionAnswer ParsePermissionAnswer(const json::value& result);

// The client's absolute path for a sandbox path: `path` (absolute, or
// relative to `sandbox_root`) lexically normalised must lie beneath
// `sandbox_root`; its part there is joined to `project_dir`. nullopt for
// paths outside the workspace, for deepbox's own files there
// (large_tool_results/, conversation_history/) and for .git/: those are
// never written back to the project.
std::optional<std::string> ProjectPathFor(std::string_view sandbox_root,
                                          std::string_view project_dir, std::string_view path);

// "/a/./b/../c" -> "/a/c"; ".." never climbs above the root.
std::string NormalizeAbsolutePath(std::string_view path);

}  // namespace deepbox::acp
