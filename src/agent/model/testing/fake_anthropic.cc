#include "agent/model/testing/fake_anthropic.h"

#include <fmt/format.h>

#include <chrono>
#include <set>
#include <thread>

#include "agent/model/testing/fake_server_core.h"

namespace deepbox::agent::testing {

using internal::FakeServerCore;

namespace {

int CountCacheControl(const json::value& v) {
  int n = 0;
  if (v.is_object()) {
    if (v.as_object().contains("cache_control")) ++n;
    if (const auto* c = v.as_object().if_contains("content")) n += CountCacheControl(*c);
  } else if (v.is_array()) {
    for (const auto& item : v.as_array()) n += CountCacheControl(item);
  }
  return n;
}

std::string JoinSet(const std::set<std::string>& s) {
  std::string out;
  for (const auto& x : s) out += (out.empty() ? "" : ", ") + x;
  return out;
}

std::string ErrorBody(std::string_view type, std::string_view message, int id) {
  return ToJson(json::object{
      {"type", "error"},
      {"error", json::object{{"type", JsonString(type)}, {"message", JsonString(message)}}},
      {"request_id", fmt::format("req_fake_{}", id)}});
}

std::string Event(std::string_view name, const json::object& data) {
  return fmt::format("event: {}\ndata: {}\n\n", name, ToJson(data));
}

}  // namespace

std::string ValidateAnthropicRequest(const json::object& body) {
  const auto* model = body.if_contains("model");
  if (model == nullptr || !model->is_string() || model->as_string().empty()) {
    return "model: Field required";
  }
  const auto* max_tokens = body.if_contains("max_tokens");
  if (max_tokens == nullptr || !(max_tokens->is_int64() || max_tokens->is_uint64())) {
    return "max_tokens: Field required";
  }
  const auto* messages = body.if_contains("messages");
  if (messages == nullptr || !messages->is_array() || messages->as_array().empty()) {
    return "messages: at least one message is required";
  }
  int breakpoints = 0;
  if (const auto* system = body.if_contains("system")) breakpoints += CountCacheControl(*system);
  if (const auto* tools = body.if_contains("tools")) {
    if (!tools->is_array()) return "tools: Input should be a valid list";
    size_t i = 0;
    for (const auto& t : tools->as_array()) {
      const json::object* tool = t.if_object();
      if (tool == nullptr || !tool->contains("name"))
        return fmt::format("tools.{}.name: Field required", i);
      const auto* schema = tool->if_contains("input_schema");
      if (schema == nullptr || !schema->is_object()) {
        return fmt::format("tools.{}.input_schema: Field required", i);
      }
      if (const auto* type = schema->as_object().if_contains("type");
          type == nullptr || *type != "object") {
        return fmt::format("tools.{}.input_schema.type: Input should be 'object'", i);
      }
      ++i;
    }
    breakpoints += CountCacheControl(*tools);
  }
  std::set<std::string> open_tool_uses;  // of the previous assistant message
  const json::array& msgs = messages->as_array();
  for (size_t i = 0; i < msgs.size(); ++i) {
    const json::object* msg = msgs[i].if_object();
    if (msg == nullptr) return fmt::format("messages.{}: Input should be an object", i);
    const auto* role = msg->if_contains("role");
    if (role == nullptr || (*role != "user" && *role != "assistant")) {
      return fmt::format("messages.{}.role: Input should be 'user' or 'assistant'", i);
    }
    const auto* content = msg->if_contains("content");
    if (content == nullptr) return fmt::format("messages.{}.content: Field required", i);
    breakpoints += CountCacheControl(*content);
    std::set<std::string> tool_uses, tool_results;
    if (content->is_array()) {
      if (content->as_array().empty()) {
        return fmt::format("messages.{}: all messages must have non-empty content", i);
      }
      size_t j = 0;
      for (const auto& b : content->as_array()) {
        const json::object* block = b.if_object();
        if (block == nullptr) return fmt::format("messages.{}.content.{}: invalid block", i, j);
        std::string type = GetOptString(*block, "type").value_or("");
        if (type == "text") {
          auto text = GetOptString(*block, "text");
          if (!text || text->empty()) return "messages: text content blocks must be non-empty";
        } else if (type == "tool_use") {
          if (*role != "assistant") {
            return fmt::format(
                "messages.{}.content.{}: tool_use blocks are only allowed in "
                "assistant messages",
                i, j);
          }
          tool_uses.insert(GetOptString(*block, "id").value_or(""));
        } else if (type == "tool_result") {
          std::string id = GetOptString(*block, "tool_use_id").value_or("");
          if (!open_tool_uses.contains(id)) {
            return fmt::format(
                "messages.{}.content.{}: unexpected `tool_use_id` found in "
                "`tool_result` blocks: {}. Each `tool_result` block must have a "
                "corresponding `tool_use` block in the previous message.",
                i, j, id);
          }
          if (j != tool_results.size()) {
            return fmt::format(
                "messages.{}.content.{}: tool_result blocks must come first in "
                "the content",
                i, j);
          }
          tool_results.insert(id);
        }
        ++j;
      }
    } else if (!content->is_string()) {
      return fmt::format("messages.{}.content: Input should be a valid list", i);
    }
    if (!open_tool_uses.empty()) {
      std::set<std::string> missing;
      for (const auto& id : open_tool_uses) {
        if (!tool_results.contains(id)) missing.insert(id);
      }
      if (!missing.empty()) {
        return fmt::format(
            "messages.{}: `tool_use` ids were found without `tool_result` blocks "
            "immediately after: {}. Each `tool_use` block must have a "
            "corresponding `tool_result` block in the next message.",
            i, JoinSet(missing));
      }
    }
    open_tool_uses = std::move(tool_uses);
  }
  if (breakpoints > 4) {
    return fmt::format("A maximum of 4 blocks with cache_control may be provided. Found {}.",
                       breakpoints);
  }
  return "";
}

FakeAnthropicServer::FakeAnthropicServer(FakeServerOptions options) : options_(std::move(options)) {
  core_ = std::make_unique<FakeServerCore>(
      options_.tls, options_.port, "",
      [this](net::Request& req, net::ResponseWriter& w) { Handle(req, w); });
}

FakeAnthropicServer::~FakeAnthropicServer() { core_->Shutdown(); }

void FakeAnthropicServer::Enqueue(ScriptedTurn turn) { core_->Enqueue(std::move(turn)); }
void FakeAnthropicServer::Enqueue(std::vector<ScriptedTurn> turns) {
  for (auto& t : turns) core_->Enqueue(std::move(t));
}
std::string FakeAnthropicServer::url() const { return core_->url(); }
std::string FakeAnthropicServer::ca_file() const { return core_->ca_file(); }
std::string FakeAnthropicServer::ca_pem() const { return core_->ca_pem(); }
std::vector<RecordedRequest> FakeAnthropicServer::requests() const { return core_->requests(); }
size_t FakeAnthropicServer::request_count() const { return core_->request_count(); }
size_t FakeAnthropicServer::pending_turns() const { return core_->pending_turns(); }

void FakeAnthropicServer::Handle(net::Request& request, net::ResponseWriter& w) {
  RecordedRequest rec = core_->Record(request);
  int id = core_->next_id();
  auto reply_error = [&](int status, std::string_view type, std::string_view message,
                         const net::Headers* extra = nullptr) {
    net::Response r = net::Response::Json(status, ErrorBody(type, message, id));
    r.headers.Set("request-id", fmt::format("req_fake_{}", id));
    if (extra != nullptr) {
      for (const auto& [k, v] : extra->entries()) r.headers.Add(k, v);
    }
    (void)w.Send(r);
  };
  if (request.path != "/v1/messages") {
    return reply_error(404, "not_found_error", fmt::format("Not found: {}", request.path));
  }
  if (request.method != "POST") {
    return reply_error(405, "invalid_request_error", "Method not allowed");
  }
  auto key = request.Header("x-api-key");
  if (!key || key->empty()) {
    return reply_error(401, "authentication_error", "x-api-key header is required");
  }
  if (!options_.api_key.empty() && *key != options_.api_key) {
    return reply_error(401, "authentication_error", "invalid x-api-key");
  }
  if (!request.Header("anthropic-version")) {
    return reply_error(400, "invalid_request_error", "anthropic-version: header is required");
  }
  if (rec.json.empty()) {
    return reply_error(400, "invalid_request_error",
                       "There was an error parsing the body of your request");
  }
  if (std::string problem = ValidateAnthropicRequest(rec.json); !problem.empty()) {
    return reply_error(400, "invalid_request_error", problem);
  }
  if (const auto* stream = rec.json.if_contains("stream"); stream == nullptr || *stream != true) {
    return reply_error(400, "invalid_request_error",
                       "fake Anthropic server: only streaming requests (\"stream\": true) are "
                       "supported");
  }
  std::optional<ScriptedTurn> turn = core_->Pop();
  if (!turn) {
    return reply_error(400, "invalid_request_error",
                       fmt::format("fake Anthropic server: no scripted turn left ({} requests "
                                   "so far)",
                                   core_->request_count()));
  }
  if (turn->kind == ScriptedTurn::Kind::kHttpError) {
    return reply_error(turn->status, turn->error_type, turn->error_message, &turn->headers);
  }

  std::string model = GetOptString(rec.json, "model").value_or("claude-sonnet-4-6");
  size_t out_bytes = turn->text.size();
  for (const auto& c : turn->tool_calls) out_bytes += ToJson(c.input).size() + c.name.size();
  Usage usage = turn->usage.value_or(Usage{static_cast<int64_t>(request.body.size() / 4),
                                           static_cast<int64_t>(out_bytes / 4 + 1), 0, 0});

  net::Headers headers;
  headers.Set("content-type", "text/event-stream; charset=utf-8");
  headers.Set("cache-control", "no-cache");
  headers.Set("request-id", fmt::format("req_fake_{}", id));
  for (const auto& [k, v] : turn->headers.entries()) headers.Add(k, v);
  if (!w.BeginStream(200, headers)) return;
  auto send = [&](std::string_view name, const json::object& data) {
    return FakeServerCore::Write(w, Event(name, data), options_.write_bytes);
  };

  json::object start_usage{{"input_tokens", usage.input_tokens},
                           {"cache_creation_input_tokens", usage.cache_write_tokens},
                           {"cache_read_input_tokens", usage.cache_read_tokens},
                           {"output_tokens", 1}};
  if (!send("message_start",
            json::object{{"type", "message_start"},
                         {"message", json::object{{"id", fmt::format("msg_fake_{}", id)},
                                                  {"type", "message"},
                                                  {"role", "assistant"},
                                                  {"content", json::array{}},
                                                  {"model", JsonString(model)},
                                                  {"stop_reason", nullptr},
                                                  {"stop_sequence", nullptr},
                                                  {"usage", start_usage}}}})) {
    return;
  }
  if (options_.pings && !send("ping", json::object{{"type", "ping"}})) return;
  int index = 0;
  if (!turn->text.empty()) {
    if (!send("content_block_start",
              json::object{{"type", "content_block_start"},
                           {"index", index},
                           {"content_block", json::object{{"type", "text"}, {"text", ""}}}})) {
      return;
    }
    for (const auto& piece : SplitUtf8(turn->text, options_.text_delta_bytes)) {
      if (!send("content_block_delta",
                json::object{{"type", "content_block_delta"},
                             {"index", index},
                             {"delta", json::object{{"type", "text_delta"},
                                                    {"text", JsonString(piece)}}}})) {
        return;
      }
    }
    if (turn->kind == ScriptedTurn::Kind::kResponse &&
        !send("content_block_stop",
              json::object{{"type", "content_block_stop"}, {"index", index}})) {
      return;
    }
    ++index;
  }
  switch (turn->kind) {
    case ScriptedTurn::Kind::kDropMidStream:
      return;  // no terminating chunk: the server closes the connection
    case ScriptedTurn::Kind::kStreamError:
      (void)send(
          "error",
          json::object{{"type", "error"},
                       {"error", json::object{{"type", JsonString(turn->error_type)},
                                              {"message", JsonString(turn->error_message)}}}});
      (void)w.EndStream();
      return;
    case ScriptedTurn::Kind::kStall: {
      auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      while (!core_->stopping() && !w.ClientGone() && std::chrono::steady_clock::now() < give_up) {
        if (!send("ping", json::object{{"type", "ping"}})) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return;
    }
    case ScriptedTurn::Kind::kSilentStall: {
      auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      while (!core_->stopping() && !w.ClientGone() && std::chrono::steady_clock::now() < give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return;
    }
    default:
      break;
  }
  int call_no = 0;
  for (const auto& call : turn->tool_calls) {
    std::string call_id = call.id.empty() ? fmt::format("toolu_fake_{}_{}", id, call_no) : call.id;
    ++call_no;
    if (!send("content_block_start",
              json::object{{"type", "content_block_start"},
                           {"index", index},
                           {"content_block", json::object{{"type", "tool_use"},
                                                          {"id", JsonString(call_id)},
                                                          {"name", JsonString(call.name)},
                                                          {"input", json::object{}}}}})) {
      return;
    }
    std::vector<std::string> pieces{""};  // the API starts with an empty fragment
    for (auto& p :
         SplitUtf8(call.raw_arguments.value_or(ToJson(call.input)), options_.json_delta_bytes))
      pieces.push_back(p);
    for (const auto& piece : pieces) {
      if (!send("content_block_delta",
                json::object{{"type", "content_block_delta"},
                             {"index", index},
                             {"delta", json::object{{"type", "input_json_delta"},
                                                    {"partial_json", JsonString(piece)}}}})) {
        return;
      }
    }
    if (!send("content_block_stop",
              json::object{{"type", "content_block_stop"}, {"index", index}})) {
      return;
    }
    ++index;
  }
  std::string stop = turn->stop_reason.empty()
                         ? (turn->tool_calls.empty() ? "end_turn" : "tool_use")
                         : turn->stop_reason;
  if (!send("message_delta",
            json::object{{"type", "message_delta"},
                         {"delta", json::object{{"stop_reason", JsonString(stop)},
                                                {"stop_sequence", nullptr}}},
                         {"usage", json::object{{"output_tokens", usage.output_tokens}}}})) {
    return;
  }
  if (!send("message_stop", json::object{{"type", "message_stop"}})) return;
  (void)w.EndStream();
}

}  // namespace deepbox::agent::testing
