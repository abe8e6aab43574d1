// Threads: JSONL persistence as the run progresses, crash tolerance,
// resuming a thread (and a paused interrupt) from a fresh DeepAgent.
#include "agent/thread_store.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "agent/codec.h"
#include "agent/testing/agent_fixture.h"
#include "agent/text.h"
#include "common/testing/temp_dir.h"

namespace deepbox::agent {
namespace {

using testing::Args;
using testing::Call;
using testing::MakeAgent;
using testing::ScriptedModel;
using testing::ToolMessages;

class ThreadTest : public ::testing::Test {
 protected:
  std::vector<json::object> Records(const std::string& id) {
    std::ifstream in(dir_ + "/" + id + ".jsonl");
    std::vector<json::object> out;
    std::string line;
    while (std::getline(in, line)) {
      auto o = ParseJsonObject(line);
      EXPECT_TRUE(o) << line;
      if (o) out.push_back(*o);
    }
    return out;
  }
  deepbox::testing::TempDir tmp_{"deepbox-threads"};
  std::string dir_ = tmp_.path().string();
};

TEST_F(ThreadTest, RunIsPersistedLineByLineAndReloads) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto store = std::make_shared<ThreadStore>(dir_);
  auto model = std::make_shared<ScriptedModel>();
  std::vector<size_t> lines_seen;
  model->Tools({Call("c1", "write_file", Args({{"file_path", "a.txt"}, {"content", "A"}}))}, "",
               Usage{10, 5, 1, 2});
  model->Respond([&](const ModelRequest&) -> Result<ModelResponse> {
    // Mid-run, the transcript already holds the first turn and its result.
    lines_seen.push_back(Records("t1").size());
    ModelResponse r;
    r.message = Message::Assistant("done");
    r.usage = Usage{20, 5, 0, 0};
    return r;
  });
  DeepAgentOptions o;
  o.model = model;
  o.sandbox = &sbd->client();
  o.thread_store = store;
  o.thread_id = "t1";
  auto agent = MakeAgent(o);
  RunResult r = agent->Run("make a.txt");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(lines_seen.size(), 1u);
  EXPECT_GE(lines_seen[0], 6u);  // thread, run_start, user, usage, assistant, tool

  auto recs = Records("t1");
  std::vector<std::string> types;
  for (const auto& rec : recs) types.push_back(std::string(rec.at("type").as_string()));
  EXPECT_EQ(types, (std::vector<std::string>{"thread", "run_start", "message", "usage", "message",
                                             "message", "usage", "message", "run_end"}));
  EXPECT_EQ(recs[0].at("id").as_string(), "t1");
  EXPECT_EQ(recs.back().at("stop_reason").as_string(), "completed");
  EXPECT_EQ(recs.back().at("final_text").as_string(), "done");

  auto loaded = store->Load("t1");
  ASSERT_TRUE(loaded) << loaded.error().ToString();
  ASSERT_EQ(loaded->state.messages.size(), r.messages.size());
  for (size_t i = 0; i < r.messages.size(); ++i) {
    EXPECT_EQ(loaded->state.messages[i].id, r.messages[i].id);
    EXPECT_EQ(loaded->state.messages[i].text, r.messages[i].text);
  }
  EXPECT_EQ(loaded->state.messages[1].tool_calls[0].input.at("content").as_string(), "A");
  EXPECT_EQ(loaded->state.usage.input_tokens, 30);
  EXPECT_EQ(loaded->state.usage.cache_write_tokens, 2);
  EXPECT_EQ(loaded->runs, 1u);
  EXPECT_EQ(loaded->last_task, "make a.txt");
}

// deepbox acp appends the client's project; the latest one counts.
TEST_F(ThreadTest, TheLatestProjectRecordIsLoaded) {
  ThreadStore store(dir_);
  auto w = store.OpenWriter("tp");
  ASSERT_TRUE(w);
  ASSERT_TRUE((*w)->Append("thread", json::object{{"id", "tp"}}));
  EXPECT_EQ(store.Load("tp")->project, "");
  ASSERT_TRUE((*w)->Append("project", json::object{{"path", "/home/u/one"}}));
  Message first = Message::User("first prompt");
  first.id = "m1";
  ASSERT_TRUE((*w)->Message(Message::Assistant("not a prompt")));
  ASSERT_TRUE((*w)->Message(first));
  ASSERT_TRUE((*w)->Message(Message::User("second prompt")));
  ASSERT_TRUE((*w)->Append("project", json::object{{"path", "/home/u/two"}}));
  EXPECT_EQ(store.Load("tp")->project, "/home/u/two");
  // Summarize reads the same without decoding every message.
  auto summary = store.Summarize("tp");
  ASSERT_TRUE(summary) << summary.error().message;
  EXPECT_EQ(summary->project, "/home/u/two");
  EXPECT_EQ(summary->first_prompt, "first prompt");
  EXPECT_FALSE(store.Summarize("no-such-thread"));
}

// session/fork of deepbox acp: the same records under a new id; the
// original untouched; a line still being written is not copied.
TEST_F(ThreadTest, ForkCopiesTheWholeLinesUnderANewId) {
  ThreadStore store(dir_);
  auto w = store.OpenWriter("orig");
  ASSERT_TRUE(w);
  ASSERT_TRUE((*w)->Append("thread", json::object{{"id", "orig"}, {"model", "m"}}));
  Message m = Message::User("hello");
  m.id = "m1";
  ASSERT_TRUE((*w)->Message(m));
  w->reset();
  {
    std::ofstream out(dir_ + "/orig.jsonl", std::ios::app);
    out << "{\"type\":\"message\",\"message\":{\"role\":\"assis";  // being written
  }
  auto forked = store.Fork("orig");
  ASSERT_TRUE(forked) << forked.error().message;
  EXPECT_NE(*forked, "orig");
  EXPECT_TRUE(ValidThreadId(*forked));
  auto loaded = store.Load(*forked);
  ASSERT_TRUE(loaded);
  ASSERT_EQ(loaded->state.messages.size(), 1u);
  EXPECT_EQ(loaded->state.messages[0].text, "hello");
  EXPECT_EQ(GetOptString(loaded->header, "id").value_or(""), *forked);
  EXPECT_EQ(GetOptString(loaded->header, "forked_from").value_or(""), "orig");
  EXPECT_EQ(GetOptString(loaded->header, "model").value_or(""), "m");
  EXPECT_EQ(GetOptString(store.Load("orig")->header, "id").value_or(""), "orig");
  EXPECT_FALSE(std::filesystem::exists(store.PathFor(*forked) + ".tmp"));
  EXPECT_EQ(store.Fork("missing").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(store.Fork("../escape").error().code, ErrorCode::kInvalidArgument);
}

TEST_F(ThreadTest, TornLastLineIsIgnored) {
  ThreadStore store(dir_);
  auto w = store.OpenWriter("t2");
  ASSERT_TRUE(w);
  json::object header;
  header["id"] = "t2";
  ASSERT_TRUE((*w)->Append("thread", header));
  Message m = Message::User("hello");
  m.id = "m1";
  ASSERT_TRUE((*w)->Message(m));
  w->reset();
  {
    std::ofstream out(dir_ + "/t2.jsonl", std::ios::app);
    out << "{\"type\":\"message\",\"message\":{\"role\":\"assis";  // crash mid-write
  }
  auto loaded = store.Load("t2");
  ASSERT_TRUE(loaded);
  ASSERT_EQ(loaded->state.messages.size(), 1u);
  EXPECT_EQ(loaded->state.messages[0].text, "hello");
  EXPECT_FALSE(store.Load("missing"));
  EXPECT_FALSE(store.OpenWriter("../escape"));
}

TEST_F(ThreadTest, ResumeThreadById) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto store = std::make_shared<ThreadStore>(dir_);
  std::string id;
  {
    auto model = std::make_shared<ScriptedModel>();
    model->Text("My name is Deepbox.");
    DeepAgentOptions o;
    o.model = model;
    o.sandbox = &sbd->client();
    o.thread_store = store;
    auto agent = MakeAgent(o);
    id = agent->thread_id();
    EXPECT_TRUE(id.starts_with("th-"));
    ASSERT_TRUE(agent->Run("what is your name?").ok());
  }
  auto model = std::make_shared<ScriptedModel>();
  model->Text("You asked for my name.");
  DeepAgentOptions o;
  o.model = model;
  o.sandbox = &sbd->client();
  o.thread_store = store;
  o.thread_id = id;
  auto agent = MakeAgent(o);
  EXPECT_EQ(agent->state().messages.size(), 2u);
  RunResult r = agent->Run("what did I ask?");
  ASSERT_TRUE(r.ok());
  auto req = model->requests().at(0);
  ASSERT_EQ(req.messages.size(), 3u);
  EXPECT_EQ(req.messages[0].text, "what is your name?");
  EXPECT_EQ(req.messages[1].text, "My name is Deepbox.");
  EXPECT_EQ(req.messages[2].text, "what did I ask?");
  // One header only; two runs.
  auto loaded = store->Load(id);
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->runs, 2u);
  EXPECT_EQ(loaded->state.messages.size(), 4u);
  auto list = store->List();
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].id, id);
}

// The same daemon under another id: a thread resumed "in another sandbox".
class RenamedSandbox : public Sandbox {
 public:
  RenamedSandbox(Sandbox& inner, std::string id) : in_(inner), id_(std::move(id)) {}
  std::string id() const override { return id_; }
  std::string root() const override { return in_.root(); }
  Result<ExecResult> Exec(const ExecRequest& r) override { return in_.Exec(r); }
  Result<ExecResult> ExecStream(const ExecRequest& r, const OutputCallback& cb) override {
    return in_.ExecStream(r, cb);
  }
  Result<FileInfo> Stat(const std::string& p) override { return in_.Stat(p); }
  Result<std::vector<FileInfo>> List(const std::string& p) override { return in_.List(p); }
  Result<ReadResult> Read(const std::string& p, const ReadOptions& o) override {
    return in_.Read(p, o);
  }
  Status Write(const std::string& p, std::string_view c, uint32_t m) override {
    return in_.Write(p, c, m);
  }
  Result<EditResult> Edit(const std::string& p, const std::string& o, const std::string& n,
                          bool all) override {
    return in_.Edit(p, o, n, all);
  }
  Status Mkdir(const std::string& p, bool parents) override { return in_.Mkdir(p, parents); }
  Status Move(const std::string& f, const std::string& t, bool o) override {
    return in_.Move(f, t, o);
  }
  Status Delete(const std::string& p, bool r) override { return in_.Delete(p, r); }
  Result<GlobResult> Glob(const std::string& pat, const std::string& p, size_t max) override {
    return in_.Glob(pat, p, max);
  }
  Result<GrepResult> Grep(const GrepRequest& r) override { return in_.Grep(r); }
  Result<std::string> Download(const std::string& p) override { return in_.Download(p); }
  Status Upload(const std::string& p, std::string_view c, uint32_t m) override {
    return in_.Upload(p, c, m);
  }

 private:
  Sandbox& in_;
  std::string id_;
};

TEST_F(ThreadTest, ResumedInAnotherSandboxTheModelIsToldOnce) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto store = std::make_shared<ThreadStore>(dir_);
  RenamedSandbox first(sbd->client(), "sb-first"), second(sbd->client(), "sb-second");
  auto run = [&](Sandbox& sb, std::vector<std::string> tasks) {
    auto model = std::make_shared<ScriptedModel>();
    for (size_t i = 0; i < tasks.size(); ++i) model->Text("ok");
    DeepAgentOptions o;
    o.model = model;
    o.sandbox = &sb;
    o.thread_store = store;
    o.thread_id = "th-moved";
    auto agent = MakeAgent(o);
    for (const auto& t : tasks) EXPECT_TRUE(agent->Run(t).ok());
    return std::make_pair(agent->sandbox_changed(), model->requests());
  };
  auto [changed1, reqs1] = run(first, {"make a file"});
  EXPECT_FALSE(changed1);  // a new thread
  EXPECT_EQ(reqs1.at(0).messages.back().text, "make a file");
  // Another sandbox: the next task carries the note, the one after does not.
  auto [changed2, reqs2] = run(second, {"is it there?", "and now?"});
  EXPECT_TRUE(changed2);
  const std::string& told = reqs2.at(0).messages.back().text;
  EXPECT_TRUE(
      told.starts_with("<system-reminder>This conversation continues in a new sandbox "
                       "(sb-second)."))
      << told;
  EXPECT_NE(told.find("sandbox sb-first"), std::string::npos) << told;
  EXPECT_TRUE(told.ends_with("</system-reminder>\n\nis it there?")) << told;
  EXPECT_EQ(reqs2.at(1).messages.back().text, "and now?");
  auto loaded = store->Load("th-moved");
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->sandbox_id, "sb-second");
  // The same sandbox again: nothing to say.
  auto [changed3, reqs3] = run(second, {"still there?"});
  EXPECT_FALSE(changed3);
  EXPECT_EQ(reqs3.at(0).messages.back().text, "still there?");
}

TEST(ThreadIds, RulesAreCheckedUpFront) {
  EXPECT_TRUE(ValidThreadId("th-20250101-120000-abc"));
  EXPECT_TRUE(ValidThreadId("my.thread_2"));
  EXPECT_FALSE(ValidThreadId(""));
  EXPECT_FALSE(ValidThreadId(".hidden"));
  EXPECT_FALSE(ValidThreadId("a/b"));
  EXPECT_FALSE(ValidThreadId("with space"));
  EXPECT_FALSE(ValidThreadId(std::string(201, 'a')));
  ThreadStore store("/nonexistent-dir-for-test");
  auto w = store.OpenWriter("a/b");
  ASSERT_FALSE(w);
  EXPECT_NE(w.error().message.find(kThreadIdRules), std::string::npos) << w.error().message;
}

TEST_F(ThreadTest, PausedInterruptSurvivesARestart) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  auto store = std::make_shared<ThreadStore>(dir_);
  auto make = [&](std::shared_ptr<ScriptedModel> model) {
    DeepAgentOptions o;
    o.model = model;
    o.sandbox = &sb;
    o.thread_store = store;
    o.thread_id = "hitl";
    o.interrupt_on["execute"] =
        InterruptConfig{{DecisionType::kApprove, DecisionType::kEdit, DecisionType::kReject},
                        "Run a shell command?"};
    return MakeAgent(o);
  };
  {
    auto model = std::make_shared<ScriptedModel>();
    model->Tools({Call("x", "execute", Args({{"command", "echo one > out.txt"}}))});
    auto agent = make(model);
    RunResult r = agent->Run("run it");
    ASSERT_EQ(r.stop_reason, StopReason::kInterrupted);
    EXPECT_TRUE(r.interrupt->action_requests[0].description.starts_with(
        "Run a shell command?\n\nTool: execute\nArgs: "));
  }
  auto model = std::make_shared<ScriptedModel>();
  model->Text("ran it");
  auto agent = make(model);
  auto pending = agent->pending_interrupt();
  ASSERT_TRUE(pending);
  EXPECT_EQ(pending->review_configs[0].allowed_decisions.size(), 3u);
  RunResult r = agent->Resume({Decision::Edit(Args({{"command", "echo two > out.txt"}}))});
  ASSERT_TRUE(r.ok()) << (r.error ? r.error->message : "");
  EXPECT_EQ(*sb.Download(sb.root() + "/out.txt"), "two\n");
  // The edit is in the transcript.
  auto loaded = store->Load("hitl");
  ASSERT_TRUE(loaded);
  EXPECT_FALSE(loaded->state.pending_interrupt);
  EXPECT_EQ(loaded->state.messages[1].tool_calls[0].input.at("command").as_string(),
            "echo two > out.txt");
  EXPECT_EQ(ToolMessages(loaded->state.messages)[0].text, "\n[Command succeeded with exit code 0]");
}

TEST(Codec, HostileNumbersAreRejectedOrCapped) {
  // A negative cutoff used to become a huge size_t; 1e400 is infinity.
  for (const char* text : {R"({"cutoff_index":-1,"summary_message":{"role":"user"}})",
                           R"({"cutoff_index":1e400,"summary_message":{"role":"user"}})",
                           R"({"cutoff_index":"3","summary_message":{"role":"user"}})"}) {
    auto o = ParseJsonObject(text);
    ASSERT_TRUE(o);
    EXPECT_FALSE(SummarizationFromJson(*o)) << text;
  }
  auto ok = ParseJsonObject(R"({"cutoff_index":3,"summary_message":{"role":"user"}})");
  ASSERT_TRUE(ok);
  auto ev = SummarizationFromJson(*ok);
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->cutoff_index, 3u);
  auto u = ParseJsonObject(
      R"({"input_tokens":18446744073709551615,"output_tokens":-4,"cache_read_tokens":1e400,)"
      R"("cache_write_tokens":9223372036854775807})");
  ASSERT_TRUE(u);
  Usage usage = UsageFromJson(*u);
  EXPECT_EQ(usage.input_tokens, 0);
  EXPECT_EQ(usage.output_tokens, 0);
  EXPECT_EQ(usage.cache_read_tokens, 0);
  EXPECT_EQ(usage.cache_write_tokens, kMaxTokenCount);
}

TEST(Codec, MessageRoundTrip) {
  Message m = Message::Assistant("hi", {Call("c", "ls", Args({{"path", "/w"}}))});
  m.id = "x";
  m.tool_calls[0].input_error = "bad";
  auto back = MessageFromJson(MessageToJson(m));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->text, "hi");
  EXPECT_EQ(back->tool_calls[0].input.at("path").as_string(), "/w");
  EXPECT_EQ(back->tool_calls[0].input_error, "bad");
  Message t = Message::Tool("c", "read_file", "", true);
  t.images.push_back({"image/png", "AAAA"});
  auto tb = MessageFromJson(MessageToJson(t));
  ASSERT_TRUE(tb);
  EXPECT_TRUE(tb->is_error);
  EXPECT_EQ(tb->images.at(0).base64_data, "AAAA");
  Decision d = Decision::Edit(Args({{"a", 1}}));
  d.edited_name = "execute";
  auto db = DecisionFromJson(DecisionToJson(d));
  ASSERT_TRUE(db);
  EXPECT_EQ(db->type, DecisionType::kEdit);
  EXPECT_EQ(*db->edited_name, "execute");
}

}  // namespace
}  // namespace deepbox::agent
