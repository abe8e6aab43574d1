// The approval prompt of `deepbox run --approve manual`: what each action
// would change (DescribeAction), then one key per decision on the terminal.
// The UI around it (run_ui.h) pauses its spinner while it asks and records
// the decisions in its own form.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agent/state.h"

namespace deepbox::run {

class LineReader;

// What an approval request would change: the command of execute, the content
// of write_file, a line diff of edit_file's strings, the path of delete,
// other tools' arguments one per line; at most `max_lines` lines of each.
// Everything from the model is shown inert (no terminal control sequences).
std::string DescribeAction(const agent::ActionRequest& action, bool color, size_t max_lines = 40);

class ApprovalPrompt {
 public:
  // Called for each decision taken (for --json's "decision" events).
  using OnDecision = std::function<void(const agent::ActionRequest&, const agent::Decision&)>;

  // One decision per action request of `request`, read from `tty` (the
  // questions written to `tty_fd`): y, a(lways for this tool, this session),
  // n, r(eject with a reason), e(dit the arguments), s (respond instead), as
  // the request allows. nullopt when interrupted or when the terminal closed.
  std::optional<std::vector<agent::Decision>> Ask(const agent::InterruptRequest& request,
                                                  LineReader& tty, int tty_fd, bool color,
                                                  const OnDecision& on_decision);

 private:
  std::set<std::string> always_approved_;  // tools the user approved for the session
};

}  // namespace deepbox::run
