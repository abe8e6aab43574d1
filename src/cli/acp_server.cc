#include "cli/acp_server.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "acp/jsonrpc_peer.h"
#include "acp/terminal_spool.h"
#include "agent/deep_agent.h"
#include "agent/mcp/config.h"
#include "agent/mcp/tools.h"
#include "agent/model/factory.h"
#include "agent/text.h"
#include "agent/thread_store.h"
#include "cli/run_sandbox.h"
#include "cli/run_signals.h"
#include "common/random.h"
#include "common/unique_fd.h"
#include "common/utf8.h"
#include "common/version.h"
#include "sandbox/forwarding_sandbox.h"
#include "sandbox/sandboxd_client.h"

namespace deepbox::cli {

namespace {

using acp::ApprovalMode;
using acp::JsonRpcPeer;
using acp::PermissionAnswer;
using acp::RpcError;
using acp::RpcMessage;

// The label naming the `deepbox acp` process whose session made a sandbox.
constexpr const char* kAcpLabel = "deepbox.dev/acp";
// Tool output kept per execute call for the editor (its tail).
constexpr size_t kMaxShownOutput = 64 * 1024;
// A file a command changed is proposed to the editor up to this size.
constexpr uint64_t kMaxProposedBytes = 8 << 20;
constexpr std::chrono::milliseconds kOutputUpdateInterval{100};
// What the editor's terminal keeps of a command shown there (terminal/create's
// outputByteLimit; the client drops the oldest output beyond it).
constexpr uint64_t kTerminalOutputLimit = 1u << 20;

// An `execute` call shown in the editor's terminal: the command's output goes
// into the spool as the sandbox streams it (the editor's terminal runs
// `deepbox acp-view SPOOL`), and its exit status is kept for the spool's end.
struct ExecTee {
  acp::OutputSpool* spool = nullptr;
  std::optional<int> exit_status;  // set once the command ended
};
// Set on the tool's thread from the execute call's start to its end: the
// command that thread sends through the session's sandbox is that call's.
thread_local ExecTee* t_exec_tee = nullptr;

// The status a shell shows for a command's end (the viewer exits with it).
int ShellStatus(const Result<ExecResult>& r) {
  if (!r) return r.error().code == ErrorCode::kCancelled ? 130 : 125;
  switch (r->kind) {
    case ExitKind::kExited:
      return r->exit_code & 0xff;
    case ExitKind::kSignaled:
    case ExitKind::kKilled:
      return 128 + (r->signal ? r->signal : 9);
    case ExitKind::kTimedOut:
      return 124;
    case ExitKind::kSpawnFailed:
      return 127;
  }
  return 125;
}

// This program, for the editor to run as the viewer.
std::string SelfExecutable() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("deepbox");
}

void LogLine(const std::string& line) {
  std::string l = "deepbox acp: " + line + "\n";
  (void)!::write(STDERR_FILENO, l.data(), l.size());
}

void FireFd(int fd) {
  uint64_t one = 1;
  while (::write(fd, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

std::string ArgStr(const json::object& args, std::string_view key) {
  const json::value* v = args.if_contains(key);
  return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

// As agent::Tool::MainArgument, for calls replayed from a saved thread.
std::string MainArgumentOf(const json::object& args) {
  for (const char* key : {"file_path", "path", "command", "pattern", "description"}) {
    if (auto v = ArgStr(args, key); !v.empty()) return v;
  }
  return "";
}

// edit_file's result on `text`, or nullopt when the edit would fail (the
// tool then fails on its own, and nothing is proposed).
std::optional<std::string> ApplyEdit(const std::string& text, const std::string& old_s,
                                     const std::string& new_s, bool replace_all) {
  if (old_s.empty()) return std::nullopt;
  size_t first = text.find(old_s);
  if (first == std::string::npos) return std::nullopt;
  if (!replace_all && text.find(old_s, first + old_s.size()) != std::string::npos) {
    return std::nullopt;
  }
  std::string out;
  size_t pos = 0;
  for (size_t at = first; at != std::string::npos; at = text.find(old_s, pos)) {
    out.append(text, pos, at - pos);
    out += new_s;
    pos = at + old_s.size();
    if (!replace_all) break;
  }
  out.append(text, pos, std::string::npos);
  return out;
}

// The session's sandbox as the agent sees it. session/cancel stops the
// commands running through it at once, by exec id
// (SandboxdClient::CancelExec): the client alone notices a cancel only at
// the stream's next keepalive (2 s). Reads first bring in the editor's text.
class SessionSandbox : public ForwardingSandbox {
 public:
  explicit SessionSandbox(Sandbox& inner)
      : ForwardingSandbox(inner), daemon_(dynamic_cast<SandboxdClient*>(&inner)) {}

  Result<ExecResult> ExecStream(const ExecRequest& request, const OutputCallback& cb) override {
    // The execute call's own command (the first this thread sends) also
    // goes to the editor's terminal.
    ExecTee* tee = std::exchange(t_exec_tee, nullptr);
    OutputCallback teed;
    if (tee) {
      teed = [tee, &cb](OutputStream stream, std::string_view data) {
        (void)tee->spool->Append(data);
        return cb(stream, data);
      };
    }
    ExecRequest r = request;
    std::string exec_id;
    r.on_exec_id = [this, &exec_id, &request](const std::string& id) {
      exec_id = id;
      if (!id.empty()) {
        std::lock_guard<std::mutex> lock(mu_);
        running_.insert(id);
      }
      if (request.on_exec_id) request.on_exec_id(id);
    };
    auto result = ForwardingSandbox::ExecStream(r, tee ? teed : cb);
    if (tee) {
      if (result && result->kind == ExitKind::kSpawnFailed && !result->error.empty()) {
        (void)tee->spool->Append(result->error + "\n");
      }
      tee->exit_status = ShellStatus(result);
    }
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(exec_id);
    return result;
  }

  // Called with the path before every read (the agent's read_file): the
  // editor's unsaved text goes into the sandbox first.
  void SetBeforeRead(std::function<void(const std::string&)> fn) { before_read_ = std::move(fn); }
  Result<ReadResult> Read(const std::string& path, const ReadOptions& options) override {
    if (before_read_) before_read_(path);
    return ForwardingSandbox::Read(path, options);
  }

  // From any thread: stops every command running through this sandbox.
  void CancelRunning() {
    std::set<std::string> ids;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ids = running_;
    }
    for (const auto& id : ids) Cancel(id);
  }

 private:
  void Cancel(const std::string& id) {
    if (!daemon_) return;  // the stream's own cancel still stops it, later
    if (auto st = daemon_->CancelExec(id); !st && st.error().code != ErrorCode::kNotFound) {
      LogLine("stopping a cancelled command in the sandbox: " + st.error().message);
    }
  }

  SandboxdClient* daemon_;  // null: a provider whose sandbox is no daemon client
  std::function<void(const std::string&)> before_read_;
  std::mutex mu_;
  std::set<std::string> running_;
};

// session/new's and session/load's mcpServers as deepbox MCP servers. A
// stdio server runs inside the session's sandbox (nothing of a session runs
// on the host); an http one is the editor's remote service, connected to from
// the host by deepbox's own MCP client, so its headers (tokens) never enter
// the sandbox. sse (the old HTTP+SSE transport) is not taken: the
// capabilities say so.
Result<std::vector<agent::McpServerConfig>> ClientMcpServers(const json::object& params) {
  std::vector<agent::McpServerConfig> out;
  const json::value* list = params.if_contains("mcpServers");
  if (!list || list->is_null()) return out;
  if (!list->is_array()) {
    return MakeError(ErrorCode::kInvalidArgument, "\"mcpServers\" must be an array");
  }
  // ACP's env and headers: [{"name": ..., "value": ...}].
  auto pairs = [](const json::object& o, std::string_view key) {
    std::map<std::string, std::string> m;
    if (const json::value* v = o.if_contains(key); v && v->is_array()) {
      for (const auto& e : v->get_array()) {
        if (const json::object* eo = e.if_object()) {
          m[FindString(*eo, {"name"})] = FindString(*eo, {"value"});
        }
      }
    }
    return m;
  };
  for (const auto& v : list->get_array()) {
    const json::object* o = v.if_object();
    if (!o) return MakeError(ErrorCode::kInvalidArgument, "an MCP server must be an object");
    agent::McpServerConfig c;
    c.name = FindString(*o, {"name"});
    std::string type = FindString(*o, {"type"});
    std::string command = FindString(*o, {"command"});
    if (c.name.empty()) return MakeError(ErrorCode::kInvalidArgument, "an MCP server needs a name");
    c.source = "the client's mcpServers";
    if (type == "http") {
      c.url = FindString(*o, {"url"});
      if (!c.url.starts_with("http://") && !c.url.starts_with("https://")) {
        LogLine("MCP server '" + c.name + "' skipped: its url must be http:// or https://");
        continue;
      }
      c.http = true;
      c.headers = pairs(*o, "headers");
      out.push_back(std::move(c));
      continue;
    }
    if ((!type.empty() && type != "stdio") || command.empty()) {
      LogLine("MCP server '" + c.name + "' skipped: only stdio and http servers are taken (type " +
              (type.empty() ? std::string("unknown") : type) + ")");
      continue;
    }
    c.command.push_back(command);
    if (const json::value* args = o->if_contains("args"); args && args->is_array()) {
      for (const auto& a : args->get_array()) {
        if (a.is_string()) c.command.emplace_back(a.get_string());
      }
    }
    c.env = pairs(*o, "env");
    c.sandbox = true;
    out.push_back(std::move(c));
  }
  return out;
}

// A file change being proposed, from the permission request to the write.
struct PendingChange {
  std::string sandbox_path;
  std::optional<std::string> host_path;  // nullopt: not a project file
  std::optional<std::string> old_text;   // the sandbox's text before; nullopt: none
  // The diff's "before": the editor's text of a project file the sandbox
  // never got (one .gitignore kept out), so that overwriting it does not look
  // like a new file; it never goes into the sandbox.
  std::optional<std::string> editor_text;
  std::optional<std::string> new_text;  // what the user was shown and allowed
  const std::optional<std::string>& DiffOld() const { return editor_text ? editor_text : old_text; }
  bool allowed = false;  // the user allowed exactly new_text
  bool seen = false;     // went through the interrupt handler (old_text is known)
};

// What the idle pauser did to a session's sandbox (--idle-pause,
// --idle-suspend); the next prompt resumes it.
enum class SandboxRest { kRunning, kPaused, kSuspended };

struct Session {
  std::string id;   // the deep agent's thread id
  std::string cwd;  // the client's project
  std::string root;
  std::unique_ptr<run::LeaseGuard> lease;
  std::unique_ptr<SessionSandbox> agent_sandbox;  // over the lease's
  // The client's servers: stdio ones in the sandbox, http ones from the host.
  std::shared_ptr<agent::McpToolset> mcp_tools;
  std::set<std::string> mcp_tool_names;
  std::set<std::string> mcp_http_tool_names;  // of those, the http servers' tools
  std::unique_ptr<agent::DeepAgent> agent;
  std::atomic<int> mode{0};
  agent::ModelProfile profile;  // the context window and prices: usage_update
  std::atomic<bool> always_edits{false};
  std::atomic<bool> always_execute{false};
  std::atomic<bool> cancel{false};
  UniqueFd cancel_fd;
  std::atomic<bool> busy{false};

  // The sandbox's idle pause (--idle-pause). Held across Pause and Resume,
  // so a prompt that starts while the idle pauser is pausing waits for it
  // and then resumes the sandbox.
  std::mutex idle_mu;
  int sandbox_users = 0;                     // prompts using the sandbox now: never paused then
  SandboxRest rest = SandboxRest::kRunning;  // what the idle pauser made of it
  std::chrono::steady_clock::time_point suspend_tried_since{};  // a suspend failed then
  std::chrono::steady_clock::time_point idle_since = std::chrono::steady_clock::now();

  // The sandbox's copy of the project as last checked (Sandbox::Tree, paths
  // relative to `root`): what differs after a command is what it changed.
  // nullopt: not checked (the daemon cannot, or the tree is too large).
  std::mutex tree_mu;  // one check at a time; taken before `mu`
  std::optional<std::map<std::string, TreeEntry>> tree;
  // Directories the listing does not enter (acp::IgnoredDirectoryNames): a
  // command's node_modules or build output is not walked after every command.
  std::vector<std::string> skip_dirs;

  std::mutex mu;  // the maps below
  // Paths (relative to `root`) the file tools wrote or deleted since the last
  // check: FinishFileChange proposes those, a check does not again.
  std::set<std::string> tool_touched;
  // The project's files the sandbox holds (relative paths): those copied
  // and those written back. Only these are ever read through the editor.
  std::set<std::string> project_files;
  std::set<std::string> announced;
  std::map<std::string, PendingChange> changes;
  std::map<std::string, std::string> outputs;
  std::map<std::string, std::chrono::steady_clock::time_point> output_sent;
  // execute calls shown in the editor's terminal, by tool call id.
  struct TerminalView {
    std::unique_ptr<acp::OutputSpool> spool;
    std::string terminal_id;
    ExecTee tee;
  };
  std::map<std::string, std::shared_ptr<TerminalView>> terminals;

  ApprovalMode Mode() const { return static_cast<ApprovalMode>(mode.load()); }
  ~Session() {
    agent.reset();  // it uses the sandbox: gone before the lease
    if (mcp_tools) mcp_tools->Close();
    agent_sandbox.reset();
    if (lease) {
      if (auto st = lease->Release(); !st) {
        LogLine(fmt::format("could not delete sandbox {}: {}", lease->sandbox().id(),
                            st.error().message));
      }
    }
  }
};

class AcpServer {
 public:
  AcpServer(const AcpConfig& config, JsonRpcPeer& peer, run::RunProviders providers)
      : config_(config), peer_(peer), providers_(std::move(providers)) {
    labels_ = config_.run.labels;
    labels_[kAcpLabel] = RandomHex(12);
  }

  // On the reading thread.
  void Handle(RpcMessage m);
  // The idle pauser (--idle-pause): one thread for every session; stopped
  // by Shutdown.
  void StartIdlePauser();
  // After the client went away (or a signal): every prompt cancelled and
  // awaited, every sandbox deleted.
  void Shutdown();

 private:
  // Runs `fn` on a thread of its own; threads that finished are joined here,
  // so a long editor session does not pile them up.
  void Spawn(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    workers_.push_back(Worker{std::thread([fn = std::move(fn), done] {
                                fn();
                                done->store(true);
                              }),
                              done});
  }
  std::shared_ptr<Session> Find(const json::object& params) {
    std::string id = FindString(params, {"sessionId"});
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(id);
    return it == sessions_.end() ? nullptr : it->second;
  }
  void Fail(const json::value& id, int code, const std::string& message) {
    (void)peer_.RespondError(id, RpcError{code, message, nullptr});
  }
  void Update(Session& s, json::object update) {
    (void)peer_.Notify("session/update", acp::SessionUpdate(s.id, std::move(update)));
  }

  // Before a prompt uses the session's sandbox: marks it in use (never
  // paused while in use) and resumes it if the idle pauser paused it. An
  // error names the sandbox and why it could not be resumed (it is then not
  // in use).
  Status BeginSandboxUse(Session& s);
  void EndSandboxUse(Session& s);
  void IdlePauserLoop();
  // Suspends or pauses `s`'s sandbox if it has been idle long enough.
  void RestIfIdle(Session& s, std::chrono::steady_clock::time_point now);

  // session/new, session/load (the thread's history replayed), session/resume
  // (not replayed: the editor shows it already) and session/fork (a copy of
  // the thread under a new id, not replayed).
  enum class Open { kNew, kLoad, kResume, kFork };
  void OpenSession(const RpcMessage& m, Open how);
  // session/close's work: the session out of the map, its prompt cancelled
  // and awaited, its sandbox deleted. false: no such session open.
  bool CloseOpenSession(const std::string& id);
  // session/delete: closed if open, then its saved thread removed.
  void DeleteSession(const RpcMessage& m);
  // session/list: the saved threads of deepbox acp sessions (those with a
  // "project" record), newest first, by cwd when asked, 100 a page.
  void ListSessions(const RpcMessage& m);
  // session/close: the session's prompt cancelled and awaited, its sandbox
  // deleted; its thread stays saved (session/load opens it again).
  void CloseSession(const RpcMessage& m);
  std::string ThreadsDir() const {
    return config_.run.threads_dir.empty() ? run::DefaultThreadsDir() : config_.run.threads_dir;
  }
  void Prompt(const RpcMessage& m);
  void ReplayHistory(Session& s);

  // The deep agent's callbacks for one prompt.
  void OnEvent(Session& s, const agent::AgentEvent& e);
  std::vector<agent::Decision> OnInterrupt(Session& s, const agent::InterruptRequest& request);
  agent::Decision Decide(Session& s, const agent::ActionRequest& action);
  bool NeedsAsking(Session& s, bool execute) const;
  // session/request_permission for a tool call; kCancelled when the client
  // is gone, the prompt was cancelled or the answer was unusable.
  PermissionAnswer Ask(Session& s, const std::string& call_id, json::object tool_call);
  // Puts the editor's text of a project file into the sandbox when it
  // differs; returns the sandbox's text after that (nullopt: not read).
  std::optional<std::string> SyncFromEditor(Session& s, const std::string& sandbox_path,
                                            const std::string& host_path);
  bool HasProjectFile(Session& s, const std::string& host_path);
  // fs/read_text_file; nullopt when the editor cannot give it (no such file).
  std::optional<std::string> EditorText(Session& s, const std::string& host_path);
  void FinishFileChange(Session& s, const agent::AgentEvent& e);
  // The sandbox's project tree now; RESOURCE_EXHAUSTED when it is too large
  // to list whole, UNIMPLEMENTED from a daemon without fs/tree.
  Result<std::map<std::string, TreeEntry>> ReadTree(Session& s);
  // A file tool is about to change `sandbox_path` (or the editor's text went
  // in): the next check leaves it to FinishFileChange.
  void NoteToolTouched(Session& s, const std::string& sandbox_path);
  // After a command (execute, an MCP tool whose server runs in the sandbox):
  // each project file it created or changed is proposed to the editor as an
  // edit, written back through fs/write_text_file when allowed and put back
  // in the sandbox when rejected; deletions are said.
  void ProposeCommandChanges(Session& s, const agent::AgentEvent& e);
  // One of them, and what became of it.
  enum class Proposal { kWritten, kRestored, kLeft, kUnanswered };
  Proposal ProposeFile(Session& s, const agent::AgentEvent& e, const std::string& rel,
                       const TreeEntry& entry, bool project_file, int n);
  // terminal/create for an execute call about to run: the editor's terminal
  // runs `deepbox acp-view SPOOL`, which shows the sandbox's output. null when
  // the client offers no terminal or it failed (the output goes into the
  // tool call's content then, as without terminals).
  std::shared_ptr<Session::TerminalView> StartTerminal(Session& s, const agent::AgentEvent& e);
  // The command ended: its status into the spool, the viewer awaited, the
  // final update, terminal/release.
  void FinishTerminal(Session& s, const agent::AgentEvent& e, Session::TerminalView& view);
  // The project file a sandbox path stands for, on the host: nullopt outside
  // the project's copy, under .git/ or deepbox's own directories, and where
  // the host's path goes through a symlink (acp::IsPlainProjectPath), since
  // the editor would follow it out of the project.
  std::optional<std::string> HostPathFor(const Session& s, const std::string& sandbox_path) const {
    auto host = acp::ProjectPathFor(s.root, s.cwd, sandbox_path);
    if (!host || !acp::IsPlainProjectPath(s.cwd, host->substr(s.cwd.size() + 1))) {
      return std::nullopt;
    }
    return host;
  }
  std::string SandboxPath(const Session& s, const std::string& path) const {
    return acp::NormalizeAbsolutePath(path.starts_with("/") ? path : s.root + "/" + path);
  }

  const AcpConfig& config_;
  JsonRpcPeer& peer_;
  run::RunProviders providers_;
  std::map<std::string, std::string> labels_;
  acp::ClientCapabilities client_;
  std::mutex claim_mu_;  // one claim at a time through the provider
  std::mutex spool_mu_;
  std::unique_ptr<acp::SpoolDir> spool_dir_;  // made on the first terminal
  uint64_t spool_count_ = 0;
  std::atomic<bool> terminal_failed_{false};  // said once on stderr

  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Session>> sessions_;
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Worker> workers_;
  bool shutting_down_ = false;

  std::thread idle_pauser_;
  std::mutex idle_stop_mu_;
  std::condition_variable idle_stop_cv_;
  bool idle_stop_ = false;
  // The provider cannot pause (k8s may answer UNIMPLEMENTED): said once,
  // then sandboxes stay running.
  std::atomic<bool> pause_unsupported_{false};
  std::atomic<bool> suspend_unsupported_{false};
};

Status AcpServer::BeginSandboxUse(Session& s) {
  std::lock_guard<std::mutex> lock(s.idle_mu);
  if (s.rest != SandboxRest::kRunning) {
    const std::string id = s.lease->sandbox().id();
    const char* how = s.rest == SandboxRest::kPaused ? "paused" : "suspended";
    if (auto st = providers_.provider->Resume(id); !st) {
      return MakeError(st.error().code, fmt::format("cannot resume sandbox {} of session {} ({} "
                                                    "while idle): {}",
                                                    id, s.id, how, st.error().message));
    }
    const bool suspended = s.rest == SandboxRest::kSuspended;
    s.rest = SandboxRest::kRunning;
    LogLine(fmt::format("session {}: sandbox {} resumed (was {})", s.id, id, how));
    // A suspend ended every process: the client's stdio servers among them.
    // Started again before the prompt runs (a server that does not start is
    // reported, and its tools answer with an error naming it).
    if (suspended && s.mcp_tools && s.mcp_tools->RestartSandboxed() > 0) {
      for (const auto& line : s.mcp_tools->Describe()) {
        LogLine("session " + s.id + ": MCP server (after the resume) " + line);
      }
    }
  }
  ++s.sandbox_users;
  return {};
}

void AcpServer::EndSandboxUse(Session& s) {
  std::lock_guard<std::mutex> lock(s.idle_mu);
  --s.sandbox_users;
  s.idle_since = std::chrono::steady_clock::now();
  s.suspend_tried_since = {};
}

void AcpServer::StartIdlePauser() {
  if (config_.idle_pause.count() <= 0 && config_.idle_suspend.count() <= 0) return;
  idle_pauser_ = std::thread([this] { IdlePauserLoop(); });
}

void AcpServer::IdlePauserLoop() {
  // Checked often enough that a sandbox is paused (suspended) at most a
  // second (or a quarter of the period) late; each check only reads the
  // sessions' state.
  auto shortest = std::chrono::milliseconds(std::chrono::seconds(1));
  for (auto period : {config_.idle_pause, config_.idle_suspend}) {
    if (period.count() > 0) {
      shortest = std::min<std::chrono::milliseconds>(
          shortest, std::max<std::chrono::milliseconds>(std::chrono::milliseconds(100),
                                                        std::chrono::milliseconds(period) / 4));
    }
  }
  std::unique_lock<std::mutex> stop_lock(idle_stop_mu_);
  while (!idle_stop_cv_.wait_for(stop_lock, shortest, [this] { return idle_stop_; })) {
    if (pause_unsupported_.load() && suspend_unsupported_.load()) return;
    stop_lock.unlock();
    std::vector<std::shared_ptr<Session>> sessions;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [id, s] : sessions_) sessions.push_back(s);
    }
    const auto now = std::chrono::steady_clock::now();
    for (auto& s : sessions) RestIfIdle(*s, now);
    sessions.clear();
    stop_lock.lock();
  }
}

void AcpServer::RestIfIdle(Session& s, std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> lock(s.idle_mu);
  if (s.sandbox_users > 0 || s.busy.load() || s.rest == SandboxRest::kSuspended) return;
  const auto idle = now - s.idle_since;
  const std::string id = s.lease->sandbox().id();
  // Suspended after --idle-suspend (from running or paused): every process
  // ends, memory is freed; the client's stdio MCP servers, processes in the
  // sandbox, are started again on resume (BeginSandboxUse).
  if (config_.idle_suspend.count() > 0 && idle >= config_.idle_suspend &&
      !suspend_unsupported_.load() &&
      (s.suspend_tried_since == std::chrono::steady_clock::time_point{} ||
       now - s.suspend_tried_since >= config_.idle_suspend)) {
    auto st = providers_.provider->Suspend(id, SuspendOptions{});
    if (st) {
      s.rest = SandboxRest::kSuspended;
      LogLine("session " + s.id + ": sandbox " + id + " suspended (idle)");
      return;
    }
    if (st.error().code == ErrorCode::kUnimplemented) {
      if (!suspend_unsupported_.exchange(true)) {
        LogLine("idle sandboxes are not suspended: " + st.error().message);
      }
    } else {
      LogLine("session " + s.id + ": suspending idle sandbox " + id + ": " + st.error().message);
      s.suspend_tried_since = now;  // tried again after another idle period
    }
  }
  if (s.rest == SandboxRest::kPaused || config_.idle_pause.count() <= 0 ||
      pause_unsupported_.load() || idle < config_.idle_pause) {
    return;
  }
  auto st = providers_.provider->Pause(id);
  if (!st) {
    if (st.error().code == ErrorCode::kUnimplemented) {
      if (!pause_unsupported_.exchange(true)) {
        LogLine("idle sandboxes stay running: " + st.error().message);
      }
      return;
    }
    LogLine("session " + s.id + ": pausing idle sandbox " + id + ": " + st.error().message);
    s.idle_since = now;  // tried again after another idle period
    return;
  }
  s.rest = SandboxRest::kPaused;
  LogLine("session " + s.id + ": sandbox " + id + " paused (idle)");
}

void AcpServer::Handle(RpcMessage m) {
  const bool request = m.kind == RpcMessage::Kind::kRequest;
  const std::string& method = m.method;
  if (method == "initialize") {
    client_ = acp::ParseClientCapabilities(m.params);
    (void)peer_.Respond(m.id, acp::InitializeResult(m.params, kVersion));
    return;
  }
  if (method == "authenticate") {
    // The key is read from the environment when a session starts: nothing to
    // do here (a missing key fails session/new with auth_required).
    if (request) (void)peer_.Respond(m.id, json::object{});
    return;
  }
  if (method == "session/new" || method == "session/load" || method == "session/resume" ||
      method == "session/fork") {
    if (!request) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shutting_down_) return;
    }
    const Open how = method == "session/new"    ? Open::kNew
                     : method == "session/load" ? Open::kLoad
                     : method == "session/fork" ? Open::kFork
                                                : Open::kResume;
    Spawn([this, how, m = std::move(m)] { OpenSession(m, how); });
    return;
  }
  if (method == "session/delete") {
    if (!request) return;
    Spawn([this, m = std::move(m)] { DeleteSession(m); });
    return;
  }
  if (method == "session/prompt") {
    if (!request) return;
    Spawn([this, m = std::move(m)] { Prompt(m); });
    return;
  }
  if (method == "session/list") {
    if (!request) return;
    Spawn([this, m = std::move(m)] { ListSessions(m); });
    return;
  }
  if (method == "session/close") {
    if (!request) return;
    Spawn([this, m = std::move(m)] { CloseSession(m); });
    return;
  }
  if (method == "session/cancel") {
    if (auto s = Find(m.params)) {
      s->cancel.store(true);
      FireFd(s->cancel_fd.get());
      // Off the reading thread: each is a request to the sandbox's daemon.
      if (s->busy.load()) Spawn([s] { s->agent_sandbox->CancelRunning(); });
    }
    return;
  }
  if (method == "session/set_mode") {
    if (!request) return;
    auto s = Find(m.params);
    if (!s) return Fail(m.id, acp::kResourceNotFound, "no such session");
    auto mode = acp::ParseModeId(FindString(m.params, {"modeId"}));
    if (!mode) {
      return Fail(m.id, acp::kInvalidParams,
                  "unknown modeId \"" + FindString(m.params, {"modeId"}) +
                      "\" (approve-all, approve-execute or auto)");
    }
    s->mode.store(static_cast<int>(*mode));
    (void)peer_.Respond(m.id, json::object{});
    return;
  }
  if (request) Fail(m.id, acp::kMethodNotFound, "Method not found: " + method);
  // Unknown notifications are ignored, as JSON-RPC wants.
}

void AcpServer::OpenSession(const RpcMessage& m, Open how) {
  const bool load = how != Open::kNew;  // a saved thread goes on
  const json::object& p = m.params;
  std::string cwd = FindString(p, {"cwd"});
  if (cwd.empty() || cwd.front() != '/') {
    return Fail(m.id, acp::kInvalidParams, "\"cwd\" must be an absolute path");
  }
  struct stat st {};
  if (::stat(cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Fail(m.id, acp::kInvalidParams, "\"cwd\" " + cwd + " is not a directory");
  }
  auto mcp_servers = ClientMcpServers(p);
  if (!mcp_servers) return Fail(m.id, acp::kInvalidParams, mcp_servers.error().message);
  auto thread_store = std::make_shared<agent::ThreadStore>(ThreadsDir());
  std::string thread_id;
  // A fork whose session does not open leaves no thread behind.
  struct ForkCleanup {
    std::string path;
    bool keep = false;
    ~ForkCleanup() {
      if (!path.empty() && !keep) ::unlink(path.c_str());
    }
  } fork_cleanup;
  if (load) {
    thread_id = FindString(p, {"sessionId"});
    if (!agent::ValidThreadId(thread_id) || !thread_store->Exists(thread_id)) {
      return Fail(m.id, acp::kResourceNotFound,
                  "no saved deepbox thread \"" + thread_id + "\" in " + thread_store->dir());
    }
    if (how == Open::kFork) {
      // The copy goes on under its own id; the original stays as it is (and
      // may stay open).
      auto forked = thread_store->Fork(thread_id);
      if (!forked) {
        return Fail(m.id, acp::kInternalError,
                    "forking thread " + thread_id + ": " + forked.error().message);
      }
      thread_id = std::move(*forked);
      fork_cleanup.path = thread_store->PathFor(thread_id);
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      if (sessions_.contains(thread_id)) {
        return Fail(m.id, acp::kInvalidParams, "session " + thread_id + " is already open");
      }
    }
  } else {
    thread_id = agent::ThreadStore::NewThreadId();
  }
  // The model first: a missing key costs no sandbox.
  agent::ModelConfig mc;
  if (config_.run.anthropic_base_url) mc.anthropic_base_url = config_.run.anthropic_base_url;
  if (config_.run.openai_base_url) mc.openai_base_url = config_.run.openai_base_url;
  mc.read_idle_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(config_.run.model_idle_timeout_seconds * 1000));
  auto model = agent::CreateChatModel(config_.run.model, mc);
  if (!model) {
    const bool auth = model.error().code == ErrorCode::kUnauthenticated;
    return Fail(m.id, auth ? acp::kAuthRequired : acp::kInternalError,
                "the model (" + config_.run.model + "): " + model.error().message);
  }
  // Then the project against the caps, before a sandbox is claimed.
  if (auto scan = acp::ScanProject(cwd, config_.copy); !scan) {
    return Fail(m.id, acp::kInvalidParams, "the project " + cwd + ": " + scan.error().message);
  }
  auto s = std::make_shared<Session>();
  s->id = thread_id;
  s->cwd = acp::NormalizeAbsolutePath(cwd);  // no trailing '/': paths are cut after it
  s->mode.store(static_cast<int>(config_.mode));
  s->cancel_fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s->cancel_fd) return Fail(m.id, acp::kInternalError, SyscallError("eventfd", errno).message);
  ClaimOptions claim;
  claim.labels = labels_;
  claim.ttl = std::chrono::seconds(config_.run.ttl_seconds);
  claim.network = config_.run.network;
  claim.image = config_.run.image;
  Result<std::unique_ptr<SandboxLease>> lease = MakeError(ErrorCode::kInternal, "not claimed");
  {
    std::lock_guard<std::mutex> lock(claim_mu_);
    lease = providers_.provider->Claim(claim);
  }
  if (!lease) {
    return Fail(m.id, acp::kInternalError, "cannot claim a sandbox: " + lease.error().message);
  }
  s->lease = std::make_unique<run::LeaseGuard>(std::move(*lease));
  Sandbox& sandbox = s->lease->sandbox();
  s->root = sandbox.root();
  auto copied = acp::CopyProjectToSandbox(cwd, sandbox, s->root, config_.copy);
  if (!copied) {
    return Fail(m.id, acp::kInternalError,
                "copying the project into the sandbox: " + copied.error().message);
  }
  LogLine(
      fmt::format("session {}: sandbox {} holds a copy of {} ({} files, {} bytes; {} "
                  "excluded by .gitignore, {} symlinks and {} special files not copied)",
                  thread_id, sandbox.id(), cwd, copied->files, copied->bytes, copied->ignored,
                  copied->symlinks.size(), copied->special.size()));
  agent::DeepAgentOptions ao;
  ao.model = std::shared_ptr<agent::ChatModel>(std::move(*model));
  s->profile = ao.model->profile();
  s->project_files.insert(copied->copied.begin(), copied->copied.end());
  // What commands change is found against this (ProposeCommandChanges).
  s->skip_dirs = acp::IgnoredDirectoryNames(cwd);
  if (auto tree = ReadTree(*s)) {
    s->tree = std::move(*tree);
  } else {
    LogLine(
        fmt::format("session {}: what commands change in the project is not proposed to "
                    "the editor: {}",
                    thread_id, tree.error().message));
  }
  s->agent_sandbox = std::make_unique<SessionSandbox>(sandbox);
  if (client_.read_text_file) {
    Session* raw = s.get();  // the sandbox wrapper dies with the session
    s->agent_sandbox->SetBeforeRead([this, raw](const std::string& path) {
      const std::string full = SandboxPath(*raw, path);
      if (auto host = HostPathFor(*raw, full)) {
        (void)SyncFromEditor(*raw, full, *host);
      }
    });
  }
  ao.sandbox = s->agent_sandbox.get();
  ao.system_prompt = config_.run.system_prompt;
  ao.max_steps = config_.run.max_steps;
  ao.thread_id = thread_id;
  ao.thread_store = thread_store;
  // Every change passes the session's interrupt handler: it shows the diff
  // and asks when the mode says so.
  for (const char* tool : {"execute", "write_file", "edit_file", "delete"}) {
    ao.interrupt_on[tool] = agent::InterruptConfig{};
  }
  // The client's stdio MCP servers run inside the sandbox, as everything else
  // does; its http servers are reached from the host.
  if (!mcp_servers->empty()) {
    agent::McpToolsetOptions mo;
    mo.sandbox = s->agent_sandbox.get();
    mo.on_problem = [id = thread_id](const std::string& why) {
      LogLine("session " + id + ": MCP: " + why);
    };
    s->mcp_tools = agent::McpToolset::Start(*mcp_servers, std::move(mo));
    for (const auto& line : s->mcp_tools->Describe()) {
      LogLine("session " + thread_id + ": MCP server " + line);
    }
    for (const auto& tool : s->mcp_tools->tools()) {
      ao.tools.push_back(tool);
      ao.interrupt_on[tool->name()] = agent::InterruptConfig{};
      s->mcp_tool_names.insert(tool->name());
      if (const auto* server = s->mcp_tools->ServerOf(tool->name()); server && server->http) {
        s->mcp_http_tool_names.insert(tool->name());
      }
    }
  }
  auto created = agent::DeepAgent::Create(std::move(ao));
  if (!created) {
    return Fail(m.id, acp::kInternalError, "cannot start the agent: " + created.error().message);
  }
  s->agent = std::move(*created);
  // The client's project, for session/list (the thread's file exists now).
  if (auto w = thread_store->OpenWriter(thread_id);
      !w || !(*w)->Append("project", json::object{{"path", s->cwd}, {"ts", agent::IsoNowUtc()}})) {
    LogLine("session " + thread_id + ": its project is not recorded for session/list");
  }
  s->idle_since = std::chrono::steady_clock::now();  // idle from now, not from the claim
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) return;  // `s` goes, and its sandbox with it
    sessions_[thread_id] = s;
  }
  json::object result{{"modes", acp::ModesJson(s->Mode())}};
  if (how == Open::kLoad) ReplayHistory(*s);
  if (how == Open::kNew || how == Open::kFork) result["sessionId"] = thread_id;
  fork_cleanup.keep = true;
  (void)peer_.Respond(m.id, result);
}

void AcpServer::ListSessions(const RpcMessage& m) {
  constexpr size_t kPageSize = 100;
  std::string cwd = FindString(m.params, {"cwd"});
  if (!cwd.empty()) {
    if (cwd.front() != '/') return Fail(m.id, acp::kInvalidParams, "\"cwd\" must be absolute");
    cwd = acp::NormalizeAbsolutePath(cwd);
  }
  // The cursor: how many matching sessions earlier pages held.
  size_t skip = 0;
  if (std::string cursor = FindString(m.params, {"cursor"}); !cursor.empty()) {
    auto [end, ec] = std::from_chars(cursor.data(), cursor.data() + cursor.size(), skip);
    if (ec != std::errc{} || end != cursor.data() + cursor.size()) {
      return Fail(m.id, acp::kInvalidParams, "\"cursor\" is not one this agent gave");
    }
  }
  agent::ThreadStore store(ThreadsDir());
  auto threads = store.List();
  if (!threads) {
    return Fail(m.id, acp::kInternalError,
                "listing " + store.dir() + ": " + threads.error().message);
  }
  json::array sessions;
  size_t matched = 0;
  bool more = false;
  for (const auto& info : *threads) {
    auto t = store.Summarize(info.id);
    if (!t || t->project.empty() || (!cwd.empty() && t->project != cwd)) continue;
    if (matched++ < skip) continue;
    if (sessions.size() == kPageSize) {
      more = true;
      break;
    }
    sessions.push_back(
        acp::SessionInfoJson(info.id, t->project, t->first_prompt, info.modified_at));
  }
  json::object result{{"sessions", std::move(sessions)}};
  if (more) result["nextCursor"] = std::to_string(skip + kPageSize);
  (void)peer_.Respond(m.id, result);
}

void AcpServer::CloseSession(const RpcMessage& m) {
  if (!CloseOpenSession(FindString(m.params, {"sessionId"}))) {
    return Fail(m.id, acp::kResourceNotFound, "no such session");
  }
  (void)peer_.Respond(m.id, json::object{});
}

void AcpServer::DeleteSession(const RpcMessage& m) {
  const std::string id = FindString(m.params, {"sessionId"});
  agent::ThreadStore store(ThreadsDir());
  if (!agent::ValidThreadId(id) || !store.Exists(id)) {
    return Fail(m.id, acp::kResourceNotFound,
                "no saved deepbox thread \"" + id + "\" in " + store.dir());
  }
  (void)CloseOpenSession(id);
  if (::unlink(store.PathFor(id).c_str()) != 0 && errno != ENOENT) {
    return Fail(m.id, acp::kInternalError,
                SyscallError("unlink", errno, store.PathFor(id)).message);
  }
  LogLine("session " + id + " deleted: its saved thread is removed");
  (void)peer_.Respond(m.id, json::object{});
}

bool AcpServer::CloseOpenSession(const std::string& session_id) {
  std::shared_ptr<Session> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) return false;
    s = std::move(it->second);
    sessions_.erase(it);  // no new prompt finds it
  }
  // A prompt that started before the erase is cancelled (again, should it
  // have cleared the flag as it began) until it has ended.
  while (s->busy.load()) {
    s->cancel.store(true);
    FireFd(s->cancel_fd.get());
    s->agent_sandbox->CancelRunning();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // The prompt's thread and the idle pauser let go of it right after: the
  // last reference deletes the sandbox, here, before the answer.
  while (s.use_count() > 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const std::string id = s->id;
  s.reset();
  LogLine("session " + id + " closed: its sandbox is deleted, its thread kept");
  return true;
}

void AcpServer::ReplayHistory(Session& s) {
  agent::AgentState state = s.agent->state();
  std::map<std::string, bool> failed;
  for (const auto& msg : state.messages) {
    if (msg.role == agent::Role::kTool) failed[msg.tool_call_id] = msg.is_error;
  }
  for (const auto& msg : state.messages) {
    if (msg.role == agent::Role::kUser) {
      if (!msg.text.empty()) Update(s, acp::MessageChunk("user_message_chunk", msg.text));
      for (const auto& image : msg.images) {
        Update(s, json::object{{"sessionUpdate", "user_message_chunk"},
                               {"content", json::object{{"type", "image"},
                                                        {"mimeType", image.media_type},
                                                        {"data", image.base64_data}}}});
      }
    } else if (msg.role == agent::Role::kAssistant) {
      if (!msg.text.empty()) Update(s, acp::MessageChunk("agent_message_chunk", msg.text));
      for (const auto& c : msg.tool_calls) {
        if (c.name == "write_todos") continue;
        auto f = failed.find(c.id);
        Update(s, json::object{{"sessionUpdate", "tool_call"},
                               {"toolCallId", c.id},
                               {"title", acp::ToolTitle(c.name, MainArgumentOf(c.input))},
                               {"kind", acp::ToolKind(c.name)},
                               {"status", f != failed.end() && f->second ? "failed" : "completed"},
                               {"rawInput", c.input}});
      }
    }
  }
  if (!state.todos.empty()) Update(s, acp::PlanUpdate(state.todos));
}

void AcpServer::Prompt(const RpcMessage& m) {
  auto s = Find(m.params);
  if (!s) return Fail(m.id, acp::kResourceNotFound, "no such session");
  auto prompt = acp::ParsePrompt(m.params);
  if (!prompt) return Fail(m.id, acp::kInvalidParams, prompt.error().message);
  if (s->busy.exchange(true)) {
    return Fail(m.id, acp::kInvalidRequest, "a prompt is already running in this session");
  }
  // Before anything touches the sandbox (the editor's text goes in on
  // reads): a sandbox paused while idle runs again.
  if (auto st = BeginSandboxUse(*s); !st) {
    s->busy.store(false);
    LogLine(st.error().message);
    return Fail(m.id, acp::kInternalError, st.error().message);
  }
  s->cancel.store(false);
  uint64_t drained;
  while (::read(s->cancel_fd.get(), &drained, sizeof drained) > 0) {
  }
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->announced.clear();
    s->changes.clear();
    s->outputs.clear();
    s->output_sent.clear();
  }
  agent::RunCallbacks callbacks;
  callbacks.on_event = [this, s](const agent::AgentEvent& e) { OnEvent(*s, e); };
  callbacks.on_interrupt = [this, s](const agent::InterruptRequest& r) {
    return std::optional<std::vector<agent::Decision>>(OnInterrupt(*s, r));
  };
  callbacks.cancel = &s->cancel;
  callbacks.cancel_fd = s->cancel_fd.get();
  std::vector<agent::ImageBlock> images;
  for (auto& image : prompt->images) {
    images.push_back(agent::ImageBlock{image.mime_type, std::move(image.base64_data)});
  }
  agent::RunResult r = s->agent->Run(prompt->text, std::move(images), callbacks);
  EndSandboxUse(*s);
  s->busy.store(false);
  std::string stop;
  switch (r.stop_reason) {
    case agent::StopReason::kCompleted:
      stop = "end_turn";
      break;
    case agent::StopReason::kCancelled:
    case agent::StopReason::kInterrupted:
      stop = "cancelled";
      break;
    case agent::StopReason::kStepLimit:
      stop = "max_turn_requests";
      break;
    case agent::StopReason::kTruncated:
      stop = "max_tokens";
      break;
    case agent::StopReason::kError:
      if (s->cancel.load()) {
        stop = "cancelled";
        break;
      }
      return Fail(m.id, acp::kInternalError,
                  r.error ? r.error->message : std::string("the agent failed"));
  }
  const agent::Usage& u = r.usage;
  json::object usage{{"inputTokens", u.input_tokens + u.cache_read_tokens + u.cache_write_tokens},
                     {"outputTokens", u.output_tokens},
                     {"totalTokens", u.input_tokens + u.cache_read_tokens + u.cache_write_tokens +
                                         u.output_tokens},
                     {"cachedReadTokens", u.cache_read_tokens},
                     {"cachedWriteTokens", u.cache_write_tokens}};
  (void)peer_.Respond(m.id, json::object{{"stopReason", stop}, {"usage", std::move(usage)}});
}

bool AcpServer::NeedsAsking(Session& s, bool execute) const {
  switch (s.Mode()) {
    case ApprovalMode::kAuto:
      return false;
    case ApprovalMode::kApproveExecute:
      return execute && !s.always_execute.load();
    case ApprovalMode::kApproveAll:
      return execute ? !s.always_execute.load() : !s.always_edits.load();
  }
  return true;
}

PermissionAnswer AcpServer::Ask(Session& s, const std::string& call_id, json::object tool_call) {
  tool_call["toolCallId"] = call_id;
  auto r = peer_.Call("session/request_permission",
                      json::object{{"sessionId", s.id},
                                   {"toolCall", std::move(tool_call)},
                                   {"options", acp::PermissionOptions()}},
                      &s.cancel);
  if (!r) {
    if (r.error().code != ErrorCode::kCancelled) {
      LogLine("session/request_permission: " + r.error().message);
    }
    // No answer is no permission; a client that is gone ends the prompt.
    if (r.error().code == ErrorCode::kUnavailable) {
      s.cancel.store(true);
      FireFd(s.cancel_fd.get());
    }
    return PermissionAnswer::kCancelled;
  }
  PermissionAnswer a = acp::ParsePermissionAnswer(*r);
  if (a == PermissionAnswer::kCancelled) {
    // The client answers "cancelled" after session/cancel.
    s.cancel.store(true);
    FireFd(s.cancel_fd.get());
  }
  return a;
}

bool AcpServer::HasProjectFile(Session& s, const std::string& host_path) {
  std::lock_guard<std::mutex> lock(s.mu);
  return s.project_files.contains(host_path.substr(s.cwd.size() + 1));
}

std::optional<std::string> AcpServer::EditorText(Session& s, const std::string& host_path) {
  auto r = peer_.Call("fs/read_text_file", json::object{{"sessionId", s.id}, {"path", host_path}},
                      &s.cancel);
  if (!r || !r->is_object()) return std::nullopt;
  const json::value* content = r->get_object().if_contains("content");
  if (!content || !content->is_string()) return std::nullopt;
  return std::string(content->get_string());
}

std::optional<std::string> AcpServer::SyncFromEditor(Session& s, const std::string& sandbox_path,
                                                     const std::string& host_path) {
  // Only a project file the sandbox got from the project (copied or written
  // back): a file .gitignore kept out (.env, keys) is never fetched into the
  // sandbox, even when the agent made one of that name there.
  if (!client_.read_text_file) return std::nullopt;
  if (!HasProjectFile(s, host_path)) return std::nullopt;
  Sandbox& sandbox = s.lease->sandbox();
  auto current = sandbox.Download(sandbox_path);
  if (!current) return std::nullopt;  // gone from the sandbox: nothing to bring in
  auto editor = EditorText(s, host_path);
  if (!editor || *editor == *current) return std::move(*current);
  auto info = sandbox.Stat(sandbox_path);  // only for its mode: +x stays
  NoteToolTouched(s, sandbox_path);
  if (!info || !sandbox.Write(sandbox_path, *editor, info->mode & 07777)) {
    return std::move(*current);
  }
  return editor;
}

std::vector<agent::Decision> AcpServer::OnInterrupt(Session& s,
                                                    const agent::InterruptRequest& request) {
  std::vector<agent::Decision> out;
  for (const auto& a : request.action_requests) out.push_back(Decide(s, a));
  return out;
}

agent::Decision AcpServer::Decide(Session& s, const agent::ActionRequest& a) {
  if (s.cancel.load()) return agent::Decision::Reject("cancelled by the user");
  Sandbox& sandbox = s.lease->sandbox();
  const std::string arg = ArgStr(a.args, a.name == "execute" ? "command" : "file_path");
  // An MCP tool may do anything its server does: asked like a command.
  const bool execute = a.name == "execute" || s.mcp_tool_names.contains(a.name);
  json::array content;
  json::array locations;
  PendingChange change;
  std::string title = acp::ToolTitle(a.name, arg);
  if (a.name == "write_file" || a.name == "edit_file") {
    change.sandbox_path = SandboxPath(s, arg);
    NoteToolTouched(s, change.sandbox_path);
    change.host_path = HostPathFor(s, change.sandbox_path);
    if (change.host_path) {
      change.old_text = SyncFromEditor(s, change.sandbox_path, *change.host_path);
      locations.push_back(json::object{{"path", *change.host_path}});
      title = acp::ToolTitle(a.name, change.host_path->substr(s.cwd.size() + 1));
    }
    // The text before, for the diff (read once: the sync above may have read it).
    if (!change.old_text) {
      if (auto old = sandbox.Download(change.sandbox_path)) change.old_text = std::move(*old);
    }
    if (change.host_path && client_.read_text_file && !HasProjectFile(s, *change.host_path)) {
      change.editor_text = EditorText(s, *change.host_path);
    }
    if (a.name == "write_file") {
      change.new_text = ArgStr(a.args, "content");
    } else if (change.old_text) {
      const json::value* all = a.args.if_contains("replace_all");
      change.new_text =
          ApplyEdit(*change.old_text, ArgStr(a.args, "old_string"), ArgStr(a.args, "new_string"),
                    all && all->is_bool() && all->get_bool());
    }
    if (change.new_text) {
      content.push_back(acp::DiffContent(change.host_path.value_or(change.sandbox_path),
                                         change.DiffOld(), *change.new_text));
    }
  } else if (a.name == "delete") {
    const std::string path = SandboxPath(s, arg);
    NoteToolTouched(s, path);
    content.push_back(acp::TextContent(
        "Deletes " + path +
        " in the sandbox. The project's file stays: ACP offers no way to delete a file "
        "through the editor."));
  } else if (a.name == "execute") {
    content.push_back(acp::TextContent("$ " + arg + "\n(runs in the sandbox)"));
  } else if (execute) {
    content.push_back(acp::TextContent("MCP tool " + a.name +
                                       (s.mcp_http_tool_names.contains(a.name)
                                            ? " (an HTTP server, called from this machine)"
                                            : " (its server runs in the sandbox)")));
  }
  json::object call{{"title", title},     {"kind", acp::ToolKind(a.name)}, {"status", "pending"},
                    {"content", content}, {"locations", locations},        {"rawInput", a.args}};
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.announced.insert(a.tool_call_id);
  }
  json::object announce = call;
  announce["sessionUpdate"] = "tool_call";
  announce["toolCallId"] = a.tool_call_id;
  Update(s, std::move(announce));
  bool allowed = true;
  if (NeedsAsking(s, execute)) {
    PermissionAnswer answer = Ask(s, a.tool_call_id, call);
    if (answer == PermissionAnswer::kAllowAlways) {
      (execute ? s.always_execute : s.always_edits).store(true);
    }
    allowed = answer == PermissionAnswer::kAllowOnce || answer == PermissionAnswer::kAllowAlways;
    if (!allowed) {
      const bool cancelled = answer == PermissionAnswer::kCancelled;
      Update(s, json::object{{"sessionUpdate", "tool_call_update"},
                             {"toolCallId", a.tool_call_id},
                             {"status", "failed"},
                             {"content", json::array{acp::TextContent(
                                             cancelled ? "Cancelled: nothing was changed"
                                                       : "Rejected: nothing was changed")}}});
      return agent::Decision::Reject(cancelled ? "The user cancelled this call."
                                               : "The user rejected this call.");
    }
  }
  if (!change.sandbox_path.empty()) {
    change.allowed = allowed;
    change.seen = true;
    std::lock_guard<std::mutex> lock(s.mu);
    s.changes[a.tool_call_id] = std::move(change);
  }
  return agent::Decision::Approve();
}

void AcpServer::FinishFileChange(Session& s, const agent::AgentEvent& e) {
  Sandbox& sandbox = s.lease->sandbox();
  PendingChange change;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.changes.find(e.tool_call_id);
    if (it != s.changes.end()) change = it->second;
  }
  if (change.sandbox_path.empty()) {  // a sub-agent's call: not seen by the handler
    change.sandbox_path = SandboxPath(s, ArgStr(e.tool_args, "file_path"));
    change.host_path = HostPathFor(s, change.sandbox_path);
    NoteToolTouched(s, change.sandbox_path);
  }
  auto done = [&](const char* status, json::array content) {
    json::object u{{"sessionUpdate", "tool_call_update"},
                   {"toolCallId", e.tool_call_id},
                   {"status", status},
                   {"content", std::move(content)}};
    if (change.host_path) u["locations"] = json::array{json::object{{"path", *change.host_path}}};
    Update(s, std::move(u));
  };
  if (!change.host_path) {
    return done("completed", json::array{acp::TextContent(
                                 "Changed " + change.sandbox_path +
                                 " in the sandbox (not a project file: nothing to write back)")});
  }
  // write_file wrote exactly its content (one sandbox round trip saved per
  // call); edit_file's result is read back (the daemon may have matched
  // the old text across CRLF/LF differences).
  Result<std::string> actual = e.tool_name == "write_file"
                                   ? Result<std::string>(ArgStr(e.tool_args, "content"))
                                   : sandbox.Download(change.sandbox_path);
  if (!actual) {
    return done("failed", json::array{acp::TextContent("reading the result in the sandbox: " +
                                                       actual.error().message)});
  }
  if (!IsValidUtf8(*actual)) {
    return done("failed", json::array{acp::TextContent(
                              "The result is not text: it stays in the sandbox (the editor "
                              "writes text files only)")});
  }
  json::array diff{acp::DiffContent(*change.host_path, change.DiffOld(), *actual)};
  bool may_write = !NeedsAsking(s, false) || (change.allowed && change.new_text == *actual);
  if (!may_write) {
    // What the tool made differs from what the user allowed (or nobody was
    // asked, e.g. a sub-agent's call): ask about the real result.
    json::object call{
        {"title", acp::ToolTitle(e.tool_name, change.host_path->substr(s.cwd.size() + 1))},
        {"kind", "edit"},
        {"status", "pending"},
        {"content", diff},
        {"locations", json::array{json::object{{"path", *change.host_path}}}}};
    PermissionAnswer answer = Ask(s, e.tool_call_id, std::move(call));
    if (answer == PermissionAnswer::kAllowAlways) s.always_edits.store(true);
    may_write = answer == PermissionAnswer::kAllowOnce || answer == PermissionAnswer::kAllowAlways;
    if (!may_write) {
      if (!change.seen) {  // what the file held before is not known here
        return done("failed", json::array{acp::TextContent(
                                  "Rejected: the project is unchanged (the sandbox keeps the "
                                  "change)")});
      }
      // The sandbox goes back to its text before, so it agrees with the project.
      if (change.old_text) {
        auto info = sandbox.Stat(change.sandbox_path);
        (void)sandbox.Write(change.sandbox_path, *change.old_text,
                            info ? info->mode & 07777 : 0644);
      } else {
        (void)sandbox.Delete(change.sandbox_path);
      }
      return done("failed", json::array{acp::TextContent("Rejected: the project is unchanged")});
    }
  }
  if (!client_.write_text_file) {
    diff.push_back(acp::TextContent(
        "The editor does not offer fs/write_text_file: the change is in the sandbox only"));
    return done("completed", std::move(diff));
  }
  auto w = peer_.Call(
      "fs/write_text_file",
      json::object{
          {"sessionId", s.id}, {"path", *change.host_path}, {"content", JsonString(*actual)}},
      &s.cancel);
  if (!w) {
    return done("failed",
                json::array{acp::TextContent("The editor did not write " + *change.host_path +
                                             ": " + w.error().message)});
  }
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.project_files.insert(change.host_path->substr(s.cwd.size() + 1));
  }
  // The tool call already shows this very diff (announced before it ran):
  // the final update need not carry the file's text again.
  if (change.seen && change.new_text == *actual) {
    Update(s, json::object{{"sessionUpdate", "tool_call_update"},
                           {"toolCallId", e.tool_call_id},
                           {"status", "completed"},
                           {"locations", json::array{json::object{{"path", *change.host_path}}}}});
    return;
  }
  done("completed", std::move(diff));
}

Result<std::map<std::string, TreeEntry>> AcpServer::ReadTree(Session& s) {
  TreeRequest request;
  request.path = s.root;
  request.skip_dirs = s.skip_dirs;  // never copied, never proposed: not listed
  auto tree = s.lease->sandbox().Tree(request);
  if (!tree) return tl::unexpected(tree.error());
  if (tree->truncated) {
    return MakeError(ErrorCode::kResourceExhausted,
                     "the sandbox's copy of the project has too many files to check");
  }
  std::map<std::string, TreeEntry> out;
  for (auto& e : tree->entries) {
    std::string rel = e.path;
    out.emplace(std::move(rel), std::move(e));
  }
  return out;
}

void AcpServer::NoteToolTouched(Session& s, const std::string& sandbox_path) {
  if (!sandbox_path.starts_with(s.root + "/")) return;
  std::lock_guard<std::mutex> lock(s.mu);
  s.tool_touched.insert(sandbox_path.substr(s.root.size() + 1));
}

void AcpServer::ProposeCommandChanges(Session& s, const agent::AgentEvent& e) {
  std::lock_guard<std::mutex> check(s.tree_mu);
  if (!s.tree) return;
  auto now = ReadTree(s);
  if (!now) {
    const ErrorCode code = now.error().code;
    if (code == ErrorCode::kUnimplemented || code == ErrorCode::kResourceExhausted) {
      LogLine(
          fmt::format("session {}: from now on, what commands change in the project is not "
                      "proposed to the editor: {}",
                      s.id, now.error().message));
      s.tree.reset();
    } else {  // the baseline stays: the next command's check proposes these changes too
      LogLine(fmt::format("session {}: what the command changed could not be checked now: {}", s.id,
                          now.error().message));
    }
    return;
  }
  std::set<std::string> touched;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    touched.swap(s.tool_touched);
  }
  const std::map<std::string, TreeEntry>& before = *s.tree;
  auto project_file = [&](const std::string& rel) {
    std::lock_guard<std::mutex> lock(s.mu);
    return s.project_files.contains(rel);
  };
  // What the command changed, against the last check: files the file tools
  // wrote are theirs; symlinks stay in the sandbox (the copy leaves them on
  // the host), and so do new files .gitignore keeps out.
  acp::ProjectIgnores ignores(s.cwd);
  std::vector<std::pair<std::string, bool>> changed;  // path, a project file
  for (const auto& [rel, entry] : *now) {
    auto was = before.find(rel);
    if ((was != before.end() && was->second == entry) || touched.contains(rel)) continue;
    if (entry.symlink) continue;
    // Through a symlink on the host (a link to ~/.ssh): not the project's.
    if (!acp::IsPlainProjectPath(s.cwd, rel)) continue;
    const bool known = project_file(rel);
    if (known || !ignores.Ignored(rel)) changed.emplace_back(rel, known);
  }
  std::vector<std::string> deleted;
  for (const auto& [rel, entry] : before) {
    if (!now->contains(rel) && !touched.contains(rel) && project_file(rel)) deleted.push_back(rel);
  }

  bool restored = false;
  std::vector<std::string> unanswered;  // still changes for the next check to propose
  int n = 0;
  for (const auto& [rel, known] : changed) {
    Proposal p =
        s.cancel.load() ? Proposal::kUnanswered : ProposeFile(s, e, rel, now->at(rel), known, ++n);
    if (p == Proposal::kRestored) restored = true;
    if (p == Proposal::kUnanswered) unanswered.push_back(rel);
  }
  if (!deleted.empty()) {
    std::string list;
    json::array locations;
    for (const auto& rel : deleted) {
      list += (list.empty() ? "" : ", ") + rel;
      locations.push_back(json::object{{"path", s.cwd + "/" + rel}});
    }
    Update(s, json::object{
                  {"sessionUpdate", "tool_call"},
                  {"toolCallId", e.tool_call_id + "/deleted"},
                  {"title", "Deleted in the sandbox: " + list},
                  {"kind", "delete"},
                  {"status", "completed"},
                  {"locations", std::move(locations)},
                  {"content", json::array{acp::TextContent(
                                  "The command deleted " + list +
                                  " in the sandbox. The project's files stay: ACP offers no way "
                                  "to delete a file through the editor.")}}});
  }
  // What the next check compares with: the tree now, or after the put-back
  // files (new times, removed new files) when any was put back.
  std::map<std::string, TreeEntry> next = std::move(*now);
  if (restored) {
    if (auto again = ReadTree(s)) next = std::move(*again);
  }
  for (const auto& rel : unanswered) {
    if (auto was = before.find(rel); was != before.end()) {
      next[rel] = was->second;
    } else {
      next.erase(rel);
    }
  }
  s.tree = std::move(next);
}

AcpServer::Proposal AcpServer::ProposeFile(Session& s, const agent::AgentEvent& e,
                                           const std::string& rel, const TreeEntry& entry,
                                           bool project_file, int n) {
  Sandbox& sandbox = s.lease->sandbox();
  const std::string host_path = s.cwd + "/" + rel;
  const std::string sandbox_path = s.root + "/" + rel;
  const std::string call_id = fmt::format("{}/{}", e.tool_call_id, n);
  const json::array locations{json::object{{"path", host_path}}};
  json::object call{{"title", "Write back " + rel + " (changed by the command)"},
                    {"kind", "edit"},
                    {"status", "pending"},
                    {"locations", locations}};
  auto finish = [&](const char* status, json::array content) {
    json::object u{
        {"sessionUpdate", "tool_call_update"}, {"toolCallId", call_id}, {"status", status}};
    if (!content.empty()) u["content"] = std::move(content);  // else the diff shown stays
    Update(s, std::move(u));
  };
  auto announce = [&](json::array content) {
    json::object u = call;
    u["sessionUpdate"] = "tool_call";
    u["toolCallId"] = call_id;
    u["content"] = std::move(content);
    Update(s, std::move(u));
  };
  if (entry.size > kMaxProposedBytes) {
    announce({});
    finish("failed", json::array{acp::TextContent(fmt::format(
                         "{} bytes: too large to propose; it stays in the sandbox", entry.size))});
    return Proposal::kLeft;
  }
  auto text = sandbox.Download(sandbox_path);
  if (!text) {
    if (text.error().code == ErrorCode::kNotFound) return Proposal::kLeft;  // gone meanwhile
    announce({});
    finish("failed",
           json::array{acp::TextContent("reading it in the sandbox: " + text.error().message)});
    return Proposal::kLeft;
  }
  // Build output, caches (NUL bytes are valid UTF-8 but never in text):
  // not for the editor, which writes text.
  if (!IsValidUtf8(*text) || text->find('\0') != std::string::npos) {
    LogLine(
        fmt::format("session {}: {} (changed by a command) is not text: it stays in the "
                    "sandbox",
                    s.id, rel));
    return Proposal::kLeft;
  }
  // The project's text: the editor's (unsaved edits included), else the disk's.
  std::optional<std::string> old_text;
  if (client_.read_text_file) old_text = EditorText(s, host_path);
  if (!old_text) {
    if (auto disk = acp::ReadProjectFile(s.cwd, rel, kMaxProposedBytes)) {
      old_text = std::move(*disk);
    }
  }
  if (old_text == *text) return Proposal::kLeft;  // only touched: nothing to propose
  json::array diff{acp::DiffContent(host_path, old_text, *text)};
  call["content"] = diff;
  announce(diff);
  bool allowed = true;
  if (NeedsAsking(s, false)) {
    PermissionAnswer answer = Ask(s, call_id, call);
    if (answer == PermissionAnswer::kAllowAlways) s.always_edits.store(true);
    if (answer == PermissionAnswer::kCancelled) {
      finish("failed", json::array{acp::TextContent(
                           "Cancelled: the project is unchanged (the sandbox keeps the change)")});
      return Proposal::kUnanswered;
    }
    allowed = answer == PermissionAnswer::kAllowOnce || answer == PermissionAnswer::kAllowAlways;
  }
  if (!allowed) {
    // The sandbox goes back to the project's text, so the two agree.
    Status put_back = old_text ? sandbox.Write(sandbox_path, *old_text, entry.mode)
                               : sandbox.Delete(sandbox_path);
    if (!put_back) {
      finish("failed",
             json::array{acp::TextContent("Rejected: the project is unchanged; putting the "
                                          "sandbox's file back failed: " +
                                          put_back.error().message)});
      return Proposal::kLeft;
    }
    finish("failed", json::array{acp::TextContent(
                         old_text ? "Rejected: the project is unchanged (the sandbox's file "
                                    "has the project's text again)"
                                  : "Rejected: the project is unchanged (the new file was "
                                    "removed from the sandbox)")});
    return Proposal::kRestored;
  }
  if (!client_.write_text_file) {
    diff.push_back(acp::TextContent(
        "The editor does not offer fs/write_text_file: the change is in the sandbox only"));
    finish("completed", std::move(diff));
    return Proposal::kLeft;
  }
  auto w = peer_.Call(
      "fs/write_text_file",
      json::object{{"sessionId", s.id}, {"path", host_path}, {"content", JsonString(*text)}},
      &s.cancel);
  if (!w) {
    finish("failed", json::array{acp::TextContent("The editor did not write " + host_path + ": " +
                                                  w.error().message)});
    return Proposal::kLeft;
  }
  if (!project_file) {
    std::lock_guard<std::mutex> lock(s.mu);
    s.project_files.insert(rel);
  }
  finish("completed", {});
  return Proposal::kWritten;
}

std::shared_ptr<Session::TerminalView> AcpServer::StartTerminal(Session& s,
                                                                const agent::AgentEvent& e) {
  auto view = std::make_shared<Session::TerminalView>();
  {
    std::lock_guard<std::mutex> lock(spool_mu_);
    if (!spool_dir_) {
      auto dir = acp::SpoolDir::Create();
      if (!dir) {
        if (!terminal_failed_.exchange(true)) {
          LogLine("commands are shown in the tool calls, not the editor's terminal: " +
                  dir.error().message);
        }
        return nullptr;
      }
      spool_dir_ = std::move(*dir);
    }
    auto spool =
        acp::OutputSpool::Create(spool_dir_->path(), fmt::format("{}.out", ++spool_count_));
    if (!spool) {
      LogLine("a spool for the editor's terminal: " + spool.error().message);
      return nullptr;
    }
    view->spool = std::move(*spool);
  }
  view->tee.spool = view->spool.get();
  // The editor runs the viewer, never the command: `deepbox acp-view` only
  // follows the spool this process writes from the sandbox's output.
  auto r = peer_.Call("terminal/create",
                      json::object{{"sessionId", s.id},
                                   {"command", SelfExecutable()},
                                   {"args", json::array{"acp-view", view->spool->path()}},
                                   {"env", json::array{}},
                                   {"cwd", s.cwd},
                                   {"outputByteLimit", kTerminalOutputLimit}},
                      &s.cancel);
  const json::object* o = r && r->is_object() ? &r->get_object() : nullptr;
  view->terminal_id = o ? FindString(*o, {"terminalId"}) : "";
  if (view->terminal_id.empty()) {
    if (!r && r.error().code == ErrorCode::kCancelled) return nullptr;
    if (!terminal_failed_.exchange(true)) {
      LogLine("terminal/create failed (" + (r ? std::string("no terminalId") : r.error().message) +
              "): commands are shown in their tool calls");
    }
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(s.mu);
  s.terminals[e.tool_call_id] = view;
  return view;
}

void AcpServer::FinishTerminal(Session& s, const agent::AgentEvent& e,
                               Session::TerminalView& view) {
  if (!view.tee.exit_status) {
    // The command never ran (the tool failed first): the terminal says why.
    (void)view.spool->Append(e.output_preview + "\n");
  }
  (void)view.spool->Finish(view.tee.exit_status.value_or(125));
  // The viewer shows the last of the output and exits with the status.
  const json::object ids{{"sessionId", s.id}, {"terminalId", view.terminal_id}};
  if (auto w = peer_.Call("terminal/wait_for_exit", ids, &s.cancel);
      !w && w.error().code != ErrorCode::kCancelled) {
    LogLine("terminal/wait_for_exit: " + w.error().message);
  }
  Update(s, json::object{{"sessionUpdate", "tool_call_update"},
                         {"toolCallId", e.tool_call_id},
                         {"status", e.ok ? "completed" : "failed"},
                         {"content", json::array{acp::TerminalContent(view.terminal_id)}},
                         {"rawOutput", json::object{{"output", JsonString(e.output_preview)}}}});
  // Released even after a cancel: the viewer would otherwise wait on.
  if (auto rel = peer_.Call("terminal/release", ids); !rel) {
    LogLine("terminal/release: " + rel.error().message);
  }
  std::lock_guard<std::mutex> lock(s.mu);
  s.terminals.erase(e.tool_call_id);  // the spool's files go with it
}

void AcpServer::OnEvent(Session& s, const agent::AgentEvent& e) {
  using agent::EventType;
  switch (e.type) {
    case EventType::kTextDelta:
      if (e.depth == 0 && !e.text.empty()) {
        Update(s, acp::MessageChunk("agent_message_chunk", e.text));
      }
      return;
    case EventType::kTodoUpdate:
      if (e.depth == 0) Update(s, acp::PlanUpdate(e.todos));
      return;
    case EventType::kUsage: {
      // The context after this model call (what it read and wrote) against
      // the model's window, and the thread's cost so far. Not sent when the
      // window is unknown: `size` is required.
      if (e.depth != 0 || s.profile.max_input_tokens <= 0) return;
      const agent::Usage& u = e.usage;
      json::object update{
          {"sessionUpdate", "usage_update"},
          {"used", u.input_tokens + u.cache_read_tokens + u.cache_write_tokens + u.output_tokens},
          {"size", s.profile.max_input_tokens}};
      if (double cost = s.profile.CostUsd(e.total_usage); cost > 0) {
        update["cost"] = json::object{{"amount", cost}, {"currency", "USD"}};
      }
      Update(s, std::move(update));
      return;
    }
    case EventType::kToolCallStart: {
      if (e.tool_name == "write_todos") return;
      bool announced;
      {
        std::lock_guard<std::mutex> lock(s.mu);
        announced = !s.announced.insert(e.tool_call_id).second;
      }
      json::object u{{"toolCallId", e.tool_call_id}, {"status", "in_progress"}};
      if (announced) {
        u["sessionUpdate"] = "tool_call_update";
      } else {
        u["sessionUpdate"] = "tool_call";
        u["title"] = acp::ToolTitle(e.tool_name, e.main_argument);
        u["kind"] = acp::ToolKind(e.tool_name);
        u["rawInput"] = e.tool_args;
        const std::string p = ArgStr(e.tool_args, e.tool_name == "ls" ? "path" : "file_path");
        if (!p.empty()) {
          if (auto host = HostPathFor(s, SandboxPath(s, p))) {
            u["locations"] = json::array{json::object{{"path", *host}}};
          }
        }
      }
      if (e.tool_name == "execute" && client_.terminal) {
        if (auto view = StartTerminal(s, e)) {
          t_exec_tee = &view->tee;  // this thread runs the command next
          u["content"] = json::array{acp::TerminalContent(view->terminal_id)};
        }
      }
      Update(s, std::move(u));
      return;
    }
    case EventType::kToolOutput: {
      std::string shown;
      {
        std::lock_guard<std::mutex> lock(s.mu);
        if (s.terminals.contains(e.tool_call_id)) return;  // the terminal shows it
        std::string& out = s.outputs[e.tool_call_id];
        out += e.text;
        if (out.size() > kMaxShownOutput) out.erase(0, out.size() - kMaxShownOutput);
        // Each update carries the whole output shown: a chatty command sends
        // one every kOutputUpdateInterval at most (the end sends the rest).
        auto now = std::chrono::steady_clock::now();
        auto& last = s.output_sent[e.tool_call_id];
        if (now - last < kOutputUpdateInterval) return;
        last = now;
        shown = out;
      }
      Update(s,
             json::object{{"sessionUpdate", "tool_call_update"},
                          {"toolCallId", e.tool_call_id},
                          {"content", json::array{acp::TextContent("```\n" + shown + "\n```")}}});
      return;
    }
    case EventType::kToolCallEnd: {
      if (e.tool_name == "write_todos") return;
      if ((e.tool_name == "write_file" || e.tool_name == "edit_file") && e.ok) {
        return FinishFileChange(s, e);
      }
      if (e.tool_name == "execute") {
        t_exec_tee = nullptr;  // the command never ran: nothing else takes it
        std::shared_ptr<Session::TerminalView> view;
        {
          std::lock_guard<std::mutex> lock(s.mu);
          auto it = s.terminals.find(e.tool_call_id);
          if (it != s.terminals.end()) view = it->second;
        }
        if (view) {
          FinishTerminal(s, e, *view);
          return ProposeCommandChanges(s, e);
        }
      }
      std::string shown;
      {
        std::lock_guard<std::mutex> lock(s.mu);
        auto it = s.outputs.find(e.tool_call_id);
        if (it != s.outputs.end()) shown = it->second;
      }
      std::string text = shown.empty() ? e.output_preview : "```\n" + shown + "\n```";
      json::object u{{"sessionUpdate", "tool_call_update"},
                     {"toolCallId", e.tool_call_id},
                     {"status", e.ok ? "completed" : "failed"},
                     {"rawOutput", json::object{{"output", JsonString(e.output_preview)}}}};
      if (!text.empty()) u["content"] = json::array{acp::TextContent(text)};
      Update(s, std::move(u));
      // A command may change any file: execute, and an MCP tool whose server
      // runs in the sandbox.
      bool sandboxed_tool;
      {
        std::lock_guard<std::mutex> lock(s.mu);
        sandboxed_tool =
            s.mcp_tool_names.contains(e.tool_name) && !s.mcp_http_tool_names.contains(e.tool_name);
      }
      if (e.tool_name == "execute" || sandboxed_tool) ProposeCommandChanges(s, e);
      return;
    }
    case EventType::kToolCallRejected: {
      bool announced;
      {
        std::lock_guard<std::mutex> lock(s.mu);
        announced = s.announced.contains(e.tool_call_id);
      }
      json::object u{{"sessionUpdate", announced ? "tool_call_update" : "tool_call"},
                     {"toolCallId", e.tool_call_id},
                     {"status", "failed"},
                     {"content", json::array{acp::TextContent(e.text)}}};
      if (!announced) {
        u["title"] = acp::ToolTitle(e.tool_name, e.main_argument);
        u["kind"] = acp::ToolKind(e.tool_name);
      }
      Update(s, std::move(u));
      return;
    }
    case EventType::kError:
      LogLine("session " + s.id + ": " + e.text);
      return;
    default:
      return;
  }
}

void AcpServer::Shutdown() {
  std::map<std::string, std::shared_ptr<Session>> sessions;
  std::vector<Worker> workers;
  {
    std::lock_guard<std::mutex> lock(idle_stop_mu_);
    idle_stop_ = true;
  }
  idle_stop_cv_.notify_all();
  if (idle_pauser_.joinable()) idle_pauser_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
    sessions = sessions_;
  }
  for (auto& [id, s] : sessions) {
    s->cancel.store(true);
    FireFd(s->cancel_fd.get());
    if (s->busy.load()) s->agent_sandbox->CancelRunning();  // the prompt ends at once
  }
  sessions.clear();
  // Workers may still register sessions (a claim under way); wait for all.
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      workers.swap(workers_);
      for (auto& [id, s] : sessions_) {
        s->cancel.store(true);
        FireFd(s->cancel_fd.get());
      }
    }
    if (workers.empty()) break;
    for (auto& w : workers) w.thread.join();
    workers.clear();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    sessions.swap(sessions_);
  }
  sessions.clear();  // each session deletes its sandbox
}

}  // namespace

int RunAcpServer(const AcpConfig& config) {
  // stdout carries the protocol only: the peer gets its own descriptor, and
  // fd 1 becomes stderr so that nothing else can write into the stream.
  UniqueFd out(::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3));
  if (!out) {
    LogLine(SyscallError("fcntl(F_DUPFD_CLOEXEC)", errno, "stdout").message);
    return 1;
  }
  if (::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    LogLine(SyscallError("dup2", errno, "stderr -> stdout").message);
    return 1;
  }
  UniqueFd stop(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop) {
    LogLine(SyscallError("eventfd", errno).message);
    return 1;
  }
  // Before any thread starts: the signals are blocked in all of them.
  const int stop_fd = stop.get();
  auto watcher = run::SignalWatcher::Start([stop_fd](int, int count) {
    if (count > 1) _exit(130);
    FireFd(stop_fd);
  });
  if (!watcher) {
    LogLine(watcher.error().message);
    return 1;
  }
  auto providers = run::MakeRunProviders(config.run);
  if (!providers) {
    LogLine("the sandbox provider: " + providers.error().message);
    return 1;
  }
  JsonRpcPeer::Options po;
  po.in_fd = STDIN_FILENO;
  po.out_fd = out.get();
  po.stop_fd = stop_fd;
  JsonRpcPeer peer(po);
  int code = 0;
  {
    AcpServer server(config, peer, std::move(*providers));
    server.StartIdlePauser();
    auto served = peer.Serve([&server](RpcMessage m) { server.Handle(std::move(m)); });
    if (!served) {
      LogLine(served.error().message);
      code = 1;
    }
    server.Shutdown();
  }
  return code;
}

}  // namespace deepbox::cli
