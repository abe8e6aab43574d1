#include "mcp/registry.h"

#include <fmt/format.h>

#include "mcp/schema.h"

namespace deepbox::mcp {

json::object TextContent(std::string_view text) {
  json::object o;
  o["type"] = "text";
  o["text"] = JsonString(text);
  return o;
}

json::object ImageContent(std::string_view base64_data, std::string_view mime_type) {
  json::object o;
  o["type"] = "image";
  o["data"] = base64_data;
  o["mimeType"] = JsonString(mime_type);
  return o;
}

json::object BlobResourceContent(std::string_view uri, std::string_view mime_type,
                                 std::string_view base64_data) {
  json::object r;
  r["uri"] = JsonString(uri);
  r["mimeType"] = JsonString(mime_type);
  r["blob"] = base64_data;
  json::object o;
  o["type"] = "resource";
  o["resource"] = std::move(r);
  return o;
}

ToolOutcome ToolOutcome::Text(std::string text, bool is_error) {
  ToolOutcome o;
  o.content.push_back(TextContent(text));
  o.is_error = is_error;
  return o;
}

json::object CallToolResultJson(const ToolOutcome& outcome) {
  json::object r;
  r["content"] = outcome.content;
  if (outcome.structured && !outcome.is_error) r["structuredContent"] = *outcome.structured;
  r["isError"] = outcome.is_error;
  if (!outcome.meta.empty()) r["_meta"] = outcome.meta;
  return r;
}

void ToolRegistry::Add(ToolDef tool) { tools_.push_back(std::move(tool)); }

const ToolDef* ToolRegistry::Find(std::string_view name) const {
  for (const auto& t : tools_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

json::array ToolRegistry::ListJson() const {
  json::array out;
  for (const auto& t : tools_) {
    json::object o;
    o["name"] = t.name;
    if (!t.title.empty()) o["title"] = t.title;
    o["description"] = t.description;
    o["inputSchema"] = t.input_schema;
    if (t.output_schema) o["outputSchema"] = *t.output_schema;
    if (!t.annotations.empty()) o["annotations"] = t.annotations;
    out.push_back(std::move(o));
  }
  return out;
}

tl::expected<json::object, RpcError> ToolRegistry::Call(const json::object& params,
                                                        ToolCallContext& ctx) const {
  const json::value* name = params.if_contains("name");
  if (!name || !name->is_string()) {
    return tl::unexpected(RpcError(kInvalidParams, "Invalid params: \"name\" must be a string"));
  }
  const ToolDef* tool = Find(name->get_string());
  if (!tool) {
    return tl::unexpected(
        RpcError(kInvalidParams, fmt::format("Unknown tool: {}", std::string(name->get_string()))));
  }
  json::object args;
  if (const json::value* a = params.if_contains("arguments"); a && !a->is_null()) {
    if (!a->is_object()) {
      // CallToolRequest itself is malformed: a protocol error.
      return tl::unexpected(
          RpcError(kInvalidParams, "Invalid params: \"arguments\" must be an object"));
    }
    args = a->get_object();
  }
  auto errors = ValidateAgainstSchema(args, tool->input_schema);
  if (!errors.empty()) {
    std::string text = fmt::format("Invalid arguments for tool {}:", tool->name);
    for (const auto& e : errors) text += "\n - " + e;
    text += "\nFix the arguments and call the tool again.";
    return CallToolResultJson(ToolOutcome::Error(text));
  }
  return CallToolResultJson(tool->handler(args, ctx));
}

}  // namespace deepbox::mcp
