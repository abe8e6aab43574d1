#include "cli/run_threads.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "agent/text.h"
#include "agent/thread_store.h"
#include "cli/run_config.h"
#include "cli/run_exit_codes.h"
#include "common/json.h"
#include "common/strings.h"
#include "common/terminal_text.h"

namespace deepbox::run {

namespace {

std::string OneLine(std::string_view text, size_t max) {
  std::string s = SanitizeLineForTerminal(Trim(text));
  if (agent::CodePointCount(s) <= max) return s;
  return std::string(agent::CodePointPrefix(s, max - 1)) + "…";
}

}  // namespace

int ThreadsListCommand(const ThreadsFlags& flags) {
  std::string dir;
  if (flags.threads_dir) {
    dir = *flags.threads_dir;
  } else {
    dir = DefaultThreadsDir();  // DEEPBOX_THREADS_DIR, DEEPBOX_STATE_DIR/threads, XDG, ~
  }
  agent::ThreadStore store(dir);
  auto list = store.List();
  if (!list) {
    std::fprintf(stderr, "deepbox: %s\n", SanitizeForTerminal(list.error().message).c_str());
    return kRunExitUsage;
  }
  json::array out;
  std::string table;
  if (!flags.json && !list->empty()) {
    table = fmt::format("{:<36} {:<20} {:>4}  {}\n", "THREAD", "MODIFIED", "RUNS", "LAST TASK");
  }
  for (const auto& info : *list) {
    auto t = store.Load(info.id);
    size_t runs = t ? t->runs : 0;
    std::string task = t ? t->last_task : "";
    if (flags.json) {
      json::object o{{"id", JsonString(info.id)},
                     {"path", JsonString(info.path)},
                     {"modified_at", JsonString(info.modified_at)},
                     {"size", info.size},
                     {"runs", runs},
                     {"last_task", JsonString(task)}};
      if (t) {
        o["created_at"] = JsonString(t->created_at);
        o["model"] = JsonString(t->model);
        o["sandbox_id"] = JsonString(t->sandbox_id);
        o["messages"] = t->state.messages.size();
      } else {
        o["error"] = JsonString(t.error().message);
      }
      out.push_back(std::move(o));
      continue;
    }
    table +=
        fmt::format("{:<36} {:<20} {:>4}  {}\n", OneLine(info.id, 36), info.modified_at, runs,
                    t ? OneLine(task, 60) : "(unreadable: " + OneLine(t.error().message, 48) + ")");
  }
  if (flags.json) {
    std::string s = ToJson(out) + "\n";
    std::fwrite(s.data(), 1, s.size(), stdout);
  } else if (list->empty()) {
    std::fprintf(stderr, "deepbox: no threads in %s\n", SanitizeForTerminal(dir).c_str());
  } else {
    std::fwrite(table.data(), 1, table.size(), stdout);
    if (isatty(STDOUT_FILENO) == 1) {
      std::fputs("continue one with: deepbox run --thread THREAD TASK\n", stderr);
    }
  }
  return 0;
}

}  // namespace deepbox::run
