// End to end through the public API: the Fibonacci task with a scripted
// model and the real sandbox daemon (the tools run for real).
#include "agent/deep_agent.h"

#include <gtest/gtest.h>

#include "agent/testing/agent_fixture.h"
#include "agent/text.h"

namespace deepbox::agent {
namespace {

using testing::Args;
using testing::Call;
using testing::EventLog;
using testing::MakeAgent;
using testing::ScriptedModel;
using testing::ToolMessages;

TEST(DeepAgentE2E, FibonacciTask) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  std::string root = sb.root();
  const std::string program =
      "a=0; b=1; i=0\n"
      "while [ $i -lt 10 ]; do printf '%s ' $a; t=$((a+b)); a=$b; b=$t; i=$((i+1)); done\n"
      "echo\n";
  auto todos = *ParseJson(R"([{"content":"Write fib.sh","status":"in_progress"},)"
                          R"({"content":"Run it","status":"pending"}])");
  auto model = std::make_shared<ScriptedModel>();
  model->Tools({Call("t0", "write_todos", Args({{"todos", todos}}))}, "Planning.");
  model->Tools(
      {Call("t1", "write_file", Args({{"file_path", root + "/fib.sh"}, {"content", program}}))});
  model->Tools({Call("t2", "execute", Args({{"command", "sh " + root + "/fib.sh"}})),
                Call("t3", "read_file", Args({{"file_path", root + "/fib.sh"}, {"limit", 1}}))});
  model->Text("The first 10 Fibonacci numbers are 0 1 1 2 3 5 8 13 21 34.");
  DeepAgentOptions o;
  o.model = model;
  o.sandbox = &sb;
  o.system_prompt = "You are a coding assistant.";
  auto agent = MakeAgent(o);
  EventLog log;
  RunResult r = agent->Run("Write fib.sh printing 10 Fibonacci numbers, run it, report.",
                           {.on_event = log.callback()});
  ASSERT_TRUE(r.ok()) << (r.error ? r.error->message : "");
  auto tools = ToolMessages(r.messages);
  ASSERT_EQ(tools.size(), 4u);
  EXPECT_EQ(tools[0].text,
            "Updated todo list to [{'content': 'Write fib.sh', 'status': 'in_progress'}, "
            "{'content': 'Run it', 'status': 'pending'}]");
  EXPECT_EQ(tools[1].text, "Updated file " + root + "/fib.sh");
  EXPECT_EQ(tools[2].text, "0 1 1 2 3 5 8 13 21 34 \n\n[Command succeeded with exit code 0]");
  EXPECT_EQ(tools[3].text, "@@ lines 1-1 of 3 | next offset 1 @@\na=0; b=1; i=0");
  EXPECT_TRUE(
      model->requests()[0].system.starts_with("You are a coding assistant.\n\n## Environment"));
  EXPECT_EQ(log.of(EventType::kTodoUpdate).size(), 1u);
  EXPECT_EQ(log.of(EventType::kToolCallEnd).size(), 4u);
  EXPECT_EQ(r.final_text, "The first 10 Fibonacci numbers are 0 1 1 2 3 5 8 13 21 34.");
}

}  // namespace
}  // namespace deepbox::agent
