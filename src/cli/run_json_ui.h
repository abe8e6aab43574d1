// `deepbox run --json`: one JSON object per line on stdout for every event
// (docs/run-json.md), each with the format's version.
#pragma once

#include <mutex>
#include <string>

#include "cli/run_ui.h"
#include "common/json.h"

namespace deepbox::run {

// An agent event as its --json object.
json::object EventToJson(const agent::AgentEvent& event);
// One --json line (without the newline): `obj` with "version" after "type"
// and *_usd numbers as plain decimals (6 places).
std::string SerializeEvent(const json::object& obj);

class JsonUi : public RunUi {
 public:
  explicit JsonUi(UiOptions options) : RunUi(options) {}

  void Notice(std::string_view text) override;
  void ErrorLine(std::string_view text) override;
  void SandboxReady(const std::string& id, const std::string& provider,
                    std::chrono::milliseconds claim_time) override;
  void RunStarted(std::string_view task, const std::string& thread_id,
                  const std::string& model) override;
  void OnEvent(const agent::AgentEvent& event) override;
  void RunFinished(const agent::RunResult& result, std::chrono::milliseconds wall) override;
  void SandboxReleased(const std::string& id, bool kept, const std::string& describe) override;
  void Egress(const json::object& event) override { Emit(event); }
  void Result(const RunSummary& summary) override;
  void Prompt(int fd) override;

 protected:
  void RecordDecision(const agent::ActionRequest& action, const agent::Decision& decision) override;

 private:
  void Emit(const json::object& obj);

  std::mutex mu_;  // one line at a time
};

}  // namespace deepbox::run
