// What `deepbox run` shows: a terminal transcript (spinner on stderr while
// the sandbox is claimed, the model thinks or a tool runs; the model's text
// streamed on stdout; one compact line per tool call with its output folded;
// the todo list when it changes; an approval prompt; tokens, cost and wall
// time at the end) or, with --json, one JSON object per line on stdout.
//
// Thread-safe: agent events may come from tool worker threads, the spinner
// redraws from its own thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "agent/deep_agent.h"
#include "agent/state.h"
#include "common/json.h"

namespace deepbox::run {

class LineReader;

// The --json stream's format version (docs/run-json.md), in every event.
inline constexpr int kJsonEventsVersion = 1;

struct UiOptions {
  bool json = false;
  bool color = false;    // SGR colours on stdout (resolve with ColorWanted)
  bool spinner = false;  // a spinner on stderr (stderr is a terminal, not --json)
  int out_fd = 1;
  int err_fd = 2;
  // The model's stream idle timeout (--model-idle-timeout), for the status
  // shown while the model has sent nothing for kModelWaitNotice.
  std::chrono::milliseconds model_idle_timeout{0};
};

// After this long without a token, "Thinking" becomes "Waiting for the model…".
inline constexpr std::chrono::seconds kModelWaitNotice{5};

// Colours when allowed (no NO_COLOR, no --no-color) and `fd` is a terminal.
bool ColorWanted(bool allowed, int fd);

// The end of a `deepbox run` session, for the final line / result event.
struct RunSummary {
  int exit_code = 0;
  std::string stop_reason;  // completed, step_limit, cancelled, interrupted, error, ...
  std::optional<Error> error;
  std::string final_text;
  agent::Usage usage;
  double cost_usd = 0;
  std::chrono::milliseconds wall{0};
  int steps = 0;
  int runs = 0;
  std::string thread_id;
  std::string sandbox_id;
  std::string provider;
  bool sandbox_kept = false;
  std::string model;
};

class RunUi {
 public:
  explicit RunUi(UiOptions options);  // starts no thread (see Start)
  ~RunUi();
  RunUi(const RunUi&) = delete;
  RunUi& operator=(const RunUi&) = delete;

  const UiOptions& options() const { return options_; }
  // Starts the spinner thread (call after SignalWatcher::Start, so that the
  // thread inherits the blocked signal mask).
  void Start();

  // A spinner with elapsed time ("Claiming a local sandbox 1.2s"); no-op
  // without a terminal. StopSpinner clears it.
  void StartSpinner(std::string label);
  void StopSpinner();

  // Informational line: stderr ("deepbox: ...") or a {"type":"notice"} event.
  void Notice(std::string_view text);
  // An error on stderr (both modes; JSON consumers get it in the result).
  void ErrorLine(std::string_view text);

  void SandboxReady(const std::string& id, const std::string& provider,
                    std::chrono::milliseconds claim_time);
  void RunStarted(std::string_view task, const std::string& thread_id, const std::string& model);
  void OnEvent(const agent::AgentEvent& event);
  void RunFinished(const agent::RunResult& result, std::chrono::milliseconds wall);
  void SandboxReleased(const std::string& id, bool kept, const std::string& describe);
  void Result(const RunSummary& summary);

  // The approval prompt for --approve manual: one decision per action
  // request, read from `tty` (prompts written to `tty_fd`). nullopt when
  // interrupted or when the terminal closed.
  std::optional<std::vector<agent::Decision>> Approve(const agent::InterruptRequest& request,
                                                      LineReader& tty, int tty_fd);

  // Writes the interactive prompt ("› ") and returns.
  void Prompt(int fd);

  // Formatting helpers (exposed for tests).
  static std::string FormatDuration(std::chrono::milliseconds d);
  static std::string FormatTokens(int64_t n);  // 12,345
  static std::string FoldOutput(std::string_view preview, size_t max_chars);
  static json::object EventToJson(const agent::AgentEvent& event);
  // One --json line (without the newline): `obj` with "version" after "type"
  // and *_usd numbers as plain decimals (6 places).
  static std::string SerializeEvent(const json::object& obj);
  // What an approval request would change, for the prompt: the command of
  // execute, the content of write_file, a line diff of edit_file's strings,
  // the path of delete, other tools' arguments one per line.
  static std::string DescribeAction(const agent::ActionRequest& action, bool color,
                                    size_t max_lines = 40);
  // " kept", "-removed", "+added" lines turning `before` into `after`.
  static std::vector<std::string> LineDiff(std::string_view before, std::string_view after);

 private:
  struct Running {
    std::string label;
    std::chrono::steady_clock::time_point start;
  };

  void EmitJson(json::object obj);
  void WriteOut(std::string_view text);  // stdout transcript (clears the spinner first)
  void WriteErr(std::string_view text);  // stderr (clears the spinner first)
  void ClearSpinnerLocked();
  void SetSpinnerLocked(std::string label);
  void SpinnerLoop();
  void DrawSpinnerLocked();
  void EndTextLineLocked();
  std::string Sgr(std::string_view code, std::string_view text) const;
  void ToolEndLocked(const agent::AgentEvent& e);
  void TodosLocked(const json::array& todos);

  UiOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread spinner_thread_;
  std::string spinner_label_;  // "" = no spinner
  std::chrono::steady_clock::time_point spinner_start_;
  bool spinner_drawn_ = false;
  bool prompting_ = false;
  size_t frame_ = 0;
  bool at_line_start_ = true;
  bool streamed_text_ = false;              // the main agent streamed text this model turn
  std::map<std::string, Running> running_;  // tool_call_id -> running tool
  std::string last_todos_;
  std::set<std::string> always_approved_;  // tools the user approved for the session
  std::chrono::steady_clock::time_point run_start_;
};

}  // namespace deepbox::run
