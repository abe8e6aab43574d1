// The middleware hooks themselves (middleware.h), on an AgentLoop with a
// scripted model: WrapToolCall (short-circuit, rewritten call and result,
// outermost-first order), AfterModel (human-in-the-loop as middleware, a
// result given without running), BeforeAgent before the input (dangling-call
// patching), contributed tools and prompt sections (sub-agents), and the
// per-call message changes of WrapModelCall.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include "agent/format.h"
#include "agent/middleware_hitl.h"
#include "agent/middleware_patch.h"
#include "agent/middleware_subagents.h"
#include "agent/testing/agent_fixture.h"
#include "agent/text.h"

namespace deepbox::agent {
namespace {

using testing::Args;
using testing::Call;
using testing::EventLog;
using testing::ScriptedModel;
using testing::ToolMessages;

// A tool that echoes its `text` argument and counts its calls.
struct Echo {
  std::atomic<int> calls{0};
  ToolPtr tool() {
    ToolSpec spec{"echo", "echoes", SchemaObject({{"text", SchemaString("what")}}, {})};
    return std::make_shared<FunctionTool>(spec, [this](ToolContext&, const json::object& args) {
      ++calls;
      return ToolResult::Ok("echo " + ArgString(args, "text"));
    });
  }
};

LoopConfig Config(std::shared_ptr<ChatModel> model, Sandbox& sb, std::vector<ToolPtr> tools,
                  std::vector<std::shared_ptr<Middleware>> middleware) {
  LoopConfig c;
  c.model = std::move(model);
  c.sandbox = &sb;
  c.system_prompt = "base";
  c.tools = std::move(tools);
  c.middleware = std::move(middleware);
  return c;
}

AgentState Started(std::string task) {
  AgentState st;
  st.messages.push_back(Message::User(std::move(task)));
  st.messages.back().id = "msg_task";
  return st;
}

// Records the order of the WrapToolCall hooks and can change the call, the
// result, or answer alone.
class ToolHook : public Middleware {
 public:
  ToolHook(std::string tag, std::vector<std::string>* log, std::mutex* mu)
      : tag_(std::move(tag)), log_(log), mu_(mu) {}
  std::string_view name() const override { return tag_; }
  ToolResult WrapToolCall(ToolCallRequest& request, RunEnv&, const ToolCallFn& next) override {
    Log(tag_ + ">");
    if (short_circuit) return ToolResult::Err("blocked by " + tag_);
    if (rewrite_args) request.call.input["text"] = "rewritten";
    ToolResult r = next(request);
    if (suffix) r.text += " (seen by " + tag_ + ")";
    Log("<" + tag_);
    return r;
  }
  bool short_circuit = false;
  bool rewrite_args = false;
  bool suffix = false;

 private:
  void Log(std::string s) {
    std::lock_guard<std::mutex> lock(*mu_);
    log_->push_back(std::move(s));
  }
  std::string tag_;
  std::vector<std::string>* log_;
  std::mutex* mu_;
};

TEST(WrapToolCall, ShortCircuitsWithoutRunningTheTool) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  model->Tools({Call("c1", "echo", Args({{"text", "hi"}}))});
  model->Text("done");
  Echo echo;
  std::vector<std::string> log;
  std::mutex mu;
  auto hook = std::make_shared<ToolHook>("guard", &log, &mu);
  hook->short_circuit = true;
  AgentLoop loop(Config(model, sbd->client(), {echo.tool()}, {hook}));
  AgentState st = Started("go");
  EventLog events;
  LoopHooks hooks;
  hooks.on_event = events.callback();
  ASSERT_EQ(loop.Run(st, hooks).reason, StopReason::kCompleted);
  EXPECT_EQ(echo.calls.load(), 0);
  auto tools = ToolMessages(st.messages);
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_TRUE(tools[0].is_error);
  EXPECT_EQ(tools[0].text, "blocked by guard");
  EXPECT_EQ(tools[0].tool_call_id, "c1");
  // The caller still sees the call start and end, with the middleware's result.
  ASSERT_EQ(events.of(EventType::kToolCallEnd).size(), 1u);
  EXPECT_FALSE(events.of(EventType::kToolCallEnd)[0].ok);
  EXPECT_EQ(events.of(EventType::kToolCallEnd)[0].output_preview, "blocked by guard");
}

TEST(WrapToolCall, ChangesTheCallAndRewritesTheResult) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  model->Tools({Call("c1", "echo", Args({{"text", "hi"}}))});
  model->Text("done");
  Echo echo;
  std::vector<std::string> log;
  std::mutex mu;
  auto hook = std::make_shared<ToolHook>("post", &log, &mu);
  hook->rewrite_args = true;
  hook->suffix = true;
  AgentLoop loop(Config(model, sbd->client(), {echo.tool()}, {hook}));
  AgentState st = Started("go");
  LoopHooks hooks;
  ASSERT_EQ(loop.Run(st, hooks).reason, StopReason::kCompleted);
  EXPECT_EQ(echo.calls.load(), 1);
  auto tools = ToolMessages(st.messages);
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_EQ(tools[0].text, "echo rewritten (seen by post)");
  // The thread keeps the call the model made.
  EXPECT_EQ(st.messages[1].tool_calls[0].input.at("text").as_string(), "hi");
}

TEST(WrapToolCall, RunsOutermostFirst) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  model->Tools({Call("c1", "echo", Args({{"text", "hi"}}))});
  model->Text("done");
  Echo echo;
  std::vector<std::string> log;
  std::mutex mu;
  auto outer = std::make_shared<ToolHook>("outer", &log, &mu);
  auto inner = std::make_shared<ToolHook>("inner", &log, &mu);
  outer->suffix = true;
  inner->suffix = true;
  AgentLoop loop(Config(model, sbd->client(), {echo.tool()}, {outer, inner}));
  AgentState st = Started("go");
  LoopHooks hooks;
  ASSERT_EQ(loop.Run(st, hooks).reason, StopReason::kCompleted);
  EXPECT_EQ(log, (std::vector<std::string>{"outer>", "inner>", "<inner", "<outer"}));
  EXPECT_EQ(ToolMessages(st.messages)[0].text, "echo hi (seen by inner) (seen by outer)");
}

// ------------------------------------------------------------------ AfterModel

TEST(AfterModel, HumanInTheLoopMiddlewarePausesAndResumes) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  model->Tools({Call("c1", "echo", Args({{"text", "hi"}})),
                Call("c2", "ls", Args({{"path", sbd->client().root()}}))});
  model->Text("done");
  Echo echo;
  std::map<std::string, InterruptConfig> interrupt_on;
  interrupt_on["echo"] = InterruptConfig{{DecisionType::kApprove, DecisionType::kEdit}, "Echo?"};
  auto hitl = std::make_shared<HumanInTheLoopMiddleware>(interrupt_on, nullptr);
  LoopConfig config = Config(model, sbd->client(), {echo.tool()}, {hitl});
  config.tools.push_back(MakeFilesystemTools()[0]);  // ls
  AgentLoop loop(config);
  AgentState st = Started("go");
  EventLog events;
  std::vector<std::optional<InterruptRequest>> states;
  std::vector<Message> replaced;
  LoopHooks hooks;
  hooks.on_event = events.callback();
  hooks.on_interrupt_state = [&](const std::optional<InterruptRequest>& r) { states.push_back(r); };
  hooks.on_message_replaced = [&](const Message& m) { replaced.push_back(m); };
  LoopOutcome paused = loop.Run(st, hooks);
  ASSERT_EQ(paused.reason, StopReason::kInterrupted);
  ASSERT_TRUE(st.pending_interrupt);
  ASSERT_EQ(st.pending_interrupt->action_requests.size(), 1u);
  EXPECT_EQ(st.pending_interrupt->action_requests[0].tool_call_id, "c1");
  EXPECT_TRUE(st.pending_interrupt->action_requests[0].description.starts_with(
      "Echo?\n\nTool: echo\nArgs: "));
  EXPECT_EQ(events.of(EventType::kInterrupt).size(), 1u);
  ASSERT_EQ(states.size(), 1u);
  EXPECT_TRUE(states[0]);
  EXPECT_TRUE(ToolMessages(st.messages).empty());
  EXPECT_EQ(echo.calls.load(), 0);

  // A decision the configuration does not allow: an error, still resumable.
  LoopOutcome bad = loop.Resume(st, {Decision::Reject()}, hooks);
  EXPECT_EQ(bad.reason, StopReason::kError);
  EXPECT_TRUE(st.pending_interrupt);

  LoopOutcome done = loop.Resume(st, {Decision::Edit(Args({{"text", "edited"}}))}, hooks);
  ASSERT_EQ(done.reason, StopReason::kCompleted) << (done.error ? done.error->message : "");
  EXPECT_FALSE(st.pending_interrupt);
  ASSERT_EQ(states.size(), 2u);
  EXPECT_FALSE(states[1]);
  ASSERT_EQ(replaced.size(), 1u);
  EXPECT_EQ(replaced[0].tool_calls[0].input.at("text").as_string(), "edited");
  auto tools = ToolMessages(st.messages);
  ASSERT_EQ(tools.size(), 2u);
  EXPECT_EQ(tools[0].text, "echo edited");
  EXPECT_FALSE(tools[1].is_error);  // ls ran too
  EXPECT_EQ(echo.calls.load(), 1);
  // Without pending decisions there is nothing to resume.
  EXPECT_EQ(loop.Resume(st, {}, hooks).error->message, "no interrupted run to resume");
}

// An AfterModel that answers some calls itself (a policy, a cache).
class Answerer : public Middleware {
 public:
  std::string_view name() const override { return "answerer"; }
  Status AfterModel(ModelTurn& turn, RunEnv&) override {
    for (const auto& c : turn.message().tool_calls) {
      if (ArgString(c.input, "text") == "cached") {
        turn.SetResult(c.id, ToolResult::Ok("from cache"));
      }
    }
    return {};
  }
};

TEST(AfterModel, GivesACallItsResultWithoutRunningIt) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  model->Tools({Call("c1", "echo", Args({{"text", "cached"}})),
                Call("c2", "echo", Args({{"text", "fresh"}}))});
  model->Text("done");
  Echo echo;
  std::vector<std::string> log;
  std::mutex mu;
  auto hook = std::make_shared<ToolHook>("hook", &log, &mu);
  AgentLoop loop(Config(model, sbd->client(), {echo.tool()}, {hook, std::make_shared<Answerer>()}));
  AgentState st = Started("go");
  LoopHooks hooks;
  ASSERT_EQ(loop.Run(st, hooks).reason, StopReason::kCompleted);
  auto tools = ToolMessages(st.messages);
  ASSERT_EQ(tools.size(), 2u);
  EXPECT_EQ(tools[0].text, "from cache");
  EXPECT_EQ(tools[1].text, "echo fresh");
  EXPECT_EQ(echo.calls.load(), 1);
  EXPECT_EQ(log.size(), 2u);  // only the call that ran went through WrapToolCall
}

// ------------------------------------------------------------------ BeforeAgent

TEST(BeforeAgent, PatchingAnswersDanglingCallsBeforeTheNewMessage) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  model->Text("ok");
  Echo echo;
  AgentLoop loop(
      Config(model, sbd->client(), {echo.tool()}, {std::make_shared<PatchToolCallsMiddleware>()}));
  AgentState st;
  st.messages = {Message::User("u"),
                 Message::Assistant("", {Call("a", "echo", Args({{"text", "x"}})),
                                         Call("b", "echo", Args({{"text", "y"}}))}),
                 Message::Tool("a", "echo", "echo x")};
  InterruptRequest pending;
  pending.action_requests.push_back({"b", "echo", {}, "?"});
  st.pending_interrupt = pending;
  std::vector<std::string> persisted;
  LoopHooks hooks;
  hooks.on_message = [&](const Message& m) {
    persisted.push_back(m.role == Role::kTool ? "tool:" + m.tool_call_id : m.text);
  };
  int cleared = 0;
  hooks.on_interrupt_state = [&](const std::optional<InterruptRequest>& r) { cleared += !r; };
  ASSERT_EQ(loop.Run(st, hooks, {Message::User("next")}).reason, StopReason::kCompleted);
  EXPECT_EQ(cleared, 1);
  EXPECT_FALSE(st.pending_interrupt);
  EXPECT_EQ(persisted, (std::vector<std::string>{"tool:b", "next", "ok"}));
  ASSERT_EQ(st.messages.size(), 6u);
  EXPECT_EQ(st.messages[3].text, DanglingToolCallMessage("echo", "b"));
  EXPECT_EQ(st.messages[4].text, "next");
  EXPECT_FALSE(st.messages[4].id.empty());
  EXPECT_EQ(model->requests()[0].messages.size(), 5u);
  EXPECT_EQ(echo.calls.load(), 0);
}

// ------------------------------------------------------------------ contributions

TEST(Contributions, SubAgentMiddlewareAddsTheTaskToolAndItsSection) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  model->Tools({Call("t", "task", Args({{"description", "look"}, {"subagent_type", "helper"}}))});
  model->Text("done");
  Echo echo;
  std::vector<std::string> ran;
  auto subagents = std::make_shared<SubAgentMiddleware>(
      std::vector<std::pair<std::string, std::string>>{{"helper", "Helps."}},
      [&](const std::string& type, const std::string& description, bool fork,
          ToolContext&) -> Result<std::string> {
        ran.push_back(type + ":" + description + (fork ? ":fork" : ""));
        return std::string("helped");
      });
  AgentLoop loop(Config(model, sbd->client(), {echo.tool()}, {subagents}));
  ASSERT_EQ(loop.tools().size(), 2u);
  EXPECT_EQ(loop.tools()[0]->name(), "echo");
  EXPECT_EQ(loop.tools()[1]->name(), "task");
  EXPECT_EQ(loop.system_prompt(), std::string("base\n\n") + kTaskSystemPrompt);
  AgentState st = Started("go");
  LoopHooks hooks;
  ASSERT_EQ(loop.Run(st, hooks).reason, StopReason::kCompleted);
  EXPECT_EQ(ran, (std::vector<std::string>{"helper:look"}));
  EXPECT_EQ(ToolMessages(st.messages)[0].text, "helped");
  auto reqs = model->requests();
  EXPECT_EQ(reqs[0].system, loop.system_prompt());
  ASSERT_EQ(reqs[0].tools.size(), 2u);
  EXPECT_EQ(reqs[0].tools[1].name, "task");

  // A LoopConfig tool of the same name wins, where the config lists it.
  ToolPtr own = std::make_shared<FunctionTool>(
      ToolSpec{"task", "mine", SchemaObject({}, {})},
      [](ToolContext&, const json::object&) { return ToolResult::Ok("mine"); });
  AgentLoop replaced(Config(model, sbd->client(), {own, echo.tool()}, {subagents}));
  ASSERT_EQ(replaced.tools().size(), 2u);
  EXPECT_EQ(replaced.tools()[0], own);
}

// ------------------------------------------------------------------ WrapModelCall

// Changes the conversation of every call in a different way: the change
// reaches that call only, never the thread or the next call.
class Rewriter : public Middleware {
 public:
  std::string_view name() const override { return "rewriter"; }
  Result<ModelResponse> WrapModelCall(ModelCallRequest& request, RunEnv&,
                                      const ModelCallFn& next) override {
    ++calls;
    if (calls == 1) {
      request.mutable_messages()[0].text = "changed in place";
    } else if (calls == 2) {
      MessageEdit edit(request);
      edit.SetText(0, "changed by an edit");
      auto resp = next(request);
      kept_view = request.view() != nullptr;
      return resp;
    }
    return next(request);
  }
  int calls = 0;
  bool kept_view = false;
};

TEST(WrapModelCall, ChangesToTheMessagesReachOneCallOnly) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  model->Tools({Call("c1", "echo", Args({{"text", "1"}}))});
  model->Tools({Call("c2", "echo", Args({{"text", "2"}}))});
  model->Text("done");
  Echo echo;
  auto rewriter = std::make_shared<Rewriter>();
  AgentLoop loop(Config(model, sbd->client(), {echo.tool()}, {rewriter}));
  AgentState st = Started("the task");
  LoopHooks hooks;
  ASSERT_EQ(loop.Run(st, hooks).reason, StopReason::kCompleted);
  auto reqs = model->requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0].messages[0].text, "changed in place");
  EXPECT_EQ(reqs[1].messages[0].text, "changed by an edit");
  EXPECT_EQ(reqs[2].messages[0].text, "the task");
  EXPECT_EQ(reqs[2].messages.size(), 5u);
  EXPECT_TRUE(rewriter->kept_view);
  EXPECT_EQ(st.messages[0].text, "the task");
}

}  // namespace
}  // namespace deepbox::agent
