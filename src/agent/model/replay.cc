#include "agent/model/replay.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>
#include <utility>

#include "agent/model/profiles.h"
#include "agent/model/retry.h"
#include "common/utf8.h"

namespace deepbox::agent {
namespace {

Result<std::vector<std::string>> ToolResultIds(const json::value& v) {
  if (!v.is_array()) {
    return MakeError(ErrorCode::kInvalidArgument, "request.tool_results must be an array");
  }
  std::vector<std::string> ids;
  for (const auto& item : v.as_array()) {
    if (item.is_string()) {
      ids.emplace_back(item.as_string());
    } else if (item.is_object()) {
      auto id = GetString(item.as_object(), "tool_call_id");
      if (!id) return tl::unexpected(id.error());
      ids.push_back(*id);
    } else {
      return MakeError(ErrorCode::kInvalidArgument,
                       "request.tool_results items must be ids or objects");
    }
  }
  return ids;
}

std::string JoinIds(std::vector<std::string> ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + ids[i];
  return out + "]";
}

// The ids of the tool results the request ends with.
std::vector<std::string> TrailingToolResults(const ModelRequest& request) {
  std::vector<std::string> ids;
  for (auto it = request.messages.rbegin(); it != request.messages.rend(); ++it) {
    if (it->role != Role::kTool) break;
    ids.push_back(it->tool_call_id);
  }
  std::reverse(ids.begin(), ids.end());
  return ids;
}

}  // namespace

// ---------------------------------------------------------------- format

json::object ReplayHeaderToJson(const ReplayHeader& header) {
  json::object h{{"deepbox_replay", kReplayFormatVersion},
                 {"description", JsonString(header.description)},
                 {"scripted", header.scripted},
                 {"model", JsonString(header.model)}};
  if (header.max_input_tokens > 0) h["max_input_tokens"] = header.max_input_tokens;
  return h;
}

json::object ResponseToJson(const ModelResponse& response) {
  json::object r;
  r["text"] = JsonString(response.message.text);
  json::array calls;
  for (const auto& call : response.message.tool_calls) {
    json::object c{
        {"id", JsonString(call.id)}, {"name", JsonString(call.name)}, {"input", call.input}};
    if (!call.input_error.empty()) c["input_error"] = JsonString(call.input_error);
    calls.push_back(std::move(c));
  }
  r["tool_calls"] = std::move(calls);
  r["stop_reason"] = JsonString(response.stop_reason);
  r["usage"] = json::object{{"input_tokens", response.usage.input_tokens},
                            {"output_tokens", response.usage.output_tokens},
                            {"cache_read_tokens", response.usage.cache_read_tokens},
                            {"cache_write_tokens", response.usage.cache_write_tokens}};
  if (!response.model.empty()) r["model"] = JsonString(response.model);
  return r;
}

Result<ModelResponse> ResponseFromJson(const json::object& obj) {
  ModelResponse r;
  r.message.role = Role::kAssistant;
  auto text = GetOptStringChecked(obj, "text");
  if (!text) return tl::unexpected(text.error());
  r.message.text = text->value_or("");
  if (const auto* calls = obj.if_contains("tool_calls"); calls && !calls->is_null()) {
    if (!calls->is_array()) {
      return MakeError(ErrorCode::kInvalidArgument, "field 'tool_calls' must be an array");
    }
    for (const auto& c : calls->as_array()) {
      if (!c.is_object()) {
        return MakeError(ErrorCode::kInvalidArgument, "each tool call must be an object");
      }
      ToolCall call;
      auto id = GetString(c.as_object(), "id");
      if (!id) return tl::unexpected(id.error());
      auto name = GetString(c.as_object(), "name");
      if (!name) return tl::unexpected(name.error());
      call.id = *id;
      call.name = *name;
      call.input_error = GetOptString(c.as_object(), "input_error").value_or("");
      if (const auto* input = c.as_object().if_contains("input"); input && !input->is_null()) {
        if (!input->is_object()) {
          return MakeError(ErrorCode::kInvalidArgument,
                           fmt::format("tool call '{}': field 'input' must be an object", *id));
        }
        call.input = input->as_object();
      }
      r.message.tool_calls.push_back(std::move(call));
    }
  }
  auto stop = GetOptStringChecked(obj, "stop_reason");
  if (!stop) return tl::unexpected(stop.error());
  r.stop_reason = stop->value_or("");
  if (r.stop_reason.empty()) r.stop_reason = r.message.tool_calls.empty() ? "end_turn" : "tool_use";
  if (const auto* u = obj.if_contains("usage"); u && u->is_object()) {
    const json::object& usage = u->as_object();
    r.usage.input_tokens = TokenCountFromJson(usage.if_contains("input_tokens"));
    r.usage.output_tokens = TokenCountFromJson(usage.if_contains("output_tokens"));
    r.usage.cache_read_tokens = TokenCountFromJson(usage.if_contains("cache_read_tokens"));
    r.usage.cache_write_tokens = TokenCountFromJson(usage.if_contains("cache_write_tokens"));
  }
  r.model = GetOptString(obj, "model").value_or("");
  return r;
}

json::object RequestSummary(const ModelRequest& request) {
  json::array results;
  size_t first = request.messages.size();
  while (first > 0 && request.messages[first - 1].role == Role::kTool) --first;
  for (size_t i = first; i < request.messages.size(); ++i) {
    const Message& m = request.messages[i];
    results.push_back(json::object{{"tool_call_id", JsonString(m.tool_call_id)},
                                   {"name", JsonString(m.tool_name)},
                                   {"is_error", m.is_error}});
  }
  json::object summary{{"messages", request.messages.size()}, {"tool_results", std::move(results)}};
  // A call that starts a task (the last message is the user's): the task, so
  // a replay can tell when it is given another one.
  if (!request.messages.empty() && request.messages.back().role == Role::kUser) {
    summary["task"] = JsonString(request.messages.back().text);
  }
  return summary;
}

Result<ReplayFile> ParseReplay(std::string_view text, std::string_view name) {
  ReplayFile file;
  bool have_header = false;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    auto fail = [&](const std::string& why) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("replay {}: line {}: {}", name, line_no, why));
    };
    auto obj = ParseJsonObject(line);
    if (!obj) return fail(obj.error().message);
    if (!have_header) {
      auto version = GetOptInt(*obj, "deepbox_replay");
      if (!version || !version->has_value()) {
        return fail(
            "not a deepbox replay file (the first line must be a header like "
            "{\"deepbox_replay\": 1, ...})");
      }
      if (**version != kReplayFormatVersion) {
        return fail(fmt::format("unsupported replay format version {} (this deepbox reads {})",
                                **version, kReplayFormatVersion));
      }
      file.header.description = GetOptString(*obj, "description").value_or("");
      file.header.model = GetOptString(*obj, "model").value_or("");
      auto scripted = GetOptBool(*obj, "scripted");
      if (!scripted) return fail(scripted.error().message);
      file.header.scripted = scripted->value_or(false);
      auto max_in = GetOptInt(*obj, "max_input_tokens");
      if (!max_in) return fail(max_in.error().message);
      file.header.max_input_tokens = max_in->value_or(0);
      have_header = true;
      continue;
    }
    const auto* resp = obj->if_contains("response");
    if (resp == nullptr || !resp->is_object()) return fail("a turn needs a \"response\" object");
    auto response = ResponseFromJson(resp->as_object());
    if (!response) return fail(response.error().message);
    ReplayTurn turn;
    turn.response = std::move(*response);
    if (const auto* req = obj->if_contains("request"); req && req->is_object()) {
      if (const auto* tr = req->as_object().if_contains("tool_results"); tr && !tr->is_null()) {
        auto ids = ToolResultIds(*tr);
        if (!ids) return fail(ids.error().message);
        turn.expected_tool_results = std::move(*ids);
      }
      if (auto task = GetOptString(req->as_object(), "task")) turn.task = std::move(*task);
    }
    file.turns.push_back(std::move(turn));
  }
  if (!have_header) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("replay {}: empty file (expected a header line)", name));
  }
  return file;
}

Result<ReplayFile> ReadReplayFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    Error e = SyscallError("open", err, path);
    e.message = fmt::format("replay {}: cannot read the file: {}", path, e.message);
    return tl::unexpected(e);
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseReplay(ss.str(), path);
}

ModelProfile ProfileForModelName(std::string_view model) {
  if (model.starts_with("anthropic:")) return AnthropicProfile(model.substr(10));
  if (model.starts_with("openai:")) return OpenAiProfile(model.substr(7));
  if (model.starts_with("claude")) return AnthropicProfile(model);
  return OpenAiProfile(model);
}

// ---------------------------------------------------------------- ReplayModel

ReplayModel::ReplayModel(ReplayFile file, std::string path, ReplayOptions options)
    : file_(std::move(file)), path_(std::move(path)), options_(options) {
  if (options_.delta_bytes == 0) options_.delta_bytes = 1;
}

Result<std::unique_ptr<ReplayModel>> ReplayModel::Open(const std::string& path,
                                                       ReplayOptions options) {
  auto file = ReadReplayFile(path);
  if (!file) return tl::unexpected(file.error());
  return std::make_unique<ReplayModel>(std::move(*file), path, options);
}

std::string ReplayModel::name() const { return "replay:" + path_; }

ModelProfile ReplayModel::profile() const {
  ModelProfile p = ProfileForModelName(file_.header.model);
  if (file_.header.max_input_tokens > 0) p.max_input_tokens = file_.header.max_input_tokens;
  return p;
}

size_t ReplayModel::turns_served() const {
  std::lock_guard lock(mu_);
  return next_;
}

Result<ModelResponse> ReplayModel::Generate(const ModelRequest& request,
                                            const StreamCallbacks& callbacks) {
  if (IsCancelled(request.cancel)) return tl::unexpected(CancelledError());
  const ReplayTurn* turn = nullptr;
  size_t number = 0;  // 1-based
  {
    std::lock_guard lock(mu_);
    if (next_ >= file_.turns.size()) {
      return MakeError(ErrorCode::kResourceExhausted,
                       fmt::format("replay {}: conversation exhausted after {} turns", path_,
                                   file_.turns.size()));
    }
    turn = &file_.turns[next_];
    number = next_ + 1;
    if (turn->expected_tool_results) {
      std::vector<std::string> want = *turn->expected_tool_results;
      std::vector<std::string> got = TrailingToolResults(request);
      std::vector<std::string> want_sorted = want, got_sorted = got;
      std::sort(want_sorted.begin(), want_sorted.end());
      std::sort(got_sorted.begin(), got_sorted.end());
      if (want_sorted != got_sorted) {
        return MakeError(
            ErrorCode::kInvalidArgument,
            fmt::format("replay {}: turn {} expects tool results for {} but the request ends "
                        "with tool results for {}; the conversation has diverged from the "
                        "recording",
                        path_, number, JoinIds(want), JoinIds(got)));
      }
    }
    if (!request.tools.empty()) {
      for (const auto& call : turn->response.message.tool_calls) {
        bool offered = std::any_of(request.tools.begin(), request.tools.end(),
                                   [&](const ToolSpec& t) { return t.name == call.name; });
        if (!offered) {
          std::vector<std::string> names;
          for (const auto& t : request.tools) names.push_back(t.name);
          return MakeError(ErrorCode::kInvalidArgument,
                           fmt::format("replay {}: turn {} calls tool '{}', which the agent "
                                       "does not offer (offered: {})",
                                       path_, number, call.name, JoinIds(names)));
        }
      }
    }
    ++next_;
  }
  // Simulated streaming: the text in small pieces, then the tool calls.
  ModelResponse response = turn->response;
  std::string_view text = response.message.text;
  while (!text.empty()) {
    if (IsCancelled(request.cancel)) return tl::unexpected(CancelledError());
    size_t n = std::min(text.size(), options_.delta_bytes);
    size_t cut = Utf8CompletePrefix(text.substr(0, n));
    if (cut == 0) {  // a multi-byte character longer than delta_bytes: send it whole
      cut = n;
      while (cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) ++cut;
    }
    if (callbacks.on_text_delta) callbacks.on_text_delta(text.substr(0, cut));
    text.remove_prefix(cut);
  }
  for (const auto& call : response.message.tool_calls) {
    if (IsCancelled(request.cancel)) return tl::unexpected(CancelledError());
    if (callbacks.on_tool_call_start) callbacks.on_tool_call_start(call.id, call.name);
  }
  if (response.model.empty()) {
    std::string_view m = file_.header.model;
    if (auto colon = m.find(':'); colon != std::string_view::npos) m.remove_prefix(colon + 1);
    response.model = std::string(m);
  }
  return response;
}

// ---------------------------------------------------------------- RecordingModel

RecordingModel::RecordingModel(std::unique_ptr<ChatModel> inner, std::string path, std::FILE* file)
    : inner_(std::move(inner)), path_(std::move(path)), file_(file) {}

RecordingModel::~RecordingModel() {
  if (file_ != nullptr) std::fclose(file_);
}

Result<std::unique_ptr<RecordingModel>> RecordingModel::Create(std::unique_ptr<ChatModel> inner,
                                                               const std::string& path,
                                                               std::string description) {
  // Owner-only: a recording holds the prompts, the files the model read and
  // its answers.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || ::fchmod(fd, 0600) != 0) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    Error e = SyscallError("open", err, path);
    e.message = fmt::format("recording to {}: {}", path, e.message);
    return tl::unexpected(e);
  }
  std::FILE* f = ::fdopen(fd, "w");
  if (f == nullptr) {
    int err = errno;
    ::close(fd);
    return tl::unexpected(SyscallError("fdopen", err, path));
  }
  ReplayHeader header;
  header.model = inner->name();
  header.description =
      description.empty() ? "Recorded by deepbox from " + header.model : std::move(description);
  header.scripted = false;
  std::string line = ToJson(ReplayHeaderToJson(header)) + "\n";
  if (std::fputs(line.c_str(), f) < 0 || std::fflush(f) != 0) {
    int err = errno;
    std::fclose(f);
    return tl::unexpected(SyscallError("write", err, path));
  }
  return std::unique_ptr<RecordingModel>(new RecordingModel(std::move(inner), path, f));
}

Result<ModelResponse> RecordingModel::Generate(const ModelRequest& request,
                                               const StreamCallbacks& callbacks) {
  auto r = inner_->Generate(request, callbacks);
  if (!r) return r;
  json::object turn{{"request", RequestSummary(request)}, {"response", ResponseToJson(*r)}};
  std::string line = ToJson(turn) + "\n";
  std::lock_guard lock(mu_);
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    int err = errno;
    Error e = SyscallError("write", err, path_);
    e.message = fmt::format("recording to {}: {}", path_, e.message);
    return tl::unexpected(e);
  }
  return r;
}

}  // namespace deepbox::agent
