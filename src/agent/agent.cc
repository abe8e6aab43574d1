#include "agent/agent.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_set>

#include "agent/format.h"
#include "agent/middleware.h"
#include "agent/text.h"

namespace deepbox::agent {

namespace internal {
// What only the loop sets on the middleware's request and turn objects.
struct LoopAccess {
  static std::vector<Message>& messages(ModelCallRequest& r) { return r.messages_; }
  static void set_view(ModelCallRequest& r, MessageView* view) { r.view_ = view; }
  static bool changed(const ModelCallRequest& r) { return r.changes_ != 0; }
  static void set_resume(ModelTurn& t, std::vector<Decision> decisions) {
    t.resume_decisions_ = std::move(decisions);
  }
  static bool resume_taken(const ModelTurn& t) { return t.resume_taken_; }
  static const std::optional<InterruptRequest>& paused(const ModelTurn& t) { return t.paused_; }
};
}  // namespace internal

using internal::LoopAccess;

namespace {
constexpr size_t kPreviewChars = 200;

std::string Preview(const ToolResult& r) {
  std::string_view t = r.text;
  std::string out(CodePointPrefix(t, kPreviewChars));
  if (out.size() < t.size()) out += "…";
  if (out.empty() && !r.images.empty()) out = "[image]";
  return out;
}
}  // namespace

struct AgentLoop::Impl {
  explicit Impl(const LoopConfig& c) : config(c), tools(c.tools), system_prompt(c.system_prompt) {
    // The middleware's contributions; a tool of the same name listed before
    // (a LoopConfig tool first) wins.
    for (const auto& mw : config.middleware) {
      for (auto& t : mw->tools()) {
        bool listed = std::any_of(tools.begin(), tools.end(),
                                  [&](const ToolPtr& o) { return o->name() == t->name(); });
        if (!listed) tools.push_back(std::move(t));
      }
      if (std::string section = mw->system_prompt(); !section.empty()) {
        system_prompt += "\n\n" + section;
      }
    }
    for (const auto& t : tools) {
      specs.push_back(t->spec());
      by_name[t->name()] = t;
      names.push_back(t->name());
    }
  }

  const LoopConfig& config;
  std::vector<ToolPtr> tools;  // offered, in order
  std::string system_prompt;
  std::vector<ToolSpec> specs;
  std::map<std::string, ToolPtr> by_name;
  std::vector<std::string> names;

  // Per run.
  struct Run {
    AgentState& state;
    LoopHooks& hooks;
    std::mutex emit_mu;
    LoopOutcome outcome;
    std::unique_ptr<RunEnv> env;
    MessageView view;
  };

  bool Cancelled(const LoopHooks& h) const { return h.cancel && h.cancel->load(); }

  void Emit(Run& run, AgentEvent ev) {
    if (!run.hooks.on_event) return;
    if (ev.agent.empty()) ev.agent = config.agent_name;
    if (ev.depth == 0) ev.depth = config.depth;
    std::lock_guard<std::mutex> lock(run.emit_mu);
    run.hooks.on_event(ev);
  }

  void Append(Run& run, Message m) {
    if (m.id.empty()) m.id = NewMessageId();
    run.state.messages.push_back(std::move(m));
    if (run.hooks.on_message) run.hooks.on_message(run.state.messages.back());
  }

  void InitEnv(Run& run) {
    auto emit = [this, &run](AgentEvent ev) { Emit(run, std::move(ev)); };
    auto append = [this, &run](Message m) { Append(run, std::move(m)); };
    run.env = std::make_unique<RunEnv>(RunEnv{config, run.state, run.hooks, emit, append, {}});
  }

  LoopOutcome Finish(Run& run, StopReason reason, std::optional<Error> error = std::nullopt) {
    run.outcome.reason = reason;
    if (error) {
      AgentEvent ev;
      ev.type = EventType::kError;
      ev.text = error->message;
      Emit(run, std::move(ev));
      run.outcome.error = std::move(error);
    }
    return run.outcome;
  }

  Result<ModelResponse> CallChain(Run& run, ModelCallRequest& call, size_t i) {
    if (i < config.middleware.size()) {
      return config.middleware[i]->WrapModelCall(
          call, *run.env,
          [this, &run, i](ModelCallRequest& r) { return CallChain(run, r, i + 1); });
    }
    StreamCallbacks cb;
    cb.on_text_delta = [this, &run](std::string_view delta) {
      AgentEvent ev;
      ev.type = EventType::kTextDelta;
      ev.text = std::string(delta);
      Emit(run, std::move(ev));
    };
    cb.on_retry = [this, &run](const RetryNotice& n) {
      AgentEvent ev;
      ev.type = EventType::kRetry;
      ev.text = n.error.message;
      ev.attempt = n.attempt;
      ev.max_attempts = n.max_attempts;
      ev.duration = n.delay;
      Emit(run, std::move(ev));
    };
    // The provider request takes the call's settings and messages and gives
    // them back (a middleware may call `next` again).
    ModelRequest req;
    req.system = std::move(call.system);
    req.tools = std::move(call.tools);
    req.max_tokens = call.max_tokens;
    req.prompt_caching = call.prompt_caching;
    req.cancel = call.cancel;
    req.cancel_fd = call.cancel_fd;
    std::vector<Message>& messages = LoopAccess::messages(call);
    // The safety net for tool calls without a result. The view knows when
    // there are none (the usual case). The patched list is a copy, so that
    // the loop gets its view back as it lent it.
    MessageView* view = call.view();
    bool answered = view && !view->MayHaveDanglingCalls();
    bool patch = !answered && HasDanglingToolCalls(messages);
    req.messages = patch ? PatchDanglingToolCalls(messages) : std::move(messages);
    auto resp = config.model->Generate(req, cb);
    if (!patch) messages = std::move(req.messages);
    call.system = std::move(req.system);
    call.tools = std::move(req.tools);
    return resp;
  }

  // Runs one tool call through the middleware's WrapToolCall.
  ToolResult ToolChain(Run& run, ToolCallRequest& request, size_t i) {
    if (i < config.middleware.size()) {
      return config.middleware[i]->WrapToolCall(
          request, *run.env,
          [this, &run, i](ToolCallRequest& r) { return ToolChain(run, r, i + 1); });
    }
    if (!request.tool) return ToolResult::Err(InvalidToolMessage(request.call.name, names));
    request.context->call = &request.call;
    try {
      return request.tool->Invoke(*request.context, request.call.input);
    } catch (const std::exception& e) {
      return ToolResult::Err(std::string("Error: ") + e.what());
    }
  }

  // Runs the tool calls of the last assistant message; `preset` holds
  // results already decided (human reject/respond, validation errors).
  void ExecuteTools(Run& run, std::map<std::string, ToolResult> preset) {
    const Message ai = run.state.messages.back();  // copy: state grows below
    const auto& calls = ai.tool_calls;
    size_t n = calls.size();
    std::vector<std::optional<ToolResult>> results(n);

    // write_todos must not run in parallel with itself.
    size_t todo_calls = 0;
    for (const auto& c : calls) todo_calls += c.name == "write_todos";

    std::vector<std::vector<size_t>> lanes;
    std::map<std::string, size_t> lane_of;
    // A call refused before it runs: the model gets the error as the result,
    // the caller an event (it would otherwise not know the call existed).
    auto reject = [&](size_t i, const Tool* tool, std::string why) {
      const ToolCall& c = calls[i];
      AgentEvent ev;
      ev.type = EventType::kToolCallRejected;
      ev.tool_call_id = c.id;
      ev.tool_name = c.name;
      ev.tool_args = c.input;
      if (tool != nullptr) ev.main_argument = tool->MainArgument(c.input);
      ev.ok = false;
      ev.text = why;
      Emit(run, std::move(ev));
      results[i] = ToolResult::Err(std::move(why));
    };
    for (size_t i = 0; i < n; ++i) {
      const ToolCall& c = calls[i];
      if (auto it = preset.find(c.id); it != preset.end()) {
        results[i] = std::move(it->second);
        continue;
      }
      auto tool_it = by_name.find(c.name);
      const Tool* tool = tool_it == by_name.end() ? nullptr : tool_it->second.get();
      if (!c.input_error.empty()) {
        reject(i, tool,
               "Tool call " + c.name + " with id " + c.id +
                   " could not be executed - arguments were malformed or truncated. " +
                   c.input_error);
        continue;
      }
      if (tool == nullptr) {
        reject(i, nullptr, InvalidToolMessage(c.name, names));
        continue;
      }
      if (todo_calls > 1 && c.name == "write_todos") {
        reject(i, tool,
               "Error: The `write_todos` tool should never be called multiple times in parallel. "
               "Please call it only once per model invocation to update the todo list.");
        continue;
      }
      if (auto err = ValidateToolArgs(tool->spec(), c.input)) {
        reject(i, tool, *err);
        continue;
      }
      std::string lane = tool_it->second->Scheduling(c.input, config.sandbox->root()).lane;
      if (lane.empty()) {
        lanes.push_back({i});
      } else if (auto l = lane_of.find(lane); l != lane_of.end()) {
        lanes[l->second].push_back(i);
      } else {
        lane_of[lane] = lanes.size();
        lanes.push_back({i});
      }
    }

    std::string root = config.sandbox->root();
    auto run_call = [&](size_t i) {
      const ToolCall& c = calls[i];
      if (Cancelled(run.hooks)) return;
      ToolPtr tool = by_name[c.name];
      AgentEvent start;
      start.type = EventType::kToolCallStart;
      start.tool_call_id = c.id;
      start.tool_name = c.name;
      start.tool_args = c.input;
      start.main_argument = tool->MainArgument(c.input);
      Emit(run, start);
      ToolContext ctx;
      ctx.sandbox = config.sandbox;
      ctx.root = root;
      ctx.cancel = run.hooks.cancel;
      ctx.cancel_fd = run.hooks.cancel_fd;
      ctx.permissions = config.permissions.get();
      ctx.state = &run.state;
      ctx.depth = config.depth;
      ctx.on_output = [this, &run, &c](std::string_view chunk) {
        AgentEvent ev;
        ev.type = EventType::kToolOutput;
        ev.tool_call_id = c.id;
        ev.tool_name = c.name;
        ev.text = std::string(chunk);
        Emit(run, std::move(ev));
      };
      ctx.on_todos = [this, &run](const json::array& todos) {
        AgentEvent ev;
        ev.type = EventType::kTodoUpdate;
        ev.todos = todos;
        Emit(run, std::move(ev));
        if (run.hooks.on_todos) run.hooks.on_todos(todos);
      };
      ctx.on_event = [this, &run](const AgentEvent& ev) { Emit(run, ev); };
      ctx.on_interrupt = run.hooks.on_interrupt;
      auto t0 = std::chrono::steady_clock::now();
      ToolCallRequest request{c, tool, &ctx};
      ToolResult r = ToolChain(run, request, 0);
      AgentEvent end = start;
      end.type = EventType::kToolCallEnd;
      end.ok = !r.is_error;
      end.duration = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - t0);
      end.output_preview = Preview(r);
      Emit(run, std::move(end));
      results[i] = std::move(r);
    };

    if (lanes.size() == 1) {
      for (size_t i : lanes[0]) run_call(i);
    } else if (!lanes.empty()) {
      std::atomic<size_t> next{0};
      size_t workers = std::min<size_t>(lanes.size(), std::max(1, config.max_parallel_tools));
      std::vector<std::thread> threads;
      threads.reserve(workers);
      for (size_t w = 0; w < workers; ++w) {
        threads.emplace_back([&] {
          while (true) {
            size_t l = next.fetch_add(1);
            if (l >= lanes.size()) break;
            for (size_t i : lanes[l]) run_call(i);
          }
        });
      }
      for (auto& t : threads) t.join();
    }

    for (size_t i = 0; i < n; ++i) {
      if (!results[i]) continue;  // cancelled before it ran: left dangling
      Message m = Message::Tool(calls[i].id, calls[i].name, std::move(results[i]->text),
                                results[i]->is_error);
      m.images = std::move(results[i]->images);
      Append(run, std::move(m));
    }
  }

  // The middleware's AfterModel pass over the last assistant message, innermost
  // first; `resume`: the caller's decisions for the pending interrupt.
  // Returns false when the run must stop (paused or failed).
  bool AfterModel(Run& run, std::map<std::string, ToolResult>& preset,
                  std::optional<std::vector<Decision>> resume) {
    Message& ai = run.state.messages.back();
    const InterruptRequest* pending =
        resume && run.state.pending_interrupt ? &*run.state.pending_interrupt : nullptr;
    ModelTurn turn(ai, pending, [this, &run](const InterruptRequest& request) {
      AgentEvent ev;
      ev.type = EventType::kInterrupt;
      ev.interrupt = &request;
      Emit(run, std::move(ev));
      std::optional<std::vector<Decision>> decisions;
      if (run.hooks.on_interrupt) decisions = run.hooks.on_interrupt(request);
      return decisions;
    });
    if (resume) LoopAccess::set_resume(turn, std::move(*resume));
    for (auto it = config.middleware.rbegin(); it != config.middleware.rend(); ++it) {
      if (auto st = (*it)->AfterModel(turn, *run.env); !st) {
        Finish(run, StopReason::kError, st.error());
        return false;
      }
      if (turn.paused()) break;
    }
    if (turn.message_changed() && run.hooks.on_message_replaced) {
      run.hooks.on_message_replaced(ai);
    }
    if (turn.paused()) {
      run.state.pending_interrupt = LoopAccess::paused(turn);
      if (run.hooks.on_interrupt_state) run.hooks.on_interrupt_state(run.state.pending_interrupt);
      Finish(run, StopReason::kInterrupted);
      return false;
    }
    if (pending) {
      if (!LoopAccess::resume_taken(turn)) {
        Finish(run, StopReason::kError,
               Error(ErrorCode::kInvalidArgument, "no interrupted run to resume"));
        return false;
      }
      run.state.pending_interrupt.reset();
      if (run.hooks.on_interrupt_state) run.hooks.on_interrupt_state(std::nullopt);
    }
    preset = std::move(turn.results());
    return true;
  }

  LoopOutcome Loop(Run& run) {
    while (true) {
      if (Cancelled(run.hooks)) return Finish(run, StopReason::kCancelled);
      if (run.outcome.steps >= config.max_steps) {
        return Finish(run, StopReason::kStepLimit,
                      Error(ErrorCode::kResourceExhausted,
                            "Agent stopped: reached the step limit of " +
                                std::to_string(config.max_steps) + " model turns"));
      }
      ModelCallRequest call(run.view.Lend(run.state));
      LoopAccess::set_view(call, &run.view);
      call.system = system_prompt;
      call.tools = specs;
      if (std::any_of(tools.begin(), tools.end(),
                      [](const ToolPtr& t) { return !t->Available(); })) {
        call.tools.clear();
        for (size_t i = 0; i < tools.size(); ++i) {
          if (tools[i]->Available()) call.tools.push_back(specs[i]);
        }
      }
      call.max_tokens = config.max_tokens;
      call.cancel = run.hooks.cancel;
      call.cancel_fd = run.hooks.cancel_fd;
      auto resp = CallChain(run, call, 0);
      run.view.Return(std::move(LoopAccess::messages(call)), LoopAccess::changed(call));
      ++run.outcome.steps;
      if (!resp) {
        if (Cancelled(run.hooks) || resp.error().code == ErrorCode::kCancelled) {
          return Finish(run, StopReason::kCancelled);
        }
        return Finish(run, StopReason::kError, resp.error());
      }
      run.outcome.usage += resp->usage;
      run.state.usage += resp->usage;
      {
        AgentEvent ev;
        ev.type = EventType::kUsage;
        ev.usage = resp->usage;
        ev.total_usage = run.state.usage;
        Emit(run, std::move(ev));
      }
      if (run.hooks.on_model_response) run.hooks.on_model_response(*resp);
      const bool cut_off = resp->stop_reason == "max_tokens";
      Message msg = std::move(resp->message);
      msg.role = Role::kAssistant;
      for (auto& c : msg.tool_calls) {
        if (c.id.empty()) c.id = "call_" + RandomHex(24);
      }
      const Usage& u = resp->usage;
      run.state.last_call_tokens =
          u.input_tokens + u.cache_read_tokens + u.cache_write_tokens + u.output_tokens;
      run.state.last_call_message_count = run.state.messages.size() + 1;
      run.state.last_call_cutoff =
          run.state.summarization ? run.state.summarization->cutoff_index : 0;
      Append(run, std::move(msg));
      const Message& ai = run.state.messages.back();
      if (ai.tool_calls.empty()) {
        run.outcome.final_text = ai.text;
        AgentEvent ev;
        ev.type = EventType::kFinalMessage;
        ev.text = ai.text;
        Emit(run, std::move(ev));
        if (cut_off) {
          return Finish(run, StopReason::kTruncated,
                        Error(ErrorCode::kResourceExhausted,
                              "the answer is incomplete: the model stopped at its output token "
                              "limit (max_tokens)"));
        }
        return Finish(run, StopReason::kCompleted);
      }
      std::map<std::string, ToolResult> preset;
      if (!AfterModel(run, preset, std::nullopt)) return run.outcome;
      ExecuteTools(run, std::move(preset));
    }
  }
};

AgentLoop::AgentLoop(LoopConfig config)
    : config_(std::move(config)), impl_(std::make_unique<Impl>(config_)) {}

AgentLoop::~AgentLoop() = default;

LoopOutcome AgentLoop::Run(AgentState& state, LoopHooks& hooks, std::vector<Message> input) {
  Impl::Run run{state, hooks, {}, {}, {}, {}};
  impl_->InitEnv(run);
  if (!config_.model || !config_.sandbox) {
    return impl_->Finish(run, StopReason::kError,
                         Error(ErrorCode::kInvalidArgument, "agent needs a model and a sandbox"));
  }
  if (state.pending_interrupt) {
    state.pending_interrupt.reset();
    if (hooks.on_interrupt_state) hooks.on_interrupt_state(std::nullopt);
  }
  run.env->input = input;
  for (const auto& mw : config_.middleware) mw->BeforeAgent(*run.env);
  run.env->input = {};
  for (auto& m : input) impl_->Append(run, std::move(m));
  return impl_->Loop(run);
}

LoopOutcome AgentLoop::Resume(AgentState& state, std::vector<Decision> decisions,
                              LoopHooks& hooks) {
  Impl::Run run{state, hooks, {}, {}, {}, {}};
  impl_->InitEnv(run);
  if (!state.pending_interrupt || state.messages.empty() ||
      state.messages.back().role != Role::kAssistant) {
    return impl_->Finish(run, StopReason::kError,
                         Error(ErrorCode::kInvalidArgument, "no interrupted run to resume"));
  }
  std::map<std::string, ToolResult> preset;
  if (!impl_->AfterModel(run, preset, std::move(decisions))) return run.outcome;
  impl_->ExecuteTools(run, std::move(preset));
  return impl_->Loop(run);
}

const std::vector<ToolPtr>& AgentLoop::tools() const { return impl_->tools; }

const std::string& AgentLoop::system_prompt() const { return impl_->system_prompt; }

std::vector<Message> AgentLoop::EffectiveMessages(const AgentState& state) {
  if (!state.summarization) return state.messages;
  std::vector<Message> out;
  size_t cutoff = std::min(state.summarization->cutoff_index, state.messages.size());
  out.reserve(state.messages.size() - cutoff + 1);
  out.push_back(state.summarization->summary_message);
  out.insert(out.end(), state.messages.begin() + static_cast<ptrdiff_t>(cutoff),
             state.messages.end());
  return out;
}

namespace {

std::unordered_set<std::string_view> AnsweredIds(const std::vector<Message>& messages) {
  std::unordered_set<std::string_view> answered;
  for (const auto& m : messages) {
    if (m.role == Role::kTool) answered.insert(m.tool_call_id);
  }
  return answered;
}

}  // namespace

bool AgentLoop::HasDanglingToolCalls(const std::vector<Message>& messages) {
  std::unordered_set<std::string_view> answered = AnsweredIds(messages);
  for (const auto& m : messages) {
    if (m.role != Role::kAssistant) continue;
    for (const auto& c : m.tool_calls) {
      if (!answered.count(c.id)) return true;
    }
  }
  return false;
}

std::vector<Message> AgentLoop::PatchDanglingToolCalls(std::vector<Message> messages) {
  // The patches per assistant message, made before anything is moved (the
  // answered set points into the messages).
  std::vector<std::pair<size_t, std::vector<Message>>> patches;
  {
    std::unordered_set<std::string_view> answered = AnsweredIds(messages);
    for (size_t i = 0; i < messages.size(); ++i) {
      if (messages[i].role != Role::kAssistant) continue;
      std::vector<Message> added;
      for (const auto& c : messages[i].tool_calls) {
        if (answered.count(c.id)) continue;
        std::string name = c.name.empty() ? "unknown" : c.name;
        added.push_back(Message::Tool(c.id, name, DanglingToolCallMessage(name, c.id)));
      }
      if (!added.empty()) patches.emplace_back(i, std::move(added));
    }
  }
  if (patches.empty()) return messages;
  std::vector<Message> out;
  out.reserve(messages.size() + patches.size() + 4);
  size_t next = 0;  // into patches
  for (size_t i = 0; i < messages.size(); ++i) {
    out.push_back(std::move(messages[i]));
    if (next == patches.size() || patches[next].first != i) continue;
    // Keep the existing results of this turn together, then add the patches.
    while (i + 1 < messages.size() && messages[i + 1].role == Role::kTool) {
      out.push_back(std::move(messages[++i]));
    }
    for (auto& p : patches[next].second) out.push_back(std::move(p));
    ++next;
  }
  return out;
}

std::string AgentLoop::NewMessageId() { return "msg_" + RandomHex(20); }

// ------------------------------------------------------------------ MessageView

int64_t ApproxMessageTokens(const Message& m) {
  size_t chars = CodePointCount(m.text);
  for (const auto& c : m.tool_calls) chars += c.name.size() + ToJson(c.input).size();
  chars += m.images.size() * 4 * 1600;  // ~1 600 tokens per image
  return static_cast<int64_t>(chars / 4) + 3;
}

std::vector<Message> MessageView::Lend(const AgentState& state) {
  const auto& s = state.summarization;
  bool same = valid_ && !lent_ && synced_ <= state.messages.size() &&
              summarized_ == s.has_value() &&
              (!s || (s->summary_message.id == summary_id_ && s->cutoff_index == cutoff_));
  if (!same) {
    Rebuild(state);
  } else {
    // EffectiveMessages: the summary, then state.messages[min(cutoff, n):].
    size_t n = state.messages.size();
    size_t from = std::max(synced_, std::min(cutoff_, n));
    for (size_t i = from; i < n; ++i) {
      messages_.push_back(state.messages[i]);
      Add(messages_.back(), messages_.size() - 1);
    }
    synced_ = n;
  }
  lent_ = true;
  lent_data_ = messages_.data();
  lent_size_ = messages_.size();
  lent_front_id_ = messages_.empty() ? "" : messages_.front().id;
  lent_back_id_ = messages_.empty() ? "" : messages_.back().id;
  return std::move(messages_);
}

void MessageView::Return(std::vector<Message> messages, bool changed) {
  if (lent_ && !changed && IsLent(messages)) {
    messages_ = std::move(messages);
  } else {
    valid_ = false;
  }
  lent_ = false;
}

bool MessageView::IsLent(const std::vector<Message>& messages) const {
  return lent_ && messages.data() == lent_data_ && messages.size() == lent_size_ &&
         (messages.empty() ||
          (messages.front().id == lent_front_id_ && messages.back().id == lent_back_id_));
}

int64_t MessageView::ApproxTokens(const std::vector<Message>& lent) {
  for (; tokens_counted_ < lent.size(); ++tokens_counted_) {
    tokens_ += ApproxMessageTokens(lent[tokens_counted_]);
  }
  return tokens_;
}

void MessageView::Rebuild(const AgentState& state) {
  messages_ = AgentLoop::EffectiveMessages(state);
  valid_ = true;
  synced_ = state.messages.size();
  summarized_ = state.summarization.has_value();
  summary_id_ = summarized_ ? state.summarization->summary_message.id : "";
  cutoff_ = summarized_ ? state.summarization->cutoff_index : 0;
  open_calls_.clear();
  user_indexes_.clear();
  tokens_ = 0;
  tokens_counted_ = 0;
  for (size_t i = 0; i < messages_.size(); ++i) Add(messages_[i], i);
}

void MessageView::Add(const Message& m, size_t index) {
  switch (m.role) {
    case Role::kUser:
      user_indexes_.push_back(index);
      break;
    case Role::kAssistant:
      for (const auto& c : m.tool_calls) open_calls_.insert(c.id);
      break;
    case Role::kTool:
      open_calls_.erase(m.tool_call_id);
      break;
  }
}

}  // namespace deepbox::agent
