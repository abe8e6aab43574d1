#include "agent/codec.h"

namespace deepbox::agent {

std::string_view RoleName(Role r) {
  switch (r) {
    case Role::kUser:
      return "user";
    case Role::kAssistant:
      return "assistant";
    case Role::kTool:
      return "tool";
  }
  return "user";
}

std::string_view DecisionTypeName(DecisionType t) {
  switch (t) {
    case DecisionType::kApprove:
      return "approve";
    case DecisionType::kEdit:
      return "edit";
    case DecisionType::kReject:
      return "reject";
    case DecisionType::kRespond:
      return "respond";
  }
  return "approve";
}

std::optional<DecisionType> DecisionTypeFromName(std::string_view name) {
  if (name == "approve") return DecisionType::kApprove;
  if (name == "edit") return DecisionType::kEdit;
  if (name == "reject") return DecisionType::kReject;
  if (name == "respond") return DecisionType::kRespond;
  return std::nullopt;
}

std::string_view EventTypeName(EventType t) {
  switch (t) {
    case EventType::kTextDelta:
      return "text_delta";
    case EventType::kToolCallStart:
      return "tool_call_start";
    case EventType::kToolCallEnd:
      return "tool_call_end";
    case EventType::kToolOutput:
      return "tool_output";
    case EventType::kTodoUpdate:
      return "todo_update";
    case EventType::kInterrupt:
      return "interrupt";
    case EventType::kUsage:
      return "usage";
    case EventType::kSummarized:
      return "summarized";
    case EventType::kFinalMessage:
      return "final_message";
    case EventType::kError:
      return "error";
    case EventType::kRetry:
      return "retry";
    case EventType::kToolCallRejected:
      return "tool_call_rejected";
  }
  return "error";
}

std::string_view StopReasonName(StopReason r) {
  switch (r) {
    case StopReason::kCompleted:
      return "completed";
    case StopReason::kStepLimit:
      return "step_limit";
    case StopReason::kCancelled:
      return "cancelled";
    case StopReason::kInterrupted:
      return "interrupted";
    case StopReason::kError:
      return "error";
    case StopReason::kTruncated:
      return "truncated";
  }
  return "error";
}

json::object MessageToJson(const Message& m) {
  json::object o;
  o["role"] = RoleName(m.role);
  if (!m.id.empty()) o["id"] = m.id;
  o["text"] = JsonString(m.text);
  if (!m.tool_calls.empty()) {
    json::array calls;
    for (const auto& c : m.tool_calls) {
      json::object jc;
      jc["id"] = c.id;
      jc["name"] = c.name;
      jc["input"] = c.input;
      if (!c.input_error.empty()) jc["input_error"] = JsonString(c.input_error);
      calls.push_back(std::move(jc));
    }
    o["tool_calls"] = std::move(calls);
  }
  if (!m.images.empty()) {
    json::array imgs;
    for (const auto& i : m.images) {
      json::object ji;
      ji["media_type"] = i.media_type;
      ji["data"] = i.base64_data;
      imgs.push_back(std::move(ji));
    }
    o["images"] = std::move(imgs);
  }
  if (m.role == Role::kTool) {
    o["tool_call_id"] = m.tool_call_id;
    o["tool_name"] = m.tool_name;
    if (m.is_error) o["is_error"] = true;
  }
  return o;
}

Result<Message> MessageFromJson(const json::object& o) {
  Message m;
  auto role = GetString(o, "role");
  if (!role) return tl::unexpected(role.error());
  if (*role == "user") {
    m.role = Role::kUser;
  } else if (*role == "assistant") {
    m.role = Role::kAssistant;
  } else if (*role == "tool") {
    m.role = Role::kTool;
  } else {
    return MakeError(ErrorCode::kInvalidArgument, "unknown message role '" + *role + "'");
  }
  m.id = GetOptString(o, "id").value_or("");
  m.text = GetOptString(o, "text").value_or("");
  if (const json::value* calls = o.if_contains("tool_calls"); calls && calls->is_array()) {
    for (const auto& jc : calls->get_array()) {
      if (!jc.is_object()) continue;
      ToolCall c;
      c.id = GetOptString(jc.get_object(), "id").value_or("");
      c.name = GetOptString(jc.get_object(), "name").value_or("");
      if (const json::value* in = jc.get_object().if_contains("input"); in && in->is_object()) {
        c.input = in->get_object();
      }
      c.input_error = GetOptString(jc.get_object(), "input_error").value_or("");
      m.tool_calls.push_back(std::move(c));
    }
  }
  if (const json::value* imgs = o.if_contains("images"); imgs && imgs->is_array()) {
    for (const auto& ji : imgs->get_array()) {
      if (!ji.is_object()) continue;
      m.images.push_back({GetOptString(ji.get_object(), "media_type").value_or(""),
                          GetOptString(ji.get_object(), "data").value_or("")});
    }
  }
  m.tool_call_id = GetOptString(o, "tool_call_id").value_or("");
  m.tool_name = GetOptString(o, "tool_name").value_or("");
  if (const json::value* e = o.if_contains("is_error"); e && e->is_bool())
    m.is_error = e->get_bool();
  return m;
}

json::object UsageToJson(const Usage& u) {
  json::object o;
  o["input_tokens"] = u.input_tokens;
  o["output_tokens"] = u.output_tokens;
  o["cache_read_tokens"] = u.cache_read_tokens;
  o["cache_write_tokens"] = u.cache_write_tokens;
  return o;
}

Usage UsageFromJson(const json::object& o) {
  Usage u;
  auto get = [&](const char* k) -> int64_t { return TokenCountFromJson(o.if_contains(k)); };
  u.input_tokens = get("input_tokens");
  u.output_tokens = get("output_tokens");
  u.cache_read_tokens = get("cache_read_tokens");
  u.cache_write_tokens = get("cache_write_tokens");
  return u;
}

namespace {
json::array DecisionTypesToJson(const std::vector<DecisionType>& types) {
  json::array a;
  for (auto t : types) a.emplace_back(DecisionTypeName(t));
  return a;
}
std::vector<DecisionType> DecisionTypesFromJson(const json::value* v) {
  std::vector<DecisionType> out;
  if (!v || !v->is_array()) return out;
  for (const auto& x : v->get_array()) {
    if (!x.is_string()) continue;
    if (auto t = DecisionTypeFromName(x.get_string())) out.push_back(*t);
  }
  return out;
}
}  // namespace

json::object InterruptToJson(const InterruptRequest& r) {
  json::object o;
  json::array actions;
  for (const auto& a : r.action_requests) {
    json::object ja;
    ja["tool_call_id"] = a.tool_call_id;
    ja["name"] = a.name;
    ja["args"] = a.args;
    ja["description"] = JsonString(a.description);
    actions.push_back(std::move(ja));
  }
  o["action_requests"] = std::move(actions);
  json::array reviews;
  for (const auto& rc : r.review_configs) {
    json::object jr;
    jr["action_name"] = rc.action_name;
    jr["allowed_decisions"] = DecisionTypesToJson(rc.allowed_decisions);
    reviews.push_back(std::move(jr));
  }
  o["review_configs"] = std::move(reviews);
  return o;
}

Result<InterruptRequest> InterruptFromJson(const json::object& o) {
  InterruptRequest r;
  if (const json::value* a = o.if_contains("action_requests"); a && a->is_array()) {
    for (const auto& ja : a->get_array()) {
      if (!ja.is_object()) continue;
      const auto& jo = ja.get_object();
      ActionRequest ar;
      ar.tool_call_id = GetOptString(jo, "tool_call_id").value_or("");
      ar.name = GetOptString(jo, "name").value_or("");
      if (const json::value* args = jo.if_contains("args"); args && args->is_object()) {
        ar.args = args->get_object();
      }
      ar.description = GetOptString(jo, "description").value_or("");
      r.action_requests.push_back(std::move(ar));
    }
  }
  if (const json::value* a = o.if_contains("review_configs"); a && a->is_array()) {
    for (const auto& jr : a->get_array()) {
      if (!jr.is_object()) continue;
      ReviewConfig rc;
      rc.action_name = GetOptString(jr.get_object(), "action_name").value_or("");
      rc.allowed_decisions =
          DecisionTypesFromJson(jr.get_object().if_contains("allowed_decisions"));
      r.review_configs.push_back(std::move(rc));
    }
  }
  return r;
}

json::object DecisionToJson(const Decision& d) {
  json::object o;
  o["type"] = DecisionTypeName(d.type);
  if (!d.message.empty()) o["message"] = JsonString(d.message);
  if (d.type == DecisionType::kEdit) {
    json::object action;
    if (d.edited_name) action["name"] = *d.edited_name;
    action["args"] = d.edited_args;
    o["edited_action"] = std::move(action);
  }
  return o;
}

Result<Decision> DecisionFromJson(const json::object& o) {
  auto type = GetString(o, "type");
  if (!type) return tl::unexpected(type.error());
  auto t = DecisionTypeFromName(*type);
  if (!t) return MakeError(ErrorCode::kInvalidArgument, "unknown decision type '" + *type + "'");
  Decision d;
  d.type = *t;
  d.message = GetOptString(o, "message").value_or("");
  if (const json::value* a = o.if_contains("edited_action"); a && a->is_object()) {
    d.edited_name = GetOptString(a->get_object(), "name");
    if (const json::value* args = a->get_object().if_contains("args"); args && args->is_object()) {
      d.edited_args = args->get_object();
    }
  }
  return d;
}

json::object SummarizationToJson(const SummarizationEvent& e) {
  json::object o;
  o["cutoff_index"] = static_cast<uint64_t>(e.cutoff_index);
  o["summary_message"] = MessageToJson(e.summary_message);
  if (e.file_path) o["file_path"] = *e.file_path;
  return o;
}

Result<SummarizationEvent> SummarizationFromJson(const json::object& o) {
  SummarizationEvent e;
  const json::value* c = o.if_contains("cutoff_index");
  auto cutoff = c ? JsonToInt64(*c) : std::nullopt;
  if (!cutoff || *cutoff < 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "summarization event needs a non-negative integer cutoff_index");
  }
  e.cutoff_index = static_cast<size_t>(*cutoff);
  const json::value* sm = o.if_contains("summary_message");
  if (!sm || !sm->is_object()) {
    return MakeError(ErrorCode::kInvalidArgument, "summarization event needs summary_message");
  }
  auto msg = MessageFromJson(sm->get_object());
  if (!msg) return tl::unexpected(msg.error());
  e.summary_message = std::move(*msg);
  e.file_path = GetOptString(o, "file_path");
  return e;
}

}  // namespace deepbox::agent
