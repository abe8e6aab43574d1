// Per-model facts: context window, prices (USD per million tokens) and the
// default max_tokens Anthropic requires. A small table matched by model-id
// prefix (longest wins), so dated ids ("claude-sonnet-4-5-20250929") match
// too. Unknown models get zero prices.
#pragma once

#include <string_view>

#include "agent/model/model.h"

namespace deepbox::agent {

// Claude models: max_input_tokens 200000 (the 1M-token beta is not assumed).
ModelProfile AnthropicProfile(std::string_view model);
// max_tokens sent when neither the request nor the config sets one.
int AnthropicDefaultMaxTokens(std::string_view model);

// OpenAI models; unknown ids (local servers) get max_input_tokens 0 = unknown.
ModelProfile OpenAiProfile(std::string_view model);

}  // namespace deepbox::agent
