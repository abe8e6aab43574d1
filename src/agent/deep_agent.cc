#include "agent/deep_agent.h"

#include "agent/background.h"
#include "agent/codec.h"
#include "agent/middleware_eviction.h"
#include "agent/middleware_hitl.h"
#include "agent/middleware_memory.h"
#include "agent/middleware_patch.h"
#include "agent/middleware_skills.h"
#include "agent/text.h"
#include "agent/tools_todos.h"

namespace deepbox::agent {

const char kDefaultBasePrompt[] =
    "You are a deep agent: an AI assistant that completes tasks for the user by planning, "
    "using tools and checking its own work.\n\n"
    "- Be concise and direct. Skip preambles and filler; answer in as few words as the task "
    "allows, and say when you are unsure.\n"
    "- Work in three steps: understand the task and the relevant files, act, then verify the "
    "result (run it, test it, re-read it) before you report.\n"
    "- Keep going until the task is fully done; do not stop halfway to ask for permission you "
    "do not need.\n"
    "- When something fails repeatedly, stop and analyze why instead of retrying the same "
    "thing.\n"
    "- Ask clarifying questions only when the task is genuinely ambiguous.\n"
    "- For longer work, give short progress updates.";

std::string EnvironmentPrompt(std::string_view root_sv) {
  std::string root(root_sv);
  return "## Environment\n\n"
         "You work inside an isolated sandbox. Your working directory is " +
         root +
         ".\n"
         "- The file tools (ls, read_file, write_file, edit_file, delete, glob, grep) take "
         "absolute paths: use paths under " +
         root + " (for example " + root + "/main.py). Relative paths are resolved against " + root +
         ". The rest of the sandbox's filesystem is readable too (mostly read-only).\n"
         "- `execute` runs shell commands with " +
         root +
         " as the current directory.\n"
         "- Large tool results are saved under " +
         root + "/large_tool_results/ and summarized conversation history under " + root +
         "/conversation_history/; read them with read_file when you need the details.";
}

namespace {

// Interrupts inside a sub-agent when nobody can answer them.
std::optional<std::vector<Decision>> RejectAll(const InterruptRequest& req) {
  std::vector<Decision> out;
  for (const auto& a : req.action_requests) {
    (void)a;
    out.push_back(Decision::Reject(
        "Error: this tool call needs human approval, but no approver is available inside a "
        "sub-agent run. The tool was not executed."));
  }
  return out;
}

}  // namespace

struct DeepAgent::Impl {
  DeepAgentOptions opts;
  std::string thread_id;
  std::string root;
  std::shared_ptr<const PermissionSet> permissions;
  std::vector<ToolPtr> shared_tools;  // fs + execute + user tools (sub-agents draw from these)
  std::vector<ToolPtr> all_tools;     // shared + write_todos (for named sub-agent tool lists)
  std::unique_ptr<AgentLoop> loop;
  std::map<std::string, LoopConfig> subagent_configs;

  std::mutex run_mu;
  AgentState state;
  std::unique_ptr<ThreadWriter> writer;

  std::mutex sub_usage_mu;
  Usage sub_usage;

  // A resumed thread whose files are in another sandbox: told to the model
  // with the next task.
  bool sandbox_changed = false;
  std::string pending_note;

  void Persist(std::string_view type, json::object record) {
    if (writer) (void)writer->Append(type, std::move(record));
  }

  // deepagents' stack, reduced to what deepbox has; `subagents`: the main
  // agent's task tool, `patch`: the main agent's (a sub-agent's thread is
  // new).
  std::vector<std::shared_ptr<Middleware>> MakeMiddleware(
      std::shared_ptr<Middleware> subagents, const std::vector<std::string>& skills_dirs,
      const std::vector<std::string>& memory_paths, bool patch,
      std::map<std::string, InterruptConfig> interrupt_on,
      std::shared_ptr<const PermissionSet> ask_rules) {
    std::vector<std::shared_ptr<Middleware>> mws;
    if (subagents) mws.push_back(std::move(subagents));
    if (!skills_dirs.empty()) mws.push_back(std::make_shared<SkillsMiddleware>(skills_dirs));
    if (!memory_paths.empty()) mws.push_back(std::make_shared<MemoryMiddleware>(memory_paths));
    if (opts.summarization) {
      mws.push_back(std::make_shared<SummarizationMiddleware>(opts.summarization_options));
    }
    if (opts.eviction_char_limit > 0) {
      mws.push_back(std::make_shared<EvictionMiddleware>(opts.eviction_char_limit));
    }
    if (patch) mws.push_back(std::make_shared<PatchToolCallsMiddleware>());
    mws.push_back(
        std::make_shared<HumanInTheLoopMiddleware>(std::move(interrupt_on), std::move(ask_rules)));
    return mws;
  }

  Result<std::string> RunSubagent(const std::string& type, const std::string& description,
                                  bool fork, ToolContext& ctx) {
    auto it = subagent_configs.find(type);
    if (it == subagent_configs.end()) {
      return MakeError(ErrorCode::kNotFound, "unknown sub-agent " + type);
    }
    LoopConfig config = it->second;
    // Held until the sub-agent is done; its deleter deletes the fork.
    std::shared_ptr<Sandbox> forked;
    if (fork) {
      auto made = opts.fork_sandbox();
      if (!made) {
        Error e = made.error();
        e.message = "cannot fork the sandbox: " + e.message;
        return tl::unexpected(e);
      }
      forked = std::move(*made);
      config.sandbox = forked.get();
    }
    config.depth = ctx.depth + 1;
    config.session_id = thread_id + "_" + type + "_" + RandomHex(8);
    AgentLoop sub(config);
    AgentState st;
    Message first = Message::User(description);
    first.id = AgentLoop::NewMessageId();
    st.messages.push_back(std::move(first));
    LoopHooks hooks;
    hooks.on_event = ctx.on_event;
    hooks.cancel = ctx.cancel;
    hooks.cancel_fd = ctx.cancel_fd;
    hooks.on_interrupt = ctx.on_interrupt ? ctx.on_interrupt : InterruptHandler(RejectAll);
    hooks.on_model_response = [this, type](const ModelResponse& r) {
      json::object rec;
      rec["usage"] = UsageToJson(r.usage);
      rec["model"] = r.model;
      rec["stop_reason"] = r.stop_reason;
      rec["agent"] = type;
      Persist("usage", std::move(rec));
    };
    LoopOutcome out = sub.Run(st, hooks);
    {
      std::lock_guard<std::mutex> lock(sub_usage_mu);
      sub_usage += out.usage;
    }
    std::string text = SubagentFinalText(st.messages);
    switch (out.reason) {
      case StopReason::kCompleted:
        return text;
      case StopReason::kCancelled:
        return MakeError(ErrorCode::kCancelled, "cancelled");
      case StopReason::kTruncated:
        return text + "\n\n[the sub-agent's answer was cut off at its output token limit]";
      case StopReason::kStepLimit:
        if (!text.empty()) return text;
        [[fallthrough]];
      default:
        return MakeError(out.error ? out.error->code : ErrorCode::kInternal,
                         out.error ? out.error->message : "sub-agent stopped");
    }
  }

  LoopHooks MakeHooks(const RunCallbacks& cb) {
    LoopHooks h;
    h.on_event = cb.on_event;
    h.on_interrupt = cb.on_interrupt;
    h.cancel = cb.cancel;
    h.cancel_fd = cb.cancel_fd;
    h.on_message = [this](const Message& m) {
      if (writer) (void)writer->Message(m);
    };
    h.on_message_replaced = [this](const Message& m) {
      if (writer) (void)writer->MessageReplace(m);
    };
    h.on_summarization = [this](const SummarizationEvent& e) {
      json::object r;
      r["event"] = SummarizationToJson(e);
      Persist("summarization", std::move(r));
    };
    h.on_interrupt_state = [this](const std::optional<InterruptRequest>& req) {
      if (req) {
        json::object r;
        r["request"] = InterruptToJson(*req);
        Persist("interrupt", std::move(r));
      } else {
        Persist("interrupt_cleared", {});
      }
    };
    h.on_todos = [this](const json::array& todos) {
      json::object r;
      r["todos"] = todos;
      Persist("todos", std::move(r));
    };
    h.on_model_response = [this](const ModelResponse& resp) {
      json::object r;
      r["usage"] = UsageToJson(resp.usage);
      r["model"] = resp.model;
      r["stop_reason"] = resp.stop_reason;
      Persist("usage", std::move(r));
    };
    return h;
  }

  RunResult Finish(const LoopOutcome& out, const Usage& before) {
    RunResult r;
    r.final_text = out.final_text;
    r.stop_reason = out.reason;
    r.error = out.error;
    {
      std::lock_guard<std::mutex> lock(sub_usage_mu);
      state.usage += sub_usage;
      sub_usage = Usage{};
    }
    // Everything this run consumed: main turns, summaries, sub-agents.
    r.usage.input_tokens = state.usage.input_tokens - before.input_tokens;
    r.usage.output_tokens = state.usage.output_tokens - before.output_tokens;
    r.usage.cache_read_tokens = state.usage.cache_read_tokens - before.cache_read_tokens;
    r.usage.cache_write_tokens = state.usage.cache_write_tokens - before.cache_write_tokens;
    r.total_usage = state.usage;
    r.cost_usd = opts.model->profile().CostUsd(r.usage);
    r.messages = state.messages;
    r.interrupt = state.pending_interrupt;
    r.thread_id = thread_id;
    r.steps = out.steps;
    json::object rec;
    rec["ts"] = IsoNowUtc();
    rec["stop_reason"] = StopReasonName(out.reason);
    if (out.error) rec["error"] = JsonString(out.error->message);
    rec["usage"] = UsageToJson(r.usage);
    rec["cost_usd"] = r.cost_usd;
    rec["final_text"] = JsonString(r.final_text);
    Persist("run_end", std::move(rec));
    return r;
  }
};

DeepAgent::DeepAgent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DeepAgent::~DeepAgent() {
  // Abandoned background work (a timed-out glob) may still use the sandbox.
  WaitForDetached(std::chrono::seconds(30));
}

Result<std::unique_ptr<DeepAgent>> DeepAgent::Create(DeepAgentOptions options) {
  if (!options.model) return MakeError(ErrorCode::kInvalidArgument, "DeepAgent needs a model");
  if (!options.sandbox) return MakeError(ErrorCode::kInvalidArgument, "DeepAgent needs a sandbox");
  auto impl = std::make_unique<Impl>();
  Impl& I = *impl;
  I.opts = std::move(options);
  DeepAgentOptions& o = I.opts;
  I.root = o.sandbox->root();

  auto perms = PermissionSet::Create(o.permissions);
  if (!perms) return tl::unexpected(perms.error());
  I.permissions = std::make_shared<const PermissionSet>(std::move(*perms));

  // Tools.
  std::vector<ToolPtr> builtins = MakeFilesystemTools(o.fs);
  if (o.enable_execute) builtins.push_back(MakeExecuteTool(o.execute));
  auto add_user_tools = [&](std::vector<ToolPtr>& list) {
    for (const auto& t : o.tools) {
      bool replaced = false;
      for (auto& existing : list) {
        if (existing->name() == t->name()) {
          existing = t;
          replaced = true;
        }
      }
      if (!replaced) list.push_back(t);
    }
  };
  I.shared_tools = builtins;
  add_user_tools(I.shared_tools);
  I.all_tools = I.shared_tools;
  ToolPtr todos = MakeWriteTodosTool();
  if (o.enable_todos) I.all_tools.push_back(todos);

  // Sub-agents.
  std::vector<SubAgentSpec> specs = o.subagents;
  bool has_gp = false;
  for (const auto& s : specs) has_gp = has_gp || s.name == kGeneralPurposeName;
  if (o.general_purpose_subagent && !has_gp) {
    SubAgentSpec gp;
    gp.name = kGeneralPurposeName;
    gp.description = kGeneralPurposeDescription;
    gp.system_prompt = kDefaultSubagentPrompt;
    specs.insert(specs.begin(), gp);
  }
  std::vector<std::pair<std::string, std::string>> listing;
  for (const auto& s : specs) {
    if (s.name.empty()) return MakeError(ErrorCode::kInvalidArgument, "sub-agent without a name");
    LoopConfig c;
    c.model = s.model ? s.model : o.model;
    c.sandbox = o.sandbox;
    c.system_prompt =
        (s.system_prompt.empty() ? std::string(kDefaultSubagentPrompt) : s.system_prompt) + "\n\n" +
        EnvironmentPrompt(I.root);
    if (s.tools) {
      for (const auto& name : *s.tools) {
        bool found = false;
        for (const auto& t : I.all_tools) {
          if (t->name() == name) {
            c.tools.push_back(t);
            found = true;
          }
        }
        if (!found) {
          return MakeError(ErrorCode::kInvalidArgument,
                           "sub-agent '" + s.name + "' names unknown tool '" + name + "'");
        }
      }
    } else {
      c.tools = I.shared_tools;
    }
    for (const auto& t : s.extra_tools) c.tools.push_back(t);
    if (s.permissions) {
      auto sp = PermissionSet::Create(*s.permissions);
      if (!sp) return tl::unexpected(sp.error());
      c.permissions = std::make_shared<const PermissionSet>(std::move(*sp));
    } else {
      c.permissions = I.permissions;
    }
    c.middleware =
        I.MakeMiddleware(nullptr, s.skills_dirs, {}, /*patch=*/false,
                         s.interrupt_on ? *s.interrupt_on : o.interrupt_on, c.permissions);
    c.max_steps = o.max_steps;
    c.max_parallel_tools = o.max_parallel_tools;
    c.max_tokens = o.max_tokens;
    c.agent_name = s.name;
    I.subagent_configs[s.name] = std::move(c);
    bool dup = false;
    for (const auto& [n, d] : listing) dup = dup || n == s.name;
    if (dup) return MakeError(ErrorCode::kInvalidArgument, "duplicate sub-agent " + s.name);
    listing.emplace_back(s.name, s.description);
  }

  // Main agent.
  LoopConfig main;
  main.model = o.model;
  main.sandbox = o.sandbox;
  main.tools = builtins;
  if (o.enable_todos) main.tools.push_back(todos);
  Impl* raw = impl.get();
  std::shared_ptr<Middleware> subagents;
  if (!listing.empty()) {
    TaskToolOptions task;
    task.parallel = o.parallel_subagents;
    task.offer_fork = static_cast<bool>(o.fork_sandbox);
    subagents = std::make_shared<SubAgentMiddleware>(
        listing,
        [raw](const std::string& type, const std::string& desc, bool fork, ToolContext& ctx) {
          return raw->RunSubagent(type, desc, fork, ctx);
        },
        task);
    // Listed here, the caller's tools come after it (deepagents' order), and
    // one of the caller's named `task` replaces it.
    for (const auto& t : subagents->tools()) main.tools.push_back(t);
  }
  add_user_tools(main.tools);
  std::string prompt = o.system_prompt.empty() ? kDefaultBasePrompt : o.system_prompt;
  prompt += "\n\n" + EnvironmentPrompt(I.root);
  if (o.enable_todos) prompt += std::string("\n\n") + kTodoSystemPrompt;
  main.system_prompt = prompt;  // + the task section (SubAgentMiddleware)
  main.middleware = I.MakeMiddleware(std::move(subagents), o.skills_dirs, o.memory_paths,
                                     /*patch=*/true, o.interrupt_on, I.permissions);
  main.permissions = I.permissions;
  main.max_steps = o.max_steps;
  main.max_parallel_tools = o.max_parallel_tools;
  main.max_tokens = o.max_tokens;

  // Thread.
  bool resumed = false;
  std::string previous_sandbox;
  if (!o.thread_id.empty() && o.thread_store && o.thread_store->Exists(o.thread_id)) {
    auto loaded = o.thread_store->Load(o.thread_id);
    if (!loaded) return tl::unexpected(loaded.error());
    I.state = std::move(loaded->state);
    previous_sandbox = loaded->sandbox_id;
    resumed = true;
  }
  if (resumed && previous_sandbox != o.sandbox->id()) {
    I.sandbox_changed = true;
    I.pending_note = NewSandboxNote(I.root, previous_sandbox, o.sandbox->id());
  }
  I.thread_id = o.thread_id.empty() ? ThreadStore::NewThreadId() : o.thread_id;
  main.session_id = I.thread_id;
  if (o.thread_store) {
    auto w = o.thread_store->OpenWriter(I.thread_id);
    if (!w) return tl::unexpected(w.error());
    I.writer = std::move(*w);
    if (!resumed) {
      json::object header;
      header["id"] = I.thread_id;
      header["version"] = 1;
      header["created_at"] = IsoNowUtc();
      header["model"] = o.model->name();
      header["sandbox"] = o.sandbox->id();
      header["root"] = I.root;
      I.Persist("thread", std::move(header));
    } else if (I.sandbox_changed) {
      json::object rec;
      rec["id"] = o.sandbox->id();
      rec["root"] = I.root;
      rec["ts"] = IsoNowUtc();
      I.Persist("sandbox", std::move(rec));
    }
  }
  I.loop = std::make_unique<AgentLoop>(std::move(main));
  return std::unique_ptr<DeepAgent>(new DeepAgent(std::move(impl)));
}

RunResult DeepAgent::Run(std::string_view task, const RunCallbacks& callbacks) {
  return Run(task, {}, callbacks);
}

RunResult DeepAgent::Run(std::string_view task, std::vector<ImageBlock> images,
                         const RunCallbacks& callbacks) {
  Impl& I = *impl_;
  std::lock_guard<std::mutex> lock(I.run_mu);
  LoopHooks hooks = I.MakeHooks(callbacks);
  json::object start;
  start["ts"] = IsoNowUtc();
  start["task"] = JsonString(task);
  I.Persist("run_start", std::move(start));
  // A pending interrupt is dropped and its calls answered as cancelled by
  // the loop and the patch middleware, before the message is appended.
  std::vector<Message> input;
  if (!I.pending_note.empty()) {
    input.push_back(Message::User(I.pending_note + "\n\n" + std::string(task)));
    I.pending_note.clear();
  } else {
    input.push_back(Message::User(std::string(task)));
  }
  input.back().images = std::move(images);
  Usage before = I.state.usage;
  LoopOutcome out = I.loop->Run(I.state, hooks, std::move(input));
  return I.Finish(out, before);
}

RunResult DeepAgent::Resume(std::vector<Decision> decisions, const RunCallbacks& callbacks) {
  Impl& I = *impl_;
  std::lock_guard<std::mutex> lock(I.run_mu);
  LoopHooks hooks = I.MakeHooks(callbacks);
  json::object start;
  start["ts"] = IsoNowUtc();
  start["resume"] = true;
  I.Persist("run_start", std::move(start));
  json::object rec;
  json::array ds;
  for (const auto& d : decisions) ds.push_back(DecisionToJson(d));
  rec["decisions"] = std::move(ds);
  I.Persist("decisions", std::move(rec));
  Usage before = I.state.usage;
  LoopOutcome out = I.loop->Resume(I.state, std::move(decisions), hooks);
  return I.Finish(out, before);
}

const std::string& DeepAgent::thread_id() const { return impl_->thread_id; }

bool DeepAgent::sandbox_changed() const { return impl_->sandbox_changed; }

std::string NewSandboxNote(std::string_view root, std::string_view previous_sandbox,
                           std::string_view sandbox) {
  std::string before = previous_sandbox.empty() ? std::string("another sandbox")
                                                : "sandbox " + std::string(previous_sandbox);
  return "<system-reminder>This conversation continues in a new sandbox (" + std::string(sandbox) +
         "). The files, installed packages and running programs of the earlier turns were in " +
         before + " and are not here: " + std::string(root) +
         " does not contain them unless you create them again. Check what exists before relying "
         "on earlier work.</system-reminder>";
}

AgentState DeepAgent::state() const {
  std::lock_guard<std::mutex> lock(impl_->run_mu);
  return impl_->state;
}

std::optional<InterruptRequest> DeepAgent::pending_interrupt() const {
  std::lock_guard<std::mutex> lock(impl_->run_mu);
  return impl_->state.pending_interrupt;
}

std::vector<ToolSpec> DeepAgent::tool_specs() const {
  std::vector<ToolSpec> out;
  for (const auto& t : impl_->loop->tools()) out.push_back(t->spec());
  return out;
}

const std::string& DeepAgent::system_prompt() const { return impl_->loop->system_prompt(); }

}  // namespace deepbox::agent
