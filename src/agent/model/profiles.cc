#include "agent/model/profiles.h"

#include <span>

namespace deepbox::agent {
namespace {

struct Entry {
  std::string_view prefix;
  int64_t max_input_tokens;
  double input, output, cache_read, cache_write;
  int max_tokens;
};

// Anthropic list prices, USD per million tokens (cache write = 5-minute TTL).
constexpr Entry kAnthropic[] = {
    {"claude-opus-4-0", 200000, 15, 75, 1.50, 18.75, 16000},
    {"claude-opus-4-1", 200000, 15, 75, 1.50, 18.75, 16000},
    {"claude-opus-4-2025", 200000, 15, 75, 1.50, 18.75, 16000},  // claude-opus-4-20250514
    {"claude-opus-4", 200000, 5, 25, 0.50, 6.25, 16000},         // 4.5 and later
    {"claude-sonnet-4", 200000, 3, 15, 0.30, 3.75, 16000},
    {"claude-haiku-4", 200000, 1, 5, 0.10, 1.25, 16000},
    {"claude-3-7-sonnet", 200000, 3, 15, 0.30, 3.75, 16000},
    {"claude-3-5-sonnet", 200000, 3, 15, 0.30, 3.75, 8192},
    {"claude-3-5-haiku", 200000, 0.80, 4, 0.08, 1.00, 8192},
    {"claude-3-opus", 200000, 15, 75, 1.50, 18.75, 4096},
    {"claude-3-haiku", 200000, 0.25, 1.25, 0.03, 0.30, 4096},
};

// OpenAI list prices; cached input is the cache-read price, writes are free.
constexpr Entry kOpenAi[] = {
    {"gpt-4o-mini", 128000, 0.15, 0.60, 0.075, 0, 0},
    {"gpt-4o", 128000, 2.50, 10, 1.25, 0, 0},
    {"gpt-4.1-nano", 1047576, 0.10, 0.40, 0.025, 0, 0},
    {"gpt-4.1-mini", 1047576, 0.40, 1.60, 0.10, 0, 0},
    {"gpt-4.1", 1047576, 2, 8, 0.50, 0, 0},
    {"gpt-5-nano", 272000, 0.05, 0.40, 0.005, 0, 0},
    {"gpt-5-mini", 272000, 0.25, 2, 0.025, 0, 0},
    {"gpt-5", 272000, 1.25, 10, 0.125, 0, 0},
    {"o4-mini", 200000, 1.10, 4.40, 0.275, 0, 0},
    {"o3", 200000, 2, 8, 0.50, 0, 0},
};

const Entry* Find(std::span<const Entry> table, std::string_view model) {
  const Entry* best = nullptr;
  for (const Entry& e : table) {
    if (model.starts_with(e.prefix) && (best == nullptr || e.prefix.size() > best->prefix.size())) {
      best = &e;
    }
  }
  return best;
}

ModelProfile ToProfile(const Entry& e) {
  ModelProfile p;
  p.max_input_tokens = e.max_input_tokens;
  p.usd_per_mtok_input = e.input;
  p.usd_per_mtok_output = e.output;
  p.usd_per_mtok_cache_read = e.cache_read;
  p.usd_per_mtok_cache_write = e.cache_write;
  return p;
}

}  // namespace

ModelProfile AnthropicProfile(std::string_view model) {
  if (const Entry* e = Find(kAnthropic, model)) return ToProfile(*e);
  ModelProfile p;
  if (model.starts_with("claude")) p.max_input_tokens = 200000;
  return p;
}

int AnthropicDefaultMaxTokens(std::string_view model) {
  if (const Entry* e = Find(kAnthropic, model)) return e->max_tokens;
  return 8192;
}

ModelProfile OpenAiProfile(std::string_view model) {
  if (const Entry* e = Find(kOpenAi, model)) return ToProfile(*e);
  return {};
}

}  // namespace deepbox::agent
