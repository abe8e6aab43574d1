#include "mcp/elicitation.h"

namespace deepbox::mcp {

void ApplySchemaDefaults(const json::object& schema, json::object& content) {
  const json::value* props = schema.if_contains("properties");
  if (!props || !props->is_object()) return;
  for (const auto& [name, prop] : props->get_object()) {
    if (!prop.is_object() || content.contains(name)) continue;
    if (const json::value* d = prop.get_object().if_contains("default")) content[name] = *d;
  }
}

json::object AnswerElicitation(const json::object& params, const ElicitationHandler& handler) {
  json::object result;
  const json::value* mode = params.if_contains("mode");
  const bool form = !mode || (mode->is_string() && mode->get_string() == "form");
  if (!form || !handler) {
    result["action"] = "decline";
    return result;
  }
  ElicitationRequest req;
  if (const json::value* m = params.if_contains("message"); m && m->is_string()) {
    req.message = std::string(m->get_string());
  }
  if (const json::value* s = params.if_contains("requestedSchema"); s && s->is_object()) {
    req.requested_schema = s->get_object();
  }
  ElicitationAnswer answer = handler(req);
  if (answer.action != "accept") {
    result["action"] = answer.action == "cancel" ? "cancel" : "decline";
    return result;
  }
  ApplySchemaDefaults(req.requested_schema, answer.content);
  result["action"] = "accept";
  result["content"] = std::move(answer.content);
  return result;
}

}  // namespace deepbox::mcp
