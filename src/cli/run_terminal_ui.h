// `deepbox run`'s terminal transcript: a spinner on stderr while the sandbox
// is claimed, the model thinks or a tool runs; the model's text streamed on
// stdout; one compact line per tool call with its output folded; the todo
// list when it changes; tokens, cost and wall time at the end.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "cli/run_ui.h"
#include "common/json.h"

namespace deepbox::run {

class TerminalUi : public RunUi {
 public:
  explicit TerminalUi(UiOptions options);  // starts no thread (see Start)
  ~TerminalUi() override;

  void Start() override;
  void StartSpinner(std::string label) override;
  void StopSpinner() override;
  void Notice(std::string_view text) override;
  void ErrorLine(std::string_view text) override;
  void SandboxReady(const std::string& id, const std::string& provider,
                    std::chrono::milliseconds claim_time) override;
  void RunStarted(std::string_view task, const std::string& thread_id,
                  const std::string& model) override;
  void OnEvent(const agent::AgentEvent& event) override;
  void RunFinished(const agent::RunResult& result, std::chrono::milliseconds wall) override;
  void SandboxReleased(const std::string& id, bool kept, const std::string& describe) override;
  void Result(const RunSummary& /*summary*/) override {}  // the last line says it already
  void Prompt(int fd) override;

 protected:
  void BeginApproval() override;
  void EndApproval() override;

 private:
  struct Running {
    std::string label;
    std::chrono::steady_clock::time_point start;
  };

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
};

}  // namespace deepbox::run
