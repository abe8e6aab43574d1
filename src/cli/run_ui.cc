#include "cli/run_ui.h"

#include <unistd.h>

#include "cli/run_json_ui.h"
#include "cli/run_terminal_ui.h"

namespace deepbox::run {

// Everything the model, the sandbox or its daemon wrote (text, tool names and
// arguments, output, todos, error messages) passes through SanitizeForTerminal
// or SanitizeLineForTerminal before it reaches the terminal; --json output is
// JSON-escaped instead.

bool ColorWanted(bool allowed, int fd) { return allowed && isatty(fd) == 1; }

std::optional<std::vector<agent::Decision>> RunUi::Approve(const agent::InterruptRequest& request,
                                                           LineReader& tty, int tty_fd) {
  BeginApproval();
  struct End {
    RunUi* ui;
    ~End() { ui->EndApproval(); }
  } end{this};
  const bool color = options_.color && isatty(tty_fd) == 1;
  return approval_.Ask(
      request, tty, tty_fd, color,
      [this](const agent::ActionRequest& a, const agent::Decision& d) { RecordDecision(a, d); });
}

std::unique_ptr<RunUi> MakeRunUi(UiOptions options) {
  if (options.json) return std::make_unique<JsonUi>(options);
  return std::make_unique<TerminalUi>(options);
}

}  // namespace deepbox::run
