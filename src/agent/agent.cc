#include "agent/agent.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_set>

#include "agent/format.h"
#include "agent/middleware.h"
#include "agent/middleware_hitl.h"
#include "agent/text.h"

namespace deepbox::agent {

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
  explicit Impl(const LoopConfig& c) : config(c) {
    for (const auto& t : config.tools) {
      specs.push_back(t->spec());
      by_name[t->name()] = t;
      names.push_back(t->name());
    }
  }

  const LoopConfig& config;
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
    run.env = std::make_unique<RunEnv>(RunEnv{
        config, run.state, run.hooks, [this, &run](AgentEvent ev) { Emit(run, std::move(ev)); },
        [this, &run](Message m) { Append(run, std::move(m)); }});
    run.env->view = &run.view;
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

  Result<ModelResponse> CallChain(Run& run, ModelRequest& req, size_t i) {
    if (i < config.middleware.size()) {
      return config.middleware[i]->WrapModelCall(
          req, *run.env, [this, &run, i](ModelRequest& r) { return CallChain(run, r, i + 1); });
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
    // The safety net for tool calls without a result. The view knows when
    // there are none (the usual case). The patched list is a copy, so that
    // the loop gets its view back as it lent it.
    bool answered = run.view.IsLent(req.messages) && !run.view.MayHaveDanglingCalls();
    if (answered || !HasDanglingToolCalls(req.messages)) return config.model->Generate(req, cb);
    std::vector<Message> messages = std::move(req.messages);
    req.messages = PatchDanglingToolCalls(messages);
    auto resp = config.model->Generate(req, cb);
    req.messages = std::move(messages);
    return resp;
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
      ctx.call = &c;
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
      ToolResult r;
      try {
        r = tool->Invoke(ctx, c.input);
      } catch (const std::exception& e) {
        r = ToolResult::Err(std::string("Error: ") + e.what());
      }
      for (const auto& mw : config.middleware) mw->AfterToolCall(c, tool.get(), r, *run.env);
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

  // Asks for (or pauses on) human decisions for the last assistant message.
  // Returns false when the run must stop (paused or failed).
  bool HandleInterrupts(Run& run, std::map<std::string, ToolResult>& preset,
                        std::optional<std::vector<Decision>> decisions) {
    Message& ai = run.state.messages.back();
    std::optional<InterruptRequest> request;
    if (run.state.pending_interrupt) {
      request = run.state.pending_interrupt;
    } else {
      request = BuildInterruptRequest(ai.tool_calls, config.interrupt_on, config.permissions.get(),
                                      config.sandbox->root());
    }
    if (!request) return true;
    if (!decisions) {
      AgentEvent ev;
      ev.type = EventType::kInterrupt;
      ev.interrupt = &*request;
      Emit(run, std::move(ev));
      if (run.hooks.on_interrupt) decisions = run.hooks.on_interrupt(*request);
      if (!decisions) {
        run.state.pending_interrupt = request;
        if (run.hooks.on_interrupt_state) run.hooks.on_interrupt_state(request);
        Finish(run, StopReason::kInterrupted);
        return false;
      }
    }
    if (auto st = ValidateDecisions(*request, *decisions); !st) {
      Finish(run, StopReason::kError, st.error());
      return false;
    }
    bool edited = ApplyDecisions(*request, *decisions, ai, preset);
    if (edited && run.hooks.on_message_replaced) run.hooks.on_message_replaced(ai);
    if (run.state.pending_interrupt) {
      run.state.pending_interrupt.reset();
      if (run.hooks.on_interrupt_state) run.hooks.on_interrupt_state(std::nullopt);
    }
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
      ModelRequest req;
      req.system = config.system_prompt;
      req.tools = specs;
      if (std::any_of(config.tools.begin(), config.tools.end(),
                      [](const ToolPtr& t) { return !t->Available(); })) {
        req.tools.clear();
        for (size_t i = 0; i < config.tools.size(); ++i) {
          if (config.tools[i]->Available()) req.tools.push_back(specs[i]);
        }
      }
      req.max_tokens = config.max_tokens;
      req.cancel = run.hooks.cancel;
      req.cancel_fd = run.hooks.cancel_fd;
      req.messages = run.view.Lend(run.state);
      auto resp = CallChain(run, req, 0);
      run.view.Return(std::move(req.messages));
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
      if (!HandleInterrupts(run, preset, std::nullopt)) return run.outcome;
      ExecuteTools(run, std::move(preset));
    }
  }
};

AgentLoop::AgentLoop(LoopConfig config)
    : config_(std::move(config)), impl_(std::make_unique<Impl>(config_)) {}

AgentLoop::~AgentLoop() = default;

LoopOutcome AgentLoop::Run(AgentState& state, LoopHooks& hooks) {
  Impl::Run run{state, hooks, {}, {}, {}, {}};
  impl_->InitEnv(run);
  if (!config_.model || !config_.sandbox) {
    return impl_->Finish(run, StopReason::kError,
                         Error(ErrorCode::kInvalidArgument, "agent needs a model and a sandbox"));
  }
  for (const auto& mw : config_.middleware) mw->BeforeAgent(*run.env);
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
  if (!impl_->HandleInterrupts(run, preset, std::move(decisions))) return run.outcome;
  impl_->ExecuteTools(run, std::move(preset));
  return impl_->Loop(run);
}

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

void MessageView::Return(std::vector<Message> messages) {
  if (lent_ && IsLent(messages)) {
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
