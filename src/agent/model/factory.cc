#include "agent/model/factory.h"

#include <fmt/format.h>

#include <cstdlib>
#include <utility>

#include "agent/model/anthropic.h"
#include "agent/model/openai.h"

namespace deepbox::agent {
namespace {

std::string Resolve(const std::optional<std::string>& value, const char* env,
                    std::string fallback = "") {
  if (value) return *value;
  const char* v = std::getenv(env);
  if (v != nullptr && *v != '\0') return v;
  return fallback;
}

HttpOptions MakeHttpOptions(const ModelConfig& config) {
  HttpOptions http;
  http.ca_pem = config.ca_pem;
  if (http.ca_pem.empty()) http.ca_file = Resolve(config.ca_file, "SSL_CERT_FILE");
  http.connect_timeout = config.connect_timeout;
  http.request_timeout = config.request_timeout;
  http.read_idle_timeout = config.read_idle_timeout;
  http.retry = config.retry;
  return http;
}

}  // namespace

Result<ModelSpec> ParseModelSpec(std::string_view spec) {
  ModelSpec out;
  auto colon = spec.find(':');
  if (colon == std::string_view::npos) {
    if (spec.empty() || spec.starts_with("claude")) {
      out.provider = ModelProvider::kAnthropic;
      out.model = spec.empty() ? kDefaultAnthropicModel : std::string(spec);
      return out;
    }
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("unknown model '{}': use anthropic:MODEL, openai:MODEL (e.g. "
                                 "openai:{}) or replay:FILE",
                                 spec, spec));
  }
  std::string_view provider = spec.substr(0, colon);
  std::string_view rest = spec.substr(colon + 1);
  if (provider == "anthropic") {
    out.provider = ModelProvider::kAnthropic;
    out.model = rest.empty() ? kDefaultAnthropicModel : std::string(rest);
  } else if (provider == "openai") {
    if (rest.empty()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "model 'openai:' names no model: use openai:MODEL (e.g. openai:gpt-4o)");
    }
    out.provider = ModelProvider::kOpenAi;
    out.model = std::string(rest);
  } else if (provider == "replay") {
    if (rest.empty()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "model 'replay:' names no file: use replay:FILE (a .jsonl recording)");
    }
    out.provider = ModelProvider::kReplay;
    out.model = std::string(rest);
  } else {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("unknown model provider '{}' in '{}': use anthropic:MODEL, "
                                 "openai:MODEL or replay:FILE",
                                 provider, spec));
  }
  return out;
}

Result<std::unique_ptr<ChatModel>> CreateChatModel(std::string_view spec,
                                                   const ModelConfig& config) {
  auto parsed = ParseModelSpec(spec);
  if (!parsed) return tl::unexpected(parsed.error());
  std::unique_ptr<ChatModel> model;
  switch (parsed->provider) {
    case ModelProvider::kAnthropic: {
      AnthropicOptions o;
      o.model = parsed->model;
      o.api_key = Resolve(config.anthropic_api_key, "ANTHROPIC_API_KEY");
      o.base_url =
          Resolve(config.anthropic_base_url, "ANTHROPIC_BASE_URL", kDefaultAnthropicBaseUrl);
      o.max_tokens = config.max_tokens;
      o.max_input_tokens = config.max_input_tokens;
      o.http = MakeHttpOptions(config);
      auto m = AnthropicModel::Create(std::move(o));
      if (!m) return tl::unexpected(m.error());
      model = std::move(*m);
      break;
    }
    case ModelProvider::kOpenAi: {
      OpenAiOptions o;
      o.model = parsed->model;
      o.api_key = Resolve(config.openai_api_key, "OPENAI_API_KEY");
      o.base_url = Resolve(config.openai_base_url, "OPENAI_BASE_URL", kDefaultOpenAiBaseUrl);
      o.max_tokens = config.max_tokens;
      o.max_input_tokens = config.max_input_tokens;
      o.http = MakeHttpOptions(config);
      auto m = OpenAiModel::Create(std::move(o));
      if (!m) return tl::unexpected(m.error());
      model = std::move(*m);
      break;
    }
    case ModelProvider::kReplay: {
      auto m = ReplayModel::Open(parsed->model, config.replay);
      if (!m) return tl::unexpected(m.error());
      model = std::move(*m);
      break;
    }
  }
  if (!config.record_path.empty()) {
    auto rec =
        RecordingModel::Create(std::move(model), config.record_path, config.record_description);
    if (!rec) return tl::unexpected(rec.error());
    model = std::move(*rec);
  }
  return model;
}

}  // namespace deepbox::agent
