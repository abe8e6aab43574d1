// Recorded and scripted model conversations.
//
// RecordingModel wraps any ChatModel and appends every successful call to a
// JSONL file; ReplayModel (`--model replay:FILE`) answers calls with the
// recorded responses, in order, deterministically, simulating streaming. The
// tools still run for real: only the model is replayed.
//
// File format (JSON Lines, UTF-8; see also src/agent/model/README.md):
//
//   line 1, the header:
//     {"deepbox_replay": 1, "description": "...", "scripted": true|false,
//      "model": "anthropic:claude-sonnet-4-6"}
//     "scripted": true marks a hand-written conversation (no model produced
//     it); "model" names the model recorded (or imitated), whose profile
//     (context window, prices) the replay reports. Optional
//     "max_input_tokens" overrides the profile's context window.
//   then one line per model call, in call order:
//     {"request": {"messages": 3,
//                  "tool_results": [{"tool_call_id": "toolu_1", "name": "ls",
//                                    "is_error": false}]},
//      "response": {"text": "...",
//                   "tool_calls": [{"id": "toolu_2", "name": "write_file",
//                                   "input": {"file_path": "/fib.py", ...}}],
//                   "stop_reason": "tool_use",
//                   "usage": {"input_tokens": 10, "output_tokens": 5,
//                             "cache_read_tokens": 0, "cache_write_tokens": 0},
//                   "model": "claude-sonnet-4-6"}}
//     Only "response" is required; "text", "tool_calls", "stop_reason"
//     (default "tool_use" when there are tool calls, else "end_turn"),
//     "usage" and "model" are optional; a tool call's "input" defaults to {}
//     (and its optional "input_error" replays ToolCall::input_error).
//     "request" is what the recorder saw; on replay, request.tool_results
//     (objects as above, or bare id strings) is checked: the request must end
//     with tool results for exactly those ids (any order). request.messages
//     is informational, so is request.task (the user's message, on a call
//     that starts a task: a replay with another task can warn). Blank lines
//     and lines starting with '#' are ignored. Recordings are written mode
//     0600 (they hold the prompts).
//
// Replay checks (errors are INVALID_ARGUMENT, naming the file and the turn):
// the expected tool results are present; each replayed tool call names a tool
// the request offers (when the request offers any). Past the last turn:
// RESOURCE_EXHAUSTED "replay FILE: conversation exhausted after N turns".
// Calls are answered in arrival order, so sub-agents must run sequentially
// for a recording to replay (concurrent calls would race for turns).
#pragma once

#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/model/model.h"
#include "common/error.h"
#include "common/json.h"

namespace deepbox::agent {

inline constexpr int kReplayFormatVersion = 1;

struct ReplayHeader {
  std::string description{};
  bool scripted = false;
  std::string model{};           // "anthropic:claude-sonnet-4-6", "openai:gpt-4o", ...
  int64_t max_input_tokens = 0;  // 0 = the model's profile
};

struct ReplayTurn {
  ModelResponse response{};
  // request.tool_results ids, when the file states them.
  std::optional<std::vector<std::string>> expected_tool_results{};
  // request.task: the user's task when this call started one (informational:
  // older recordings lack it; used for warnings only).
  std::optional<std::string> task{};
};

struct ReplayFile {
  ReplayHeader header{};
  std::vector<ReplayTurn> turns{};
};

// Parses a replay file; errors name the file and line.
Result<ReplayFile> ReadReplayFile(const std::string& path);
Result<ReplayFile> ParseReplay(std::string_view text, std::string_view name);

// The file's JSON forms (used by the recorder and by test fakes).
json::object ReplayHeaderToJson(const ReplayHeader& header);
json::object ResponseToJson(const ModelResponse& response);
Result<ModelResponse> ResponseFromJson(const json::object& obj);
json::object RequestSummary(const ModelRequest& request);

// The profile of a "provider:model" or bare model name (zero prices if unknown).
ModelProfile ProfileForModelName(std::string_view model);

struct ReplayOptions {
  size_t delta_bytes = 8;  // text is streamed in pieces of at most this many bytes
};

class ReplayModel : public ChatModel {
 public:
  // `spec_path` is FILE of replay:FILE.
  static Result<std::unique_ptr<ReplayModel>> Open(const std::string& path,
                                                   ReplayOptions options = {});
  ReplayModel(ReplayFile file, std::string path, ReplayOptions options = {});

  std::string name() const override;  // "replay:FILE"
  ModelProfile profile() const override;
  // A call consumes one turn once validated (a cancelled call consumes it too).
  Result<ModelResponse> Generate(const ModelRequest& request,
                                 const StreamCallbacks& callbacks) override;

  const ReplayHeader& header() const { return file_.header; }
  size_t turns_total() const { return file_.turns.size(); }
  size_t turns_served() const;

 private:
  ReplayFile file_;
  std::string path_;
  ReplayOptions options_;
  mutable std::mutex mu_;
  size_t next_ = 0;
};

class RecordingModel : public ChatModel {
 public:
  // Creates (truncates) `path` and writes the header; description defaults to
  // "Recorded by deepbox from <model>".
  static Result<std::unique_ptr<RecordingModel>> Create(std::unique_ptr<ChatModel> inner,
                                                        const std::string& path,
                                                        std::string description = "");
  ~RecordingModel() override;

  std::string name() const override { return inner_->name(); }
  ModelProfile profile() const override { return inner_->profile(); }
  // Forwards to the inner model; a successful call is appended to the file
  // (failures and cancelled calls are not recorded). A write failure is
  // returned as an error (the response would be lost from the recording).
  Result<ModelResponse> Generate(const ModelRequest& request,
                                 const StreamCallbacks& callbacks) override;

  const std::string& path() const { return path_; }

 private:
  RecordingModel(std::unique_ptr<ChatModel> inner, std::string path, std::FILE* file);
  std::unique_ptr<ChatModel> inner_;
  std::string path_;
  std::mutex mu_;
  std::FILE* file_;
};

}  // namespace deepbox::agent
