// Builds a ChatModel from a --model spec:
//   ""  or  "claude-sonnet-4-6"  (a bare "claude-..." id)  -> Anthropic
//   "anthropic:MODEL"                                        -> Anthropic
//   "openai:MODEL"                                           -> OpenAI-compatible
//   "replay:FILE"                                            -> ReplayModel
// with ModelConfig::record_path set, the model is wrapped in a RecordingModel.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "agent/model/http_options.h"
#include "agent/model/model.h"
#include "agent/model/replay.h"
#include "agent/model/retry.h"
#include "common/error.h"

namespace deepbox::agent {

struct ModelConfig {
  // nullopt = read the environment variable named in the comment at call
  // time; a value (even "") overrides it.
  std::optional<std::string> anthropic_api_key{};   // ANTHROPIC_API_KEY
  std::optional<std::string> anthropic_base_url{};  // ANTHROPIC_BASE_URL, default api.anthropic.com
  std::optional<std::string> openai_api_key{};      // OPENAI_API_KEY
  std::optional<std::string> openai_base_url{};     // OPENAI_BASE_URL, default api.openai.com/v1
  // CA bundle (PEM file) trusted for HTTPS instead of the system CAs.
  std::optional<std::string> ca_file{};  // SSL_CERT_FILE; unset = system CAs
  std::string ca_pem;                    // PEM text alternative (wins over ca_file)

  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds request_timeout{600000};  // one attempt, streaming included
  // Longest silence on a stream before the attempt is given up (HttpOptions).
  std::chrono::milliseconds read_idle_timeout{HttpOptions{}.read_idle_timeout};
  RetryPolicy retry{};
  int max_tokens = 0;            // 0 = per-model default (Anthropic requires one)
  int64_t max_input_tokens = 0;  // 0 = the model's profile (set it for local servers)

  std::string record_path{};  // non-empty: record every call to this JSONL file
  std::string record_description{};
  ReplayOptions replay{};
};

enum class ModelProvider { kAnthropic, kOpenAi, kReplay };

struct ModelSpec {
  ModelProvider provider = ModelProvider::kAnthropic;
  std::string model{};  // model id, or the file for kReplay
};

// INVALID_ARGUMENT for an unknown form, naming the accepted ones.
Result<ModelSpec> ParseModelSpec(std::string_view spec);

// Errors: the client's (e.g. UNAUTHENTICATED with "ANTHROPIC_API_KEY is not
// set. Export it ..." when no key is configured), a replay file that cannot
// be read or parsed, a record file that cannot be created.
Result<std::unique_ptr<ChatModel>> CreateChatModel(std::string_view spec,
                                                   const ModelConfig& config = {});

}  // namespace deepbox::agent
