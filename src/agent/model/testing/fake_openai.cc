#include "agent/model/testing/fake_openai.h"

#include <fmt/format.h>

#include <chrono>
#include <set>
#include <thread>

#include "agent/model/testing/fake_server_core.h"

namespace deepbox::agent::testing {

using internal::FakeServerCore;

namespace {

std::string ErrorBody(std::string_view message, std::string_view type, std::string_view code) {
  json::object err{
      {"message", JsonString(message)}, {"type", JsonString(type)}, {"param", nullptr}};
  err["code"] = code.empty() ? json::value(nullptr) : json::value(JsonString(code));
  return ToJson(json::object{{"error", std::move(err)}});
}

std::string OpenAiFinishReason(std::string_view stop) {
  if (stop == "end_turn") return "stop";
  if (stop == "tool_use") return "tool_calls";
  if (stop == "max_tokens") return "length";
  return std::string(stop);
}

// 400 reasons, empty = fine.
std::string Validate(const json::object& body) {
  const auto* model = body.if_contains("model");
  if (model == nullptr || !model->is_string() || model->as_string().empty()) {
    return "you must provide a model parameter";
  }
  const auto* messages = body.if_contains("messages");
  if (messages == nullptr || !messages->is_array() || messages->as_array().empty()) {
    return "[] is too short - 'messages'";
  }
  std::set<std::string> open;  // tool calls of the last assistant message not yet answered
  for (const auto& m : messages->as_array()) {
    const json::object* msg = m.if_object();
    if (msg == nullptr) return "messages: each message must be an object";
    std::string role = GetOptString(*msg, "role").value_or("");
    if (role == "tool") {
      std::string id = GetOptString(*msg, "tool_call_id").value_or("");
      if (!open.erase(id)) {
        return "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
               "message with 'tool_calls'.";
      }
      continue;
    }
    if (!open.empty()) {
      return "An assistant message with 'tool_calls' must be followed by tool messages "
             "responding to each 'tool_call_id'. The following tool_call_ids did not have "
             "response messages: " +
             *open.begin();
    }
    if (role == "assistant") {
      if (const auto* calls = msg->if_contains("tool_calls"); calls && calls->is_array()) {
        for (const auto& c : calls->as_array()) {
          if (c.is_object()) open.insert(GetOptString(c.as_object(), "id").value_or(""));
        }
      }
    } else if (role != "system" && role != "user" && role != "developer") {
      return fmt::format(
          "Invalid value: '{}'. Supported values are: 'system', 'assistant', "
          "'user', 'tool', and 'developer'.",
          role);
    }
  }
  return "";
}

}  // namespace

FakeOpenAiServer::FakeOpenAiServer(FakeServerOptions options) : options_(std::move(options)) {
  core_ = std::make_unique<FakeServerCore>(
      options_.tls, options_.port, "/v1",
      [this](net::Request& req, net::ResponseWriter& w) { Handle(req, w); });
}

FakeOpenAiServer::~FakeOpenAiServer() { core_->Shutdown(); }

void FakeOpenAiServer::Enqueue(ScriptedTurn turn) { core_->Enqueue(std::move(turn)); }
void FakeOpenAiServer::Enqueue(std::vector<ScriptedTurn> turns) {
  for (auto& t : turns) core_->Enqueue(std::move(t));
}
std::string FakeOpenAiServer::url() const { return core_->url(); }
std::string FakeOpenAiServer::ca_file() const { return core_->ca_file(); }
std::string FakeOpenAiServer::ca_pem() const { return core_->ca_pem(); }
std::vector<RecordedRequest> FakeOpenAiServer::requests() const { return core_->requests(); }
size_t FakeOpenAiServer::request_count() const { return core_->request_count(); }
size_t FakeOpenAiServer::pending_turns() const { return core_->pending_turns(); }

void FakeOpenAiServer::Handle(net::Request& request, net::ResponseWriter& w) {
  RecordedRequest rec = core_->Record(request);
  int id = core_->next_id();
  auto reply_error = [&](int status, std::string_view message, std::string_view type,
                         std::string_view code, const net::Headers* extra = nullptr) {
    net::Response r = net::Response::Json(status, ErrorBody(message, type, code));
    if (extra != nullptr) {
      for (const auto& [k, v] : extra->entries()) r.headers.Add(k, v);
    }
    (void)w.Send(r);
  };
  if (request.path != "/v1/chat/completions" || request.method != "POST") {
    return reply_error(404, fmt::format("Invalid URL ({} {})", request.method, request.path),
                       "invalid_request_error", "");
  }
  if (!options_.api_key.empty()) {
    std::string auth = request.Header("authorization").value_or("");
    if (auth != "Bearer " + options_.api_key) {
      std::string given = auth.starts_with("Bearer ") ? auth.substr(7) : auth;
      return reply_error(401,
                         fmt::format("Incorrect API key provided: {}. You can find your API key "
                                     "at https://platform.openai.com/account/api-keys.",
                                     given.empty() ? "(none)" : given),
                         "invalid_request_error", "invalid_api_key");
    }
  }
  if (rec.json.empty()) {
    return reply_error(400, "We could not parse the JSON body of your request.",
                       "invalid_request_error", "");
  }
  if (std::string problem = Validate(rec.json); !problem.empty()) {
    return reply_error(400, problem, "invalid_request_error", "");
  }
  if (const auto* stream = rec.json.if_contains("stream"); stream == nullptr || *stream != true) {
    return reply_error(400, "fake OpenAI server: only streaming requests are supported",
                       "invalid_request_error", "");
  }
  std::optional<ScriptedTurn> turn = core_->Pop();
  if (!turn) {
    return reply_error(400,
                       fmt::format("fake OpenAI server: no scripted turn left ({} requests so "
                                   "far)",
                                   core_->request_count()),
                       "invalid_request_error", "");
  }
  if (turn->kind == ScriptedTurn::Kind::kHttpError) {
    std::string type = turn->status == 429   ? "requests"
                       : turn->status >= 500 ? "server_error"
                                             : "invalid_request_error";
    return reply_error(turn->status, turn->error_message, type, turn->error_type, &turn->headers);
  }

  std::string model = GetOptString(rec.json, "model").value_or("gpt-4o");
  size_t out_bytes = turn->text.size();
  for (const auto& c : turn->tool_calls) out_bytes += ToJson(c.input).size() + c.name.size();
  Usage usage = turn->usage.value_or(Usage{static_cast<int64_t>(request.body.size() / 4),
                                           static_cast<int64_t>(out_bytes / 4 + 1), 0, 0});
  net::Headers headers;
  headers.Set("content-type", "text/event-stream; charset=utf-8");
  headers.Set("cache-control", "no-cache");
  headers.Set("x-request-id", fmt::format("req_fake_{}", id));
  for (const auto& [k, v] : turn->headers.entries()) headers.Add(k, v);
  if (!w.BeginStream(200, headers)) return;
  std::string chunk_id = fmt::format("chatcmpl-fake{}", id);
  auto chunk = [&](json::array choices, json::value usage_value = nullptr) {
    json::object c{{"id", JsonString(chunk_id)},      {"object", "chat.completion.chunk"},
                   {"created", 1700000000},           {"model", JsonString(model)},
                   {"system_fingerprint", "fp_fake"}, {"choices", std::move(choices)},
                   {"usage", std::move(usage_value)}};
    return FakeServerCore::Write(w, "data: " + ToJson(c) + "\n\n", options_.write_bytes);
  };
  auto delta = [&](json::object d, json::value finish = nullptr) {
    return chunk(json::array{json::object{{"index", 0},
                                          {"delta", std::move(d)},
                                          {"logprobs", nullptr},
                                          {"finish_reason", std::move(finish)}}});
  };
  if (!delta(json::object{{"role", "assistant"}, {"content", ""}, {"refusal", nullptr}})) return;
  for (const auto& piece : SplitUtf8(turn->text, options_.text_delta_bytes)) {
    if (!delta(json::object{{"content", JsonString(piece)}})) return;
  }
  switch (turn->kind) {
    case ScriptedTurn::Kind::kDropMidStream:
      return;
    case ScriptedTurn::Kind::kStreamError:
      (void)FakeServerCore::Write(
          w,
          "data: " +
              ToJson(
                  json::object{{"error", json::object{{"message", JsonString(turn->error_message)},
                                                      {"type", JsonString(turn->error_type)},
                                                      {"param", nullptr},
                                                      {"code", nullptr}}}}) +
              "\n\n",
          options_.write_bytes);
      (void)w.EndStream();
      return;
    case ScriptedTurn::Kind::kStall: {
      // OpenAI has no ping event; SSE comments keep the stream alive.
      auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      while (!core_->stopping() && !w.ClientGone() && std::chrono::steady_clock::now() < give_up) {
        if (!FakeServerCore::Write(w, ": keep-alive\n\n", 0)) return;
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
  int index = 0;
  for (const auto& call : turn->tool_calls) {
    std::string call_id = call.id.empty() ? fmt::format("call_fake_{}_{}", id, index) : call.id;
    json::object first{
        {"index", index},
        {"id", JsonString(call_id)},
        {"type", "function"},
        {"function", json::object{{"name", JsonString(call.name)}, {"arguments", ""}}}};
    if (!delta(json::object{{"tool_calls", json::array{std::move(first)}}})) return;
    for (const auto& piece :
         SplitUtf8(call.raw_arguments.value_or(ToJson(call.input)), options_.json_delta_bytes)) {
      json::object frag{{"index", index},
                        {"function", json::object{{"arguments", JsonString(piece)}}}};
      if (!delta(json::object{{"tool_calls", json::array{std::move(frag)}}})) return;
    }
    ++index;
  }
  std::string stop = turn->stop_reason.empty()
                         ? (turn->tool_calls.empty() ? "end_turn" : "tool_use")
                         : turn->stop_reason;
  if (!delta(json::object{}, JsonString(OpenAiFinishReason(stop)))) return;
  json::object u{
      {"prompt_tokens", usage.input_tokens + usage.cache_read_tokens},
      {"completion_tokens", usage.output_tokens},
      {"total_tokens", usage.input_tokens + usage.cache_read_tokens + usage.output_tokens},
      {"prompt_tokens_details", json::object{{"cached_tokens", usage.cache_read_tokens}}}};
  if (!chunk(json::array{}, std::move(u))) return;
  if (!FakeServerCore::Write(w, "data: [DONE]\n\n", options_.write_bytes)) return;
  (void)w.EndStream();
}

}  // namespace deepbox::agent::testing
