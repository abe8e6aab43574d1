#include "agent/model/model.h"

#include <algorithm>
#include <utility>

namespace deepbox::agent {

Message Message::User(std::string text) {
  Message m;
  m.role = Role::kUser;
  m.text = std::move(text);
  return m;
}

Message Message::Assistant(std::string text, std::vector<ToolCall> calls) {
  Message m;
  m.role = Role::kAssistant;
  m.text = std::move(text);
  m.tool_calls = std::move(calls);
  return m;
}

Message Message::Tool(std::string tool_call_id, std::string tool_name, std::string text,
                      bool is_error) {
  Message m;
  m.role = Role::kTool;
  m.tool_call_id = std::move(tool_call_id);
  m.tool_name = std::move(tool_name);
  m.text = std::move(text);
  m.is_error = is_error;
  return m;
}

int64_t TokenCountFromJson(const json::value* value, int64_t fallback) {
  if (value == nullptr) return fallback;
  auto n = JsonToInt64(*value);
  if (!n || *n < 0) return fallback;
  return std::min(*n, kMaxTokenCount);
}

namespace {
// Saturates instead of overflowing (a thread file may hold any number of
// usage records).
int64_t AddTokens(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return b > 0 ? INT64_MAX : INT64_MIN;
  return sum;
}
}  // namespace

Usage& Usage::operator+=(const Usage& o) {
  input_tokens = AddTokens(input_tokens, o.input_tokens);
  output_tokens = AddTokens(output_tokens, o.output_tokens);
  cache_read_tokens = AddTokens(cache_read_tokens, o.cache_read_tokens);
  cache_write_tokens = AddTokens(cache_write_tokens, o.cache_write_tokens);
  return *this;
}

double ModelProfile::CostUsd(const Usage& u) const {
  return (static_cast<double>(u.input_tokens) * usd_per_mtok_input +
          static_cast<double>(u.output_tokens) * usd_per_mtok_output +
          static_cast<double>(u.cache_read_tokens) * usd_per_mtok_cache_read +
          static_cast<double>(u.cache_write_tokens) * usd_per_mtok_cache_write) /
         1e6;
}

}  // namespace deepbox::agent
