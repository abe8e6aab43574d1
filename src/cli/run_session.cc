#include "cli/run_session.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>

#include "agent/deep_agent.h"
#include "agent/model/factory.h"
#include "agent/model/replay.h"
#include "agent/text.h"
#include "agent/thread_store.h"
#include "cli/run_exit_codes.h"
#include "cli/run_sandbox.h"
#include "cli/run_signals.h"
#include "cli/run_ui.h"
#include "common/unique_fd.h"

namespace deepbox::run {

namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds Since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t);
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGINT:
      return "interrupted (Ctrl-C)";
    case SIGTERM:
      return "terminated (SIGTERM)";
    case SIGHUP:
      return "hung up (SIGHUP)";
    default:
      return "signalled";
  }
}

// What the signal thread shares with the main thread.
struct Shared {
  std::atomic<bool> cancel{false};
  std::mutex mu;
  std::function<Status()> force_delete;  // set while a sandbox is held
  std::string cleanup_hint;              // how to delete a sandbox left behind
};

// The main flow; `summary` is filled as it goes.
class Session {
 public:
  Session(RunConfig config, RunUi& ui, SignalWatcher& watcher, Shared& shared)
      : config_(std::move(config)), ui_(ui), watcher_(watcher), shared_(shared) {}

  int Run(RunSummary& summary);

 private:
  int Fail(RunSummary& summary, int code, const Error& error, std::string_view prefix = "") {
    summary.exit_code = code;
    summary.error = error;
    if (summary.stop_reason.empty()) summary.stop_reason = "error";
    ui_.ErrorLine(std::string(prefix) + error.message);
    return code;
  }
  int Interrupted(RunSummary& summary) {
    summary.exit_code = kRunExitInterrupted;
    summary.stop_reason = "interrupted";
    summary.error = Error(ErrorCode::kCancelled, SignalName(watcher_.last_signal()));
    return kRunExitInterrupted;
  }

  RunConfig config_;
  RunUi& ui_;
  SignalWatcher& watcher_;
  Shared& shared_;
};

int Session::Run(RunSummary& summary) {
  // 1. The model: a missing API key or an unreadable replay file fails here,
  // before a sandbox is claimed.
  auto spec = agent::ParseModelSpec(config_.model);
  if (!spec) return Fail(summary, kRunExitUsage, spec.error(), "--model: ");
  agent::ModelConfig mc;
  if (config_.anthropic_base_url) mc.anthropic_base_url = config_.anthropic_base_url;
  if (config_.openai_base_url) mc.openai_base_url = config_.openai_base_url;
  mc.record_path = config_.record_path;
  if (!config_.record_path.empty()) {
    mc.record_description = fmt::format("Recorded by `deepbox run` from {}", config_.model);
  }
  auto created = agent::CreateChatModel(config_.model, mc);
  if (!created) return Fail(summary, kRunExitModel, created.error());
  std::shared_ptr<agent::ChatModel> model(std::move(*created));
  summary.model = model->name();
  if (spec->provider == agent::ModelProvider::kReplay) {
    auto file = agent::ReadReplayFile(spec->model);
    if (file) {
      ui_.Notice(
          fmt::format("replaying {}{}{}", spec->model,
                      file->header.scripted ? " (a scripted conversation, not a live model)"
                                            : " (a recorded conversation)",
                      file->header.description.empty() ? "" : ": " + file->header.description));
    }
  }
  if (!config_.record_path.empty()) {
    ui_.Notice(fmt::format("recording the model conversation to {}", config_.record_path));
  }

  // 2. The task(s).
  const bool stdin_tty = isatty(STDIN_FILENO) == 1;
  LineReader stdin_reader(STDIN_FILENO, watcher_.interrupt_fd());
  std::optional<std::string> first_task = config_.task;
  const bool interactive = !first_task && stdin_tty;
  if (!first_task && !stdin_tty) {
    auto all = stdin_reader.ReadAll();
    if (!all) return Interrupted(summary);
    std::string t(agent::Trim(*all));
    if (t.empty()) {
      return Fail(summary, kRunExitUsage,
                  Error(ErrorCode::kInvalidArgument,
                        "no TASK: give it as an argument, on stdin, or run in a terminal for "
                        "an interactive prompt"));
    }
    first_task = t;
  }
  // The approval prompt reads the terminal even when stdin is a pipe.
  UniqueFd tty_fd;
  if (config_.approve == "manual") {
    tty_fd.reset(open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY));
    if (!tty_fd) {
      return Fail(summary, kRunExitUsage,
                  Error(ErrorCode::kInvalidArgument,
                        "--approve manual needs a terminal to ask on (/dev/tty is not "
                        "available); use --approve auto"));
    }
  }
  LineReader tty_reader(tty_fd ? tty_fd.get() : -1, watcher_.interrupt_fd());

  // 3. The sandbox.
  const std::string run_id = agent::RandomHex(12);
  auto provider = MakeRunProvider(config_, run_id);
  if (!provider) return Fail(summary, kRunExitSandbox, provider.error());
  summary.provider = provider->provider->name();
  ClaimOptions claim;
  claim.labels = config_.labels;
  claim.labels[kRunIdLabel] = run_id;
  claim.ttl = std::chrono::seconds(config_.ttl_seconds);
  claim.network = config_.network;
  ui_.StartSpinner("Claiming a " + provider->description);
  auto claim_start = Clock::now();
  auto lease = provider->provider->Claim(claim);
  ui_.StopSpinner();
  if (!lease) {
    if (watcher_.interrupted()) return Interrupted(summary);
    // A k8s claim that worked but whose daemon cannot be reached says so
    // itself (k8s::kClaimedButUnreachable): it is no claim failure.
    return Fail(
        summary, kRunExitSandbox, lease.error(),
        lease.error().message.starts_with("claimed sandbox ") ? "" : "cannot claim a sandbox: ");
  }
  LeaseGuard guard(std::move(*lease));
  const std::string sandbox_id = guard.sandbox().id();
  summary.sandbox_id = sandbox_id;
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    shared_.force_delete = [fd = provider->force_delete, sandbox_id] { return fd(sandbox_id); };
    shared_.cleanup_hint =
        summary.provider == "local"
            ? fmt::format("deepbox sandbox rm {}", sandbox_id)
            : fmt::format("kubectl delete sandboxclaim -l {}={}", kRunIdLabel, run_id);
  }
  // Stops the sandbox's watch (set once the agent's sandbox exists below).
  std::function<void()> stop_watch;
  // Releases on every path below (the guard releases too, as a last resort).
  auto release = [&]() -> int {
    if (stop_watch) std::exchange(stop_watch, nullptr)();  // our own delete is no news
    {
      std::lock_guard<std::mutex> lock(shared_.mu);
      shared_.force_delete = nullptr;
    }
    if (config_.keep_sandbox && !watcher_.interrupted()) {
      guard.Keep();
      summary.sandbox_kept = true;
      ui_.SandboxReleased(sandbox_id, true, guard.Describe());
      return 0;
    }
    ui_.StartSpinner("Releasing the sandbox");
    auto st = guard.Release();
    ui_.StopSpinner();
    if (!st) {
      ui_.ErrorLine(fmt::format("could not release sandbox {}: {} (delete it with: {})", sandbox_id,
                                st.error().message, shared_.cleanup_hint));
      return kRunExitSandbox;
    }
    ui_.SandboxReleased(sandbox_id, false, "");
    return 0;
  };
  if (watcher_.interrupted()) {
    release();
    return Interrupted(summary);
  }
  ui_.SandboxReady(sandbox_id, summary.provider, Since(claim_start));
  if (provider->limits_line) ui_.Notice(provider->limits_line(sandbox_id));

  // 4. The agent.
  WatchedSandbox watched(
      guard.sandbox(), [&, probe = provider->probe] { return probe(sandbox_id, guard.sandbox()); },
      &shared_.cancel);
  if (provider->watch) {
    stop_watch = provider->watch(sandbox_id, [&](const Error& why) {
      watched.MarkGone(why);
      shared_.cancel.store(true);
    });
  }
  // The watch calls into `watched`: it ends before `watched` does, on every path.
  struct StopWatch {
    std::function<void()>& stop;
    ~StopWatch() {
      if (stop) std::exchange(stop, nullptr)();
    }
  } stop_watch_guard{stop_watch};
  agent::DeepAgentOptions ao;
  ao.model = model;
  ao.sandbox = &watched;
  ao.system_prompt = config_.system_prompt;
  ao.max_steps = config_.max_steps;
  ao.thread_id = config_.thread_id;
  ao.thread_store = std::make_shared<agent::ThreadStore>(
      config_.threads_dir.empty() ? agent::ThreadStore::DefaultDir() : config_.threads_dir);
  const bool resuming = !config_.thread_id.empty() && ao.thread_store->Exists(config_.thread_id);
  if (config_.approve == "manual") {
    for (const char* tool : {"execute", "write_file", "edit_file", "delete"}) {
      ao.interrupt_on[tool] = agent::InterruptConfig{};
    }
  }
  auto agent = agent::DeepAgent::Create(std::move(ao));
  if (!agent) {
    int code = Fail(summary, kRunExitUsage, agent.error(), "cannot start the agent: ");
    release();
    return code;
  }
  summary.thread_id = (*agent)->thread_id();
  if (resuming) {
    ui_.Notice(fmt::format("continuing thread {} ({} messages; this is a new sandbox)",
                           summary.thread_id, (*agent)->state().messages.size()));
  }

  agent::RunCallbacks callbacks;
  callbacks.on_event = [&](const agent::AgentEvent& e) { ui_.OnEvent(e); };
  callbacks.cancel = &shared_.cancel;
  if (config_.approve == "manual") {
    callbacks.on_interrupt = [&](const agent::InterruptRequest& request) {
      return ui_.Approve(request, tty_reader, tty_fd.get());
    };
  }

  int code = kRunExitOk;
  std::optional<std::string> task = first_task;
  if (interactive) {
    ui_.Notice("type a task and press Enter; an empty line or Ctrl-D ends the session");
  }
  for (;;) {
    if (interactive) {
      ui_.Prompt(config_.json ? STDERR_FILENO : STDOUT_FILENO);
      task = stdin_reader.ReadLine();
      if (stdin_reader.interrupted()) {
        code = Interrupted(summary);
        break;
      }
      if (!task || agent::IsBlank(*task)) break;
    }
    ui_.RunStarted(*task, summary.thread_id, summary.model);
    auto t0 = Clock::now();
    agent::RunResult r = (*agent)->Run(*task, callbacks);
    ui_.RunFinished(r, Since(t0));
    summary.runs++;
    summary.steps += r.steps;
    summary.usage += r.usage;
    summary.cost_usd += r.cost_usd;
    summary.final_text = r.final_text;
    summary.stop_reason = std::string(agent::StopReasonName(r.stop_reason));
    summary.error.reset();
    code = kRunExitOk;
    if (watcher_.interrupted()) {
      code = Interrupted(summary);
      break;
    }
    if (auto fatal = watched.fatal()) {
      code = Fail(summary, kRunExitSandbox, *fatal,
                  "the sandbox went away during the run (deleted from outside, expired or "
                  "crashed): ");
      break;
    }
    switch (r.stop_reason) {
      case agent::StopReason::kCompleted:
        break;
      case agent::StopReason::kStepLimit:
        code = Fail(summary, kRunExitStepLimit,
                    r.error.value_or(Error(ErrorCode::kResourceExhausted, "step limit reached")));
        ui_.Notice("raise the limit with --max-steps N");
        break;
      case agent::StopReason::kCancelled:
        code = Interrupted(summary);
        break;
      case agent::StopReason::kInterrupted:
        code =
            Fail(summary, kRunExitInterrupted,
                 Error(ErrorCode::kCancelled, "no answer to the approval prompt"), "run paused: ");
        break;
      case agent::StopReason::kError:
        code = Fail(summary, kRunExitModel,
                    r.error.value_or(Error(ErrorCode::kInternal, "the run failed")));
        break;
    }
    if (!interactive) break;
    if (code == kRunExitInterrupted) break;
  }
  if (summary.runs > 0 && !config_.json) {
    ui_.Notice(fmt::format("thread {} (continue it with: deepbox run --thread {} TASK)",
                           summary.thread_id, summary.thread_id));
  }
  agent->reset();  // the agent uses the sandbox: gone before it is released
  int rc = release();
  if (code == kRunExitOk && rc != 0) code = rc;
  summary.exit_code = code;
  return code;
}

}  // namespace

int RunAgentCommand(const RunFlags& flags) {
  auto wall_start = Clock::now();
  auto config = ResolveRunConfig(flags);
  UiOptions uo;
  uo.json = config ? config->json : flags.json;
  uo.color = !uo.json && ColorWanted(config ? config->color : !flags.no_color, STDOUT_FILENO);
  uo.spinner = !uo.json && isatty(STDERR_FILENO) == 1;
  RunUi ui(uo);
  RunSummary summary;
  if (!config) {
    ui.ErrorLine(config.error().message);
    summary.exit_code = kRunExitUsage;
    summary.stop_reason = "usage";
    summary.error = config.error();
    ui.Result(summary);
    return kRunExitUsage;
  }
  summary.model = config->model;

  Shared shared;
  auto watcher = SignalWatcher::Start([&](int sig, int count) {
    shared.cancel.store(true);
    std::function<Status()> force_delete;
    std::string hint;
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      force_delete = shared.force_delete;
      hint = shared.cleanup_hint;
    }
    if (count > 1) {
      ui.ErrorLine(
          fmt::format("{} again: exiting now{}", SignalName(sig),
                      hint.empty() ? "" : "; if the sandbox is left, delete it with: " + hint));
      _exit(kRunExitInterrupted);
    }
    // Deleting the sandbox (even with --keep-sandbox) also ends a command
    // running in it, so the agent stops promptly.
    if (force_delete) {
      ui.Notice(fmt::format("{}: stopping the agent and deleting the sandbox", SignalName(sig)));
      if (auto st = force_delete(); !st) {
        ui.ErrorLine(
            fmt::format("deleting the sandbox: {} (delete it with: {})", st.error().message, hint));
      }
    } else {
      ui.Notice(fmt::format("{}: stopping (press Ctrl-C again to exit at once)", SignalName(sig)));
    }
  });
  if (!watcher) {
    ui.ErrorLine(watcher.error().message);
    return kRunExitSandbox;
  }
  ui.Start();
  int code;
  {
    Session session(*config, ui, **watcher, shared);
    code = session.Run(summary);
  }
  summary.exit_code = code;
  summary.wall = Since(wall_start);
  watcher->reset();  // no callback may run past this point
  ui.Result(summary);
  return code;
}

}  // namespace deepbox::run
