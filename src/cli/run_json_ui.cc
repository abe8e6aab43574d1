#include "cli/run_json_ui.h"

#include <fmt/format.h>
#include <unistd.h>

#include "agent/codec.h"
#include "cli/run_format.h"
#include "common/io.h"
#include "common/terminal_text.h"

namespace deepbox::run {

using agent::AgentEvent;
using agent::EventType;

json::object EventToJson(const AgentEvent& e) {
  json::object o;
  o["type"] = agent::EventTypeName(e.type);
  if (!e.agent.empty()) o["agent"] = e.agent;
  if (e.depth > 0) o["depth"] = e.depth;
  switch (e.type) {
    case EventType::kTextDelta:
    case EventType::kSummarized:
    case EventType::kFinalMessage:
    case EventType::kError:
      o["text"] = JsonString(e.text);
      break;
    case EventType::kToolCallStart:
      o["tool_call_id"] = e.tool_call_id;
      o["tool"] = e.tool_name;
      o["main_argument"] = JsonString(e.main_argument);
      o["args"] = e.tool_args;
      break;
    case EventType::kToolCallEnd:
      o["tool_call_id"] = e.tool_call_id;
      o["tool"] = e.tool_name;
      o["main_argument"] = JsonString(e.main_argument);
      o["ok"] = e.ok;
      o["duration_ms"] = e.duration.count();
      o["output_preview"] = JsonString(e.output_preview);
      break;
    case EventType::kToolOutput:
      o["tool_call_id"] = e.tool_call_id;
      o["tool"] = e.tool_name;
      o["text"] = JsonString(e.text);
      break;
    case EventType::kTodoUpdate:
      o["todos"] = e.todos;
      break;
    case EventType::kInterrupt:
      if (e.interrupt != nullptr) o["interrupt"] = agent::InterruptToJson(*e.interrupt);
      break;
    case EventType::kUsage:
      o["usage"] = agent::UsageToJson(e.usage);
      o["total_usage"] = agent::UsageToJson(e.total_usage);
      break;
    case EventType::kRetry:
      o["error"] = JsonString(e.text);
      o["attempt"] = e.attempt;
      o["max_attempts"] = e.max_attempts;
      o["delay_ms"] = e.duration.count();
      break;
    case EventType::kToolCallRejected:
      o["tool_call_id"] = JsonString(e.tool_call_id);
      o["tool"] = JsonString(e.tool_name);
      o["main_argument"] = JsonString(e.main_argument);
      o["args"] = e.tool_args;
      o["reason"] = JsonString(e.text);
      break;
  }
  return o;
}

std::string SerializeEvent(const json::object& obj) {
  // By hand at the top level: "version" goes right after "type", and money is
  // a plain decimal (boost::json writes 0.0123 as 1.23E-2).
  std::string line = "{";
  auto key = [&](std::string_view k) {
    if (line.size() > 1) line += ',';
    line += json::serialize(json::string(k));
    line += ':';
  };
  if (const auto* type = obj.if_contains("type")) {
    key("type");
    line += json::serialize(*type);
  }
  key("version");
  line += std::to_string(kJsonEventsVersion);
  for (const auto& [k, v] : obj) {
    if (k == "type" || k == "version") continue;
    key(k);
    if (k.ends_with("_usd") && v.is_number()) {
      line += fmt::format("{:.6f}", v.to_number<double>());
    } else {
      line += json::serialize(v);
    }
  }
  line += '}';
  return line;
}

void JsonUi::Emit(const json::object& obj) {
  std::string line = SerializeEvent(obj) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  (void)WriteAll(options_.out_fd, line, "stdout");  // a closed pipe: nothing more to do
}

void JsonUi::Notice(std::string_view text) {
  json::object o;
  o["type"] = "notice";
  o["text"] = JsonString(text);
  Emit(o);
}

void JsonUi::ErrorLine(std::string_view text) {
  // On stderr, as on a terminal: the result event carries the error too.
  const bool color = options_.color && isatty(options_.err_fd) == 1;
  std::string msg = fmt::format("deepbox: {}", SanitizeForTerminal(text));
  std::lock_guard<std::mutex> lock(mu_);
  (void)WriteAll(options_.err_fd, Sgr(color, kSgrRed, msg) + "\n", "stderr");
}

void JsonUi::SandboxReady(const std::string& id, const std::string& provider,
                          std::chrono::milliseconds claim_time) {
  json::object o;
  o["type"] = "sandbox";
  o["id"] = id;
  o["provider"] = provider;
  o["claim_ms"] = claim_time.count();
  Emit(o);
}

void JsonUi::RunStarted(std::string_view task, const std::string& thread_id,
                        const std::string& model) {
  json::object o;
  o["type"] = "run_start";
  o["task"] = JsonString(task);
  o["thread_id"] = thread_id;
  o["model"] = model;
  Emit(o);
}

void JsonUi::OnEvent(const AgentEvent& e) { Emit(EventToJson(e)); }

void JsonUi::RunFinished(const agent::RunResult& r, std::chrono::milliseconds wall) {
  json::object o;
  o["type"] = "run_end";
  o["stop_reason"] = agent::StopReasonName(r.stop_reason);
  o["thread_id"] = r.thread_id;
  o["steps"] = r.steps;
  o["usage"] = agent::UsageToJson(r.usage);
  o["cost_usd"] = r.cost_usd;
  o["wall_ms"] = wall.count();
  o["final_text"] = JsonString(r.final_text);
  if (r.error) o["error"] = ErrorToJson(*r.error).at("error");
  Emit(o);
}

void JsonUi::SandboxReleased(const std::string& id, bool kept, const std::string& describe) {
  json::object o;
  o["type"] = kept ? "sandbox_kept" : "sandbox_released";
  o["id"] = id;
  if (kept) o["describe"] = JsonString(describe);
  Emit(o);
}

void JsonUi::Result(const RunSummary& s) {
  json::object o;
  o["type"] = "result";
  o["exit_code"] = s.exit_code;
  o["stop_reason"] = s.stop_reason;
  if (s.error) o["error"] = ErrorToJson(*s.error).at("error");
  o["final_text"] = JsonString(s.final_text);
  o["usage"] = agent::UsageToJson(s.usage);
  o["cost_usd"] = s.cost_usd;
  o["wall_ms"] = s.wall.count();
  o["steps"] = s.steps;
  o["runs"] = s.runs;
  o["thread_id"] = s.thread_id;
  o["model"] = s.model;
  o["provider"] = s.provider;
  o["sandbox_id"] = s.sandbox_id;
  o["sandbox_kept"] = s.sandbox_kept;
  Emit(o);
}

void JsonUi::Prompt(int fd) {
  (void)WriteAll(fd,
                 options_.color ? Sgr(true, std::string(kSgrBold) + ";" + kSgrCyan, "›") + " "
                                : std::string("› "),
                 "the terminal");
}

void JsonUi::RecordDecision(const agent::ActionRequest& a, const agent::Decision& d) {
  json::object o;
  o["type"] = "decision";
  o["tool_call_id"] = JsonString(a.tool_call_id);
  o["tool"] = JsonString(a.name);
  o["decision"] = agent::DecisionToJson(d);
  Emit(o);
}

}  // namespace deepbox::run
