#include "cli/run_terminal_ui.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>

#include "agent/text.h"
#include "cli/run_format.h"
#include "common/io.h"
#include "common/parse_number.h"
#include "common/strings.h"
#include "common/terminal_text.h"

namespace deepbox::run {

// Everything the model, the sandbox or its daemon wrote (text, tool names and
// arguments, output, todos, error messages) passes through SanitizeForTerminal
// or SanitizeLineForTerminal before it reaches the terminal; --json output is
// JSON-escaped instead.

namespace {

using namespace std::chrono_literals;
using agent::AgentEvent;
using agent::EventType;

constexpr const char* kThinking = "Thinking";
constexpr const char* kFrames[] = {"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"};
constexpr const char* kBold = kSgrBold;
constexpr const char* kDim = kSgrDim;
constexpr const char* kRed = kSgrRed;
constexpr const char* kGreen = kSgrGreen;
constexpr const char* kYellow = kSgrYellow;
constexpr const char* kCyan = kSgrCyan;

void WriteFd(int fd, std::string_view data) {
  (void)WriteAll(fd, data, "the terminal");  // a closed terminal or pipe: nothing more to do
}

size_t TerminalWidth(int fd) {
  struct winsize ws {};
  if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
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

TerminalUi::TerminalUi(UiOptions options) : RunUi(options) {}

void TerminalUi::Start() {
  if (options_.spinner && !spinner_thread_.joinable()) {
    spinner_thread_ = std::thread([this] { SpinnerLoop(); });
  }
}

TerminalUi::~TerminalUi() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    ClearSpinnerLocked();
  }
  cv_.notify_all();
  if (spinner_thread_.joinable()) spinner_thread_.join();
}

std::string TerminalUi::Sgr(std::string_view code, std::string_view text) const {
  return run::Sgr(options_.color, code, text);
}

// ------------------------------------------------------------------ spinner

void TerminalUi::ClearSpinnerLocked() {
  if (!spinner_drawn_) return;
  WriteFd(options_.err_fd, "\r\x1b[K");
  spinner_drawn_ = false;
}

void TerminalUi::SetSpinnerLocked(std::string label) {
  if (label != spinner_label_) {
    spinner_label_ = std::move(label);
    spinner_start_ = std::chrono::steady_clock::now();
  }
  if (spinner_label_.empty()) ClearSpinnerLocked();
}

void TerminalUi::StartSpinner(std::string label) {
  std::lock_guard<std::mutex> lock(mu_);
  spinner_label_.clear();
  SetSpinnerLocked(std::move(label));
  DrawSpinnerLocked();
}

void TerminalUi::StopSpinner() {
  std::lock_guard<std::mutex> lock(mu_);
  SetSpinnerLocked("");
}

void TerminalUi::SpinnerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, 80ms);
    if (stop_) break;
    DrawSpinnerLocked();
  }
}

void TerminalUi::DrawSpinnerLocked() {
  if (!options_.spinner || prompting_ || stop_) return;
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

void TerminalUi::WriteOut(std::string_view text) {
  ClearSpinnerLocked();
  WriteFd(options_.out_fd, text);
  if (!text.empty()) at_line_start_ = text.back() == '\n';
}

void TerminalUi::WriteErr(std::string_view text) {
  ClearSpinnerLocked();
  if (!at_line_start_ && isatty(options_.out_fd) == 1 && isatty(options_.err_fd) == 1) {
    WriteFd(options_.out_fd, "\n");
    at_line_start_ = true;
  }
  WriteFd(options_.err_fd, text);
}

void TerminalUi::EndTextLineLocked() {
  if (!at_line_start_) WriteOut("\n");
}

void TerminalUi::Notice(std::string_view text) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool color = options_.color && isatty(options_.err_fd) == 1;
  std::string line = fmt::format("deepbox: {}", SanitizeForTerminal(text));
  WriteErr((color ? fmt::format("\x1b[{}m{}\x1b[0m", kDim, line) : line) + "\n");
}

void TerminalUi::ErrorLine(std::string_view text) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool color = options_.color && isatty(options_.err_fd) == 1;
  std::string msg = fmt::format("deepbox: {}", SanitizeForTerminal(text));
  WriteErr((color ? fmt::format("\x1b[{}m{}\x1b[0m", kRed, msg) : msg) + "\n");
}

void TerminalUi::SandboxReady(const std::string& id, const std::string& provider,
                              std::chrono::milliseconds claim_time) {
  StopSpinner();
  std::lock_guard<std::mutex> lock(mu_);
  const bool color = options_.color && isatty(options_.err_fd) == 1;
  std::string mark = color ? fmt::format("\x1b[{}m●\x1b[0m", kGreen) : "●";
  WriteErr(fmt::format("{} sandbox {} ready ({}, {})\n", mark, SanitizeLineForTerminal(id),
                       SanitizeLineForTerminal(provider), FormatDuration(claim_time)));
}

void TerminalUi::RunStarted(std::string_view /*task*/, const std::string& /*thread_id*/,
                            const std::string& /*model*/) {
  std::lock_guard<std::mutex> lock(mu_);
  streamed_text_ = false;
  spinner_label_.clear();
  SetSpinnerLocked(kThinking);
  DrawSpinnerLocked();
}

void TerminalUi::ToolEndLocked(const AgentEvent& e) {
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

void TerminalUi::TodosLocked(const json::array& todos) {
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

void TerminalUi::OnEvent(const AgentEvent& e) {
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
        for (auto l : SplitLines(e.text)) {
          if (!IsBlank(l)) last = SanitizeLineForTerminal(Trim(l));
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

void TerminalUi::RunFinished(const agent::RunResult& r, std::chrono::milliseconds wall) {
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

void TerminalUi::SandboxReleased(const std::string& /*id*/, bool kept,
                                 const std::string& describe) {
  std::lock_guard<std::mutex> lock(mu_);
  SetSpinnerLocked("");
  if (kept) WriteErr(fmt::format("deepbox: kept the sandbox: {}\n", SanitizeForTerminal(describe)));
}

void TerminalUi::Prompt(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  ClearSpinnerLocked();
  WriteFd(fd, options_.color ? fmt::format("\x1b[{};{}m›\x1b[0m ", kBold, kCyan) : "› ");
}

void TerminalUi::BeginApproval() {
  std::lock_guard<std::mutex> lock(mu_);
  prompting_ = true;
  ClearSpinnerLocked();
  EndTextLineLocked();
}

void TerminalUi::EndApproval() {
  std::lock_guard<std::mutex> lock(mu_);
  prompting_ = false;
}

}  // namespace deepbox::run
