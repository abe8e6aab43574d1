// deepbox's Deep Agent: the public C++ API for embedding the agent.
//
//   auto agent = deepbox::agent::DeepAgent::Create({
//       .model = model,                 // a ChatModel (Anthropic, OpenAI, replay, ...)
//       .sandbox = &lease->sandbox(),   // every tool call runs in here
//       .system_prompt = "You are a coding assistant.",
//       .thread_store = std::make_shared<ThreadStore>(threads_dir),
//   });
//   RunResult r = (*agent)->Run("Write fib.py, run it, report", {.on_event = print});
//
// A DeepAgent is one conversation (thread). Run() adds a user message and
// drives the loop (agent.h) until the model answers without tool calls, the
// step limit, cancellation, an interrupt, or an error; call Run() again to
// continue the conversation, Resume() to answer a pending interrupt. With a
// thread store every change is appended to <dir>/<thread_id>.jsonl as it
// happens, and Create() with an existing thread_id resumes that thread.
//
// Tools, in order: ls, read_file, write_file, edit_file, delete, glob, grep,
// execute, write_todos, task, then the caller's tools. Middleware
// (middleware.h), outermost first: sub-agents (the `task` tool and its
// prompt section), skills, memory, summarization (model calls), large-result
// eviction (model calls and tool results), dangling-call patching (when a
// new message arrives) and human-in-the-loop (interrupt_on / "ask"
// permissions pause for human decisions).
//
// Paths: tools see real sandbox paths; the workspace root (Sandbox::root(),
// e.g. /workspace) is the working directory, relative paths resolve against
// it. Evicted tool results and summarized history go to
// <root>/large_tool_results/ and <root>/conversation_history/ (deepagents
// uses /large_tool_results and /conversation_history at its virtual root; the
// rest of a deepbox sandbox's filesystem is read-only).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/agent.h"
#include "agent/middleware_hitl.h"  // ValidateDecisions
#include "agent/middleware_subagents.h"
#include "agent/middleware_summarization.h"
#include "agent/permissions.h"
#include "agent/state.h"
#include "agent/thread_store.h"
#include "agent/tool.h"
#include "agent/tools_execute.h"
#include "agent/tools_fs.h"
#include "sandbox/sandbox.h"

namespace deepbox::agent {

struct DeepAgentOptions {
  std::shared_ptr<ChatModel> model;  // required
  Sandbox* sandbox = nullptr;        // required; must outlive the agent
  // Prepended to deepbox's environment/tool sections; "" = deepbox's default
  // base prompt.
  std::string system_prompt;
  std::vector<ToolPtr> tools;  // extra tools (after the built-in ones)
  std::vector<SubAgentSpec> subagents;
  bool general_purpose_subagent = true;
  bool enable_todos = true;                             // write_todos
  bool enable_execute = true;                           // execute
  std::map<std::string, InterruptConfig> interrupt_on;  // tool name -> config
  std::vector<PermissionRule> permissions;              // first match wins
  std::vector<std::string> skills_dirs;                 // sandbox directories
  std::vector<std::string> memory_paths;                // sandbox AGENTS.md paths
  int max_steps = 1000;  // model turns per Run/Resume (the recursion limit)
  int max_parallel_tools = 16;
  // Sub-agents of one turn run concurrently; false runs them one after
  // another (needed to replay a recorded conversation deterministically).
  bool parallel_subagents = true;
  // Makes a fork of `sandbox` (a new sandbox holding a copy of its files as
  // they are; the returned pointer's deleter deletes it). Set: the `task`
  // tool offers `sandbox: "fork"` (middleware_subagents.h); null: the tool
  // is deepagents' own, byte for byte.
  std::function<Result<std::shared_ptr<Sandbox>>()> fork_sandbox;
  int max_tokens = 0;                         // per model call; 0 = the client's default
  std::string thread_id;                      // "" = a new thread; an existing id resumes it
  std::shared_ptr<ThreadStore> thread_store;  // null = nothing persisted
  FsToolOptions fs;
  ExecuteToolOptions execute;
  bool summarization = true;
  SummarizationOptions summarization_options;
  size_t eviction_char_limit = 80000;  // 0 disables large-result eviction
};

struct RunCallbacks {
  EventCallback on_event;                     // called serialized, possibly from worker threads
  InterruptHandler on_interrupt;              // unset: the run pauses (StopReason::kInterrupted)
  const std::atomic<bool>* cancel = nullptr;  // set to true to stop (Ctrl-C)
  // Optional fd (eventfd/pipe) the caller makes readable when it sets *cancel:
  // a model call waiting on a silent server then ends at once.
  int cancel_fd = -1;
};

struct RunResult {
  std::string final_text;
  StopReason stop_reason = StopReason::kCompleted;
  std::optional<Error> error;                 // kError / kStepLimit
  Usage usage;                                // this run
  Usage total_usage;                          // the whole thread
  double cost_usd = 0;                        // this run, from the model's profile
  std::vector<Message> messages;              // the whole thread
  std::optional<InterruptRequest> interrupt;  // kInterrupted: what to decide
  std::string thread_id;
  int steps = 0;  // model turns in this run
  bool ok() const { return stop_reason == StopReason::kCompleted; }
};

class DeepAgent {
 public:
  static Result<std::unique_ptr<DeepAgent>> Create(DeepAgentOptions options);
  ~DeepAgent();
  DeepAgent(const DeepAgent&) = delete;
  DeepAgent& operator=(const DeepAgent&) = delete;

  // Adds `task` as a user message and runs. If the thread was paused on an
  // interrupt, the pending tool calls are answered as cancelled first.
  RunResult Run(std::string_view task, const RunCallbacks& callbacks = {});
  // The same with images attached to the user message (a model API that
  // takes them gets them; the thread keeps them).
  RunResult Run(std::string_view task, std::vector<ImageBlock> images,
                const RunCallbacks& callbacks = {});
  // Answers the pending interrupt (one decision per action request) and
  // continues the run.
  RunResult Resume(std::vector<Decision> decisions, const RunCallbacks& callbacks = {});

  const std::string& thread_id() const;
  // Whether Create() resumed a thread whose latest run used another sandbox
  // (its files are not in this one). The model is told so with the next
  // task (NewSandboxNote before it, in the same user message).
  bool sandbox_changed() const;
  // A snapshot of the conversation state. Blocks while a run is in
  // progress: do not call it from a callback.
  AgentState state() const;
  std::optional<InterruptRequest> pending_interrupt() const;
  // The tools the model is offered, in order.
  std::vector<ToolSpec> tool_specs() const;
  // The base system prompt (skills and memory sections are added per call).
  const std::string& system_prompt() const;

 private:
  struct Impl;
  explicit DeepAgent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// deepbox's default base prompt and the environment section for a root.
extern const char kDefaultBasePrompt[];
std::string EnvironmentPrompt(std::string_view root);
// What a resumed thread's model is told when the sandbox changed.
std::string NewSandboxNote(std::string_view root, std::string_view previous_sandbox,
                           std::string_view sandbox);

}  // namespace deepbox::agent
