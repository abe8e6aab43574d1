// The agent loop with a scripted model and the real sandbox daemon: tool
// turns, parallel calls, serialization per path, step limit, cancellation,
// invalid calls, model errors, events.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <thread>

#include "agent/format.h"
#include "agent/middleware_summarization.h"
#include "agent/testing/agent_fixture.h"
#include "agent/text.h"

namespace deepbox::agent {
namespace {

using testing::Args;
using testing::Call;
using testing::EventLog;
using testing::MakeAgent;
using testing::Options;
using testing::ScriptedModel;
using testing::ToolMessages;

TEST(AgentLoop, ToolTurnThenFinalAnswer) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  std::string p = sb.root() + "/fib.py";
  auto model = std::make_shared<ScriptedModel>();
  model->Tools({Call("t1", "write_file", Args({{"file_path", p}, {"content", "print(1)\n"}}))},
               "Writing.", Usage{100, 20, 0, 0});
  model->Text("Done: wrote fib.py", Usage{150, 10, 0, 0});
  auto agent = MakeAgent(Options(model, sb));
  EventLog log;
  RunResult r = agent->Run("write fib.py", {.on_event = log.callback()});
  ASSERT_EQ(r.stop_reason, StopReason::kCompleted) << (r.error ? r.error->message : "");
  EXPECT_EQ(r.final_text, "Done: wrote fib.py");
  EXPECT_EQ(r.steps, 2);
  EXPECT_EQ(r.usage.input_tokens, 250);
  EXPECT_EQ(r.usage.output_tokens, 30);
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, Role::kUser);
  EXPECT_EQ(r.messages[0].text, "write fib.py");
  EXPECT_EQ(r.messages[2].role, Role::kTool);
  EXPECT_EQ(r.messages[2].text, "Updated file " + p);
  EXPECT_EQ(r.messages[2].tool_call_id, "t1");
  for (const auto& m : r.messages) EXPECT_FALSE(m.id.empty());
  EXPECT_EQ(*sb.Download(p), "print(1)\n");
  // The second request carried the tool result.
  auto reqs = model->requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].messages.size(), 3u);
  EXPECT_NE(reqs[0].system.find("Your working directory is " + sb.root()), std::string::npos);
  // Events.
  auto starts = log.of(EventType::kToolCallStart);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].tool_name, "write_file");
  EXPECT_EQ(starts[0].main_argument, p);
  auto ends = log.of(EventType::kToolCallEnd);
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_TRUE(ends[0].ok);
  EXPECT_EQ(ends[0].output_preview, "Updated file " + p);
  EXPECT_EQ(log.of(EventType::kUsage).size(), 2u);
  EXPECT_EQ(log.of(EventType::kFinalMessage).at(0).text, "Done: wrote fib.py");
  std::string streamed;
  for (const auto& e : log.of(EventType::kTextDelta)) streamed += e.text;
  EXPECT_EQ(streamed, "Writing.Done: wrote fib.py");
}

TEST(AgentLoop, ParallelCallsRunConcurrentlyAndResultsKeepCallOrder) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  // Two parallel-safe tools that each wait until both are running.
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
  auto make = [&](std::string name) {
    ToolSpec spec{name, "waits for its sibling", SchemaObject({}, {})};
    return std::make_shared<FunctionTool>(
        spec,
        [&, name](ToolContext&, const json::object&) {
          std::unique_lock<std::mutex> lock(mu);
          ++running;
          cv.notify_all();
          bool both = cv.wait_for(lock, std::chrono::seconds(5), [&] { return running >= 2; });
          return ToolResult::Ok(name + (both ? " saw sibling" : " ran alone"));
        },
        /*parallel_safe=*/true);
  };
  auto model = std::make_shared<ScriptedModel>();
  model->Tools({Call("a", "slow_a", {}), Call("b", "slow_b", {})});
  model->Text("ok");
  auto o = Options(model, sbd->client());
  o.tools = {make("slow_a"), make("slow_b")};
  auto agent = MakeAgent(o);
  RunResult r = agent->Run("go");
  ASSERT_TRUE(r.ok());
  auto tools = ToolMessages(r.messages);
  ASSERT_EQ(tools.size(), 2u);
  EXPECT_EQ(tools[0].tool_call_id, "a");
  EXPECT_EQ(tools[0].text, "slow_a saw sibling");
  EXPECT_EQ(tools[1].tool_call_id, "b");
  EXPECT_EQ(tools[1].text, "slow_b saw sibling");
}

TEST(AgentLoop, SamePathCallsAreSerializedInCallOrder) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  std::string p = sb.root() + "/order.txt";
  std::string q = sb.root() + "/other.txt";
  for (int round = 0; round < 5; ++round) {
    auto model = std::make_shared<ScriptedModel>();
    model->Tools({
        Call("w1", "write_file", Args({{"file_path", p}, {"content", "alpha"}})),
        Call("w2", "write_file", Args({{"file_path", q}, {"content", "other"}})),
        Call("e1", "edit_file",
             Args({{"file_path", p}, {"old_string", "alpha"}, {"new_string", "beta"}})),
        Call("r1", "read_file", Args({{"file_path", p}})),
        Call("e2", "edit_file",
             Args({{"file_path", "order.txt"}, {"old_string", "beta"}, {"new_string", "gamma"}})),
    });
    model->Text("ok");
    auto agent = MakeAgent(Options(model, sb));
    RunResult r = agent->Run("go");
    ASSERT_TRUE(r.ok());
    auto tools = ToolMessages(r.messages);
    ASSERT_EQ(tools.size(), 5u);
    EXPECT_EQ(tools[2].text, "Successfully replaced 1 instance(s) of the string in '" + p + "'");
    EXPECT_EQ(tools[3].text, "@@ lines 1-1 of 1 @@\nbeta");
    EXPECT_FALSE(tools[4].is_error) << tools[4].text;
    EXPECT_EQ(*sb.Download(p), "gamma");
  }
}

TEST(AgentLoop, UserToolsAreSequentialUnlessParallelSafe) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  std::atomic<int> running{0};
  std::atomic<int> peak{0};
  ToolSpec spec{"counter", "counts", SchemaObject({}, {})};
  auto tool = std::make_shared<FunctionTool>(spec, [&](ToolContext&, const json::object&) {
    int now = ++running;
    peak = std::max(peak.load(), now);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    --running;
    return ToolResult::Ok("ok");
  });
  auto model = std::make_shared<ScriptedModel>();
  model->Tools({Call("1", "counter", {}), Call("2", "counter", {}), Call("3", "counter", {})});
  model->Text("done");
  auto o = Options(model, sbd->client());
  o.tools = {tool};
  auto agent = MakeAgent(o);
  ASSERT_TRUE(agent->Run("go").ok());
  EXPECT_EQ(peak.load(), 1);
}

TEST(AgentLoop, StepLimit) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  for (int i = 0; i < 10; ++i) {
    model->Tools({Call("c" + std::to_string(i), "ls", Args({{"path", sbd->client().root()}}))});
  }
  auto o = Options(model, sbd->client());
  o.max_steps = 3;
  auto agent = MakeAgent(o);
  RunResult r = agent->Run("loop forever");
  EXPECT_EQ(r.stop_reason, StopReason::kStepLimit);
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->message, "Agent stopped: reached the step limit of 3 model turns");
  EXPECT_EQ(model->calls(), 3u);
  EXPECT_EQ(r.steps, 3);
  // Every call made was answered.
  EXPECT_EQ(ToolMessages(r.messages).size(), 3u);
}

TEST(AgentLoop, CancelDuringModelCall) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  model->BlockUntilCancelled();
  auto agent = MakeAgent(Options(model, sbd->client()));
  std::atomic<bool> cancel{false};
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cancel = true;
  });
  RunResult r = agent->Run("hi", {.cancel = &cancel});
  t.join();
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_FALSE(r.error);
}

TEST(AgentLoop, CancelDuringToolCallStopsCommandAndLeavesThreadResumable) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  model->Tools(
      {Call("x1", "execute", Args({{"command", "while true; do echo tick; sleep 0.05; done"}}))});
  model->Text("after cancel");
  auto agent = MakeAgent(Options(model, sbd->client()));
  std::atomic<bool> cancel{false};
  EventLog log;
  std::thread t([&] {
    while (log.of(EventType::kToolOutput).empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    cancel = true;
  });
  auto t0 = std::chrono::steady_clock::now();
  RunResult r = agent->Run("run it", {.on_event = log.callback(), .cancel = &cancel});
  t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(model->calls(), 1u);
  // A new message continues the same thread.
  RunResult r2 = agent->Run("continue");
  EXPECT_TRUE(r2.ok());
  EXPECT_EQ(r2.final_text, "after cancel");
}

TEST(AgentLoop, InvalidCallsGetErrorResults) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  ToolCall malformed = Call("m", "write_file", {});
  malformed.input_error = "Expecting ',' delimiter";
  model->Tools(
      {Call("u", "no_such_tool", {}), Call("v", "read_file", Args({{"limit", 5}})), malformed});
  model->Text("ok");
  auto agent = MakeAgent(Options(model, sbd->client()));
  RunResult r = agent->Run("go");
  ASSERT_TRUE(r.ok());
  auto tools = ToolMessages(r.messages);
  ASSERT_EQ(tools.size(), 3u);
  EXPECT_TRUE(tools[0].is_error);
  EXPECT_EQ(tools[0].text,
            "Error: no_such_tool is not a valid tool, try one of [ls, read_file, write_file, "
            "edit_file, delete, glob, grep, execute, write_todos, task].");
  EXPECT_EQ(tools[1].text,
            "Error invoking tool 'read_file' with kwargs {'limit': 5} with error:\n file_path: "
            "Field required\n Please fix the error and try again.");
  EXPECT_EQ(tools[2].text,
            "Tool call write_file with id m could not be executed - arguments were malformed or "
            "truncated. Expecting ',' delimiter");
}

TEST(AgentLoop, RejectedCallsAreReportedAsEvents) {
  // The model gets the error as the result; the caller an event per call
  // (before, such calls were invisible outside the conversation).
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  ToolCall malformed = Call("m", "write_file", {});
  malformed.input_error = "Expecting ',' delimiter";
  model->Tools({Call("u", "no_such_tool", {}), Call("v", "read_file", Args({{"limit", 5}})),
                malformed, Call("ok", "ls", Args({{"path", "/workspace"}}))});
  model->Text("ok");
  auto agent = MakeAgent(Options(model, sbd->client()));
  EventLog log;
  RunResult r = agent->Run("go", {.on_event = log.callback()});
  ASSERT_TRUE(r.ok());
  auto rejected = log.of(EventType::kToolCallRejected);
  ASSERT_EQ(rejected.size(), 3u);
  EXPECT_EQ(rejected[0].tool_call_id, "u");
  EXPECT_EQ(rejected[0].tool_name, "no_such_tool");
  EXPECT_FALSE(rejected[0].ok);
  EXPECT_EQ(rejected[0].text, ToolMessages(r.messages)[0].text);
  EXPECT_EQ(rejected[1].tool_name, "read_file");
  EXPECT_NE(rejected[1].text.find("file_path: Field required"), std::string::npos);
  EXPECT_EQ(rejected[2].tool_name, "write_file");
  EXPECT_NE(rejected[2].text.find("Expecting ',' delimiter"), std::string::npos);
  // The valid call ran as usual and was not reported as rejected.
  auto ends = log.of(EventType::kToolCallEnd);
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0].tool_name, "ls");
}

TEST(AgentLoop, AnAnswerCutOffAtMaxTokensIsNotCompleted) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  model->Respond([](const ModelRequest&) -> Result<ModelResponse> {
    ModelResponse r;
    r.message = Message::Assistant("The first ten numbers are 0, 1, 1, 2", {});
    r.stop_reason = "max_tokens";
    return r;
  });
  auto agent = MakeAgent(Options(model, sbd->client()));
  RunResult r = agent->Run("list them");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.stop_reason, StopReason::kTruncated);
  EXPECT_EQ(StopReasonName(r.stop_reason), "truncated");
  EXPECT_EQ(r.final_text, "The first ten numbers are 0, 1, 1, 2");
  ASSERT_TRUE(r.error.has_value());
  EXPECT_NE(r.error->message.find("output token limit"), std::string::npos);
}

TEST(AgentLoop, ParallelWriteTodosIsRefused) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto todos = *ParseJson(R"([{"content":"a","status":"pending"}])");
  auto model = std::make_shared<ScriptedModel>();
  model->Tools({Call("t1", "write_todos", Args({{"todos", todos}})),
                Call("t2", "write_todos", Args({{"todos", todos}}))});
  model->Tools({Call("t3", "write_todos", Args({{"todos", todos}}))});
  model->Text("ok");
  auto agent = MakeAgent(Options(model, sbd->client()));
  EventLog log;
  RunResult r = agent->Run("plan", {.on_event = log.callback()});
  auto tools = ToolMessages(r.messages);
  ASSERT_EQ(tools.size(), 3u);
  EXPECT_EQ(tools[0].text,
            "Error: The `write_todos` tool should never be called multiple times in parallel. "
            "Please call it only once per model invocation to update the todo list.");
  EXPECT_TRUE(tools[1].is_error);
  EXPECT_EQ(tools[2].text, "Updated todo list to [{'content': 'a', 'status': 'pending'}]");
  auto updates = log.of(EventType::kTodoUpdate);
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].todos.size(), 1u);
  EXPECT_EQ(agent->state().todos.size(), 1u);
}

TEST(AgentLoop, ModelErrorStopsWithError) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  model->Fail(Error(ErrorCode::kUnauthenticated, "invalid x-api-key"));
  auto agent = MakeAgent(Options(model, sbd->client()));
  EventLog log;
  RunResult r = agent->Run("hi", {.on_event = log.callback()});
  EXPECT_EQ(r.stop_reason, StopReason::kError);
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->code, ErrorCode::kUnauthenticated);
  EXPECT_EQ(log.of(EventType::kError).at(0).text, "invalid x-api-key");
}

TEST(AgentLoop, DanglingToolCallsArePatchedOnNextMessage) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  model->Tools(
      {Call("w1", "write_file", Args({{"file_path", "a.txt"}, {"content", "x"}}))});  // will pause
  model->Text("ok, moving on");
  auto o = Options(model, sbd->client());
  o.interrupt_on["write_file"] = InterruptConfig{};
  auto agent = MakeAgent(o);
  RunResult paused = agent->Run("write a.txt");
  ASSERT_EQ(paused.stop_reason, StopReason::kInterrupted);
  RunResult r = agent->Run("never mind, do something else");
  ASSERT_TRUE(r.ok());
  auto reqs = model->requests();
  const auto& msgs = reqs.back().messages;
  ASSERT_EQ(msgs.size(), 4u);
  EXPECT_EQ(msgs[2].role, Role::kTool);
  EXPECT_EQ(msgs[2].tool_call_id, "w1");
  EXPECT_EQ(msgs[2].text,
            "Tool call write_file with id w1 was cancelled - another message came in before it "
            "could be completed.");
  EXPECT_EQ(msgs[3].text, "never mind, do something else");
  EXPECT_FALSE(agent->pending_interrupt());
  EXPECT_FALSE(sbd->client().Stat(sbd->client().root() + "/a.txt"));
}

TEST(AgentLoop, RequestTimePatchCoversOlderDanglingCalls) {
  std::vector<Message> msgs = {Message::User("u"),
                               Message::Assistant("", {Call("a", "ls", {}), Call("b", "glob", {})}),
                               Message::Tool("a", "ls", "[]"), Message::User("next")};
  auto patched = AgentLoop::PatchDanglingToolCalls(msgs);
  ASSERT_EQ(patched.size(), 5u);
  EXPECT_EQ(patched[2].tool_call_id, "a");
  EXPECT_EQ(patched[3].tool_call_id, "b");
  EXPECT_EQ(patched[3].text, DanglingToolCallMessage("glob", "b"));
  EXPECT_EQ(patched[4].text, "next");
}

Message WithId(Message m, std::string id) {
  m.id = std::move(id);
  return m;
}

std::vector<std::string> Ids(const std::vector<Message>& msgs) {
  std::vector<std::string> out;
  for (const auto& m : msgs) out.push_back(m.id);
  return out;
}

// Lends the view, checks it against EffectiveMessages and gives it back.
void ExpectViewMatches(MessageView& view, const AgentState& st) {
  std::vector<Message> lent = view.Lend(st);
  EXPECT_TRUE(view.IsLent(lent));
  std::vector<Message> expected = AgentLoop::EffectiveMessages(st);
  EXPECT_EQ(Ids(lent), Ids(expected));
  for (size_t i = 0; i < lent.size() && i < expected.size(); ++i) {
    EXPECT_EQ(lent[i].text, expected[i].text) << i;
  }
  int64_t tokens = 0;
  std::vector<size_t> users;
  for (size_t i = 0; i < expected.size(); ++i) {
    tokens += ApproxMessageTokens(expected[i]);
    if (expected[i].role == Role::kUser) users.push_back(i);
  }
  EXPECT_EQ(view.ApproxTokens(lent), tokens);
  EXPECT_EQ(view.user_indexes(), users);
  EXPECT_EQ(view.MayHaveDanglingCalls(), AgentLoop::HasDanglingToolCalls(lent));
  view.Return(std::move(lent));
}

TEST(MessageView, FollowsTheStateTurnByTurn) {
  AgentState st;
  st.messages.push_back(WithId(Message::User("u"), "m0"));
  MessageView view;
  ExpectViewMatches(view, st);
  st.messages.push_back(
      WithId(Message::Assistant("", {Call("a", "ls", {}), Call("b", "glob", {})}), "m1"));
  ExpectViewMatches(view, st);  // both calls open
  st.messages.push_back(WithId(Message::Tool("a", "ls", "[]"), "m2"));
  ExpectViewMatches(view, st);  // b still open
  st.messages.push_back(WithId(Message::Tool("b", "glob", "[]"), "m3"));
  ExpectViewMatches(view, st);
  EXPECT_FALSE(view.MayHaveDanglingCalls());
  st.messages.push_back(WithId(Message::User("more"), "m4"));
  st.messages.push_back(WithId(Message::Assistant("", {Call("c", "ls", {})}), "m5"));
  st.messages.push_back(WithId(Message::Tool("c", "ls", "[]"), "m6"));
  ExpectViewMatches(view, st);

  // A summarization replaces the head: the view starts over from the summary.
  SummarizationEvent ev;
  ev.cutoff_index = 4;
  ev.summary_message = WithId(Message::User("summary one"), "summary_1");
  st.summarization = ev;
  ExpectViewMatches(view, st);
  st.messages.push_back(WithId(Message::Assistant("", {Call("d", "ls", {})}), "m7"));
  st.messages.push_back(WithId(Message::Tool("d", "ls", "[]"), "m8"));
  ExpectViewMatches(view, st);
  // A later summary with the same cutoff is still a different view.
  ev.summary_message = WithId(Message::User("summary two"), "summary_2");
  st.summarization = ev;
  ExpectViewMatches(view, st);
  // A cutoff past the end: the summary alone until the thread reaches it.
  ev.cutoff_index = 11;
  ev.summary_message = WithId(Message::User("summary three"), "summary_3");
  st.summarization = ev;
  ExpectViewMatches(view, st);
  st.messages.push_back(WithId(Message::User("m9"), "m9"));
  st.messages.push_back(WithId(Message::Assistant("m10"), "m10"));
  ExpectViewMatches(view, st);
  st.messages.push_back(WithId(Message::User("m11"), "m11"));
  st.messages.push_back(WithId(Message::Assistant("m12"), "m12"));
  ExpectViewMatches(view, st);
}

TEST(MessageView, TakesBackOnlyTheLentVector) {
  AgentState st;
  st.messages.push_back(WithId(Message::User("u"), "m0"));
  st.messages.push_back(WithId(Message::Assistant("a"), "m1"));
  MessageView view;
  std::vector<Message> lent = view.Lend(st);
  std::vector<Message> copy = lent;
  EXPECT_FALSE(view.IsLent(copy));
  // A replaced list (same length, new first message) is not taken back.
  lent.front() = WithId(Message::User("replaced"), "summary_x");
  EXPECT_FALSE(view.IsLent(lent));
  view.Return(std::move(lent));
  ExpectViewMatches(view, st);  // rebuilt from the state
  // Neither is a list that grew.
  lent = view.Lend(st);
  lent.push_back(WithId(Message::Tool("x", "ls", "patched"), "p"));
  EXPECT_FALSE(view.IsLent(lent));
  view.Return(std::move(lent));
  ExpectViewMatches(view, st);
  // Lending again without a Return starts over too.
  lent = view.Lend(st);
  ExpectViewMatches(view, st);
}

// A call without a result in the middle of the thread (e.g. a thread written
// by an older deepbox) is patched in every request, and only there.
TEST(AgentLoop, OlderDanglingCallsArePatchedInEveryRequest) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  model->Tools({Call("c1", "noop", {})});
  model->Tools({Call("c2", "noop", {})});
  model->Text("done");
  LoopConfig config;
  config.model = model;
  config.sandbox = &sbd->client();
  config.tools = {std::make_shared<FunctionTool>(
      ToolSpec{"noop", "does nothing", SchemaObject({}, {})},
      [](ToolContext&, const json::object&) { return ToolResult::Ok("nothing"); })};
  config.middleware = {std::make_shared<SummarizationMiddleware>()};
  AgentLoop loop(config);
  AgentState st;
  st.messages = {WithId(Message::User("u"), "m0"),
                 WithId(Message::Assistant("", {Call("a", "ls", {}), Call("b", "glob", {})}), "m1"),
                 WithId(Message::Tool("a", "ls", "[]"), "m2"), WithId(Message::User("next"), "m3")};
  LoopHooks hooks;
  LoopOutcome out = loop.Run(st, hooks);
  ASSERT_EQ(out.reason, StopReason::kCompleted) << (out.error ? out.error->message : "");
  auto reqs = model->requests();
  ASSERT_EQ(reqs.size(), 3u);
  for (size_t k = 0; k < reqs.size(); ++k) {
    const auto& msgs = reqs[k].messages;
    ASSERT_EQ(msgs.size(), 5 + 2 * k) << k;
    EXPECT_EQ(msgs[2].tool_call_id, "a");
    EXPECT_EQ(msgs[3].tool_call_id, "b");
    EXPECT_EQ(msgs[3].text, DanglingToolCallMessage("glob", "b"));
    EXPECT_EQ(msgs[4].text, "next");
    if (k > 0) {
      EXPECT_EQ(msgs.back().tool_call_id, "c" + std::to_string(k));
    }
  }
  // The thread itself is not patched.
  ASSERT_EQ(st.messages.size(), 9u);
  EXPECT_EQ(ToolMessages(st.messages).size(), 3u);
}

TEST(DeepAgentApi, ToolsPromptAndValidation) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  auto agent = MakeAgent(Options(model, sbd->client()));
  std::vector<std::string> names;
  for (const auto& s : agent->tool_specs()) names.push_back(s.name);
  EXPECT_EQ(names, (std::vector<std::string>{"ls", "read_file", "write_file", "edit_file", "delete",
                                             "glob", "grep", "execute", "write_todos", "task"}));
  for (const auto& s : agent->tool_specs()) {
    EXPECT_FALSE(s.description.empty()) << s.name;
    EXPECT_EQ(s.input_schema.at("type").as_string(), "object") << s.name;
  }
  EXPECT_TRUE(agent->system_prompt().starts_with(kDefaultBasePrompt));
  EXPECT_FALSE(DeepAgent::Create({}));
  DeepAgentOptions no_sandbox;
  no_sandbox.model = model;
  EXPECT_EQ(DeepAgent::Create(no_sandbox).error().message, "DeepAgent needs a sandbox");
  DeepAgentOptions bad_perm = Options(model, sbd->client());
  bad_perm.permissions = {{{FsOperation::kRead}, {"relative/**"}, PermissionMode::kDeny}};
  EXPECT_FALSE(DeepAgent::Create(bad_perm));
}

TEST(DeepAgentApi, CostFromProfile) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  ModelProfile profile;
  profile.usd_per_mtok_input = 3;
  profile.usd_per_mtok_output = 15;
  auto model = std::make_shared<ScriptedModel>(profile);
  model->Text("hi", Usage{1000000, 100000, 0, 0});
  auto agent = MakeAgent(Options(model, sbd->client()));
  RunResult r = agent->Run("hello");
  EXPECT_NEAR(r.cost_usd, 3 + 1.5, 1e-9);
}

}  // namespace
}  // namespace deepbox::agent
