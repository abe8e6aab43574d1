// The Fibonacci example (examples/fib/main.cc) end to end: the real binary,
// a real local sandbox, the shipped recording or the fake Anthropic server.
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

class ExampleTest : public E2eTest {
 protected:
  std::map<std::string, std::string> FakeEnv(const FakeAnthropicServer& server) {
    return {{"ANTHROPIC_API_KEY", kFakeApiKey}, {"ANTHROPIC_BASE_URL", server.url()}};
  }
  // The model writes `script` as fib.py, runs it, and claims success.
  static std::vector<ScriptedTurn> WritesAndRuns(const std::string& script) {
    return {
        ScriptedTurn::ToolCalls({ScriptedToolCall(
            "toolu_w", "write_file", {{"file_path", "/workspace/fib.py"}, {"content", script}})}),
        ScriptedTurn::ToolCalls(
            {ScriptedToolCall("toolu_x", "execute", {{"command", "python3 /workspace/fib.py"}})}),
        ScriptedTurn::Text("Done: fib.py prints the first 10 Fibonacci numbers.")};
  }
};

TEST_F(ExampleTest, ReplaysTheRecordingWithoutAnApiKeyAndVerifies) {
  auto r = Run({kExample});
  EXPECT_EQ(r.code, run::kRunExitOk) << r.out << r.err;
  EXPECT_THAT(r.err,
              HasSubstr("ANTHROPIC_API_KEY is not set: replaying the recorded conversation"));
  EXPECT_THAT(r.err, HasSubstr("examples/fib/fib.replay.jsonl (a scripted conversation, not a "
                               "live model)"));
  EXPECT_THAT(r.err, HasSubstr("[tool] write_file /workspace/fib.py"));
  EXPECT_THAT(r.err, HasSubstr("[tool] execute python3 /workspace/fib.py"));
  EXPECT_THAT(r.out, HasSubstr("Agent's final message:"));
  EXPECT_THAT(r.out, HasSubstr("0, 1, 1, 2, 3, 5, 8, 13, 21, 34"));
  EXPECT_THAT(r.out, HasSubstr(kVerifiedLocal));
  EXPECT_THAT(Sandboxes(kExampleLabel), IsEmpty());
}

TEST_F(ExampleTest, TalksToAnthropicOverHttpWhenAKeyIsSet) {
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  auto script = agent::testing::ScriptFromReplayFile(kFibReplay);
  ASSERT_TRUE(script.has_value()) << script.error().message;
  server.Enqueue(std::move(*script));
  auto r = Run({kExample}, FakeEnv(server));
  EXPECT_EQ(r.code, run::kRunExitOk) << r.out << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("replaying")));
  EXPECT_THAT(r.out, HasSubstr(kVerifiedLocal));
  EXPECT_EQ(server.pending_turns(), 0u);
  ASSERT_GE(server.requests().size(), 1u);
  EXPECT_EQ(server.requests()[0].json.at("model").as_string(), "claude-sonnet-4-6");
  EXPECT_THAT(Sandboxes(kExampleLabel), IsEmpty());
}

TEST_F(ExampleTest, WrongSequenceFailsVerification) {
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  server.Enqueue(WritesAndRuns("print(1, 1, 2, 3, 5, 8, 13, 21, 34, 55)\n"));
  auto r = Run({kExample}, FakeEnv(server));
  EXPECT_EQ(r.code, run::kRunExitVerification) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("Sandbox verification failed: fib.py does not print the sequence"));
  EXPECT_THAT(r.out, Not(HasSubstr(kVerifiedLocal)));
  EXPECT_THAT(Sandboxes(kExampleLabel), IsEmpty());
}

TEST_F(ExampleTest, CrashingScriptFailsVerification) {
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  server.Enqueue(WritesAndRuns("print(0, 1, 1)\nraise SystemExit(1 / 0)\n"));
  auto r = Run({kExample}, FakeEnv(server));
  EXPECT_EQ(r.code, run::kRunExitVerification) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("`python3 fib.py` exited with status 1 in the sandbox"));
  EXPECT_THAT(r.err, HasSubstr("ZeroDivisionError"));
  EXPECT_THAT(Sandboxes(kExampleLabel), IsEmpty());
}

TEST_F(ExampleTest, MissingScriptFailsVerification) {
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  server.Enqueue(ScriptedTurn::Text("I did it (I did not)."));
  auto r = Run({kExample}, FakeEnv(server));
  EXPECT_EQ(r.code, run::kRunExitVerification) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("exited with status 2"));
  EXPECT_THAT(r.err, HasSubstr("No such file"));
}

class ExampleSignalTest : public ExampleTest, public ::testing::WithParamInterface<int> {};

TEST_P(ExampleSignalTest, SignalDuringAToolCallDeletesTheSandbox) {
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  server.Enqueue(ScriptedTurn::ToolCalls(
      {ScriptedToolCall("toolu_sleep", "execute", {{"command", "sleep 1000"}})}));
  Process p({kExample}, Env(FakeEnv(server)), dir_);
  ASSERT_TRUE(Eventually([&] {
    return p.err().find("[tool] execute sleep 1000") != std::string::npos;
  })) << p.err();
  WaitForSandbox(kExampleLabel);
  kill(p.pid(), GetParam());
  EXPECT_EQ(p.Wait(), run::kRunExitInterrupted) << p.out() << p.err();
  EXPECT_THAT(p.err(), HasSubstr("the sandbox"));
  EXPECT_THAT(Sandboxes(kExampleLabel), IsEmpty());
}

INSTANTIATE_TEST_SUITE_P(Signals, ExampleSignalTest, ::testing::Values(SIGINT, SIGTERM),
                         [](const auto& info) {
                           return info.param == SIGINT ? "SIGINT" : "SIGTERM";
                         });

TEST_F(ExampleTest, SandboxDeletedUnderTheAgentIsASandboxError) {
  FakeAnthropicServer server({.api_key = kFakeApiKey});
  server.Enqueue(ScriptedTurn::ToolCalls(
      {ScriptedToolCall("toolu_sleep", "execute", {{"command", "sleep 1000"}})}));
  server.Enqueue(ScriptedTurn::Text("The command failed."));
  Process p({kExample}, Env(FakeEnv(server)), dir_);
  ASSERT_TRUE(
      Eventually([&] { return p.err().find("[tool] execute sleep 1000") != std::string::npos; }));
  std::string id = WaitForSandbox(kExampleLabel);
  auto rm = Run({kDeepbox, "sandbox", "rm", id});
  EXPECT_EQ(rm.code, 0) << rm.err;
  EXPECT_EQ(p.Wait(), run::kRunExitSandbox) << p.out() << p.err();
  EXPECT_THAT(p.err(), HasSubstr("could not run fib.py in sandbox " + id));
  EXPECT_THAT(Sandboxes(kExampleLabel), IsEmpty());
}

TEST_F(ExampleTest, ClaudeWithoutAKeyIsAModelError) {
  auto r = Run({kExample}, {{"DEEPBOX_MODEL", "claude-sonnet-4-6"}});
  EXPECT_EQ(r.code, run::kRunExitModel) << r.err;
  EXPECT_THAT(r.err, HasSubstr("ANTHROPIC_API_KEY is not set"));
  EXPECT_THAT(Sandboxes(kExampleLabel), IsEmpty());
}

TEST_F(ExampleTest, UsageErrors) {
  EXPECT_EQ(Run({kExample, "--sandbox", "docker"}).code, run::kRunExitUsage);
  EXPECT_EQ(Run({kExample, "--bogus"}).code, run::kRunExitUsage);
  auto help = Run({kExample, "--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(help.err, HasSubstr("usage: deepbox-fib-example"));
}

}  // namespace
}  // namespace deepbox::e2e
