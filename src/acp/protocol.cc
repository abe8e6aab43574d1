#include "acp/protocol.h"

#include <algorithm>
#include <vector>

#include "common/base64.h"
#include "common/utf8.h"

namespace deepbox::acp {

namespace {

struct ModeInfo {
  ApprovalMode mode;
  const char* id;
  const char* name;
  const char* description;
};

constexpr ModeInfo kModes[] = {
    {ApprovalMode::kApproveAll, "approve-all", "Approve every change",
     "Every file change and every command waits for your approval"},
    {ApprovalMode::kApproveExecute, "approve-execute", "Approve commands only",
     "Commands wait for your approval; file changes are written through the editor at once"},
    {ApprovalMode::kAuto, "auto", "Auto",
     "Nothing waits: file changes are written through the editor, commands run in the sandbox"},
};

bool Flag(const json::object& o, std::initializer_list<std::string_view> path) {
  const json::value* v = Find(o, path);
  return v && v->is_bool() && v->get_bool();
}

}  // namespace

std::string_view ModeId(ApprovalMode mode) {
  for (const auto& m : kModes) {
    if (m.mode == mode) return m.id;
  }
  return "approve-all";
}

std::optional<ApprovalMode> ParseModeId(std::string_view id) {
  for (const auto& m : kModes) {
    if (id == m.id) return m.mode;
  }
  return std::nullopt;
}

json::object ModesJson(ApprovalMode current) {
  json::array available;
  for (const auto& m : kModes) {
    available.push_back(
        json::object{{"id", m.id}, {"name", m.name}, {"description", m.description}});
  }
  return json::object{{"currentModeId", ModeId(current)}, {"availableModes", std::move(available)}};
}

ClientCapabilities ParseClientCapabilities(const json::object& params) {
  ClientCapabilities c;
  c.read_text_file = Flag(params, {"clientCapabilities", "fs", "readTextFile"});
  c.write_text_file = Flag(params, {"clientCapabilities", "fs", "writeTextFile"});
  c.terminal = Flag(params, {"clientCapabilities", "terminal"});
  return c;
}

json::object InitializeResult(const json::object& params, std::string_view agent_version) {
  // Version negotiation: answer the client's version when we support it,
  // else the latest we support (the client then decides).
  int64_t version = kProtocolVersion;
  if (const json::value* v = params.if_contains("protocolVersion")) {
    if (auto n = JsonToInt64(*v); n && *n == kProtocolVersion) version = *n;
  }
  json::object caps{
      {"loadSession", true},
      {"promptCapabilities",
       json::object{{"image", true}, {"audio", false}, {"embeddedContext", true}}},
      // http: connected from the host by deepbox's MCP client (Streamable
      // HTTP). sse false: deepbox's MCP client speaks Streamable HTTP only, not
      // the HTTP+SSE transport MCP replaced with it in 2025-03-26.
      {"mcpCapabilities", json::object{{"http", true}, {"sse", false}}},
      // session/list (saved deepbox acp threads), session/close and
      // session/delete: stable in the pinned schema (v1.19.0, PyPI
      // agent-client-protocol 0.12.1); session/resume and session/fork:
      // unstable there.
      {"sessionCapabilities", json::object{{"list", json::object{}},
                                           {"close", json::object{}},
                                           {"delete", json::object{}},
                                           {"resume", json::object{}},
                                           {"fork", json::object{}}}},
  };
  // The model key comes from the environment the editor starts deepbox in
  // (its agent_servers / acp.json "env"); a replay model needs none.
  json::array auth{
      json::object{
          {"type", "env_var"},
          {"id", "anthropic-api-key"},
          {"name", "Anthropic API key"},
          {"description",
           "Set ANTHROPIC_API_KEY in the environment the editor starts `deepbox acp` with "
           "(the \"env\" of its agent server settings); `deepbox doctor` says whether it is set"},
          {"vars",
           json::array{json::object{
               {"name", "ANTHROPIC_API_KEY"}, {"label", "Anthropic API key"}, {"secret", true}}}},
          {"link", "https://console.anthropic.com/settings/keys"},
      },
      json::object{
          {"type", "env_var"},
          {"id", "openai-api-key"},
          {"name", "OpenAI API key"},
          {"description",
           "For --model openai:MODEL: set OPENAI_API_KEY (and OPENAI_BASE_URL for a compatible "
           "server) in the environment the editor starts `deepbox acp` with"},
          {"vars",
           json::array{
               json::object{{"name", "OPENAI_API_KEY"}, {"secret", true}},
               json::object{{"name", "OPENAI_BASE_URL"}, {"secret", false}, {"optional", true}}}},
      },
  };
  return json::object{
      {"protocolVersion", version},
      {"agentCapabilities", std::move(caps)},
      {"authMethods", std::move(auth)},
      {"agentInfo",
       json::object{{"name", "deepbox"}, {"title", "deepbox"}, {"version", agent_version}}},
  };
}

std::string_view ToolKind(std::string_view name) {
  if (name == "read_file") return "read";
  if (name == "write_file" || name == "edit_file") return "edit";
  if (name == "delete") return "delete";
  if (name == "ls" || name == "glob" || name == "grep") return "search";
  if (name == "execute") return "execute";
  if (name == "write_todos") return "think";
  return "other";
}

std::string ToolTitle(std::string_view name, std::string_view arg) {
  std::string a(arg);
  if (name == "read_file") return "Read " + a;
  if (name == "write_file") return "Write " + a;
  if (name == "edit_file") return "Edit " + a;
  if (name == "delete") return "Delete " + a;
  if (name == "ls") return "List " + a;
  if (name == "glob" || name == "grep") return "Search " + a;
  if (name == "execute") return "Run `" + a + "`";
  if (name == "write_todos") return "Update the plan";
  if (name == "task") return "Sub-agent: " + a;
  return a.empty() ? std::string(name) : std::string(name) + " " + a;
}

json::object TextContent(std::string_view text) {
  return json::object{{"type", "content"},
                      {"content", json::object{{"type", "text"}, {"text", JsonString(text)}}}};
}

json::object DiffContent(std::string_view path, const std::optional<std::string>& old_text,
                         std::string_view new_text) {
  json::object d{{"type", "diff"}, {"path", JsonString(path)}, {"newText", JsonString(new_text)}};
  d["oldText"] = old_text ? json::value(JsonString(*old_text)) : json::value(nullptr);
  return d;
}

json::object TerminalContent(std::string_view terminal_id) {
  return json::object{{"type", "terminal"}, {"terminalId", JsonString(terminal_id)}};
}

json::object SessionUpdate(std::string_view session_id, json::object update) {
  return json::object{{"sessionId", session_id}, {"update", std::move(update)}};
}

json::object MessageChunk(std::string_view kind, std::string_view text) {
  return json::object{{"sessionUpdate", kind},
                      {"content", json::object{{"type", "text"}, {"text", JsonString(text)}}}};
}

json::object SessionInfoJson(std::string_view session_id, std::string_view cwd,
                             std::string_view first_prompt, std::string_view updated_at) {
  json::object info{{"sessionId", session_id}, {"cwd", cwd}};
  std::string_view title = first_prompt.substr(0, first_prompt.find('\n'));
  while (!title.empty() && (title.back() == ' ' || title.back() == '\r')) title.remove_suffix(1);
  constexpr size_t kMaxTitleBytes = 80;
  if (title.size() > kMaxTitleBytes) {
    std::string cut(title.substr(0, Utf8CompletePrefix(title.substr(0, kMaxTitleBytes))));
    info["title"] = cut + "\u2026";
  } else if (!title.empty()) {
    info["title"] = title;
  }
  if (!updated_at.empty()) info["updatedAt"] = updated_at;
  return info;
}

json::object PlanUpdate(const json::array& todos) {
  json::array entries;
  for (const auto& t : todos) {
    const json::object* o = t.if_object();
    if (!o) continue;
    std::string status = FindString(*o, {"status"});
    if (status != "pending" && status != "in_progress" && status != "completed") {
      status = "pending";
    }
    entries.push_back(json::object{{"content", JsonString(FindString(*o, {"content"}))},
                                   {"priority", "medium"},
                                   {"status", status}});
  }
  return json::object{{"sessionUpdate", "plan"}, {"entries", std::move(entries)}};
}

Result<Prompt> ParsePrompt(const json::object& params) {
  const json::value* prompt = params.if_contains("prompt");
  if (!prompt || !prompt->is_array()) {
    return MakeError(ErrorCode::kInvalidArgument, "\"prompt\" must be an array of content blocks");
  }
  Prompt out;
  std::string& text = out.text;
  auto add = [&](std::string_view part) {
    if (!text.empty() && text.back() != '\n') text += "\n";
    text += part;
  };
  for (const auto& block : prompt->get_array()) {
    const json::object* b = block.if_object();
    if (!b) return MakeError(ErrorCode::kInvalidArgument, "a prompt block must be an object");
    std::string type = FindString(*b, {"type"});
    if (type == "text") {
      add(FindString(*b, {"text"}));
    } else if (type == "resource_link") {
      add("[@" + FindString(*b, {"name"}) + "](" + FindString(*b, {"uri"}) + ")");
    } else if (type == "resource") {
      std::string uri = FindString(*b, {"resource", "uri"});
      const json::value* t = Find(*b, {"resource", "text"});
      if (t && t->is_string()) {
        add("<context ref=\"" + uri + "\">\n" + std::string(t->get_string()) + "\n</context>");
      } else {
        add("[@" + uri + "](" + uri + ")");  // a binary resource: named, not inlined
      }
    } else if (type == "image") {
      PromptImage image{FindString(*b, {"mimeType"}), FindString(*b, {"data"})};
      static constexpr std::string_view kTypes[] = {"image/png", "image/jpeg", "image/gif",
                                                    "image/webp"};
      if (std::find(std::begin(kTypes), std::end(kTypes), image.mime_type) == std::end(kTypes)) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "an image of type \"" + image.mime_type +
                             "\" is not supported (PNG, JPEG, GIF or WebP)");
      }
      if (image.base64_data.empty()) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "an image needs its \"data\" (base64): deepbox does not fetch images "
                         "by URI");
      }
      if (image.base64_data.size() / 4 * 3 > kMaxPromptImageBytes) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "an image is larger than 5 MiB (the model API's limit)");
      }
      if (!Base64Decode(image.base64_data)) {
        return MakeError(ErrorCode::kInvalidArgument, "an image's \"data\" is not base64");
      }
      out.images.push_back(std::move(image));
    } else {
      return MakeError(ErrorCode::kInvalidArgument,
                       "prompt blocks of type \"" + type +
                           "\" are not supported (deepbox takes text, images and resources)");
    }
  }
  return out;
}

json::array PermissionOptions() {
  return json::array{
      json::object{{"optionId", "allow_once"}, {"name", "Allow"}, {"kind", "allow_once"}},
      json::object{
          {"optionId", "allow_always"}, {"name", "Always allow"}, {"kind", "allow_always"}},
      json::object{{"optionId", "reject_once"}, {"name", "Reject"}, {"kind", "reject_once"}},
  };
}

PermissionAnswer ParsePermissionAnswer(const json::value& result) {
  const json::object* r = result.if_object();
  if (!r) return PermissionAnswer::kCancelled;
  if (FindString(*r, {"outcome", "outcome"}) != "selected") return PermissionAnswer::kCancelled;
  std::string option = FindString(*r, {"outcome", "optionId"});
  if (option == "allow_once") return PermissionAnswer::kAllowOnce;
  if (option == "allow_always") return PermissionAnswer::kAllowAlways;
  return PermissionAnswer::kReject;  // reject_once, and anything we did not offer
}

std::string NormalizeAbsolutePath(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view seg = path.substr(i, j - i);
    if (seg == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!seg.empty() && seg != ".") {
      parts.push_back(seg);
    }
    i = j + 1;
  }
  std::string out;
  for (auto p : parts) {
    out += "/";
    out += p;
  }
  return out.empty() ? "/" : out;
}

std::optional<std::string> ProjectPathFor(std::string_view sandbox_root,
                                          std::string_view project_dir, std::string_view path) {
  if (path.empty()) return std::nullopt;
  std::string root = NormalizeAbsolutePath(sandbox_root);
  std::string full = path.front() == '/' ? std::string(path) : root + "/" + std::string(path);
  full = NormalizeAbsolutePath(full);
  if (root == "/" || !full.starts_with(root + "/")) return std::nullopt;
  std::string rel = full.substr(root.size() + 1);
  std::string_view first = std::string_view(rel).substr(0, rel.find('/'));
  if (first == "large_tool_results" || first == "conversation_history" || first == ".git") {
    return std::nullopt;
  }
  std::string dir(project_dir);
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir + "/" + rel;
}

}  // namespace deepbox::acp
