#include "cli/run_session.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>

#include "agent/deep_agent.h"
#include "agent/mcp/config.h"
#include "agent/mcp/tools.h"
#include "agent/model/factory.h"
#include "agent/model/replay.h"
#include "agent/text.h"
#include "agent/thread_store.h"
#include "cli/commands.h"
#include "cli/image_pull_display.h"
#include "cli/project_trust.h"
#include "cli/run_agent_files.h"
#include "cli/run_egress.h"
#include "cli/run_exit_codes.h"
#include "cli/run_format.h"
#include "cli/run_prompt.h"
#include "cli/run_sandbox.h"
#include "cli/run_signals.h"
#include "cli/run_ui.h"
#include "common/io.h"
#include "common/strings.h"
#include "common/unique_fd.h"
#include "mcp/oauth.h"

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

// Where the main thread is, for the signal thread: Ctrl-C in an interactive
// session abandons the line at the prompt or cancels the task being run;
// anywhere else (and SIGTERM/SIGHUP always) it ends the session.
enum Phase : int { kSetup, kPrompt, kTurn, kEnding };

// How long the session may take to wind down after a stop signal deleted the
// sandbox, before the signal thread exits the process itself: model calls,
// tools and prompts are cancellable, but a DNS lookup or TLS handshake to the
// model API is not.
constexpr std::chrono::milliseconds kStopGrace{1000};

void Fire(int fd) {
  uint64_t one = 1;
  while (::write(fd, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

// What the signal thread shares with the main thread.
struct Shared {
  std::atomic<bool> cancel{false};  // the current task (or the whole run) stops
  UniqueFd cancel_fd;               // eventfd, readable while `cancel` is set
  UniqueFd prompt_fd;               // eventfd: Ctrl-C at the interactive prompt
  std::atomic<int> phase{kSetup};
  std::atomic<bool> interactive{false};
  std::atomic<bool> turn_cancelled{false};

  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;                 // a stop signal arrived: the session ends
  bool done = false;                     // Session::Run returned
  bool held = false;                     // a sandbox is in use (claimed or attached)
  std::function<Status()> force_delete;  // set while a claimed sandbox is held
  std::string cleanup_hint;              // how to delete a sandbox left behind
  RunSummary snapshot;                   // what a result written by the signal thread says

  bool Stopping() {
    std::lock_guard<std::mutex> lock(mu);
    return stopping;
  }
  void Cancel() {
    cancel.store(true);
    Fire(cancel_fd.get());
  }
  // Before a task of an interactive session: a Ctrl-C that cancelled the
  // previous one must not cancel this one.
  void ResetTurn() {
    cancel.store(false);
    turn_cancelled.store(false);
    uint64_t n;
    while (::read(cancel_fd.get(), &n, sizeof n) > 0) {
    }
  }
  template <typename F>
  void UpdateSnapshot(F f) {
    std::lock_guard<std::mutex> lock(mu);
    f(snapshot);
  }
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

  // The working directory's project files that may be used: those the user
  // trusted (asked now on a terminal, or earlier for the same contents);
  // none without a terminal (one notice says what was ignored and how to use
  // it). nullopt: interrupted while asking.
  std::optional<ProjectInputs> TrustedProjectInputs(LineReader& reader, bool stdin_tty);

  RunConfig config_;
  RunUi& ui_;
  SignalWatcher& watcher_;
  Shared& shared_;
};

// Whether `file` (given with --mcp-config) is the working directory's .mcp.json.
bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

std::optional<ProjectInputs> Session::TrustedProjectInputs(LineReader& reader, bool stdin_tty) {
  ProjectInputs none;
  char cwd[4096];
  if (getcwd(cwd, sizeof cwd) == nullptr) return none;
  none.dir = cwd;
  bool want_mcp = false;
  want_mcp = !config_.no_mcp;
  for (const auto& f : config_.mcp_configs) {
    if (SameFile(f, none.dir + "/.mcp.json")) want_mcp = false;  // named: used as given
  }
  auto read = ReadProjectInputs(none.dir, want_mcp, config_.project_memory, config_.project_skills);
  if (!read) {
    ui_.Notice("not using this directory's project files: " + read.error().message);
    return none;
  }
  for (const auto& r : read->refused) ui_.Notice(r);
  if (read->empty()) return none;
  const std::string hash = read->Hash();
  TrustStore store(DefaultTrustDir());
  const bool can_ask = stdin_tty && isatty(STDERR_FILENO) == 1 && !config_.json;
  std::vector<std::string> lines = read->Describe();
  if (can_ask && store.IsTrusted(read->dir, hash)) return std::move(*read);
  if (can_ask) {
    std::string q = "deepbox: this directory has project files that deepbox run would use:\n";
    for (const auto& l : lines) q += "  " + l + "\n";
    q += "Trust them only if you wrote or reviewed them: a cloned repository or a directory "
         "copied out of a sandbox can run any program here through .mcp.json.\n"
         "Use them (and remember this answer until they change)? [y/N] ";
    (void)WriteAll(STDERR_FILENO, q, "stderr");
    auto answer = reader.ReadLine();
    if (!answer) {
      (void)WriteAll(STDERR_FILENO, "\n", "stderr");
      if (reader.interrupted()) return std::nullopt;
      answer = "";
    }
    std::string a(Trim(*answer));
    if (a == "y" || a == "Y" || a == "yes" || a == "YES" || a == "Yes") {
      if (auto st = store.Trust(read->dir, hash); !st) {
        ui_.Notice("could not record the decision (you will be asked again): " +
                   st.error().message);
      }
      return std::move(*read);
    }
    ui_.Notice("not using this directory's project files (you will be asked again next time)");
    return none;
  }
  std::string what;
  for (const auto& l : lines) {
    if (l.starts_with("    ")) continue;  // a server of .mcp.json
    what += (what.empty() ? "" : "; ") + l.substr(0, l.find(": "));
  }
  ui_.Notice("ignoring this directory's project files (" + what +
             "): without a terminal to ask on, deepbox run uses a project's files only when named "
             "(--mcp-config ./.mcp.json, --memory-file ./.deepagents/AGENTS.md, --skills "
             "./.deepagents/skills); on a terminal it asks once and remembers the answer");
  return none;
}

int Session::Run(RunSummary& summary) {
  // 1. The model: a missing API key or an unreadable replay file fails here,
  // before a sandbox is claimed.
  auto spec = agent::ParseModelSpec(config_.model);
  if (!spec) return Fail(summary, kRunExitUsage, spec.error(), "--model: ");
  // A replay file that cannot be read is a bad --model argument.
  std::optional<agent::ReplayFile> replay;
  if (spec->provider == agent::ModelProvider::kReplay) {
    auto file = agent::ReadReplayFile(spec->model);
    if (!file) return Fail(summary, kRunExitUsage, file.error(), "--model: ");
    replay = std::move(*file);
  }
  agent::ModelConfig mc;
  if (config_.anthropic_base_url) mc.anthropic_base_url = config_.anthropic_base_url;
  if (config_.openai_base_url) mc.openai_base_url = config_.openai_base_url;
  mc.read_idle_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(config_.model_idle_timeout_seconds * 1000));
  mc.record_path = config_.record_path;
  if (!config_.record_path.empty()) {
    mc.record_description = fmt::format("Recorded by `deepbox run` from {}", config_.model);
  }
  auto created = agent::CreateChatModel(config_.model, mc);
  if (!created) return Fail(summary, kRunExitModel, created.error());
  std::shared_ptr<agent::ChatModel> model(std::move(*created));
  summary.model = model->name();
  shared_.UpdateSnapshot([&](RunSummary& s) { s.model = summary.model; });
  if (replay) {
    ui_.Notice(
        fmt::format("replaying {}{}{}", spec->model,
                    replay->header.scripted ? " (a scripted conversation, not a live model)"
                                            : " (a recorded conversation)",
                    replay->header.description.empty() ? "" : ": " + replay->header.description));
  }
  // Warns once, on the first task, when the recording answered another one.
  auto check_replayed_task = [&](const std::string& task) {
    if (!replay || replay->turns.empty() || !replay->turns[0].task) return;
    const std::string& recorded = *replay->turns[0].task;
    if (Trim(recorded) == Trim(task)) return;
    ui_.Notice(fmt::format(
        "warning: the recording answers another task (\"{}\"); it replays the same answers "
        "whatever the task is",
        agent::CodePointCount(recorded) > 120
            ? std::string(agent::CodePointPrefix(recorded, 119)) + "…"
            : recorded));
  };
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
    std::string t(Trim(*all));
    if (t.empty()) {
      return Fail(summary, kRunExitUsage,
                  Error(ErrorCode::kInvalidArgument,
                        "no TASK: give it as an argument, on stdin, or run in a terminal for "
                        "an interactive prompt"));
    }
    first_task = t;
  }
  std::unique_ptr<LinePrompt> prompt;
  if (interactive) {
    LinePrompt::Options po;
    po.in_fd = STDIN_FILENO;
    po.out_fd =
        ui_.options().out_fd == STDOUT_FILENO && !config_.json ? STDOUT_FILENO : STDERR_FILENO;
    po.history_file = DefaultHistoryFile();
    po.color = ui_.options().color;
    po.interrupt_fd = shared_.prompt_fd.get();
    auto p = LinePrompt::Create(po);
    if (!p) return Fail(summary, kRunExitUsage, p.error(), "the interactive prompt: ");
    prompt = std::move(*p);
    shared_.interactive.store(true);
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
  // Ctrl-C cancels a question as it cancels the task that asked it.
  LineReader tty_reader(tty_fd ? tty_fd.get() : -1, shared_.cancel_fd.get());
  // Where the thread goes, checked before a sandbox is claimed.
  auto thread_store = std::make_shared<agent::ThreadStore>(
      config_.threads_dir.empty() ? DefaultThreadsDir() : config_.threads_dir);
  if (auto st = CheckThreadsDir(thread_store->dir()); !st) {
    return Fail(summary, kRunExitUsage, st.error(), "--threads-dir: ");
  }
  const bool resuming = !config_.thread_id.empty() && thread_store->Exists(config_.thread_id);
  std::string previous_sandbox;  // where the thread's last run ran
  if (resuming) {
    auto loaded = thread_store->Load(config_.thread_id);
    if (!loaded) return Fail(summary, kRunExitUsage, loaded.error(), "--thread: ");
    previous_sandbox = loaded->sandbox_id;
  }
  // Project files of the working directory (.mcp.json, .deepagents/): used
  // only once the user trusted exactly these contents (project_trust.h).
  auto project = TrustedProjectInputs(stdin_reader, stdin_tty);
  if (!project) return Interrupted(summary);
  // Skills and memory files are read from this machine now, copied into the
  // sandbox once it is there.
  auto agent_files = ReadAgentFiles(config_.skills_dirs, config_.memory_files);
  if (!agent_files) return Fail(summary, kRunExitUsage, agent_files.error());
  if (project->skills) agent_files->skills.push_back(std::move(*project->skills));
  if (project->memory) agent_files->memory.push_back(std::move(*project->memory));
  const bool stdout_tty = isatty(STDOUT_FILENO) == 1;

  // 3. The sandbox.
  const std::string run_id = RandomHex(12);
  auto providers = MakeRunProviders(config_);
  if (!providers) {
    // A --pool that names no pool is a usage error (CheckPoolExists).
    const bool bad_pool = providers.error().code == ErrorCode::kInvalidArgument &&
                          providers.error().message.starts_with("--pool ");
    return Fail(summary, bad_pool ? kRunExitUsage : kRunExitSandbox, providers.error());
  }
  SandboxProvider& provider = *providers->provider;
  std::shared_ptr<SandboxProvider> side = providers->side;
  summary.provider = provider.name();
  // A continued thread goes on in its last run's sandbox when that one was
  // kept and still exists (a suspended one is resumed by the attach);
  // otherwise in a new one, and the agent is told.
  if (config_.sandbox_id.empty() && !previous_sandbox.empty() &&
      provider.OwnsId(previous_sandbox) && side->Inspect(previous_sandbox)) {
    config_.sandbox_id = previous_sandbox;
  }
  const bool attached = !config_.sandbox_id.empty();
  ClaimOptions claim;
  claim.labels = config_.labels;
  claim.labels[kRunIdLabel] = run_id;
  claim.ttl = std::chrono::seconds(config_.ttl_seconds);
  claim.network = config_.network;
  claim.image = config_.image;
  if (!attached && !config_.image.empty() && provider.name() == "local") {
    // Pulled now, with `image pull`'s progress, rather than silently by the claim.
    if (auto st = cli::PullImageForSandbox(config_.image); !st) {
      return Fail(summary, kRunExitUsage, st.error(), "--image: ");
    }
  }
  if (!attached && !config_.secrets.empty()) {
    auto secrets = ResolveSecretFlags(config_.secrets);
    if (!secrets) return Fail(summary, kRunExitUsage, secrets.error(), "--secret: ");
    claim.secrets = std::move(*secrets);
  }
  claim.idle_suspend =
      std::chrono::seconds(config_.idle_suspend_seconds >= 0 ? config_.idle_suspend_seconds
                           : config_.keep_sandbox            ? kDefaultIdleSuspendSeconds
                                                             : 0);
  ui_.StartSpinner(attached ? "Connecting to sandbox " + config_.sandbox_id
                            : "Claiming a " + provider.description());
  auto claim_start = Clock::now();
  auto lease = attached ? provider.Attach(config_.sandbox_id) : provider.Claim(claim);
  ui_.StopSpinner();
  if (!lease) {
    if (shared_.Stopping()) return Interrupted(summary);
    if (attached) {
      if (lease.error().code == ErrorCode::kUnimplemented) {
        return Fail(summary, kRunExitUsage, lease.error(), "--sandbox-id: ");
      }
      return Fail(summary, kRunExitSandbox, lease.error(),
                  "--sandbox-id " + config_.sandbox_id + ": ");
    }
    // A claim that worked but whose daemon cannot be reached says so itself
    // (kReasonClaimedButUnreachable): it is no claim failure.
    return Fail(
        summary, kRunExitSandbox, lease.error(),
        lease.error().reason == kReasonClaimedButUnreachable ? "" : "cannot claim a sandbox: ");
  }
  LeaseGuard guard(std::move(*lease));
  const std::string sandbox_id = guard.sandbox().id();
  summary.sandbox_id = sandbox_id;
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    shared_.held = true;
    // A sandbox the run did not create is never deleted by it.
    if (!attached) {
      // Out of band, from the signal thread: the side handle, never the
      // lease or its Sandbox, which the agent may be using.
      shared_.force_delete = [side, sandbox_id]() -> Status {
        auto st = side->Delete(sandbox_id);
        if (!st && st.error().code == ErrorCode::kNotFound) return {};
        return st;
      };
    }
    shared_.cleanup_hint =
        summary.provider == "local"
            ? fmt::format("deepbox sandbox rm {}", sandbox_id)
            : fmt::format("kubectl delete sandboxclaim -l {}={}", kRunIdLabel, run_id);
    shared_.snapshot.provider = summary.provider;
    shared_.snapshot.sandbox_id = sandbox_id;
  }
  // --json: the sandbox's egress log as "egress" events while the run lasts.
  std::unique_ptr<EgressFollower> egress;
  // Stops the sandbox's watch (set once the agent's sandbox exists below).
  std::function<void()> stop_watch;
  // Ends what uses the sandbox (MCP servers inside it) before it is released.
  std::function<void()> before_release;
  // Releases on every path below (the guard releases too, as a last resort).
  auto release = [&]() -> int {
    egress.reset();  // its last poll, while the sandbox still exists
    if (before_release) std::exchange(before_release, nullptr)();
    if (stop_watch) std::exchange(stop_watch, nullptr)();  // our own delete is no news
    shared_.phase.store(kEnding);
    {
      std::lock_guard<std::mutex> lock(shared_.mu);
      shared_.force_delete = nullptr;
    }
    if (attached) {
      (void)guard.Release();  // leaves it running
      summary.sandbox_kept = true;
      ui_.SandboxReleased(sandbox_id, true, guard.Describe());
      return 0;
    }
    if (config_.keep_sandbox && !shared_.Stopping()) {
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
  if (shared_.Stopping()) {
    release();
    return Interrupted(summary);
  }
  ui_.SandboxReady(sandbox_id, summary.provider, Since(claim_start));
  if (config_.json) {
    egress = std::make_unique<EgressFollower>(side, sandbox_id,
                                              [this](const json::object& e) { ui_.Egress(e); });
  }
  if (!attached) {
    // What it runs with, and what this host did not enforce.
    if (auto info = side->Inspect(sandbox_id); info && !info->limits.empty()) {
      std::string line = "limits: " + info->limits;
      if (!info->limits_note.empty()) line += "; WARNING: " + info->limits_note;
      ui_.Notice(line);
    }
  }
  auto copied = CopyAgentFiles(guard.sandbox(), *agent_files);
  if (!copied) {
    int code = Fail(summary, kRunExitSandbox, copied.error(),
                    "copying skills and memory into the sandbox: ");
    release();
    return code;
  }
  if (!copied->summary.empty()) ui_.Notice(copied->summary);

  // 4. The agent.
  WatchedSandbox watched(
      guard.sandbox(), [&] { return ProbeSandbox(*side, sandbox_id, guard.sandbox()); },
      &shared_.cancel);
  // A sandbox deleted from outside ends the run at once instead of when it
  // stops answering (where the provider can watch; failed calls still probe).
  if (auto watch = side->Watch(sandbox_id, [&](const Error& why) {
        watched.MarkGone(why);
        shared_.Cancel();  // wakes a model call or tool waiting on cancel_fd
      })) {
    std::shared_ptr<SandboxWatch> shared_watch(std::move(*watch));
    stop_watch = [shared_watch] { shared_watch->Stop(); };
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
  ao.thread_store = thread_store;
  ao.skills_dirs = copied->skills_dirs;
  ao.memory_paths = copied->memory_paths;
  if (config_.approve == "manual") {
    for (const char* tool : {"execute", "write_file", "edit_file", "delete"}) {
      ao.interrupt_on[tool] = agent::InterruptConfig{};
    }
  }
  if (config_.fork_subagents) {
    // A fork (SandboxProvider::Fork) of this run's sandbox for one sub-agent,
    // with the run's labels and TTL (a deepbox that dies leaves it to the
    // TTL), deleted when the sub-agent ends.
    ClaimOptions fork_options = claim;
    fork_options.idle_suspend = std::chrono::seconds(0);
    ao.fork_sandbox = [side, sandbox_id, fork_options]() -> Result<std::shared_ptr<Sandbox>> {
      auto made = side->Fork(sandbox_id, 1, fork_options);
      if (!made) return tl::unexpected(made.error());
      const std::string id = made->at(0).id;
      auto lease = side->Attach(id);
      if (!lease) {
        (void)side->Delete(id);
        return tl::unexpected(lease.error());
      }
      std::shared_ptr<SandboxLease> held(std::move(*lease));
      Sandbox* forked = &held->sandbox();
      return std::shared_ptr<Sandbox>(forked, [side, id, held](Sandbox*) mutable {
        (void)held->Release();
        (void)side->Delete(id);
      });
    };
  }
  // MCP servers' tools (docs/mcp.md). A file that cannot be read or a server
  // that cannot start is a notice, not the end of the run.
  std::shared_ptr<agent::McpToolset> mcp_tools;
  if (!config_.no_mcp) {
    std::vector<agent::McpConfigText> project_mcp;
    if (project->mcp_json) project_mcp.push_back({project->dir + "/.mcp.json", *project->mcp_json});
    auto set = agent::LoadMcpConfigs(agent::DefaultMcpConfigPaths(), project_mcp,
                                     config_.mcp_configs, agent::McpProcessEnv());
    if (!set) {
      int code = Fail(summary, kRunExitUsage, set.error(), "MCP configuration: ");
      release();
      return code;
    }
    for (const auto& problem : set->problems) ui_.Notice("MCP: " + problem);
    if (!set->servers.empty()) {
      agent::McpToolsetOptions mo;
      mo.sandbox = &watched;
      mo.on_problem = [this](const std::string& message) { ui_.Notice(message); };
      // HTTP servers that ask for OAuth: the tokens `deepbox mcp login` kept on
      // this host (refreshed when they expire); no interactive authorization
      // mid-run, the error says to log in.
      if (auto oauth_file = mcp::DefaultOAuthStorePath()) {
        mcp::OAuthOptions oauth;
        oauth.store = std::make_shared<mcp::FileOAuthStore>(*oauth_file);
        mo.client.oauth = mcp::MakeOAuthSessionFactory(std::move(oauth));
      }
      mcp_tools = agent::McpToolset::Start(set->servers, std::move(mo));
      for (const auto& line : mcp_tools->Describe()) ui_.Notice("MCP server " + line);
      for (const auto& tool : mcp_tools->tools()) {
        ao.tools.push_back(tool);
        if (config_.approve == "manual") ao.interrupt_on[tool->name()] = agent::InterruptConfig{};
      }
    }
  }
  // Stops the servers before the sandbox they may run in is released.
  if (mcp_tools) before_release = [mcp_tools] { mcp_tools->Close(); };
  auto agent = agent::DeepAgent::Create(std::move(ao));
  if (!agent) {
    int code = Fail(summary, kRunExitUsage, agent.error(), "cannot start the agent: ");
    release();
    return code;
  }
  summary.thread_id = (*agent)->thread_id();
  shared_.UpdateSnapshot([&](RunSummary& s) { s.thread_id = summary.thread_id; });
  if (resuming) {
    ui_.Notice(fmt::format(
        "continuing thread {} ({} messages) {}", summary.thread_id,
        (*agent)->state().messages.size(),
        (*agent)->sandbox_changed()
            ? "in a new sandbox: the files of its earlier runs are not here (the agent is told); "
              "keep a sandbox with --keep-sandbox and continue in it with --sandbox-id ID"
            : "in the same sandbox"));
  }

  agent::RunCallbacks callbacks;
  callbacks.on_event = [&](const agent::AgentEvent& e) { ui_.OnEvent(e); };
  callbacks.cancel = &shared_.cancel;
  callbacks.cancel_fd = shared_.cancel_fd.get();
  if (config_.approve == "manual") {
    callbacks.on_interrupt = [&](const agent::InterruptRequest& request) {
      return ui_.Approve(request, tty_reader, tty_fd.get());
    };
  }

  int code = kRunExitOk;
  std::optional<std::string> task = first_task;
  if (interactive) {
    ui_.Notice(
        "type a task and press Enter (arrow keys edit and recall earlier tasks); Ctrl-C "
        "cancels the task being run, Ctrl-D or /exit ends the session");
  }
  bool history_warned = false;
  for (;;) {
    if (interactive) {
      shared_.phase.store(kPrompt);
      auto read = shared_.Stopping() ? LinePrompt::Read{} : prompt->ReadLine();
      shared_.phase.store(kSetup);
      if (shared_.Stopping()) {
        code = Interrupted(summary);
        break;
      }
      if (read.outcome == LinePrompt::Outcome::kInterrupted) continue;
      if (read.outcome == LinePrompt::Outcome::kEof) break;
      std::string line(Trim(read.line));
      if (line.empty()) continue;
      if (line == "/exit" || line == "/quit") break;
      if (auto st = prompt->AddHistory(line); !st && !history_warned) {
        history_warned = true;
        ui_.Notice("the prompt history is not saved: " + st.error().message);
      }
      task = line;
      shared_.ResetTurn();
      tty_reader.ResetInterrupt();
      shared_.phase.store(kTurn);
    }
    if (summary.runs == 0) check_replayed_task(*task);
    ui_.RunStarted(*task, summary.thread_id, summary.model);
    auto t0 = Clock::now();
    agent::RunResult r = (*agent)->Run(*task, callbacks);
    shared_.phase.store(kSetup);
    ui_.RunFinished(r, Since(t0));
    // Redirected (run TASK > answer.txt): the answer alone on stdout, the
    // transcript went to stderr.
    if (!config_.json && !stdout_tty && !r.final_text.empty() &&
        (r.stop_reason == agent::StopReason::kCompleted ||
         r.stop_reason == agent::StopReason::kTruncated)) {
      // A closed pipe: nothing more to do.
      (void)WriteAll(STDOUT_FILENO,
                     r.final_text.back() == '\n' ? r.final_text : r.final_text + "\n", "stdout");
    }
    summary.runs++;
    summary.steps += r.steps;
    summary.usage += r.usage;
    summary.cost_usd += r.cost_usd;
    summary.final_text = r.final_text;
    summary.stop_reason = std::string(agent::StopReasonName(r.stop_reason));
    summary.error.reset();
    code = kRunExitOk;
    if (shared_.Stopping()) {
      code = Interrupted(summary);
      break;
    }
    if (auto fatal = watched.fatal()) {
      code = Fail(summary, kRunExitSandbox, *fatal,
                  "the sandbox went away during the run (deleted from outside, expired or "
                  "crashed): ");
      break;
    }
    if (interactive && shared_.turn_cancelled.load()) {
      // Ctrl-C during the task: the session goes on.
      summary.stop_reason = "cancelled";
      ui_.Notice("task cancelled (the conversation and the sandbox are kept)");
      continue;
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
      case agent::StopReason::kTruncated:
        code =
            Fail(summary, kRunExitTruncated,
                 r.error.value_or(Error(ErrorCode::kResourceExhausted, "truncated")), "warning: ");
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
  // Not a terminal: the transcript goes to stderr, stdout gets the answer.
  if (!uo.json && isatty(STDOUT_FILENO) != 1) uo.out_fd = STDERR_FILENO;
  uo.color = !uo.json && ColorWanted(config ? config->color : !flags.no_color, uo.out_fd);
  uo.spinner = !uo.json && isatty(STDERR_FILENO) == 1;
  if (config) {
    uo.model_idle_timeout =
        std::chrono::milliseconds(static_cast<int64_t>(config->model_idle_timeout_seconds * 1000));
  }
  std::unique_ptr<RunUi> ui_owner = MakeRunUi(uo);
  RunUi& ui = *ui_owner;
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
  shared.cancel_fd.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  shared.prompt_fd.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!shared.cancel_fd || !shared.prompt_fd) {
    ui.ErrorLine(SyscallError("eventfd", errno).message);
    return kRunExitSandbox;
  }
  shared.snapshot.model = config->model;
  auto watcher = SignalWatcher::Start([&](int sig, int) {
    if (sig == SIGINT && shared.interactive.load()) {
      int phase = shared.phase.load();
      if (phase == kPrompt) {
        Fire(shared.prompt_fd.get());  // a fresh prompt
        return;
      }
      if (phase == kTurn && !shared.turn_cancelled.exchange(true)) {
        shared.Cancel();
        ui.Notice(
            "interrupted (Ctrl-C): cancelling the task (Ctrl-C again ends the session, Ctrl-D "
            "or /exit at the prompt ends it normally)");
        return;
      }
    }
    bool again, held;
    std::function<Status()> force_delete;
    std::string hint;
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      again = shared.stopping;
      shared.stopping = true;
      held = shared.held && shared.phase.load() != kEnding;
      force_delete = shared.force_delete;
      hint = shared.cleanup_hint;
    }
    shared.Cancel();
    Fire(shared.prompt_fd.get());
    if (again) {
      ui.ErrorLine(
          fmt::format("{} again: exiting now{}", SignalName(sig),
                      hint.empty() ? "" : "; if the sandbox is left, delete it with: " + hint));
      _exit(kRunExitInterrupted);
    }
    if (!held) {
      ui.Notice(fmt::format("{}: stopping (press Ctrl-C again to exit at once)", SignalName(sig)));
      return;
    }
    if (force_delete) {
      // Deleting the sandbox (even with --keep-sandbox) also ends a command
      // running in it, so the agent stops promptly.
      ui.Notice(fmt::format("{}: stopping the agent and deleting the sandbox", SignalName(sig)));
      if (auto st = force_delete(); !st) {
        ui.ErrorLine(
            fmt::format("deleting the sandbox: {} (delete it with: {})", st.error().message, hint));
      }
    } else {
      ui.Notice(fmt::format("{}: stopping the agent (the sandbox stays)", SignalName(sig)));
    }
    // The run must end within moments now. Everything it waits on is
    // cancellable except a connection being set up to the model API (name
    // lookup, TLS handshake): do not wait for that.
    std::unique_lock<std::mutex> lock(shared.mu);
    if (shared.cv.wait_for(lock, kStopGrace, [&] { return shared.done; })) return;
    RunSummary s = shared.snapshot;
    lock.unlock();
    ui.ErrorLine(
        fmt::format("{}: the run did not stop within {} (waiting for the model API?): exiting now",
                    SignalName(sig), FormatDuration(kStopGrace)));
    s.exit_code = kRunExitInterrupted;
    s.stop_reason = "interrupted";
    s.error = Error(ErrorCode::kCancelled, SignalName(sig));
    s.wall = Since(wall_start);
    ui.Result(s);
    _exit(kRunExitInterrupted);
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
  {
    std::lock_guard<std::mutex> lock(shared.mu);
    shared.done = true;
  }
  shared.cv.notify_all();
  summary.exit_code = code;
  summary.wall = Since(wall_start);
  watcher->reset();  // no callback may run past this point
  ui.Result(summary);
  return code;
}

}  // namespace deepbox::run
