// What `deepbox run` shows, behind one event sink (RunUi): a terminal
// transcript (run_terminal_ui.h) or, with --json, one JSON object per line
// on stdout (run_json_ui.h); the approval prompt (run_approval.h) is shared.
//
// Thread-safe: agent events may come from tool worker threads, the spinner
// redraws from its own thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/deep_agent.h"
#include "agent/state.h"
#include "cli/run_approval.h"
#include "common/json.h"

namespace deepbox::run {

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

// The sink of everything a run shows, in one of two forms (MakeRunUi): a
// terminal transcript (run_terminal_ui.h) or --json events
// (run_json_ui.h). The approval prompt (run_approval.h) is shared: it always
// asks on the terminal.
class RunUi {
 public:
  virtual ~RunUi() = default;
  RunUi(const RunUi&) = delete;
  RunUi& operator=(const RunUi&) = delete;

  const UiOptions& options() const { return options_; }
  // Starts the spinner thread, if any (call after SignalWatcher::Start, so
  // that the thread inherits the blocked signal mask).
  virtual void Start() {}

  // A spinner with elapsed time ("Claiming a local sandbox 1.2s"); no-op
  // without a terminal. StopSpinner clears it.
  virtual void StartSpinner(std::string /*label*/) {}
  virtual void StopSpinner() {}

  // Informational line: stderr ("deepbox: ...") or a {"type":"notice"} event.
  virtual void Notice(std::string_view text) = 0;
  // An error on stderr (both forms; JSON consumers get it in the result).
  virtual void ErrorLine(std::string_view text) = 0;

  virtual void SandboxReady(const std::string& id, const std::string& provider,
                            std::chrono::milliseconds claim_time) = 0;
  virtual void RunStarted(std::string_view task, const std::string& thread_id,
                          const std::string& model) = 0;
  virtual void OnEvent(const agent::AgentEvent& event) = 0;
  virtual void RunFinished(const agent::RunResult& result, std::chrono::milliseconds wall) = 0;
  virtual void SandboxReleased(const std::string& id, bool kept, const std::string& describe) = 0;
  // An entry of the sandbox's egress log (run_egress.h), with "type": "egress".
  virtual void Egress(const json::object& /*event*/) {}
  virtual void Result(const RunSummary& summary) = 0;

  // The approval prompt for --approve manual (run_approval.h), asked on `tty`
  // (written to `tty_fd`). nullopt when interrupted or when the terminal
  // closed.
  std::optional<std::vector<agent::Decision>> Approve(const agent::InterruptRequest& request,
                                                      LineReader& tty, int tty_fd);

  // Writes the interactive prompt ("› ") and returns.
  virtual void Prompt(int fd) = 0;

 protected:
  explicit RunUi(UiOptions options) : options_(options) {}
  // Around the approval prompt: the terminal UI stops drawing its spinner.
  virtual void BeginApproval() {}
  virtual void EndApproval() {}
  // A decision taken (the JSON UI emits a "decision" event).
  virtual void RecordDecision(const agent::ActionRequest& /*action*/,
                              const agent::Decision& /*decision*/) {}

  const UiOptions options_;

 private:
  ApprovalPrompt approval_;
};

// The terminal transcript, or with options.json the JSON events.
std::unique_ptr<RunUi> MakeRunUi(UiOptions options);

}  // namespace deepbox::run
