#include "cli/run_approval.h"

#include <fmt/format.h>
#include <termios.h>

#include <algorithm>
#include <cctype>

#include "agent/codec.h"
#include "agent/text.h"
#include "cli/line_diff.h"
#include "cli/run_format.h"
#include "cli/run_signals.h"
#include "common/io.h"
#include "common/json.h"
#include "common/strings.h"
#include "common/terminal_text.h"

namespace deepbox::run {

namespace {

using agent::Decision;
using agent::DecisionType;

void WriteFd(int fd, std::string_view data) {
  (void)WriteAll(fd, data, "the terminal");  // a closed terminal: nothing more to do
}

std::vector<std::string> Lines(std::string_view text) {
  std::vector<std::string> out;
  for (auto l : SplitLines(text)) out.emplace_back(l);
  return out;
}

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

}  // namespace

std::string DescribeAction(const agent::ActionRequest& a, bool color, size_t max_lines) {
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
             sgr(kSgrDim, fmt::format("… {} more line{}", lines.size() - shown,
                                      lines.size() - shown == 1 ? "" : "s")) +
             "\n";
    }
    return out;
  };
  std::string name = SanitizeLineForTerminal(a.name);
  std::string head = sgr(kSgrYellow, "⏸ approve?") + " " + sgr(kSgrBold, name);
  std::string body;
  if (a.name == "execute") {
    std::string timeout = str("timeout");
    head +=
        timeout.empty() || timeout == "null" ? "" : sgr(kSgrDim, " (timeout " + timeout + " s)");
    auto lines = Lines(str("command"));
    if (lines.empty()) lines.push_back("");
    lines[0] = "$ " + lines[0];
    for (size_t k = 1; k < lines.size(); ++k) lines[k] = "  " + lines[k];
    body = block(lines, [&](const std::string& l) { return sgr(kSgrBold, l); });
  } else if (a.name == "write_file") {
    std::string content = str("content");
    auto lines = Lines(content);
    head +=
        " " + SanitizeLineForTerminal(str("file_path")) +
        sgr(kSgrDim, fmt::format(" (writes {} line{}, {} bytes; replaces the file if it exists)",
                                 lines.size(), lines.size() == 1 ? "" : "s", content.size()));
    body = block(lines, [&](const std::string& l) { return sgr(kSgrGreen, "+" + l); });
  } else if (a.name == "edit_file") {
    const json::value* all = a.args.if_contains("replace_all");
    bool replace_all = all != nullptr && all->is_bool() && all->get_bool();
    head += " " + SanitizeLineForTerminal(str("file_path")) +
            sgr(kSgrDim, replace_all ? " (every occurrence)" : " (one occurrence)");
    auto diff = LineDiff(str("old_string"), str("new_string"));
    body = "  " + sgr(kSgrDim, "--- before") + "\n  " + sgr(kSgrDim, "+++ after") + "\n" +
           block(diff, [&](const std::string& l) {
             if (l.starts_with("-")) return sgr(kSgrRed, l);
             if (l.starts_with("+")) return sgr(kSgrGreen, l);
             return l;
           });
  } else if (a.name == "delete") {
    head += " " + SanitizeLineForTerminal(str("file_path")) +
            sgr(kSgrDim, " (deletes it; a directory with everything in it)");
  } else {
    std::vector<std::string> lines;
    for (const auto& [k, v] : a.args) {
      std::string text = v.is_string() ? std::string(v.get_string()) : ToJson(v);
      auto vl = Lines(text);
      lines.push_back(std::string(k) + ": " + (vl.empty() ? "" : vl[0]) +
                      (vl.size() > 1 ? fmt::format(" (+{} lines)", vl.size() - 1) : ""));
    }
    body = block(lines, [&](const std::string& l) { return sgr(kSgrDim, l); });
  }
  return head + "\n" + body;
}

std::optional<std::vector<Decision>> ApprovalPrompt::Ask(const agent::InterruptRequest& request,
                                                         LineReader& tty, int tty_fd, bool color,
                                                         const OnDecision& on_decision) {
  auto sgr = [&](std::string_view code, std::string_view text) {
    return color ? fmt::format("\x1b[{}m{}\x1b[0m", code, text) : std::string(text);
  };
  auto ask_line = [&](std::string_view prompt) -> std::optional<std::string> {
    WriteFd(tty_fd, prompt);
    return tty.ReadLine();
  };
  auto record = [&](const agent::ActionRequest& a, const Decision& d, std::string_view how) {
    if (on_decision) on_decision(a, d);
    WriteFd(tty_fd, "  " + sgr(kSgrDim, std::string(how)) + "\n");
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
        decision = Decision::Reject(std::string(Trim(*why)));
        how = "rejected";
      } else if (k == 'e' && is_allowed(DecisionType::kEdit)) {
        WriteFd(tty_fd,
                "  " +
                    sgr(kSgrDim, "now: " + Truncate(SanitizeLineForTerminal(ToJson(a.args)), 400)) +
                    "\n");
        auto text = ask_line("  new arguments (one JSON object): ");
        if (!text) return std::nullopt;
        auto obj = ParseJsonObject(*text);
        if (!obj) {
          WriteFd(tty_fd,
                  fmt::format("  {}\n",
                              sgr(kSgrRed, "not a JSON object: " +
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
