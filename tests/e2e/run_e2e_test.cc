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

constexpr const char* kKey = "sk-ant-e2e-test";
constexpr const char* kTask = "Write fib.py that prints the first 10 Fibonacci numbers and run it";
const std::string kLabel = "e2e.deepbox.dev/test=run";

class RunTest : public E2eTest {
 protected:
  std::map<std::string, std::string> FakeEnv(const FakeAnthropicServer& server) {
    return {{"ANTHROPIC_API_KEY", kKey}, {"ANTHROPIC_BASE_URL", server.url()}};
  }
  std::vector<std::string> RunArgs(std::vector<std::string> extra) {
    std::vector<std::string> argv = {kDeepbox, "run", "--label", kLabel};
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
  auto r = Run(RunArgs({"--model", "replay:" + kFibReplay, kTask}));
  EXPECT_EQ(r.code, run::kRunExitOk) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("a scripted conversation, not a live model"));
  EXPECT_THAT(r.out, HasSubstr("I'll plan this first"));
  EXPECT_THAT(r.out, HasSubstr("✓ write_file  /workspace/fib.py"));
  EXPECT_THAT(r.out, HasSubstr("✓ execute  python3 /workspace/fib.py"));
  EXPECT_THAT(r.out, HasSubstr("⎿ 0  (+9 more lines)"));  // the real output, folded
  EXPECT_THAT(r.out, HasSubstr("☰ Todos"));
  EXPECT_THAT(r.out, HasSubstr("0, 1, 1, 2, 3, 5, 8, 13, 21, 34"));
  EXPECT_THAT(r.err, HasSubstr("6 steps · tokens"));
  EXPECT_THAT(r.out + r.err, Not(HasSubstr("\x1b[")));  // not a terminal: no colours
  EXPECT_THAT(Sandboxes(kLabel), IsEmpty());
}

TEST_F(RunTest, JsonEventsAgainstTheFakeAnthropicServer) {
  FakeAnthropicServer server({.api_key = kKey});
  auto script = agent::testing::ScriptFromReplayFile(kFibReplay);
  ASSERT_TRUE(script.has_value());
  server.Enqueue(std::move(*script));
  auto r = Run(RunArgs({"--json", kTask}), FakeEnv(server));
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
  EXPECT_THAT(Sandboxes(kLabel), IsEmpty());
}

TEST_F(RunTest, MissingApiKeySaysHowToProvideOne) {
  auto r = Run(RunArgs({kTask}));
  EXPECT_EQ(r.code, run::kRunExitModel) << r.err;
  EXPECT_THAT(r.err, HasSubstr("ANTHROPIC_API_KEY is not set"));
  EXPECT_THAT(r.err, HasSubstr("export ANTHROPIC_API_KEY="));
  EXPECT_THAT(r.err, HasSubstr("--model replay:FILE"));
  EXPECT_THAT(Sandboxes(kLabel), IsEmpty());  // nothing was claimed
  // And in --json mode the result says so too.
  r = Run(RunArgs({"--json", kTask}));
  EXPECT_EQ(r.code, run::kRunExitModel);
  auto events = JsonLines(r.out);
  ASSERT_THAT(events, SizeIs(1));
  EXPECT_EQ(events[0].at("type").as_string(), "result");
  EXPECT_EQ(events[0].at("exit_code").as_int64(), run::kRunExitModel);
  EXPECT_EQ(events[0].at("error").at("code").as_string(), "UNAUTHENTICATED");
}

TEST_F(RunTest, RejectedApiKeyIsAModelError) {
  FakeAnthropicServer server({.api_key = kKey});
  auto r = Run(RunArgs({kTask}),
               {{"ANTHROPIC_API_KEY", "sk-ant-wrong"}, {"ANTHROPIC_BASE_URL", server.url()}});
  EXPECT_EQ(r.code, run::kRunExitModel) << r.err;
  EXPECT_THAT(r.err, HasSubstr("Check ANTHROPIC_API_KEY"));
  EXPECT_THAT(Sandboxes(kLabel), IsEmpty());
}

class RunSignalTest : public RunTest, public ::testing::WithParamInterface<int> {};

TEST_P(RunSignalTest, SignalDuringAToolCallExits130AndDeletesTheSandbox) {
  FakeAnthropicServer server({.api_key = kKey});
  server.Enqueue(ScriptedTurn::ToolCalls(
      {ScriptedToolCall("toolu_sleep", "execute", {{"command", "sleep 1000"}})}));
  Process p(RunArgs({"--json", kTask}), Env(FakeEnv(server)), dir_);
  ASSERT_TRUE(Eventually([&] {
    return p.out().find(R"("type":"tool_call_start")") != std::string::npos;
  })) << p.out()
      << p.err();
  WaitForSandbox(kLabel);
  kill(p.pid(), GetParam());
  EXPECT_EQ(p.Wait(), run::kRunExitInterrupted) << p.err();
  auto events = JsonLines(p.out());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().at("type").as_string(), "result");
  EXPECT_EQ(events.back().at("exit_code").as_int64(), run::kRunExitInterrupted);
  EXPECT_EQ(events.back().at("stop_reason").as_string(), "interrupted");
  EXPECT_THAT(Sandboxes(kLabel), IsEmpty());
}

INSTANTIATE_TEST_SUITE_P(Signals, RunSignalTest, ::testing::Values(SIGINT, SIGTERM),
                         [](const auto& info) {
                           return info.param == SIGINT ? "SIGINT" : "SIGTERM";
                         });

TEST_F(RunTest, SandboxDeletedUnderTheAgentIsAClearSandboxError) {
  FakeAnthropicServer server({.api_key = kKey});
  server.Enqueue(ScriptedTurn::ToolCalls(
      {ScriptedToolCall("toolu_sleep", "execute", {{"command", "sleep 1000"}})}));
  server.Enqueue(ScriptedTurn::Text("unreachable"));
  Process p(RunArgs({kTask}), Env(FakeEnv(server)), dir_);
  std::string id = WaitForSandbox(kLabel);
  ASSERT_TRUE(Eventually([&] { return server.request_count() >= 1; }));
  auto rm = Run({kDeepbox, "sandbox", "rm", id});
  EXPECT_EQ(rm.code, 0) << rm.err;
  EXPECT_EQ(p.Wait(), run::kRunExitSandbox) << p.out() << p.err();
  EXPECT_THAT(p.err(), HasSubstr("the sandbox went away during the run (deleted from outside"));
  EXPECT_THAT(p.err(), HasSubstr(id));
  EXPECT_EQ(server.pending_turns(), 1u);  // the agent stopped instead of carrying on
  EXPECT_THAT(Sandboxes(kLabel), IsEmpty());
}

TEST_F(RunTest, StepLimit) {
  auto r = Run(RunArgs({"--model", "replay:" + kFibReplay, "--max-steps", "2", kTask}));
  EXPECT_EQ(r.code, run::kRunExitStepLimit) << r.err;
  EXPECT_THAT(r.err, HasSubstr("step limit of 2"));
  EXPECT_THAT(r.err, HasSubstr("--max-steps"));
  EXPECT_THAT(Sandboxes(kLabel), IsEmpty());
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
  auto r = Run(RunArgs({"--model", "replay:" + (dir_ / "bad.jsonl").string(), kTask}));
  EXPECT_EQ(r.code, run::kRunExitModel) << r.err;
  EXPECT_THAT(r.err, HasSubstr("diverged from the recording"));
  EXPECT_THAT(Sandboxes(kLabel), IsEmpty());
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
  EXPECT_TRUE(fs::exists(dir_ / "xdg" / "deepbox" / "threads" / "th-e2e.jsonl"));
  // The same thread again: the model now sees the earlier messages.
  FakeAnthropicServer server({.api_key = kKey});
  server.Enqueue(ScriptedTurn::Text("second answer"));
  r = Run(RunArgs({"--thread", "th-e2e", "and again"}), FakeEnv(server));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("continuing thread th-e2e"));
  ASSERT_EQ(server.requests().size(), 1u);
  EXPECT_EQ(server.requests()[0].json.at("messages").as_array().size(), 3u);
}

TEST_F(RunTest, RecordThenReplay) {
  FakeAnthropicServer server({.api_key = kKey});
  auto script = agent::testing::ScriptFromReplayFile(kFibReplay);
  ASSERT_TRUE(script.has_value());
  server.Enqueue(std::move(*script));
  std::string rec = (dir_ / "rec.jsonl").string();
  auto r = Run(RunArgs({"--record", rec, kTask}), FakeEnv(server));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("recording the model conversation to " + rec));
  r = Run(RunArgs({"--model", "replay:" + rec, kTask}));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("(a recorded conversation)"));
  EXPECT_THAT(r.out, HasSubstr("0, 1, 1, 2, 3, 5, 8, 13, 21, 34"));
}

TEST_F(RunTest, KeepSandboxLeavesItAndSaysHowToDeleteIt) {
  auto r =
      Run(RunArgs({"--keep-sandbox", "--ttl", "300", "--model", "replay:" + kFibReplay, kTask}));
  EXPECT_EQ(r.code, 0) << r.err;
  auto list = Sandboxes(kLabel);
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
  auto r = Run({kDeepbox, "run", "--config", (dir_ / "cfg.yaml").string(), kTask});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("0, 1, 1, 2, 3, 5, 8, 13, 21, 34"));

  WriteFile(dir_ / "bad.yaml", "modle: x\n");
  r = Run({kDeepbox, "run", "--config", (dir_ / "bad.yaml").string(), kTask});
  EXPECT_EQ(r.code, run::kRunExitUsage);
  EXPECT_THAT(r.err, HasSubstr("modle: unknown setting"));

  EXPECT_EQ(Run({kDeepbox, "run", "--sandbox", "docker", kTask}).code, run::kRunExitUsage);
  EXPECT_EQ(Run({kDeepbox, "run", "--ttl", "-5", kTask}).code, run::kRunExitUsage);
  EXPECT_EQ(Run({kDeepbox, "run", "--label", "bad label", kTask}).code, run::kRunExitUsage);
  r = Run({kDeepbox, "run", "--model", "gemini:x", kTask});
  EXPECT_EQ(r.code, run::kRunExitUsage) << r.err;
  r = Run({kDeepbox, "run", "--model", "replay:" + kFibReplay}, {}, "");
  EXPECT_EQ(r.code, run::kRunExitUsage) << r.err;  // no TASK on an empty stdin
  EXPECT_THAT(r.err, HasSubstr("no TASK"));
  EXPECT_THAT(Sandboxes(kLabel), IsEmpty());
}

TEST_F(RunTest, HelpDocumentsEveryFlagAndVariable) {
  auto r = Run({kDeepbox, "run", "--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* s : {"--sandbox",
                        "--model",
                        "--approve",
                        "--label",
                        "--ttl",
                        "--keep-sandbox",
                        "--thread",
                        "--json",
                        "--max-steps",
                        "--namespace",
                        "--warm-pool",
                        "--context",
                        "--kubeconfig",
                        "--config",
                        "--no-color",
                        "--record",
                        "--router-url",
                        "--router-token",
                        "AGENT_SANDBOX_ROUTER_TOKEN",
                        "ANTHROPIC_API_KEY",
                        "ANTHROPIC_BASE_URL",
                        "OPENAI_API_KEY",
                        "OPENAI_BASE_URL",
                        "SSL_CERT_FILE",
                        "KUBECONFIG",
                        "AGENT_SANDBOX_NAMESPACE",
                        "AGENT_SANDBOX_WARMPOOL",
                        "AGENT_SANDBOX_ROUTER_URL",
                        "DEEPBOX_STATE_DIR",
                        "NO_COLOR",
                        "DEEPBOX_MODEL",
                        "Exit codes",
                        "130 interrupted",
                        "default deepagents-warmpool",
                        "Default 3600"}) {
    EXPECT_THAT(r.out, HasSubstr(s));
  }
}

}  // namespace
}  // namespace deepbox::e2e
