// `deepbox run` end to end: the real binary as a process, real local
// sandboxes, the shipped recording (replay:) and the fake Anthropic server.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include "agent/model/testing/fake_anthropic.h"
#include "cli/run_exit_codes.h"
#include "e2e_util.h"

namespace deepbox::e2e {
namespace {

using agent::testing::FakeAnthropicServer;
using agent::testing::ScriptedToolCall;
using agent::testing::ScriptedTurn;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

const std::string kRunLabel = "e2e.deepbox.dev/test=run";

class RunTest : public E2eTest {
 protected:
  std::map<std::string, std::string> FakeEnv(const FakeAnthropicServer& server) {
    return {{"ANTHROPIC_API_KEY", kFakeApiKey}, {"ANTHROPIC_BASE_URL", server.url()}};
  }
  std::vector<std::string> RunArgs(std::vector<std::string> extra) {
    std::vector<std::string> argv = {kDeepbox, "run", "--label", kRunLabel};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
  static const json::object* Find(const std::vector<json::object>& events, std::string_view type,
                                  std::string_view tool = "") {
    for (const auto& e : events) {
      if (GetOptString(e, "type").value_or("") != type) continue;
      if (!tool.empty() && GetOptString(e, "tool").value_or("") != tool) continue;
      return &e;
    }
    return nullptr;
  }
};

TEST_F(RunTest, ReplaysTheFibonacciRecording) {
  auto r = Run(RunArgs({"--model", "replay:" + kFibReplay, kFibTask}));
  EXPECT_EQ(r.code, run::kRunExitOk) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("a scripted conversation, not a live model"));
  // stdout is not a terminal: the transcript goes to stderr, the answer alone
  // to stdout (run TASK > answer.txt).
  EXPECT_THAT(r.err, HasSubstr("I'll plan this first"));
  EXPECT_THAT(r.err, HasSubstr("✓ write_file  /workspace/fib.py"));
  EXPECT_THAT(r.err, HasSubstr("✓ execute  python3 /workspace/fib.py"));
  EXPECT_THAT(r.err, HasSubstr("⎿ 0  (+9 more lines)"));  // the real output, folded
  EXPECT_THAT(r.err, HasSubstr("☰ Todos"));
  EXPECT_THAT(r.err, HasSubstr("6 steps · tokens"));
  EXPECT_EQ(r.out,
            "I wrote `/workspace/fib.py` and ran it with `python3 /workspace/fib.py` in the "
            "sandbox. It defines `fibonacci(n)` (iterative, starting from 0, 1) and prints the "
            "first 10 Fibonacci numbers, one per line:\n\n0, 1, 1, 2, 3, 5, 8, 13, 21, 34\n\nThe "
            "script exited with status 0.\n");
  EXPECT_THAT(r.out + r.err, Not(HasSubstr("\x1b[")));  // not a terminal: no colours
  // The recording was made for the example's longer task: said, not fatal.
  EXPECT_THAT(r.err, HasSubstr("warning: the recording answers another task"));
  EXPECT_THAT(Sandboxes(kRunLabel), IsEmpty());
}

TEST_F(RunTest, ReplayOfItsOwnTaskSaysNothingAboutTasks) {
  auto r = Run(RunArgs({"--model", "replay:" + kFibReplay,
                        "Write a Python script /workspace/fib.py that prints the first 10 "
                        "Fibonacci numbers (starting 0, 1), then run it with `python3 "
                        "/workspace/fib.py` and tell me what it printed."}));
  EXPECT_EQ(r.code, run::kRunExitOk) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("answers another task")));
}

TEST_F(RunTest, JsonEventsAgainstTheFakeAnthropicServer) {
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  auto script = agent::testing::ScriptFromReplayFile(kFibReplay);
  ASSERT_TRUE(script.has_value());
  server.Enqueue(std::move(*script));
  auto r = Run(RunArgs({"--json", kFibTask}), FakeEnv(server));
  EXPECT_EQ(r.code, run::kRunExitOk) << r.err;
  auto events = JsonLines(r.out);
  ASSERT_FALSE(events.empty());
  EXPECT_NE(Find(events, "sandbox"), nullptr);
  EXPECT_NE(Find(events, "run_start"), nullptr);
  EXPECT_NE(Find(events, "text_delta"), nullptr);
  EXPECT_NE(Find(events, "todo_update"), nullptr);
  const json::object* exec_end = Find(events, "tool_call_end", "execute");
  ASSERT_NE(exec_end, nullptr);
  EXPECT_TRUE(exec_end->at("ok").as_bool());
  EXPECT_THAT(std::string(exec_end->at("output_preview").as_string()), HasSubstr("21\n34"));
  EXPECT_NE(Find(events, "sandbox_released"), nullptr);
  const json::object& result = events.back();
  EXPECT_EQ(result.at("type").as_string(), "result");
  EXPECT_EQ(result.at("exit_code").as_int64(), 0);
  EXPECT_EQ(result.at("stop_reason").as_string(), "completed");
  EXPECT_EQ(result.at("model").as_string(), "anthropic:claude-sonnet-4-6");
  EXPECT_GT(result.at("usage").at("input_tokens").as_int64(), 0);
  EXPECT_GT(result.at("cost_usd").to_number<double>(), 0.0);
  EXPECT_THAT(std::string(result.at("final_text").as_string()),
              HasSubstr("0, 1, 1, 2, 3, 5, 8, 13, 21, 34"));
  EXPECT_EQ(server.pending_turns(), 0u);
  EXPECT_THAT(Sandboxes(kRunLabel), IsEmpty());
}

TEST_F(RunTest, MissingApiKeySaysHowToProvideOne) {
  auto r = Run(RunArgs({kFibTask}));
  EXPECT_EQ(r.code, run::kRunExitModel) << r.err;
  EXPECT_THAT(r.err, HasSubstr("ANTHROPIC_API_KEY is not set"));
  EXPECT_THAT(r.err, HasSubstr("export ANTHROPIC_API_KEY="));
  EXPECT_THAT(r.err, HasSubstr("--model replay:FILE"));
  EXPECT_THAT(Sandboxes(kRunLabel), IsEmpty());  // nothing was claimed
  // And in --json mode the result says so too.
  r = Run(RunArgs({"--json", kFibTask}));
  EXPECT_EQ(r.code, run::kRunExitModel);
  auto events = JsonLines(r.out);
  ASSERT_THAT(events, SizeIs(1));
  EXPECT_EQ(events[0].at("type").as_string(), "result");
  EXPECT_EQ(events[0].at("exit_code").as_int64(), run::kRunExitModel);
  EXPECT_EQ(events[0].at("error").at("code").as_string(), "UNAUTHENTICATED");
}

TEST_F(RunTest, RejectedApiKeyIsAModelError) {
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  auto r = Run(RunArgs({kFibTask}),
               {{"ANTHROPIC_API_KEY", "sk-ant-wrong"}, {"ANTHROPIC_BASE_URL", server.url()}});
  EXPECT_EQ(r.code, run::kRunExitModel) << r.err;
  EXPECT_THAT(r.err, HasSubstr("Check ANTHROPIC_API_KEY"));
  EXPECT_THAT(Sandboxes(kRunLabel), IsEmpty());
}

class RunSignalTest : public RunTest, public ::testing::WithParamInterface<int> {};

TEST_P(RunSignalTest, SignalDuringAToolCallExits130AndDeletesTheSandbox) {
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  server.Enqueue(ScriptedTurn::ToolCalls(
      {ScriptedToolCall("toolu_sleep", "execute", {{"command", "sleep 1000"}})}));
  Process p(RunArgs({"--json", kFibTask}), Env(FakeEnv(server)), dir_);
  ASSERT_TRUE(Eventually([&] {
    return p.out().find(R"("type":"tool_call_start")") != std::string::npos;
  })) << p.out()
      << p.err();
  WaitForSandbox(kRunLabel);
  kill(p.pid(), GetParam());
  EXPECT_EQ(p.Wait(), run::kRunExitInterrupted) << p.err();
  auto events = JsonLines(p.out());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().at("type").as_string(), "result");
  EXPECT_EQ(events.back().at("exit_code").as_int64(), run::kRunExitInterrupted);
  EXPECT_EQ(events.back().at("stop_reason").as_string(), "interrupted");
  EXPECT_THAT(Sandboxes(kRunLabel), IsEmpty());
}

INSTANTIATE_TEST_SUITE_P(Signals, RunSignalTest, ::testing::Values(SIGINT, SIGTERM),
                         [](const auto& info) {
                           return info.param == SIGINT ? "SIGINT" : "SIGTERM";
                         });

// One Ctrl-C ends the run promptly whatever the model API is doing; `how`
// says whether the run wound down by itself (cancelled) or was abandoned
// after the grace period (a connection being set up cannot be cancelled).
void ExpectOneCtrlCEndsTheRun(RunTest& t, Process& p, bool abandoned) {
  kill(p.pid(), SIGINT);
  auto code = p.WaitAtMost(60s);
  ASSERT_TRUE(code.has_value()) << "one Ctrl-C did not end the run\n" << p.err();
  EXPECT_EQ(*code, run::kRunExitInterrupted) << p.err();
  auto events = JsonLines(p.out());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().at("type").as_string(), "result");
  EXPECT_EQ(events.back().at("exit_code").as_int64(), run::kRunExitInterrupted);
  EXPECT_EQ(events.back().at("stop_reason").as_string(), "interrupted");
  EXPECT_EQ(p.err().find("did not stop within") != std::string::npos, abandoned) << p.err();
  (void)t;
}

TEST_F(RunTest, OneCtrlCWhileTheModelStreamIsSilent) {
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  server.Enqueue(ScriptedTurn::SilentStall("Let me think"));
  Process p(RunArgs({"--json", kFibTask}), Env(FakeEnv(server)), dir_);
  ASSERT_TRUE(Eventually([&] {
    return p.out().find(R"("type":"text_delta")") != std::string::npos;
  })) << p.out()
      << p.err();
  WaitForSandbox(kRunLabel);
  ExpectOneCtrlCEndsTheRun(*this, p, /*abandoned=*/false);
  EXPECT_THAT(Sandboxes(kRunLabel), IsEmpty());
}

TEST_F(RunTest, OneCtrlCWhileTheModelApiNeverAnswers) {
  SilentServer api;
  Process p(RunArgs({"--json", kFibTask}),
            Env({{"ANTHROPIC_API_KEY", kFakeApiKey},
                 {"ANTHROPIC_BASE_URL", "http://127.0.0.1:" + std::to_string(api.port())}}),
            dir_);
  WaitForSandbox(kRunLabel);
  ASSERT_TRUE(Eventually([&] { return api.accepted() >= 1; }));
  ExpectOneCtrlCEndsTheRun(*this, p, /*abandoned=*/false);
  EXPECT_THAT(Sandboxes(kRunLabel), IsEmpty());
}

TEST_F(RunTest, OneCtrlCWhileTheTlsHandshakeStalls) {
  SilentServer api;
  Process p(RunArgs({"--json", kFibTask}),
            Env({{"ANTHROPIC_API_KEY", kFakeApiKey},
                 {"ANTHROPIC_BASE_URL", "https://127.0.0.1:" + std::to_string(api.port())}}),
            dir_);
  WaitForSandbox(kRunLabel);
  ASSERT_TRUE(Eventually([&] { return api.accepted() >= 1; }));
  ExpectOneCtrlCEndsTheRun(*this, p, /*abandoned=*/true);
  EXPECT_THAT(p.out(), HasSubstr("stopping the agent and deleting the sandbox"));  // a notice
  EXPECT_THAT(Sandboxes(kRunLabel), IsEmpty());
}

TEST_F(RunTest, SandboxDeletedUnderTheAgentIsAClearSandboxError) {
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  server.Enqueue(ScriptedTurn::ToolCalls(
      {ScriptedToolCall("toolu_sleep", "execute", {{"command", "sleep 1000"}})}));
  server.Enqueue(ScriptedTurn::Text("unreachable"));
  Process p(RunArgs({kFibTask}), Env(FakeEnv(server)), dir_);
  std::string id = WaitForSandbox(kRunLabel);
  ASSERT_TRUE(Eventually([&] { return server.request_count() >= 1; }));
  auto rm = Run({kDeepbox, "sandbox", "rm", id});
  EXPECT_EQ(rm.code, 0) << rm.err;
  EXPECT_EQ(p.Wait(), run::kRunExitSandbox) << p.out() << p.err();
  EXPECT_THAT(p.err(), HasSubstr("the sandbox went away during the run (deleted from outside"));
  EXPECT_THAT(p.err(), HasSubstr(id));
  EXPECT_EQ(server.pending_turns(), 1u);  // the agent stopped instead of carrying on
  EXPECT_THAT(Sandboxes(kRunLabel), IsEmpty());
}

TEST_F(RunTest, StepLimit) {
  auto r = Run(RunArgs({"--model", "replay:" + kFibReplay, "--max-steps", "2", kFibTask}));
  EXPECT_EQ(r.code, run::kRunExitStepLimit) << r.err;
  EXPECT_THAT(r.err, HasSubstr("step limit of 2"));
  EXPECT_THAT(r.err, HasSubstr("--max-steps"));
  EXPECT_THAT(Sandboxes(kRunLabel), IsEmpty());
}

TEST_F(RunTest, ReplayThatDivergesIsAModelError) {
  // The recording expects the write_file result; a different task still
  // replays (the task text is not checked), but a file with a wrong id breaks it.
  WriteFile(
      dir_ / "bad.jsonl",
      R"({"deepbox_replay": 1, "scripted": true, "model": "anthropic:claude-sonnet-4-6"})"
      "\n"
      R"({"response": {"tool_calls": [{"id": "toolu_a", "name": "ls", "input": {"path": "/workspace"}}]}})"
      "\n"
      R"({"request": {"tool_results": ["toolu_other"]}, "response": {"text": "done"}})"
      "\n");
  auto r = Run(RunArgs({"--model", "replay:" + (dir_ / "bad.jsonl").string(), kFibTask}));
  EXPECT_EQ(r.code, run::kRunExitModel) << r.err;
  EXPECT_THAT(r.err, HasSubstr("diverged from the recording"));
  EXPECT_THAT(Sandboxes(kRunLabel), IsEmpty());
}

TEST_F(RunTest, TaskFromStdinAndThreadContinues) {
  WriteFile(dir_ / "one.jsonl",
            R"({"deepbox_replay": 1, "scripted": true, "model": "anthropic:claude-sonnet-4-6"})"
            "\n"
            R"({"response": {"text": "first answer"}})"
            "\n");
  auto r = Run(RunArgs({"--json", "--model", "replay:" + (dir_ / "one.jsonl").string(), "--thread",
                        "th-e2e"}),
               {}, "say something\n");
  EXPECT_EQ(r.code, 0) << r.err;
  auto events = JsonLines(r.out);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().at("final_text").as_string(), "first answer");
  EXPECT_EQ(events.back().at("thread_id").as_string(), "th-e2e");
  // DEEPBOX_STATE_DIR is set (Env()) and DEEPBOX_THREADS_DIR is not: the
  // threads follow the state directory (issue 29 L12), in a 0700 directory (issue 21 L5).
  EXPECT_TRUE(fs::exists(dir_ / "state" / "threads" / "th-e2e.jsonl"));
  EXPECT_FALSE(fs::exists(dir_ / "xdg" / "deepbox" / "threads"));
  EXPECT_EQ(fs::status(dir_ / "state" / "threads").permissions() & fs::perms::all,
            fs::perms::owner_all);
  // The same thread again: the model now sees the earlier messages.
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  server.Enqueue(ScriptedTurn::Text("second answer"));
  r = Run(RunArgs({"--thread", "th-e2e", "and again"}), FakeEnv(server));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("continuing thread th-e2e"));
  ASSERT_EQ(server.requests().size(), 1u);
  EXPECT_EQ(server.requests()[0].json.at("messages").as_array().size(), 3u);
}

TEST_F(RunTest, RecordThenReplay) {
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  auto script = agent::testing::ScriptFromReplayFile(kFibReplay);
  ASSERT_TRUE(script.has_value());
  server.Enqueue(std::move(*script));
  std::string rec = (dir_ / "rec.jsonl").string();
  auto r = Run(RunArgs({"--record", rec, kFibTask}), FakeEnv(server));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("recording the model conversation to " + rec));
  // The recording holds the prompts: owner-only.
  EXPECT_EQ(fs::status(rec).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  r = Run(RunArgs({"--model", "replay:" + rec, kFibTask}));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("(a recorded conversation)"));
  EXPECT_THAT(r.err, Not(HasSubstr("answers another task")));  // the task it recorded
  EXPECT_THAT(r.out, HasSubstr("0, 1, 1, 2, 3, 5, 8, 13, 21, 34"));
  r = Run(RunArgs({"--model", "replay:" + rec, "something else entirely"}));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("warning: the recording answers another task (\"" +
                               std::string(kFibTask) + "\")"));
}

// Whether a --json run claimed a sandbox at all.
bool ClaimedASandbox(const std::string& out) {
  for (const auto& e : JsonLines(out)) {
    if (GetOptString(e, "type").value_or("") == "sandbox") return true;
  }
  return false;
}

TEST_F(RunTest, BadArgumentsAreRefusedBeforeASandboxIsClaimed) {
  auto r = Run(RunArgs({"--json", "--model", "replay:/nonexistent/rec.jsonl", kFibTask}));
  EXPECT_EQ(r.code, run::kRunExitUsage) << r.err;
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/rec.jsonl"));
  EXPECT_FALSE(ClaimedASandbox(r.out));
  r = Run(RunArgs({"--json", "--model", "replay:" + kFibReplay, "  "}));
  EXPECT_EQ(r.code, run::kRunExitUsage) << r.err;
  EXPECT_THAT(r.err, HasSubstr("TASK is empty"));
  EXPECT_FALSE(ClaimedASandbox(r.out));
  r = Run(
      RunArgs({"--json", "--model", "replay:" + kFibReplay, "--thread", "my thread/1", kFibTask}));
  EXPECT_EQ(r.code, run::kRunExitUsage) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--thread 'my thread/1': not a valid thread id (use letters, "
                               "digits, '-', '_' and '.'"));
  EXPECT_FALSE(ClaimedASandbox(r.out));
  WriteFile(dir_ / "a-file", "x");
  r = Run(RunArgs({"--json", "--model", "replay:" + kFibReplay, "--threads-dir",
                   (dir_ / "a-file" / "threads").string(), kFibTask}));
  EXPECT_EQ(r.code, run::kRunExitUsage) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--threads-dir: "));
  EXPECT_FALSE(ClaimedASandbox(r.out));
  r = Run(RunArgs({"--json", "--model", "replay:" + kFibReplay, "--skills",
                   (dir_ / "no-such-dir").string(), kFibTask}));
  EXPECT_EQ(r.code, run::kRunExitUsage) << r.err;
  EXPECT_THAT(r.err, HasSubstr("no-such-dir: not a directory"));
  EXPECT_FALSE(ClaimedASandbox(r.out));
  EXPECT_THAT(Sandboxes(kRunLabel), IsEmpty());
}

TEST_F(RunTest, ATruncatedAnswerIsNotASuccess) {
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  server.Enqueue(ScriptedTurn::Text("The numbers are 0, 1, 1, 2").WithStopReason("max_tokens"));
  auto r = Run(RunArgs({kFibTask}), FakeEnv(server));
  EXPECT_EQ(r.code, run::kRunExitTruncated) << r.err;
  EXPECT_THAT(r.err, HasSubstr("warning: the answer is incomplete: the model stopped at its "
                               "output token limit"));
  EXPECT_EQ(r.out, "The numbers are 0, 1, 1, 2\n");  // what there is, still printed
  server.Enqueue(ScriptedTurn::Text("cut").WithStopReason("max_tokens"));
  r = Run(RunArgs({"--json", kFibTask}), FakeEnv(server));
  EXPECT_EQ(r.code, run::kRunExitTruncated);
  auto events = JsonLines(r.out);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().at("stop_reason").as_string(), "truncated");
  EXPECT_EQ(events.back().at("exit_code").as_int64(), run::kRunExitTruncated);
}

TEST_F(RunTest, RejectedToolCallsAndRetriesAreShown) {
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  server.Enqueue(ScriptedTurn::RateLimited("0"));
  server.Enqueue(ScriptedTurn::ToolCalls(
      {ScriptedToolCall("toolu_x", "no_such_tool", {{"path", "/"}}),
       ScriptedToolCall::Raw("toolu_y", "write_file", R"({"file_path": "/workspace/a", )")}));
  server.Enqueue(ScriptedTurn::Text("gave up"));
  auto r = Run(RunArgs({kFibTask}), FakeEnv(server));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("the model API failed (attempt 1 of 6): "));
  EXPECT_THAT(r.err, HasSubstr("retrying in 0ms"));
  EXPECT_THAT(r.err, HasSubstr("✗ no_such_tool  · rejected before it ran"));
  EXPECT_THAT(r.err, HasSubstr("⎿ Error: no_such_tool is not a valid tool"));
  EXPECT_THAT(r.err, HasSubstr("✗ write_file  · rejected before it ran"));  // no arguments
  EXPECT_THAT(r.err, HasSubstr("could not be executed - arguments were malformed"));
  // And in the event stream.
  server.Enqueue(ScriptedTurn::RateLimited("0"));
  server.Enqueue(
      ScriptedTurn::ToolCalls({ScriptedToolCall("toolu_z", "no_such_tool", {{"path", "/"}})}));
  server.Enqueue(ScriptedTurn::Text("gave up"));
  r = Run(RunArgs({"--json", kFibTask}), FakeEnv(server));
  EXPECT_EQ(r.code, 0) << r.err;
  auto events = JsonLines(r.out);
  const json::object* retry = Find(events, "retry");
  ASSERT_NE(retry, nullptr) << r.out;
  EXPECT_EQ(retry->at("attempt").as_int64(), 1);
  EXPECT_THAT(std::string(retry->at("error").as_string()), HasSubstr("429"));
  const json::object* rejected = Find(events, "tool_call_rejected", "no_such_tool");
  ASSERT_NE(rejected, nullptr) << r.out;
  EXPECT_EQ(rejected->at("tool_call_id").as_string(), "toolu_z");
  EXPECT_THAT(std::string(rejected->at("reason").as_string()), HasSubstr("not a valid tool"));
  for (const auto& e : events) EXPECT_EQ(e.at("version").as_int64(), 1) << ToJson(e);
}

TEST_F(RunTest, SkillsAndMemoryFromThisMachineReachTheAgent) {
  fs::create_directories(dir_ / "skills" / "greeting");
  WriteFile(dir_ / "skills" / "greeting" / "SKILL.md",
            "---\nname: greeting\ndescription: Greets people in Esperanto.\n---\nSay saluton.\n");
  WriteFile(dir_ / "AGENTS.md", "The user prefers tabs over spaces.\n");
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  server.Enqueue(ScriptedTurn::ToolCalls(
      {ScriptedToolCall("toolu_r", "execute",
                        {{"command", "cat /workspace/.deepagents/skills/1/greeting/SKILL.md"}})}));
  server.Enqueue(ScriptedTurn::Text("done"));
  auto r = Run(RunArgs({"--skills", (dir_ / "skills").string(), "--memory-file",
                        (dir_ / "AGENTS.md").string(), kFibTask}),
               FakeEnv(server));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("1 skill from " + (dir_ / "skills").string()));
  EXPECT_THAT(r.err, HasSubstr("⎿ ---  (+4 more lines)"));  // the copy is there
  ASSERT_GE(server.requests().size(), 1u);
  std::string system = ToJson(server.requests()[0].json.at("system"));
  EXPECT_THAT(system, HasSubstr("greeting"));
  EXPECT_THAT(system, HasSubstr("Greets people in Esperanto."));
  EXPECT_THAT(system, HasSubstr("The user prefers tabs over spaces."));
  // deepagents' default places, under $HOME, without flags.
  fs::create_directories(dir_ / "home" / ".deepagents" / "agent" / "skills" / "hello");
  WriteFile(dir_ / "home" / ".deepagents" / "agent" / "skills" / "hello" / "SKILL.md",
            "---\nname: hello\ndescription: Says hello.\n---\nHello.\n");
  WriteFile(dir_ / "home" / ".deepagents" / "agent" / "AGENTS.md", "Default memory here.\n");
  server.Enqueue(ScriptedTurn::Text("done"));
  auto env = FakeEnv(server);
  env["HOME"] = (dir_ / "home").string();
  r = Run(RunArgs({kFibTask}), env);
  EXPECT_EQ(r.code, 0) << r.err;
  system = ToJson(server.requests().back().json.at("system"));
  EXPECT_THAT(system, HasSubstr("Says hello."));
  EXPECT_THAT(system, HasSubstr("Default memory here."));
  // `none` turns the defaults off.
  server.Enqueue(ScriptedTurn::Text("done"));
  r = Run(RunArgs({"--skills", "none", "--memory-file", "none", kFibTask}), env);
  EXPECT_EQ(r.code, 0) << r.err;
  system = ToJson(server.requests().back().json.at("system"));
  EXPECT_THAT(system, Not(HasSubstr("Says hello.")));
  EXPECT_THAT(system, Not(HasSubstr("Default memory here.")));
}

// The last user message the fake server received, as text.
std::string LastUserText(const json::object& body) {
  const auto& msgs = body.at("messages").as_array();
  const json::value& content = msgs.back().at("content");
  if (content.is_string()) return std::string(content.as_string());
  std::string text;
  for (const auto& block : content.as_array()) {
    if (const auto* t = block.as_object().if_contains("text")) text += t->as_string();
  }
  return text;
}

TEST_F(RunTest, AThreadContinuesInItsSandboxOrIsToldItIsNew) {
  // Run 1 keeps its sandbox, with a file in it.
  auto r = Run(RunArgs(
      {"--keep-sandbox", "--thread", "th-keep", "--model", "replay:" + kFibReplay, kFibTask}));
  ASSERT_EQ(r.code, 0) << r.err;
  auto list = Sandboxes(kRunLabel);
  ASSERT_EQ(list.size(), 1u);
  std::string id(list[0].at("id").as_string());
  // Run 2 continues in it: the file is there and the model is told nothing.
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  server.Enqueue(ScriptedTurn::ToolCalls({ScriptedToolCall(
      "toolu_c", "execute", {{"command", "python3 /workspace/fib.py | tail -1"}})}));
  server.Enqueue(ScriptedTurn::Text("still there"));
  r = Run(RunArgs({"--thread", "th-keep", "--sandbox-id", id, "run it again"}), FakeEnv(server));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("continuing thread th-keep"));
  EXPECT_THAT(r.err, HasSubstr("in the same sandbox"));
  EXPECT_THAT(r.err, HasSubstr("⎿ 34"));
  EXPECT_EQ(LastUserText(server.requests().at(0).json), "run it again");
  EXPECT_THAT(r.err, HasSubstr("deepbox sandbox rm " + id));  // left running, as it was
  ASSERT_EQ(Sandboxes(kRunLabel).size(), 1u);
  // Run 2b: without --sandbox-id the thread goes on in its kept sandbox too.
  server.Enqueue(ScriptedTurn::ToolCalls({ScriptedToolCall(
      "toolu_d", "execute", {{"command", "python3 /workspace/fib.py | tail -1"}})}));
  server.Enqueue(ScriptedTurn::Text("still there, found by the thread"));
  r = Run(RunArgs({"--thread", "th-keep", "once more"}), FakeEnv(server));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("in the same sandbox"));
  EXPECT_THAT(r.err, HasSubstr("⎿ 34"));
  ASSERT_EQ(Sandboxes(kRunLabel).size(), 1u);  // attached, not deleted
  // Run 3 gets a new sandbox once that one is gone: the model is told its
  // files are gone.
  ASSERT_EQ(Run({kDeepbox, "sandbox", "rm", id}).code, 0);
  server.Enqueue(ScriptedTurn::Text("I will recreate it"));
  r = Run(RunArgs({"--thread", "th-keep", "and again"}), FakeEnv(server));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("in a new sandbox: the files of its earlier runs are not here"));
  std::string told = LastUserText(server.requests().back().json);
  EXPECT_THAT(told, HasSubstr("<system-reminder>This conversation continues in a new sandbox"));
  EXPECT_THAT(told, HasSubstr("sandbox " + id));
  EXPECT_THAT(told, HasSubstr("and again"));
  // `threads ls` knows the thread and its last task.
  auto ls = Run({kDeepbox, "threads", "ls"});
  EXPECT_EQ(ls.code, 0) << ls.err;
  EXPECT_THAT(ls.out, HasSubstr("th-keep"));
  EXPECT_THAT(ls.out, HasSubstr("and again"));
  ls = Run({kDeepbox, "threads", "ls", "--json"});
  auto arr = ParseJson(ls.out);
  ASSERT_TRUE(arr && arr->is_array()) << ls.out;
  ASSERT_EQ(arr->as_array().size(), 1u);
  EXPECT_EQ(arr->as_array()[0].at("id").as_string(), "th-keep");
  EXPECT_EQ(arr->as_array()[0].at("runs").as_int64(), 4);
}

// --fork-subagents: a `task` with sandbox "fork" runs in a fork holding the
// sandbox's files; what the sub-agent writes stays in the fork, which is
// deleted when it ends.
TEST_F(RunTest, AForkedSubAgentLeavesTheSandboxsFilesAlone) {
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  server.Enqueue(ScriptedTurn::ToolCalls(
      {ScriptedToolCall("toolu_1", "execute", {{"command", "echo base > /workspace/base.txt"}})}));
  server.Enqueue(ScriptedTurn::ToolCalls({ScriptedToolCall(
      "toolu_2", "task",
      {{"description", "try it"}, {"subagent_type", "general-purpose"}, {"sandbox", "fork"}})}));
  // The sub-agent (same model): it sees the file, and writes one.
  server.Enqueue(ScriptedTurn::ToolCalls({ScriptedToolCall(
      "toolu_s", "execute",
      {{"command", "cat /workspace/base.txt; echo forked > /workspace/a.txt; hostname"}})}));
  server.Enqueue(ScriptedTurn::Text("fork report"));
  server.Enqueue(ScriptedTurn::ToolCalls({ScriptedToolCall(
      "toolu_3", "execute",
      {{"command", "test -e /workspace/a.txt && echo LEAKED || echo clean; hostname"}})}));
  server.Enqueue(ScriptedTurn::Text("done"));
  auto r = Run(RunArgs({"--fork-subagents", "--keep-sandbox", "--ttl", "300", "try a fix"}),
               FakeEnv(server));
  ASSERT_EQ(r.code, 0) << r.err;
  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 6u);
  // The tool was offered with its sandbox argument.
  EXPECT_THAT(ToJson(requests[0].json), HasSubstr("a copy of your files as they are now"));
  // The sub-agent's command ran in another sandbox that had the file.
  std::string sub_result = ToJson(requests[3].json);
  EXPECT_THAT(sub_result, HasSubstr("base"));
  auto list = Sandboxes(kRunLabel);
  ASSERT_EQ(list.size(), 1u);  // the fork is gone, the kept sandbox stays
  std::string id(list[0].at("id").as_string());
  EXPECT_THAT(sub_result, Not(HasSubstr(id)));  // its hostname is its own id
  EXPECT_THAT(ToJson(requests[4].json), HasSubstr("fork report"));
  std::string main_result = ToJson(requests[5].json);
  EXPECT_THAT(main_result, HasSubstr("clean"));
  EXPECT_THAT(main_result, HasSubstr(id));
  EXPECT_EQ(Run({kDeepbox, "sandbox", "rm", id}).code, 0);
}

TEST_F(RunTest, KeepSandboxLeavesItAndSaysHowToDeleteIt) {
  auto r =
      Run(RunArgs({"--keep-sandbox", "--ttl", "300", "--model", "replay:" + kFibReplay, kFibTask}));
  EXPECT_EQ(r.code, 0) << r.err;
  auto list = Sandboxes(kRunLabel);
  ASSERT_THAT(list, SizeIs(1));
  std::string id(list[0].at("id").as_string());
  EXPECT_THAT(r.err, HasSubstr("deepbox sandbox rm " + id));
  // fib.py is still there.
  auto cat = Run({kDeepbox, "sandbox", "exec", id, "--", "python3", "fib.py"});
  EXPECT_EQ(cat.code, 0) << cat.err;
  EXPECT_THAT(cat.out, HasSubstr("34"));
  EXPECT_EQ(Run({kDeepbox, "sandbox", "rm", id}).code, 0);
}

TEST_F(RunTest, ConfigFileAndUsageErrors) {
  WriteFile(dir_ / "cfg.yaml", "model: replay:" + kFibReplay + "\nlabels: {" +
                                   "e2e.deepbox.dev/test: run}\nttl: 120\n");
  auto r = Run({kDeepbox, "run", "--config", (dir_ / "cfg.yaml").string(), kFibTask});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("0, 1, 1, 2, 3, 5, 8, 13, 21, 34"));

  WriteFile(dir_ / "bad.yaml", "modle: x\n");
  r = Run({kDeepbox, "run", "--config", (dir_ / "bad.yaml").string(), kFibTask});
  EXPECT_EQ(r.code, run::kRunExitUsage);
  EXPECT_THAT(r.err, HasSubstr("modle: unknown setting"));

  EXPECT_EQ(Run({kDeepbox, "run", "--sandbox", "docker", kFibTask}).code, run::kRunExitUsage);
  EXPECT_EQ(Run({kDeepbox, "run", "--ttl", "-5", kFibTask}).code, run::kRunExitUsage);
  EXPECT_EQ(Run({kDeepbox, "run", "--label", "bad label", kFibTask}).code, run::kRunExitUsage);
  r = Run({kDeepbox, "run", "--model", "gemini:x", kFibTask});
  EXPECT_EQ(r.code, run::kRunExitUsage) << r.err;
  r = Run({kDeepbox, "run", "--model", "replay:" + kFibReplay}, {}, "");
  EXPECT_EQ(r.code, run::kRunExitUsage) << r.err;  // no TASK on an empty stdin
  EXPECT_THAT(r.err, HasSubstr("no TASK"));
  EXPECT_THAT(Sandboxes(kRunLabel), IsEmpty());
}

TEST_F(RunTest, HelpDocumentsEveryFlagAndVariable) {
  auto r = Run({kDeepbox, "run", "--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* s :
       {"--sandbox", "--model", "--approve", "--label", "--ttl", "--keep-sandbox", "--thread",
        "--json", "--max-steps", "--namespace", "--warm-pool", "--context", "--kubeconfig",
        "--config", "--no-color", "--record", "--router-url", "--router-token", "--mcp-config",
        "--no-mcp", "AGENT_SANDBOX_ROUTER_TOKEN", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY", "OPENAI_BASE_URL", "SSL_CERT_FILE", "KUBECONFIG",
        "AGENT_SANDBOX_NAMESPACE", "AGENT_SANDBOX_WARMPOOL", "AGENT_SANDBOX_ROUTER_URL",
        "DEEPBOX_STATE_DIR", "NO_COLOR", "DEEPBOX_MODEL", "Exit codes", "130 interrupted",
        "7 answer truncated", "--sandbox-id", "--skills", "--memory-file", "docs/run-json.md",
        "Ctrl-D or /exit ends", "default deepagents-warmpool", "Default 3600",
        // Issue 29 L12 / L6, issue 21 H1.
        "DEEPBOX_THREADS_DIR", "~/.local/state/deepbox/threads", "$DEEPBOX_STATE_DIR/threads",
        "--model-idle-timeout", "DEEPBOX_MODEL_IDLE_TIMEOUT", "Project files: ./.mcp.json",
        "trusted-projects"}) {
    EXPECT_THAT(r.out, HasSubstr(s));
  }
}

// Issue 21 H1/M7: project files planted in the working directory. Without a
// terminal nothing of them is used (no stdio server runs, no ${VAR} reaches a
// URL, no memory or skills reach the model), and one notice says how to use
// them; named with --mcp-config, the file is used.
TEST_F(RunTest, UntrustedProjectFilesAreIgnoredWithoutATerminal) {
  fs::path proj = dir_ / "proj";
  fs::create_directories(proj / ".deepagents" / "skills" / "planted");
  const fs::path marker = dir_ / "PWNED";
  WriteFile(proj / ".mcp.json",
            R"({"mcpServers": {"helper": {"command": "sh", "args": ["-c", "echo ran >> )" +
                marker.string() + R"("]}}})");
  WriteFile(proj / ".deepagents" / "AGENTS.md", "PLANTED-MEMORY-91c2\n");
  WriteFile(proj / ".deepagents" / "skills" / "planted" / "SKILL.md",
            "---\nname: planted\ndescription: PLANTED-SKILL-5d1e\n---\n");
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  server.Enqueue(ScriptedTurn::Text("done"));
  Process p(RunArgs({kFibTask}), Env(FakeEnv(server)), dir_, "", proj);
  ASSERT_EQ(p.Wait(), 0) << p.err();
  EXPECT_FALSE(fs::exists(marker)) << "a planted stdio MCP server ran on the host";
  const std::string err = p.err();
  size_t first = err.find("ignoring this directory's project files");
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("ignoring this directory's project files", first + 1), std::string::npos);
  EXPECT_THAT(err, HasSubstr("--mcp-config ./.mcp.json"));
  ASSERT_EQ(server.requests().size(), 1u);
  const std::string sent = ToJson(server.requests()[0].json);
  EXPECT_THAT(sent, Not(HasSubstr("PLANTED-MEMORY-91c2")));
  EXPECT_THAT(sent, Not(HasSubstr("PLANTED-SKILL-5d1e")));
  // Named explicitly, the file is the user's own choice: used.
  server.Enqueue(ScriptedTurn::Text("done"));
  Process named(RunArgs({"--mcp-config", "./.mcp.json", kFibTask}), Env(FakeEnv(server)), dir_, "",
                proj);
  ASSERT_EQ(named.Wait(), 0) << named.err();
  EXPECT_TRUE(Eventually([&] { return fs::exists(marker); }, 30s)) << named.err();
  EXPECT_THAT(named.err(), Not(HasSubstr("PLANTED")));
  EXPECT_THAT(Sandboxes(kRunLabel), IsEmpty());
}

// Issue 29 L6: a model API that accepts the connection and never answers is
// given up on after --model-idle-timeout (and retried), not after 300 s.
TEST_F(RunTest, StalledModelStreamHitsTheIdleTimeout) {
  SilentServer api;
  Process p(RunArgs({"--json", "--model-idle-timeout", "1", kFibTask}),
            Env({{"ANTHROPIC_API_KEY", kFakeApiKey},
                 {"ANTHROPIC_BASE_URL", "http://127.0.0.1:" + std::to_string(api.port())}}),
            dir_);
  // A retry event (the first attempt timed out), well before any 300 s timer.
  ASSERT_TRUE(
      Eventually([&] { return p.out().find("\"type\":\"retry\"") != std::string::npos; }, 60s))
      << p.out() << p.err();
  EXPECT_GE(api.accepted(), 1);
  kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.Wait(), run::kRunExitInterrupted) << p.err();
  // The environment variable does the same.
  SilentServer api2;
  Process q(RunArgs({"--json", kFibTask}),
            Env({{"ANTHROPIC_API_KEY", kFakeApiKey},
                 {"ANTHROPIC_BASE_URL", "http://127.0.0.1:" + std::to_string(api2.port())},
                 {"DEEPBOX_MODEL_IDLE_TIMEOUT", "1"}}),
            dir_);
  ASSERT_TRUE(
      Eventually([&] { return q.out().find("\"type\":\"retry\"") != std::string::npos; }, 60s))
      << q.out() << q.err();
  kill(q.pid(), SIGTERM);
  EXPECT_EQ(q.Wait(), run::kRunExitInterrupted) << q.err();
  EXPECT_THAT(Sandboxes(kRunLabel), IsEmpty());
}

// Issue 29 L8: a misspelt --pool is a usage error, before anything is claimed.
TEST_F(RunTest, UnknownPoolIsAUsageError) {
  auto r = Run(RunArgs({"--pool", "nosuchpool", "--model", "replay:" + kFibReplay, kFibTask}));
  EXPECT_EQ(r.code, run::kRunExitUsage) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--pool nosuchpool: no such warm pool"));
  EXPECT_THAT(Sandboxes(kRunLabel), IsEmpty());
}

}  // namespace
}  // namespace deepbox::e2e
