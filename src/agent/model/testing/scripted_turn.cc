#include "agent/model/testing/scripted_turn.h"

#include "agent/model/replay.h"
#include "common/utf8.h"

namespace deepbox::agent::testing {

ScriptedTurn ScriptedTurn::Text(std::string text) {
  ScriptedTurn t;
  t.text = std::move(text);
  return t;
}

ScriptedTurn ScriptedTurn::ToolCalls(std::vector<ScriptedToolCall> calls, std::string text) {
  ScriptedTurn t;
  t.text = std::move(text);
  t.tool_calls = std::move(calls);
  return t;
}

ScriptedTurn ScriptedTurn::HttpError(int status, std::string type, std::string message) {
  ScriptedTurn t;
  t.kind = Kind::kHttpError;
  t.status = status;
  t.error_type = std::move(type);
  t.error_message = std::move(message);
  return t;
}

ScriptedTurn ScriptedTurn::RateLimited(std::string retry_after_seconds) {
  ScriptedTurn t = HttpError(429, "rate_limit_error",
                             "Number of request tokens has exceeded your per-minute rate limit");
  if (!retry_after_seconds.empty()) t.headers.Add("retry-after", std::move(retry_after_seconds));
  return t;
}

ScriptedTurn ScriptedTurn::Overloaded() { return HttpError(529, "overloaded_error", "Overloaded"); }

ScriptedTurn ScriptedTurn::ServerError() {
  return HttpError(500, "api_error", "Internal server error");
}

ScriptedTurn ScriptedTurn::DropMidStream(std::string text_before) {
  ScriptedTurn t;
  t.kind = Kind::kDropMidStream;
  t.text = std::move(text_before);
  return t;
}

ScriptedTurn ScriptedTurn::StreamError(std::string type, std::string message,
                                       std::string text_before) {
  ScriptedTurn t;
  t.kind = Kind::kStreamError;
  t.error_type = std::move(type);
  t.error_message = std::move(message);
  t.text = std::move(text_before);
  return t;
}

ScriptedTurn ScriptedTurn::Stall(std::string text_before) {
  ScriptedTurn t;
  t.kind = Kind::kStall;
  t.text = std::move(text_before);
  return t;
}

ScriptedTurn ScriptedTurn::SilentStall(std::string text_before) {
  ScriptedTurn t;
  t.kind = Kind::kSilentStall;
  t.text = std::move(text_before);
  return t;
}

ScriptedTurn ScriptedTurn::FromResponse(const ModelResponse& response) {
  ScriptedTurn t;
  t.text = response.message.text;
  for (const auto& call : response.message.tool_calls) {
    t.tool_calls.emplace_back(call.id, call.name, call.input);
  }
  t.stop_reason = response.stop_reason;
  t.usage = response.usage;
  return t;
}

Result<std::vector<ScriptedTurn>> ScriptFromReplayFile(const std::string& path) {
  auto file = ReadReplayFile(path);
  if (!file) return tl::unexpected(file.error());
  std::vector<ScriptedTurn> turns;
  for (const auto& turn : file->turns) turns.push_back(ScriptedTurn::FromResponse(turn.response));
  return turns;
}

std::vector<std::string> SplitUtf8(std::string_view text, size_t max_bytes) {
  std::vector<std::string> out;
  if (max_bytes == 0) max_bytes = 1;
  while (!text.empty()) {
    size_t n = std::min(text.size(), max_bytes);
    size_t cut = Utf8CompletePrefix(text.substr(0, n));
    if (cut == 0) {
      cut = n;
      while (cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) ++cut;
    }
    out.emplace_back(text.substr(0, cut));
    text.remove_prefix(cut);
  }
  return out;
}

}  // namespace deepbox::agent::testing
