// Middleware: eviction, summarization, interrupts (approve / edit / reject /
// respond, callback and resume), "ask" permissions, sub-agents, skills,
// memory.
#include <gtest/gtest.h>

#include "agent/codec.h"
#include "agent/format.h"
#include "agent/middleware_eviction.h"
#include "agent/middleware_memory.h"
#include "agent/middleware_skills.h"
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

ToolPtr BigTool(size_t chars, std::string name = "big") {
  ToolSpec spec{name, "returns a lot", SchemaObject({}, {})};
  return std::make_shared<FunctionTool>(spec, [chars](ToolContext&, const json::object&) {
    std::string out;
    int line = 1;
    while (out.size() < chars) out += "row " + std::to_string(line++) + "\n";
    out.resize(chars);
    return ToolResult::Ok(out);
  });
}

// ------------------------------------------------------------------ eviction

TEST(Eviction, LargeResultsGoToTheFilesystem) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  auto model = std::make_shared<ScriptedModel>();
  model->Tools({Call("toolu.a/1", "big", {}), Call("small", "big_small", {})});
  model->Text("ok");
  auto o = Options(model, sb);
  ToolPtr big = BigTool(80001);
  ToolPtr small = BigTool(80000, "big_small");
  o.tools = {big, small};
  auto agent = MakeAgent(o);
  RunResult r = agent->Run("go");
  ASSERT_TRUE(r.ok());
  auto tools = ToolMessages(r.messages);
  ASSERT_EQ(tools.size(), 2u);
  std::string path = sb.root() + "/large_tool_results/toolu_a_1";
  std::string full = *sb.Download(path);
  EXPECT_EQ(full.size(), 80001u);
  EXPECT_EQ(tools[0].text, TooLargeToolMessage("toolu.a/1", path, CreateContentPreview(full)));
  EXPECT_TRUE(
      tools[0].text.starts_with("Tool result too large, the result of this tool call toolu.a/1 was "
                                "saved in the filesystem at this path: " +
                                path));
  EXPECT_NE(tools[0].text.find("1  row 1\n2  row 2\n"), std::string::npos);
  EXPECT_NE(tools[0].text.find(" lines truncated] ...\n"), std::string::npos);
  // Exactly at the threshold: kept inline.
  EXPECT_EQ(tools[1].text.size(), 80000u);
}

TEST(Eviction, FileToolsAreNeverEvicted) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  std::string content;
  for (int i = 0; i < 30; ++i) content += std::string(3000, 'a' + i % 26) + "\n";
  ASSERT_TRUE(sb.Upload(sb.root() + "/wide.txt", content));
  auto model = std::make_shared<ScriptedModel>();
  model->Tools({Call("r", "read_file", Args({{"file_path", "wide.txt"}})),
                Call("x", "execute", Args({{"command", "cat wide.txt"}}))});
  model->Text("ok");
  auto agent = MakeAgent(Options(model, sb));
  RunResult r = agent->Run("go");
  auto tools = ToolMessages(r.messages);
  ASSERT_EQ(tools.size(), 2u);
  // read_file: budget-cut (its truncation notice above the header), not evicted.
  EXPECT_TRUE(tools[0].text.starts_with("[Output was truncated due to size limits."));
  EXPECT_NE(tools[0].text.find("| truncated due to size @@\naaa"), std::string::npos);
  EXPECT_TRUE(tools[1].text.starts_with("Tool result too large"));  // execute: evicted
  EXPECT_TRUE(sb.Stat(sb.root() + "/large_tool_results/x"));
}

TEST(Eviction, LargeUserMessagesAreSavedAndPreviewed) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  std::string task;
  for (int i = 1; task.size() <= 200000; ++i) task += "paragraph " + std::to_string(i) + "\n";
  auto model = std::make_shared<ScriptedModel>();
  model->Text("got it");
  auto agent = MakeAgent(Options(model, sb));
  RunResult r = agent->Run(task);
  ASSERT_TRUE(r.ok());
  std::string path = sb.root() + "/conversation_history/" + r.messages[0].id + ".md";
  EXPECT_EQ(model->requests()[0].messages[0].text,
            TooLargeHumanMessage(path, CreateContentPreview(task)));
  EXPECT_TRUE(model->requests()[0].messages[0].text.starts_with(
      "Message content too large and was saved to the filesystem at: " + path +
      "\n\nYou can read the full content using the read_file tool"));
  EXPECT_EQ(*sb.Download(path), task);
  EXPECT_EQ(r.messages[0].text, task);  // the thread keeps the full text
}

// ------------------------------------------------------------------ summarization

TEST(Summarization, TriggersAtThresholdAndReplacesHistory) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  ModelProfile profile;
  profile.max_input_tokens = 2000;  // trigger at 1 700 tokens, keep ~200
  auto model = std::make_shared<ScriptedModel>(profile);
  model->Tools({Call("l1", "blob", {})}, "", Usage{100, 10, 0, 0});
  model->Tools({Call("l2", "blob", {})}, "", Usage{1800, 10, 0, 0});
  model->Text("SUMMARY OF WORK");  // the summary call
  model->Text("final answer");
  auto o = Options(model, sb);
  o.thread_id = "sumtest";
  o.tools = {BigTool(1000, "blob")};
  auto agent = MakeAgent(o);
  EventLog log;
  RunResult r = agent->Run("please list things", {.on_event = log.callback()});
  ASSERT_TRUE(r.ok()) << (r.error ? r.error->message : "");
  EXPECT_EQ(r.final_text, "final answer");
  auto reqs = model->requests();
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_EQ(reqs[1].messages.size(), 3u);  // no summarization below the threshold
  // The summary request holds the old messages.
  const ModelRequest& sreq = reqs[2];
  EXPECT_TRUE(sreq.tools.empty());
  ASSERT_EQ(sreq.messages.size(), 1u);
  EXPECT_NE(sreq.messages[0].text.find("<human>please list things</human>"), std::string::npos);
  // The next request: the summary message, then the kept tail.
  std::string history = sb.root() + "/conversation_history/sumtest.md";
  const ModelRequest& next = reqs[3];
  ASSERT_EQ(next.messages.size(), 3u);
  EXPECT_EQ(next.messages[0].role, Role::kUser);
  EXPECT_EQ(next.messages[0].text, SummaryMessageText("SUMMARY OF WORK", history));
  EXPECT_EQ(next.messages[1].tool_calls.at(0).id, "l2");
  EXPECT_EQ(next.messages[2].tool_call_id, "l2");
  // The history file holds the summarized messages.
  std::string saved = *sb.Download(history);
  EXPECT_TRUE(saved.starts_with("## Summarized at "));
  EXPECT_NE(saved.find("<human>please list things</human>"), std::string::npos);
  EXPECT_NE(saved.find("<tool id=\"l1\" name=\"blob\">row 1"), std::string::npos);
  EXPECT_EQ(log.of(EventType::kSummarized).at(0).text, history);
  // The thread keeps everything; the event records the cutoff.
  AgentState st = agent->state();
  ASSERT_TRUE(st.summarization);
  EXPECT_EQ(st.messages.size(), 6u);
  EXPECT_EQ(st.summarization->cutoff_index, 3u);
  EXPECT_EQ(st.summarization->file_path, history);
  EXPECT_EQ(AgentLoop::EffectiveMessages(st).front().text, next.messages[0].text);
}

// A model call refused as too long (Error::reason, whatever its text) is
// summarized and retried once, below the threshold too; the same text
// without the reason is just an error.
TEST(Summarization, AContextOverflowSummarizesAndRetriesOnce) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  ModelProfile profile;
  profile.max_input_tokens = 2000;  // trigger at 1 700 tokens, keep ~200: never reached here
  auto model = std::make_shared<ScriptedModel>(profile);
  model->Tools({Call("l1", "blob", {})}, "", Usage{100, 10, 0, 0});
  model->Tools({Call("l2", "blob", {})}, "", Usage{100, 10, 0, 0});
  model->Fail(
      Error(ErrorCode::kInvalidArgument, "some wording", std::string(kReasonContextOverflow)));
  model->Text("SUMMARY OF WORK");
  model->Text("final answer");
  auto o = Options(model, sb);
  o.thread_id = "overflow";
  o.tools = {BigTool(1000, "blob")};
  auto agent = MakeAgent(o);
  RunResult r = agent->Run("go");
  ASSERT_TRUE(r.ok()) << (r.error ? r.error->message : "");
  EXPECT_EQ(r.final_text, "final answer");
  auto reqs = model->requests();
  ASSERT_EQ(reqs.size(), 5u);
  EXPECT_TRUE(reqs[3].tools.empty());  // the summary call
  EXPECT_EQ(reqs[4].messages[0].role, Role::kUser);

  auto plain = std::make_shared<ScriptedModel>(profile);
  plain->Fail(Error(ErrorCode::kInvalidArgument, "prompt is too long"));
  auto o2 = Options(plain, sb);
  auto agent2 = MakeAgent(o2);
  RunResult r2 = agent2->Run("go");
  EXPECT_FALSE(r2.ok());
  EXPECT_EQ(plain->requests().size(), 1u);  // not summarized: no reason
}

TEST(Summarization, WithoutProfileKeepsSixMessagesAndTruncatesOldArgs) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  auto model = std::make_shared<ScriptedModel>();  // no profile: 170 000 tokens / 6 messages
  std::string big(3000, 'B');
  for (int i = 0; i < 12; ++i) {
    model->Tools({Call("w" + std::to_string(i), "write_file",
                       Args({{"file_path", "f" + std::to_string(i) + ".txt"}, {"content", big}}))},
                 "", Usage{1000, 10, 0, 0});
  }
  model->Tools({Call("last", "ls", Args({{"path", sb.root()}}))}, "", Usage{200000, 10, 0, 0});
  model->Text("the summary");
  model->Text("done");
  auto agent = MakeAgent(Options(model, sb));
  RunResult r = agent->Run("write files");
  ASSERT_TRUE(r.ok()) << (r.error ? r.error->message : "");
  auto reqs = model->requests();
  ASSERT_EQ(reqs.size(), 15u);
  // Request 13 (25 messages >= 20): write_file contents before the last 20
  // messages are shortened.
  const auto& m13 = reqs[12].messages;
  ASSERT_EQ(m13.size(), 25u);
  EXPECT_EQ(m13[1].tool_calls[0].input.at("content").as_string(),
            std::string(20, 'B') + "...(argument truncated)");
  EXPECT_EQ(m13[3].tool_calls[0].input.at("content").as_string(),
            std::string(20, 'B') + "...(argument truncated)");
  EXPECT_EQ(m13[5].tool_calls[0].input.at("content").as_string(), big);
  // The thread itself is untouched.
  EXPECT_EQ(agent->state().messages[1].tool_calls[0].input.at("content").as_string(), big);
  // Request 14 is the summary; request 15: summary + the last 6 messages.
  EXPECT_TRUE(reqs[13].tools.empty());
  const auto& m15 = reqs[14].messages;
  ASSERT_EQ(m15.size(), 7u);
  EXPECT_TRUE(m15[0].text.starts_with("You are in the middle of a conversation"));
  EXPECT_EQ(m15[1].role, Role::kAssistant);
  EXPECT_EQ(m15[6].tool_call_id, "last");
}

// The loop keeps its view of the conversation across turns: after a
// summarization it starts over from the summary and then grows again.
TEST(Summarization, LaterRequestsCarryTheSummaryAndTheGrowingTail) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  ModelProfile profile;
  profile.max_input_tokens = 2000;  // trigger at 1 700 tokens
  auto model = std::make_shared<ScriptedModel>(profile);
  model->Tools({Call("l1", "blob", {})}, "", Usage{100, 10, 0, 0});
  model->Tools({Call("l2", "blob", {})}, "", Usage{1800, 10, 0, 0});
  model->Text("SUMMARY OF WORK");  // the summary call
  model->Tools({Call("l3", "blob", {})}, "", Usage{300, 10, 0, 0});
  model->Tools({Call("l4", "blob", {})}, "", Usage{600, 10, 0, 0});
  model->Text("final answer");
  auto o = Options(model, sb);
  o.tools = {BigTool(1000, "blob")};
  auto agent = MakeAgent(o);
  RunResult r = agent->Run("please list things");
  ASSERT_TRUE(r.ok()) << (r.error ? r.error->message : "");
  auto reqs = model->requests();
  ASSERT_EQ(reqs.size(), 6u);
  AgentState st = agent->state();
  ASSERT_TRUE(st.summarization);
  EXPECT_EQ(st.summarization->cutoff_index, 3u);
  std::vector<Message> effective = AgentLoop::EffectiveMessages(st);
  ASSERT_EQ(effective.size(), 8u);  // summary, l2..l4 calls and results, the answer
  for (size_t k : {3u, 4u, 5u}) {
    const auto& msgs = reqs[k].messages;
    ASSERT_EQ(msgs.size(), 3 + 2 * (k - 3)) << k;
    for (size_t i = 0; i < msgs.size(); ++i) {
      EXPECT_EQ(msgs[i].id, effective[i].id) << k << " " << i;
      EXPECT_EQ(msgs[i].text, effective[i].text) << k << " " << i;
    }
  }
  EXPECT_EQ(reqs[5].messages.back().tool_call_id, "l4");
}

// Middleware change request messages for one call only (eviction of large
// user messages, truncated write_file arguments) through a MessageEdit,
// which undoes that afterwards: an outer middleware sees the loop's view
// unchanged after the call, so the loop can keep it for the next turn.
class UndoChecker : public Middleware {
 public:
  std::string_view name() const override { return "undo_checker"; }
  Result<ModelResponse> WrapModelCall(ModelCallRequest& request, RunEnv&,
                                      const ModelCallFn& next) override {
    EXPECT_TRUE(request.view());
    json::array before;
    for (const auto& m : request.messages()) before.push_back(MessageToJson(m));
    auto resp = next(request);
    EXPECT_TRUE(request.view());
    json::array after;
    for (const auto& m : request.messages()) after.push_back(MessageToJson(m));
    EXPECT_EQ(before, after);
    ++calls;
    return resp;
  }
  int calls = 0;
};

TEST(Summarization, RequestOnlyChangesAreUndoneAfterTheCall) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  auto model = std::make_shared<ScriptedModel>();  // no profile: truncation from 20 messages
  std::string big(3000, 'B');
  for (int i = 0; i < 12; ++i) {
    model->Tools({Call("w" + std::to_string(i), "write_file",
                       Args({{"file_path", "f" + std::to_string(i) + ".txt"}, {"content", big}}))});
  }
  model->Text("done");
  auto checker = std::make_shared<UndoChecker>();
  LoopConfig config;
  config.model = model;
  config.sandbox = &sb;
  config.tools = MakeFilesystemTools();
  config.middleware = {checker, std::make_shared<SummarizationMiddleware>(),
                       std::make_shared<EvictionMiddleware>(80000, 1000)};
  AgentLoop loop(config);
  std::string task(5000, 'T');
  AgentState st;
  st.messages.push_back(Message::User(task));
  st.messages.back().id = "msg_task";
  LoopHooks hooks;
  LoopOutcome out = loop.Run(st, hooks);
  ASSERT_EQ(out.reason, StopReason::kCompleted) << (out.error ? out.error->message : "");
  EXPECT_EQ(checker->calls, 13);
  auto reqs = model->requests();
  ASSERT_EQ(reqs.size(), 13u);
  std::string history = sb.root() + "/conversation_history/msg_task.md";
  std::string truncated = std::string(20, 'B') + "...(argument truncated)";
  for (size_t k = 0; k < reqs.size(); ++k) {
    const auto& msgs = reqs[k].messages;
    ASSERT_EQ(msgs.size(), 1 + 2 * k);
    // Every request shows the large task as a preview.
    EXPECT_EQ(msgs[0].text, TooLargeHumanMessage(history, CreateContentPreview(task))) << k;
    // From 20 messages on, contents before the last 20 are shortened.
    for (size_t i = 1; i < msgs.size(); i += 2) {
      bool shortened = msgs.size() > 20 && i < msgs.size() - 20;
      EXPECT_EQ(msgs[i].tool_calls.at(0).input.at("content").as_string(),
                shortened ? truncated : big)
          << k << " " << i;
    }
  }
  // The thread keeps the originals.
  EXPECT_EQ(st.messages[0].text, task);
  EXPECT_EQ(st.messages[1].tool_calls[0].input.at("content").as_string(), big);
  EXPECT_EQ(*sb.Download(history), task);
}

// ------------------------------------------------------------------ interrupts

struct HitlSetup {
  std::shared_ptr<ScriptedModel> model = std::make_shared<ScriptedModel>();
  std::unique_ptr<DeepAgent> agent;
  std::string path;
};

HitlSetup MakeHitl(Sandbox& sb) {
  HitlSetup s;
  s.path = sb.root() + "/hitl.txt";
  s.model->Tools({Call("w", "write_file", Args({{"file_path", s.path}, {"content", "original"}})),
                  Call("l", "ls", Args({{"path", sb.root()}}))});
  s.model->Text("finished");
  auto o = Options(s.model, sb);
  o.interrupt_on["write_file"] = InterruptConfig{};
  s.agent = MakeAgent(o);
  return s;
}

TEST(Interrupts, PauseThenApprove) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  HitlSetup s = MakeHitl(sb);
  EventLog log;
  RunResult r = s.agent->Run("write it", {.on_event = log.callback()});
  ASSERT_EQ(r.stop_reason, StopReason::kInterrupted);
  ASSERT_TRUE(r.interrupt);
  ASSERT_EQ(r.interrupt->action_requests.size(), 1u);  // ls needs no approval
  EXPECT_EQ(r.interrupt->action_requests[0].name, "write_file");
  EXPECT_EQ(r.interrupt->action_requests[0].tool_call_id, "w");
  EXPECT_TRUE(r.interrupt->action_requests[0].description.starts_with(
      "Tool execution requires approval\n\nTool: write_file\nArgs: "));
  EXPECT_EQ(r.interrupt->review_configs[0].allowed_decisions.size(), 4u);
  EXPECT_EQ(log.of(EventType::kInterrupt).size(), 1u);
  EXPECT_FALSE(sb.Stat(s.path));
  EXPECT_TRUE(ToolMessages(r.messages).empty());  // nothing ran, not even ls

  RunResult done = s.agent->Resume({Decision::Approve()});
  ASSERT_TRUE(done.ok()) << (done.error ? done.error->message : "");
  EXPECT_EQ(*sb.Download(s.path), "original");
  auto tools = ToolMessages(done.messages);
  ASSERT_EQ(tools.size(), 2u);
  EXPECT_EQ(tools[0].text, "Updated file " + s.path);
}

TEST(Interrupts, EditRewritesTheCall) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  HitlSetup s = MakeHitl(sb);
  ASSERT_EQ(s.agent->Run("write it").stop_reason, StopReason::kInterrupted);
  RunResult done = s.agent->Resume(
      {Decision::Edit(Args({{"file_path", s.path}, {"content", "edited by human"}}))});
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(*sb.Download(s.path), "edited by human");
  // The assistant message now carries the edited arguments.
  EXPECT_EQ(done.messages[1].tool_calls[0].input.at("content").as_string(), "edited by human");
  EXPECT_EQ(s.model->requests().back().messages[1].tool_calls[0].input.at("content").as_string(),
            "edited by human");
}

TEST(Interrupts, RejectWithAndWithoutMessage) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  {
    HitlSetup s = MakeHitl(sb);
    ASSERT_EQ(s.agent->Run("write it").stop_reason, StopReason::kInterrupted);
    RunResult done = s.agent->Resume({Decision::Reject()});
    ASSERT_TRUE(done.ok());
    auto tools = ToolMessages(done.messages);
    ASSERT_EQ(tools.size(), 2u);
    EXPECT_TRUE(tools[0].is_error);
    EXPECT_EQ(tools[0].text,
              "User rejected the tool call for `write_file` with id w. The tool was not "
              "executed. Do not retry this tool call unless the user explicitly requests it.");
    EXPECT_FALSE(tools[1].is_error);  // ls still ran
    EXPECT_FALSE(sb.Stat(s.path));
  }
  {
    HitlSetup s = MakeHitl(sb);
    ASSERT_EQ(s.agent->Run("write it").stop_reason, StopReason::kInterrupted);
    RunResult done = s.agent->Resume({Decision::Reject("use another name")});
    EXPECT_EQ(ToolMessages(done.messages)[0].text, "use another name");
  }
}

TEST(Interrupts, RespondAndCallbackMode) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  HitlSetup s = MakeHitl(sb);
  int asked = 0;
  RunCallbacks cb;
  cb.on_interrupt = [&](const InterruptRequest& req) -> std::optional<std::vector<Decision>> {
    ++asked;
    EXPECT_EQ(req.action_requests.size(), 1u);
    return std::vector<Decision>{Decision::Respond("already written by hand")};
  };
  RunResult r = s.agent->Run("write it", cb);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(asked, 1);
  auto tools = ToolMessages(r.messages);
  EXPECT_FALSE(tools[0].is_error);
  EXPECT_EQ(tools[0].text, "already written by hand");
  EXPECT_FALSE(sb.Stat(s.path));
}

TEST(Interrupts, InvalidDecisions) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  HitlSetup s = MakeHitl(sb);
  ASSERT_EQ(s.agent->Run("write it").stop_reason, StopReason::kInterrupted);
  RunResult bad = s.agent->Resume({});
  EXPECT_EQ(bad.stop_reason, StopReason::kError);
  EXPECT_EQ(bad.error->message,
            "Number of human decisions (0) does not match number of hanging tool calls (1).");
  InterruptRequest req = *s.agent->pending_interrupt();
  req.review_configs[0].allowed_decisions = {DecisionType::kApprove};
  EXPECT_EQ(ValidateDecisions(req, {Decision::Respond("x")}).error().message,
            "Decision type 'respond' is not allowed for tool 'write_file'. Expected one of "
            "['approve'] based on the tool's configuration.");
  // Still resumable.
  EXPECT_TRUE(s.agent->Resume({Decision::Approve()}).ok());
  DEEPBOX_AGENT_SANDBOX(other);
  auto fresh = MakeAgent(Options(std::make_shared<ScriptedModel>(), other->client()));
  EXPECT_EQ(fresh->Resume({}).error->message, "no interrupted run to resume");
}

TEST(Interrupts, AskPermissionInterruptsMatchingPathsOnly) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  std::string root = sb.root();
  ASSERT_TRUE(sb.Upload(root + "/secrets/k", "key"));
  ASSERT_TRUE(sb.Upload(root + "/pub.txt", "pub"));
  auto model = std::make_shared<ScriptedModel>();
  model->Tools({Call("a", "read_file", Args({{"file_path", root + "/secrets/k"}})),
                Call("b", "read_file", Args({{"file_path", root + "/pub.txt"}})),
                Call("c", "grep", Args({{"pattern", "key"}}))});
  model->Text("ok");
  auto o = Options(model, sb);
  o.permissions = {{{FsOperation::kRead}, {root + "/secrets/**"}, PermissionMode::kAsk}};
  auto agent = MakeAgent(o);
  RunResult r = agent->Run("read");
  ASSERT_EQ(r.stop_reason, StopReason::kInterrupted);
  ASSERT_EQ(r.interrupt->action_requests.size(), 2u);  // read of secrets + pathless grep
  EXPECT_EQ(r.interrupt->action_requests[0].tool_call_id, "a");
  EXPECT_EQ(r.interrupt->action_requests[1].tool_call_id, "c");
  RunResult done = agent->Resume({Decision::Approve(), Decision::Reject()});
  ASSERT_TRUE(done.ok());
  auto tools = ToolMessages(done.messages);
  EXPECT_EQ(tools[0].text, "@@ lines 1-1 of 1 @@\nkey");
  EXPECT_EQ(tools[1].text, "@@ lines 1-1 of 1 @@\npub");
  EXPECT_TRUE(tools[2].is_error);
}

// ------------------------------------------------------------------ sub-agents

TEST(SubAgents, IsolatedContextAndOnlyTheFinalMessageReturns) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  auto main_model = std::make_shared<ScriptedModel>();
  auto sub_model = std::make_shared<ScriptedModel>();
  main_model->Tools(
      {Call("t1", "task", Args({{"description", "count the files"}, {"subagent_type", "counter"}})),
       Call("t2", "task", Args({{"description", "x"}, {"subagent_type", "nope"}}))});
  main_model->Text("there are some files");
  sub_model->Tools({Call("s1", "ls", Args({{"path", sb.root()}}))}, "Let me look.");
  sub_model->Text("FOUND 0 FILES\n\n");
  sub_model->Text("");  // never used
  auto o = Options(main_model, sb);
  SubAgentSpec spec;
  spec.name = "counter";
  spec.description = "Counts files.";
  spec.system_prompt = "You count files.";
  spec.model = sub_model;
  spec.tools = std::vector<std::string>{"ls"};
  o.subagents = {spec};
  auto agent = MakeAgent(o);
  EventLog log;
  RunResult r = agent->Run("how many files?", {.on_event = log.callback()});
  ASSERT_TRUE(r.ok()) << (r.error ? r.error->message : "");
  auto tools = ToolMessages(r.messages);
  ASSERT_EQ(tools.size(), 2u);
  EXPECT_EQ(tools[0].text, "FOUND 0 FILES");
  EXPECT_EQ(tools[1].text,
            "We cannot invoke subagent nope because it does not exist, the only allowed types "
            "are `general-purpose`, `counter`");
  // The sub-agent saw only its description, its own prompt and its tools.
  auto sreqs = sub_model->requests();
  ASSERT_EQ(sreqs.size(), 2u);
  ASSERT_EQ(sreqs[0].messages.size(), 1u);
  EXPECT_EQ(sreqs[0].messages[0].text, "count the files");
  EXPECT_TRUE(sreqs[0].system.starts_with("You count files."));
  ASSERT_EQ(sreqs[0].tools.size(), 1u);
  EXPECT_EQ(sreqs[0].tools[0].name, "ls");
  // The main thread holds none of the sub-agent's messages.
  EXPECT_EQ(r.messages.size(), 5u);
  // Sub-agent events are tagged.
  bool tagged = false;
  for (const auto& e : log.of(EventType::kToolCallStart)) {
    if (e.tool_name == "ls") {
      tagged = e.agent == "counter" && e.depth == 1;
    }
  }
  EXPECT_TRUE(tagged);
  // The task tool lists both agents.
  std::string desc;
  for (const auto& s : agent->tool_specs()) {
    if (s.name == "task") desc = s.description;
  }
  EXPECT_NE(desc.find("- general-purpose: "), std::string::npos);
  EXPECT_NE(desc.find("- counter: Counts files."), std::string::npos);
}

TEST(SubAgents, GeneralPurposeHasTheMainToolsButNoTask) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  model->Tools({Call("t", "task",
                     Args({{"description", "research"}, {"subagent_type", "general-purpose"}}))},
               "", Usage{1, 10, 0, 0});
  model->Text("sub answer", Usage{2, 20, 0, 0});  // the sub-agent's turn (same model)
  model->Text("main answer", Usage{4, 40, 0, 0});
  auto agent = MakeAgent(Options(model, sbd->client()));
  RunResult r = agent->Run("go");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.usage.input_tokens, 7);  // sub-agent calls count too
  EXPECT_EQ(r.usage.output_tokens, 70);
  EXPECT_EQ(r.total_usage.output_tokens, 70);
  EXPECT_EQ(ToolMessages(r.messages)[0].text, "sub answer");
  auto reqs = model->requests();
  std::vector<std::string> names;
  for (const auto& t : reqs[1].tools) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"ls", "read_file", "write_file", "edit_file", "delete",
                                             "glob", "grep", "execute"}));
  EXPECT_TRUE(reqs[1].system.starts_with(kDefaultSubagentPrompt));
}

// A `task` with sandbox "fork" runs in the fork the agent's fork maker
// makes (here a second daemon given a copy of the file, as a provider's
// Fork would), which is deleted when the sub-agent ends; the caller's files
// are untouched. Without a fork maker the tool is deepagents' own.
TEST(SubAgents, AForkedSubAgentWorksOnACopyThatIsDeletedAfterwards) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  DEEPBOX_AGENT_SANDBOX(fork_sbd);
  Sandbox& sb = sbd->client();
  Sandbox& fork = fork_sbd->client();
  ASSERT_TRUE(sb.Upload(sb.root() + "/a.txt", "original\n"));
  auto model = std::make_shared<ScriptedModel>();
  auto sub_model = std::make_shared<ScriptedModel>();
  model->Tools(
      {Call("t1", "task",
            Args({{"description", "try it"}, {"subagent_type", "fixer"}, {"sandbox", "fork"}})),
       Call("t2", "task",
            Args({{"description", "x"}, {"subagent_type", "fixer"}, {"sandbox", "moon"}}))},
      "", {});
  model->Text("done");
  sub_model->Tools({Call("e", "edit_file",
                         Args({{"file_path", fork.root() + "/a.txt"},
                               {"old_string", "original"},
                               {"new_string", "changed"}}))});
  sub_model->Text("it works");
  auto o = Options(model, sb);
  SubAgentSpec spec;
  spec.name = "fixer";
  spec.description = "Fixes.";
  spec.model = sub_model;
  o.subagents = {spec};
  int forks = 0, deleted = 0;
  o.fork_sandbox = [&]() -> Result<std::shared_ptr<Sandbox>> {
    ++forks;
    auto copy = sb.Download(sb.root() + "/a.txt");
    if (!copy) return tl::unexpected(copy.error());
    if (auto st = fork.Upload(fork.root() + "/a.txt", *copy); !st) {
      return tl::unexpected(st.error());
    }
    return std::shared_ptr<Sandbox>(&fork, [&](Sandbox*) { ++deleted; });
  };
  auto agent = MakeAgent(o);
  // The tool offers the argument, described for the model.
  json::object schema;
  for (const auto& t : agent->tool_specs()) {
    if (t.name == "task") schema = t.input_schema;
  }
  ASSERT_TRUE(schema.at("properties").as_object().contains("sandbox"));
  EXPECT_EQ(schema.at("properties").at("sandbox").at("description").as_string(),
            kTaskSandboxArgDescription);
  EXPECT_EQ(schema.at("required").as_array().size(), 2u);  // sandbox is optional
  RunResult r = agent->Run("go");
  ASSERT_TRUE(r.ok()) << (r.error ? r.error->message : "");
  auto tools = ToolMessages(r.messages);
  ASSERT_EQ(tools.size(), 2u);
  EXPECT_EQ(tools[0].text, "it works");
  EXPECT_TRUE(tools[1].is_error);
  // The schema's enum rejects it, as deepagents' argument validation would.
  EXPECT_NE(tools[1].text.find("sandbox: Input should be 'shared' or 'fork'"), std::string::npos)
      << tools[1].text;
  EXPECT_EQ(forks, 1);
  EXPECT_EQ(deleted, 1);  // released when the sub-agent ended
  EXPECT_EQ(*sb.Download(sb.root() + "/a.txt"), "original\n");
  EXPECT_EQ(*fork.Download(fork.root() + "/a.txt"), "changed\n");
}

TEST(SubAgents, WithoutAForkMakerTheTaskToolIsDeepagentsOwn) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  auto agent = MakeAgent(Options(model, sbd->client()));
  for (const auto& t : agent->tool_specs()) {
    if (t.name != "task") continue;
    EXPECT_EQ(ToJson(t.input_schema),
              ToJson(SchemaObject(
                  {{"description",
                    SchemaString("A detailed description of the task for the subagent to perform "
                                 "autonomously. Include all necessary context and specify the "
                                 "expected output format.")},
                   {"subagent_type", SchemaString("The type of subagent to use. Must be one of "
                                                  "the available agent types listed in the tool "
                                                  "description.")}},
                  {"description", "subagent_type"})));
  }
}

TEST(SubAgents, AForkThatCannotBeMadeIsTheToolsError) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto model = std::make_shared<ScriptedModel>();
  model->Tools({Call(
      "t", "task",
      Args({{"description", "x"}, {"subagent_type", "general-purpose"}, {"sandbox", "fork"}}))});
  model->Text("ok");
  auto o = Options(model, sbd->client());
  o.fork_sandbox = []() -> Result<std::shared_ptr<Sandbox>> {
    return MakeError(ErrorCode::kUnimplemented, "the test provider cannot fork sandboxes");
  };
  auto agent = MakeAgent(o);
  RunResult r = agent->Run("go");
  ASSERT_TRUE(r.ok());
  auto tools = ToolMessages(r.messages);
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_TRUE(tools[0].is_error);
  EXPECT_EQ(tools[0].text,
            "Error: sub-agent 'general-purpose' failed: cannot fork the sandbox: the test provider "
            "cannot fork sandboxes");
}

// ------------------------------------------------------------------ skills

TEST(Skills, ParseAndValidate) {
  std::vector<std::string> warnings;
  auto s = ParseSkillMd(
      "---\nname: pdf-tools\ndescription: Handle PDF files.\nlicense: MIT\n"
      "allowed-tools: read_file, execute\nmetadata:\n  author: me\n---\n\n# PDF tools\n",
      "/s/pdf-tools/SKILL.md", "pdf-tools", &warnings);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->name, "pdf-tools");
  EXPECT_EQ(s->description, "Handle PDF files.");
  EXPECT_EQ(s->license, "MIT");
  EXPECT_EQ(s->allowed_tools, (std::vector<std::string>{"read_file", "execute"}));
  EXPECT_EQ(s->metadata.at("author"), "me");
  EXPECT_TRUE(warnings.empty());
  EXPECT_FALSE(ParseSkillMd("# no front matter", "/p", "x", &warnings));
  EXPECT_FALSE(ParseSkillMd("---\nname: x\n---\n", "/p", "x", &warnings));  // no description
  EXPECT_FALSE(ParseSkillMd("---\nname: [unclosed\n---\n", "/p", "x", &warnings));
  EXPECT_EQ(ValidateSkillName("Bad_Name", "Bad_Name"),
            "name must be lowercase alphanumeric with single hyphens only");
  EXPECT_EQ(ValidateSkillName("a--b", "a--b"),
            "name must be lowercase alphanumeric with single hyphens only");
  EXPECT_EQ(ValidateSkillName(std::string(65, 'a'), std::string(65, 'a')),
            "name exceeds 64 characters");
  EXPECT_EQ(ValidateSkillName("abc", "abd"), "name 'abc' must match directory name 'abd'");
  auto long_desc = ParseSkillMd("---\nname: d\ndescription: " + std::string(2000, 'x') + "\n---\n",
                                "/p", "d", &warnings);
  ASSERT_TRUE(long_desc);
  EXPECT_EQ(long_desc->description.size(), 1024u);
}

TEST(Skills, ListedInTheSystemPrompt) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  std::string dir = sb.root() + "/skills";
  ASSERT_TRUE(sb.Upload(dir + "/web-research/SKILL.md",
                        "---\nname: web-research\ndescription: Research topics on the web.\n---\n"
                        "Steps...\n"));
  ASSERT_TRUE(sb.Upload(dir + "/broken/SKILL.md", "no front matter"));
  ASSERT_TRUE(sb.Upload(dir + "/notes.txt", "not a skill"));
  auto model = std::make_shared<ScriptedModel>();
  model->Text("ok");
  auto o = Options(model, sb);
  o.skills_dirs = {dir};
  auto agent = MakeAgent(o);
  ASSERT_TRUE(agent->Run("hi").ok());
  std::string sys = model->requests()[0].system;
  EXPECT_NE(sys.find("- **web-research**: Research topics on the web.\n  -> Read `" + dir +
                     "/web-research/SKILL.md` for full instructions"),
            std::string::npos);
  EXPECT_EQ(sys.find("broken"), std::string::npos);
  EXPECT_NE(sys.find("limit=1000"), std::string::npos);
}

// ------------------------------------------------------------------ memory

TEST(Memory, AgentsMdInjected) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  std::string path = sb.root() + "/AGENTS.md";
  ASSERT_TRUE(sb.Upload(path, "Prefer tabs.<!-- hidden -->\nUser is Ada.\n"));
  auto model = std::make_shared<ScriptedModel>();
  model->Text("ok");
  auto o = Options(model, sb);
  o.memory_paths = {path, sb.root() + "/missing/AGENTS.md"};
  auto agent = MakeAgent(o);
  ASSERT_TRUE(agent->Run("hi").ok());
  std::string sys = model->requests()[0].system;
  EXPECT_NE(
      sys.find("<agent_memory>\n" + path + "\n\nPrefer tabs.\nUser is Ada.\n\n</agent_memory>"),
      std::string::npos);
  EXPECT_NE(sys.find("<memory_guidelines>"), std::string::npos);
  EXPECT_NE(sys.find("edit_file"), std::string::npos);
  EXPECT_TRUE((FormatMemorySection({"/a"}, {}))
                  .starts_with("<agent_memory>\n(No memory loaded)\n\n</agent_memory>\n\n"
                               "<memory_guidelines>"));
}

}  // namespace
}  // namespace deepbox::agent
