#include "cli/run_ui.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <iterator>

#include "agent/codec.h"
#include "agent/text.h"
#include "cli/run_signals.h"
#include "common/io.h"
#include "common/parse_number.h"
#include "common/terminal_text.h"

namespace deepbox::run {

// Everything the model, the sandbox or its daemon wrote (text, tool names and
// arguments, output, todos, error messages) passes through SanitizeForTerminal
// or SanitizeLineForTerminal before it reaches the terminal; --json output is
// JSON-escaped instead.

namespace {

using namespace std::chrono_literals;
using agent::AgentEvent;
using agent::Decision;
using agent::DecisionType;
using agent::EventType;

constexpr const char* kThinking = "Thinking";
constexpr const char* kFrames[] = {"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"};
constexpr const char* kBold = "1";
constexpr const char* kDim = "2";
constexpr const char* kRed = "31";
constexpr const char* kGreen = "32";
constexpr const char* kYellow = "33";
constexpr const char* kCyan = "36";

void WriteFd(int fd, std::string_view data) {
  (void)WriteAll(fd, data, "the terminal");  // a closed terminal or pipe: nothing more to do
}

size_t TerminalWidth(int fd) {
  struct winsize ws {};
  if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

std::string Truncate(std::string_view text, size_t max_chars) {
  if (agent::CodePointCount(text) <= max_chars) return std::string(text);
  return std::string(agent::CodePointPrefix(text, max_chars > 1 ? max_chars - 1 : 0)) + "…";
}

std::string FirstLine(std::string_view text) {
  auto lines = agent::SplitLines(text);
  for (auto l : lines) {
    if (!agent::IsBlank(l)) {
      std::string s(agent::Trim(l));
      return lines.size() > 1 ? s + " …" : s;
    }
  }
  return "";
}

std::string ToolLabel(const AgentEvent& e) {
  std::string label = SanitizeLineForTerminal(e.tool_name);
  if (e.depth > 0 && !e.agent.empty()) label = SanitizeLineForTerminal(e.agent) + " › " + label;
  std::string arg = SanitizeLineForTerminal(FirstLine(e.main_argument));
  if (!arg.empty()) label += " " + arg;
  return label;
}

// "[Command failed with exit code 2]" in an execute result -> 2.
std::optional<int> FailedExitCode(std::string_view preview) {
  constexpr std::string_view kMarker = "[Command failed with exit code ";
  size_t pos = preview.rfind(kMarker);
  if (pos == std::string_view::npos) return std::nullopt;
  std::string_view rest = preview.substr(pos + kMarker.size());
  size_t end = rest.find(']');
  if (end == std::string_view::npos) return std::nullopt;
  return ParseInteger<int>(rest.substr(0, end));
}

}  // namespace

bool ColorWanted(bool allowed, int fd) { return allowed && isatty(fd) == 1; }

RunUi::RunUi(UiOptions options) : options_(options) {}

void RunUi::Start() {
  if (options_.spinner && !options_.json && !spinner_thread_.joinable()) {
    spinner_thread_ = std::thread([this] { SpinnerLoop(); });
  }
}

RunUi::~RunUi() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    ClearSpinnerLocked();
  }
  cv_.notify_all();
  if (spinner_thread_.joinable()) spinner_thread_.join();
}

// ------------------------------------------------------------------ helpers

std::string RunUi::FormatDuration(std::chrono::milliseconds d) {
  int64_t ms = d.count();
  if (ms < 1000) return fmt::format("{}ms", ms);
  if (ms < 60000) return fmt::format("{:.1f}s", static_cast<double>(ms) / 1000.0);
  int64_t s = ms / 1000;
  return fmt::format("{}m{:02d}s", s / 60, s % 60);
}

std::string RunUi::FormatTokens(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string RunUi::FoldOutput(std::string_view preview, size_t max_chars) {
  std::vector<std::string_view> lines;
  for (auto l : agent::SplitLines(preview)) {
    if (agent::IsBlank(l)) continue;
    if (agent::StartsWith(l, "[Command succeeded with exit code")) continue;
    lines.push_back(agent::TrimRight(l));
  }
  if (lines.empty()) return "";
  std::string out = Truncate(agent::Trim(lines[0]), max_chars);
  if (lines.size() > 1)
    out += fmt::format("  (+{} more line{})", lines.size() - 1, lines.size() == 2 ? "" : "s");
  return out;
}

std::string RunUi::Sgr(std::string_view code, std::string_view text) const {
  if (!options_.color) return std::string(text);
  return fmt::format("\x1b[{}m{}\x1b[0m", code, text);
}

json::object RunUi::EventToJson(const AgentEvent& e) {
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

std::string RunUi::SerializeEvent(const json::object& obj) {
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

void RunUi::EmitJson(json::object obj) {
  std::string line = SerializeEvent(obj) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  WriteFd(options_.out_fd, line);
}

// ------------------------------------------------------------------ spinner

void RunUi::ClearSpinnerLocked() {
  if (!spinner_drawn_) return;
  WriteFd(options_.err_fd, "\r\x1b[K");
  spinner_drawn_ = false;
}

void RunUi::SetSpinnerLocked(std::string label) {
  if (label != spinner_label_) {
    spinner_label_ = std::move(label);
    spinner_start_ = std::chrono::steady_clock::now();
  }
  if (spinner_label_.empty()) ClearSpinnerLocked();
}

void RunUi::StartSpinner(std::string label) {
  if (options_.json) return;
  std::lock_guard<std::mutex> lock(mu_);
  spinner_label_.clear();
  SetSpinnerLocked(std::move(label));
  DrawSpinnerLocked();
}

void RunUi::StopSpinner() {
  std::lock_guard<std::mutex> lock(mu_);
  SetSpinnerLocked("");
}

void RunUi::SpinnerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, 80ms);
    if (stop_) break;
    DrawSpinnerLocked();
  }
}

void RunUi::DrawSpinnerLocked() {
  if (!options_.spinner || options_.json || prompting_ || stop_) return;
  // Never draw over a partial line of the transcript on the same terminal.
  if (!at_line_start_ && isatty(options_.out_fd) == 1) return;
  std::string label;
  std::chrono::steady_clock::time_point start;
  if (!running_.empty()) {
    auto first = running_.begin();
    for (auto it = running_.begin(); it != running_.end(); ++it) {
      if (it->second.start < first->second.start) first = it;
    }
    label = first->second.label;
    if (running_.size() > 1) label += fmt::format(" (+{} more)", running_.size() - 1);
    start = first->second.start;
  } else if (!spinner_label_.empty()) {
    label = spinner_label_;
    start = spinner_start_;
  } else {
    return;
  }
  auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  // The model has sent nothing for a while: say so (a stalled API or network
  // looks like a long think otherwise), and when deepbox gives up on it.
  if (label == kThinking && elapsed >= kModelWaitNotice) {
    label = "Waiting for the model… (nothing received yet";
    if (options_.model_idle_timeout.count() > 0) {
      label += "; retried after " + FormatDuration(options_.model_idle_timeout) +
               " of silence, --model-idle-timeout";
    }
    label += ")";
  }
  std::string time = fmt::format("{:.1f}s", static_cast<double>(elapsed.count()) / 1000.0);
  size_t width = TerminalWidth(options_.err_fd);
  size_t room = width > time.size() + 6 ? width - time.size() - 6 : 10;
  const bool color = options_.color && isatty(options_.err_fd) == 1;
  std::string frame = kFrames[frame_++ % std::size(kFrames)];
  if (color) frame = fmt::format("\x1b[{}m{}\x1b[0m", kCyan, frame);
  std::string t = color ? fmt::format("\x1b[{}m{}\x1b[0m", kDim, time) : time;
  WriteFd(options_.err_fd, fmt::format("\r{} {} {}\x1b[K", frame, Truncate(label, room), t));
  spinner_drawn_ = true;
}

// ------------------------------------------------------------------ output

void RunUi::WriteOut(std::string_view text) {
  ClearSpinnerLocked();
  WriteFd(options_.out_fd, text);
  if (!text.empty()) at_line_start_ = text.back() == '\n';
}

void RunUi::WriteErr(std::string_view text) {
  ClearSpinnerLocked();
  if (!at_line_start_ && isatty(options_.out_fd) == 1 && isatty(options_.err_fd) == 1) {
    WriteFd(options_.out_fd, "\n");
    at_line_start_ = true;
  }
  WriteFd(options_.err_fd, text);
}

void RunUi::EndTextLineLocked() {
  if (!at_line_start_) WriteOut("\n");
}

void RunUi::Notice(std::string_view text) {
  if (options_.json) {
    json::object o;
    o["type"] = "notice";
    o["text"] = JsonString(text);
    EmitJson(std::move(o));
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  const bool color = options_.color && isatty(options_.err_fd) == 1;
  std::string line = fmt::format("deepbox: {}", SanitizeForTerminal(text));
  WriteErr((color ? fmt::format("\x1b[{}m{}\x1b[0m", kDim, line) : line) + "\n");
}

void RunUi::ErrorLine(std::string_view text) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool color = options_.color && isatty(options_.err_fd) == 1;
  std::string msg = fmt::format("deepbox: {}", SanitizeForTerminal(text));
  WriteErr((color ? fmt::format("\x1b[{}m{}\x1b[0m", kRed, msg) : msg) + "\n");
}

void RunUi::SandboxReady(const std::string& id, const std::string& provider,
                         std::chrono::milliseconds claim_time) {
  if (options_.json) {
    json::object o;
    o["type"] = "sandbox";
    o["id"] = id;
    o["provider"] = provider;
    o["claim_ms"] = claim_time.count();
    EmitJson(std::move(o));
    return;
  }
  StopSpinner();
  std::lock_guard<std::mutex> lock(mu_);
  const bool color = options_.color && isatty(options_.err_fd) == 1;
  std::string mark = color ? fmt::format("\x1b[{}m●\x1b[0m", kGreen) : "●";
  WriteErr(fmt::format("{} sandbox {} ready ({}, {})\n", mark, SanitizeLineForTerminal(id),
                       SanitizeLineForTerminal(provider), FormatDuration(claim_time)));
}

void RunUi::RunStarted(std::string_view task, const std::string& thread_id,
                       const std::string& model) {
  run_start_ = std::chrono::steady_clock::now();
  if (options_.json) {
    json::object o;
    o["type"] = "run_start";
    o["task"] = JsonString(task);
    o["thread_id"] = thread_id;
    o["model"] = model;
    EmitJson(std::move(o));
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  streamed_text_ = false;
  spinner_label_.clear();
  SetSpinnerLocked(kThinking);
  DrawSpinnerLocked();
}

void RunUi::ToolEndLocked(const AgentEvent& e) {
  bool ok = e.ok;
  std::string outcome;
  if (e.tool_name == "execute") {
    if (auto code = FailedExitCode(e.output_preview)) {
      ok = false;
      outcome = fmt::format("exit {}", *code);
    }
  }
  if (e.tool_name == "write_todos" && ok) return;  // the todo list shows instead
  std::string indent(2 + 2 * static_cast<size_t>(e.depth), ' ');
  std::string name = SanitizeLineForTerminal(e.tool_name);
  if (e.depth > 0 && !e.agent.empty()) name = SanitizeLineForTerminal(e.agent) + " › " + name;
  std::string arg = SanitizeLineForTerminal(FirstLine(e.main_argument));
  size_t width = isatty(options_.out_fd) == 1 ? TerminalWidth(options_.out_fd) : 120;
  size_t room =
      width > indent.size() + name.size() + 24 ? width - indent.size() - name.size() - 24 : 20;
  std::string line = indent + (ok ? Sgr(kGreen, "✓") : Sgr(kRed, "✗")) + " " + Sgr(kBold, name);
  if (!arg.empty()) line += "  " + Truncate(arg, room);
  std::string tail = FormatDuration(e.duration);
  if (!outcome.empty()) tail = outcome + ", " + tail;
  line += "  " + Sgr(kDim, "· " + tail) + "\n";
  bool show_output = !ok || (e.tool_name != "write_file" && e.tool_name != "edit_file" &&
                             e.tool_name != "delete" && e.tool_name != "write_todos");
  if (show_output) {
    size_t out_room = width > indent.size() + 30 ? width - indent.size() - 30 : 40;
    std::string fold = SanitizeLineForTerminal(
        FoldOutput(SanitizeForTerminal(e.output_preview), std::min<size_t>(out_room, 100)));
    if (!fold.empty()) {
      line += indent + "  " + (ok ? Sgr(kDim, "⎿ " + fold) : Sgr(kRed, "⎿ " + fold)) + "\n";
    }
  }
  WriteOut(line);
}

void RunUi::TodosLocked(const json::array& todos) {
  std::string key = ToJson(todos);
  if (key == last_todos_) return;
  last_todos_ = key;
  EndTextLineLocked();
  std::string out = "  " + Sgr(kBold, "☰ Todos") + "\n";
  for (const auto& t : todos) {
    if (!t.is_object()) continue;
    const auto& o = t.as_object();
    std::string content = SanitizeLineForTerminal(GetOptString(o, "content").value_or(""));
    std::string status = GetOptString(o, "status").value_or("pending");
    if (status == "completed") {
      out += "    " + Sgr(kGreen, "✔") + " " + Sgr(kDim, content) + "\n";
    } else if (status == "in_progress") {
      out += "    " + Sgr(kYellow, "▸") + " " + Sgr(kBold, content) + "\n";
    } else {
      out += "    ○ " + content + "\n";
    }
  }
  WriteOut(out);
}

void RunUi::OnEvent(const AgentEvent& e) {
  if (options_.json) {
    EmitJson(EventToJson(e));
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  const bool main = e.depth == 0;
  switch (e.type) {
    case EventType::kTextDelta:
      if (!main) break;  // sub-agents' prose reaches the main agent as the task result
      SetSpinnerLocked("");
      WriteOut(SanitizeForTerminal(e.text));
      streamed_text_ = true;
      break;
    case EventType::kUsage:
      if (main) {
        EndTextLineLocked();
        SetSpinnerLocked("");
      }
      break;
    case EventType::kToolCallStart:
      EndTextLineLocked();
      if (main) streamed_text_ = false;
      running_[e.tool_call_id] = Running{ToolLabel(e), std::chrono::steady_clock::now()};
      DrawSpinnerLocked();
      break;
    case EventType::kToolCallEnd:
      running_.erase(e.tool_call_id);
      ToolEndLocked(e);
      if (running_.empty()) SetSpinnerLocked(kThinking);
      break;
    case EventType::kToolOutput:
      if (auto it = running_.find(e.tool_call_id); it != running_.end()) {
        std::string last;
        for (auto l : agent::SplitLines(e.text)) {
          if (!agent::IsBlank(l)) last = SanitizeLineForTerminal(agent::Trim(l));
        }
        if (!last.empty()) {
          std::string base = it->second.label.substr(0, it->second.label.find(" ⎿ "));
          it->second.label = base + " ⎿ " + last;
        }
      }
      break;
    case EventType::kTodoUpdate:
      TodosLocked(e.todos);
      break;
    case EventType::kInterrupt:
      EndTextLineLocked();
      SetSpinnerLocked("");
      break;
    case EventType::kSummarized:
      EndTextLineLocked();
      WriteOut(
          "  " +
          Sgr(kDim,
              "⋯ older messages summarized" +
                  (e.text.empty() ? "" : " (history: " + SanitizeLineForTerminal(e.text) + ")")) +
          "\n");
      break;
    case EventType::kFinalMessage:
      if (main) {
        if (!streamed_text_ && !e.text.empty()) WriteOut(SanitizeForTerminal(e.text));
        EndTextLineLocked();
        SetSpinnerLocked("");
      }
      break;
    case EventType::kError: {
      // The run's own failure is reported once by the caller; sub-agents'
      // and middleware errors show here.
      if (main) break;
      EndTextLineLocked();
      WriteOut(
          std::string(2 + 2 * static_cast<size_t>(e.depth), ' ') +
          Sgr(kRed, "! " + SanitizeLineForTerminal(e.agent) + ": " + SanitizeForTerminal(e.text)) +
          "\n");
      break;
    }
    case EventType::kRetry: {
      // Said on stderr even without a terminal: a run that seems stuck is
      // often one waiting out a rate limit.
      std::string what = fmt::format(
          "the model API failed (attempt {} of {}): {}; retrying in {}", e.attempt, e.max_attempts,
          SanitizeLineForTerminal(FirstLine(e.text)), FormatDuration(e.duration));
      if (!e.agent.empty() && e.depth > 0) what = SanitizeLineForTerminal(e.agent) + ": " + what;
      const bool color = options_.color && isatty(options_.err_fd) == 1;
      std::string line = "deepbox: " + what;
      WriteErr((color ? fmt::format("\x1b[{}m{}\x1b[0m", kYellow, line) : line) + "\n");
      if (main) SetSpinnerLocked("Waiting to retry the model API");
      break;
    }
    case EventType::kToolCallRejected: {
      // Refused before it ran; the model got the reason as the result.
      EndTextLineLocked();
      std::string indent(2 + 2 * static_cast<size_t>(e.depth), ' ');
      std::string name = SanitizeLineForTerminal(e.tool_name.empty() ? "?" : e.tool_name);
      if (e.depth > 0 && !e.agent.empty()) name = SanitizeLineForTerminal(e.agent) + " › " + name;
      std::string arg = SanitizeLineForTerminal(FirstLine(e.main_argument));
      size_t width = isatty(options_.out_fd) == 1 ? TerminalWidth(options_.out_fd) : 120;
      size_t room = width > indent.size() + 30 ? width - indent.size() - 30 : 40;
      std::string line = indent + Sgr(kRed, "✗") + " " + Sgr(kBold, name);
      if (!arg.empty()) line += "  " + Truncate(arg, room);
      line += "  " + Sgr(kDim, "· rejected before it ran") + "\n";
      std::string why = SanitizeLineForTerminal(
          FoldOutput(SanitizeForTerminal(e.text), std::min<size_t>(room + 10, 160)));
      if (!why.empty()) line += indent + "  " + Sgr(kRed, "⎿ " + why) + "\n";
      WriteOut(line);
      break;
    }
  }
}

void RunUi::RunFinished(const agent::RunResult& r, std::chrono::milliseconds wall) {
  if (options_.json) {
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
    EmitJson(std::move(o));
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  SetSpinnerLocked("");
  running_.clear();
  EndTextLineLocked();
  const auto& u = r.usage;
  std::string line =
      fmt::format("─ {} step{} · tokens {} in, {} out, cache {} read / {} write · ${:.4f} · {}",
                  r.steps, r.steps == 1 ? "" : "s", FormatTokens(u.input_tokens),
                  FormatTokens(u.output_tokens), FormatTokens(u.cache_read_tokens),
                  FormatTokens(u.cache_write_tokens), r.cost_usd, FormatDuration(wall));
  const bool color = options_.color && isatty(options_.err_fd) == 1;
  WriteErr((color ? fmt::format("\x1b[{}m{}\x1b[0m", kDim, line) : line) + "\n");
}

void RunUi::SandboxReleased(const std::string& id, bool kept, const std::string& describe) {
  if (options_.json) {
    json::object o;
    o["type"] = kept ? "sandbox_kept" : "sandbox_released";
    o["id"] = id;
    if (kept) o["describe"] = JsonString(describe);
    EmitJson(std::move(o));
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  SetSpinnerLocked("");
  if (kept) WriteErr(fmt::format("deepbox: kept the sandbox: {}\n", SanitizeForTerminal(describe)));
}

void RunUi::Result(const RunSummary& s) {
  if (!options_.json) return;
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
  EmitJson(std::move(o));
}

void RunUi::Prompt(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  ClearSpinnerLocked();
  WriteFd(fd, options_.color ? fmt::format("\x1b[{};{}m›\x1b[0m ", kBold, kCyan) : "› ");
}

namespace {

// Non-canonical, no echo, signals kept (Ctrl-C still cancels): one key at a
// time. Restores the previous mode when destroyed.
class KeyMode {
 public:
  explicit KeyMode(int fd) : fd_(fd) {
    if (fd_ < 0 || tcgetattr(fd_, &saved_) != 0) return;
    struct termios raw = saved_;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    // Keys pressed before the question was shown must not answer it.
    active_ = tcsetattr(fd_, TCSAFLUSH, &raw) == 0;
  }
  ~KeyMode() { Restore(); }
  void Restore() {
    if (active_) tcsetattr(fd_, TCSANOW, &saved_);
    active_ = false;
  }
  bool active() const { return active_; }

 private:
  int fd_;
  struct termios saved_ {};
  bool active_ = false;
};

std::vector<std::string> Lines(std::string_view text) {
  std::vector<std::string> out;
  for (auto l : agent::SplitLines(text)) out.emplace_back(l);
  return out;
}

}  // namespace

std::vector<std::string> RunUi::LineDiff(std::string_view before, std::string_view after) {
  std::vector<std::string> a = Lines(before), b = Lines(after);
  std::vector<std::string> out;
  // Longest common subsequence of lines; edits are short strings, so the
  // table stays small (a huge edit falls back to all-removed, all-added).
  size_t n = a.size(), m = b.size();
  if (n * m > 250000) {
    for (const auto& l : a) out.push_back("-" + l);
    for (const auto& l : b) out.push_back("+" + l);
    return out;
  }
  std::vector<std::vector<uint32_t>> lcs(n + 1, std::vector<uint32_t>(m + 1, 0));
  for (size_t i = n; i-- > 0;) {
    for (size_t j = m; j-- > 0;) {
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) {
      out.push_back(" " + a[i]);
      ++i;
      ++j;
    } else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) {
      out.push_back("-" + a[i++]);  // removals first, as diff shows them
    } else {
      out.push_back("+" + b[j++]);
    }
  }
  return out;
}

std::string RunUi::DescribeAction(const agent::ActionRequest& a, bool color, size_t max_lines) {
  auto sgr = [&](std::string_view code, std::string_view text) {
    return color ? fmt::format("\x1b[{}m{}\x1b[0m", code, text) : std::string(text);
  };
  auto str = [&](std::string_view key) -> std::string {
    const json::value* v = a.args.if_contains(key);
    if (v == nullptr) return "";
    if (v->is_string()) return std::string(v->get_string());
    return ToJson(*v);
  };
  // Shows at most max_lines lines of a block, each after `bar`.
  auto block = [&](const std::vector<std::string>& lines, const auto& style) {
    std::string out;
    size_t shown = std::min(lines.size(), max_lines);
    for (size_t k = 0; k < shown; ++k)
      out += "  " + style(SanitizeLineForTerminal(lines[k])) + "\n";
    if (lines.size() > shown) {
      out += "  " +
             sgr(kDim, fmt::format("… {} more line{}", lines.size() - shown,
                                   lines.size() - shown == 1 ? "" : "s")) +
             "\n";
    }
    return out;
  };
  std::string name = SanitizeLineForTerminal(a.name);
  std::string head = sgr(kYellow, "⏸ approve?") + " " + sgr(kBold, name);
  std::string body;
  if (a.name == "execute") {
    std::string timeout = str("timeout");
    head += timeout.empty() || timeout == "null" ? "" : sgr(kDim, " (timeout " + timeout + " s)");
    auto lines = Lines(str("command"));
    if (lines.empty()) lines.push_back("");
    lines[0] = "$ " + lines[0];
    for (size_t k = 1; k < lines.size(); ++k) lines[k] = "  " + lines[k];
    body = block(lines, [&](const std::string& l) { return sgr(kBold, l); });
  } else if (a.name == "write_file") {
    std::string content = str("content");
    auto lines = Lines(content);
    head += " " + SanitizeLineForTerminal(str("file_path")) +
            sgr(kDim, fmt::format(" (writes {} line{}, {} bytes; replaces the file if it exists)",
                                  lines.size(), lines.size() == 1 ? "" : "s", content.size()));
    body = block(lines, [&](const std::string& l) { return sgr(kGreen, "+" + l); });
  } else if (a.name == "edit_file") {
    const json::value* all = a.args.if_contains("replace_all");
    bool replace_all = all != nullptr && all->is_bool() && all->get_bool();
    head += " " + SanitizeLineForTerminal(str("file_path")) +
            sgr(kDim, replace_all ? " (every occurrence)" : " (one occurrence)");
    auto diff = LineDiff(str("old_string"), str("new_string"));
    body = "  " + sgr(kDim, "--- before") + "\n  " + sgr(kDim, "+++ after") + "\n" +
           block(diff, [&](const std::string& l) {
             if (l.starts_with("-")) return sgr(kRed, l);
             if (l.starts_with("+")) return sgr(kGreen, l);
             return l;
           });
  } else if (a.name == "delete") {
    head += " " + SanitizeLineForTerminal(str("file_path")) +
            sgr(kDim, " (deletes it; a directory with everything in it)");
  } else {
    std::vector<std::string> lines;
    for (const auto& [k, v] : a.args) {
      std::string text = v.is_string() ? std::string(v.get_string()) : ToJson(v);
      auto vl = Lines(text);
      lines.push_back(std::string(k) + ": " + (vl.empty() ? "" : vl[0]) +
                      (vl.size() > 1 ? fmt::format(" (+{} lines)", vl.size() - 1) : ""));
    }
    body = block(lines, [&](const std::string& l) { return sgr(kDim, l); });
  }
  return head + "\n" + body;
}

std::optional<std::vector<Decision>> RunUi::Approve(const agent::InterruptRequest& request,
                                                    LineReader& tty, int tty_fd) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    prompting_ = true;
    ClearSpinnerLocked();
    EndTextLineLocked();
  }
  struct Done {
    RunUi* ui;
    ~Done() {
      std::lock_guard<std::mutex> lock(ui->mu_);
      ui->prompting_ = false;
    }
  } done{this};
  const bool color = options_.color && isatty(tty_fd) == 1;
  auto sgr = [&](std::string_view code, std::string_view text) {
    return color ? fmt::format("\x1b[{}m{}\x1b[0m", code, text) : std::string(text);
  };
  auto ask_line = [&](std::string_view prompt) -> std::optional<std::string> {
    WriteFd(tty_fd, prompt);
    return tty.ReadLine();
  };
  auto record = [&](const agent::ActionRequest& a, const Decision& d, std::string_view how) {
    if (options_.json) {
      json::object o;
      o["type"] = "decision";
      o["tool_call_id"] = JsonString(a.tool_call_id);
      o["tool"] = JsonString(a.name);
      o["decision"] = agent::DecisionToJson(d);
      EmitJson(std::move(o));
    }
    WriteFd(tty_fd, "  " + sgr(kDim, std::string(how)) + "\n");
  };
  std::vector<Decision> decisions;
  for (size_t i = 0; i < request.action_requests.size(); ++i) {
    const auto& a = request.action_requests[i];
    std::vector<DecisionType> allowed = {DecisionType::kApprove, DecisionType::kEdit,
                                         DecisionType::kReject, DecisionType::kRespond};
    if (i < request.review_configs.size() && !request.review_configs[i].allowed_decisions.empty()) {
      allowed = request.review_configs[i].allowed_decisions;
    }
    auto is_allowed = [&](DecisionType t) {
      return std::find(allowed.begin(), allowed.end(), t) != allowed.end();
    };
    WriteFd(tty_fd, DescribeAction(a, color));
    if (is_allowed(DecisionType::kApprove) && always_approved_.count(a.name) > 0) {
      record(a, Decision::Approve(), "approved (always, as you chose for " + a.name + ")");
      decisions.push_back(Decision::Approve());
      continue;
    }
    std::string name = SanitizeLineForTerminal(a.name);
    std::string keys;
    if (is_allowed(DecisionType::kApprove)) keys += "[y]es  [a]lways for " + name + "  ";
    if (is_allowed(DecisionType::kReject)) keys += "[n]o  [r]eject with a reason  ";
    if (is_allowed(DecisionType::kEdit)) keys += "[e]dit the arguments  ";
    if (is_allowed(DecisionType::kRespond)) keys += "re[s]pond instead  ";
    std::optional<Decision> decision;
    std::string how;
    while (!decision) {
      // The key as 0..255, or -1 when interrupted or at EOF. (An int, not an
      // optional<char>: GCC 12 at -O3 takes the latter for uninitialized.)
      int key = -1;
      {
        // Before the question shows: what was typed ahead is dropped, what
        // is typed after it answers.
        KeyMode mode(tty_fd);
        if (mode.active()) tty.DiscardBuffered();
        WriteFd(tty_fd, "  " + keys + "› ");
        if (auto byte = tty.ReadByte()) key = static_cast<unsigned char>(*byte);
        if (key >= 0 && key != '\n' && !mode.active()) {
          // Not a terminal after all: the answer is the first character of a line.
          auto rest = tty.ReadLine();
          if (!rest) key = -1;
        }
      }
      if (key < 0 || key == '\x04') {  // interrupted, EOF, or Ctrl-D
        WriteFd(tty_fd, "\n");
        return std::nullopt;
      }
      char k = static_cast<char>(std::tolower(key));
      if (k == '\r' || k == '\n') {
        WriteFd(tty_fd, "\n");
        continue;
      }
      WriteFd(tty_fd, std::string(1, std::isprint(static_cast<unsigned char>(k)) ? k : '?') + "\n");
      if (k == 'y' && is_allowed(DecisionType::kApprove)) {
        decision = Decision::Approve();
        how = "approved";
      } else if (k == 'a' && is_allowed(DecisionType::kApprove)) {
        always_approved_.insert(a.name);
        decision = Decision::Approve();
        how = "approved; later " + name + " calls run without asking";
      } else if (k == 'n' && is_allowed(DecisionType::kReject)) {
        decision = Decision::Reject();
        how = "rejected";
      } else if (k == 'r' && is_allowed(DecisionType::kReject)) {
        auto why = ask_line("  reason (told to the model): ");
        if (!why) return std::nullopt;
        decision = Decision::Reject(std::string(agent::Trim(*why)));
        how = "rejected";
      } else if (k == 'e' && is_allowed(DecisionType::kEdit)) {
        WriteFd(tty_fd,
                "  " + sgr(kDim, "now: " + Truncate(SanitizeLineForTerminal(ToJson(a.args)), 400)) +
                    "\n");
        auto text = ask_line("  new arguments (one JSON object): ");
        if (!text) return std::nullopt;
        auto obj = ParseJsonObject(*text);
        if (!obj) {
          WriteFd(tty_fd, fmt::format("  {}\n",
                                      sgr(kRed, "not a JSON object: " +
                                                    SanitizeLineForTerminal(obj.error().message))));
          continue;
        }
        decision = Decision::Edit(std::move(*obj));
        how = "edited";
      } else if (k == 's' && is_allowed(DecisionType::kRespond)) {
        auto text = ask_line("  response (returned to the model as the tool result): ");
        if (!text) return std::nullopt;
        decision = Decision::Respond(*text);
        how = "answered";
      } else {
        WriteFd(tty_fd, "  press one of the keys in brackets (Ctrl-C cancels)\n");
      }
    }
    record(a, *decision, how);
    decisions.push_back(std::move(*decision));
  }
  return decisions;
}

}  // namespace deepbox::run
