// `deepbox run` on a real pseudo-terminal (forkpty): what a person sees.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>

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

const std::string kTerminalLabel = "e2e.deepbox.dev/test=terminal";

// An SGR (colour) escape sequence: ESC [ digits/semicolons m.
bool HasSgr(const std::string& s) {
  for (size_t i = s.find("\x1b["); i != std::string::npos; i = s.find("\x1b[", i + 1)) {
    size_t j = i + 2;
    while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == ';')) ++j;
    if (j < s.size() && s[j] == 'm') return true;
  }
  return false;
}

// A spinner frame: "\r", the label, then an elapsed time like "0.3s" on the same line.
bool HasSpinnerFrame(const std::string& s, const std::string& label) {
  for (size_t i = s.find('\r'); i != std::string::npos; i = s.find('\r', i + 1)) {
    size_t end = s.find_first_of("\r\n", i + 1);
    std::string line = s.substr(i + 1, end == std::string::npos ? std::string::npos : end - i - 1);
    size_t at = line.find(label);
    if (at == std::string::npos) continue;
    for (size_t k = at + label.size(); k + 3 < line.size() + 1; ++k) {
      if (k + 2 < line.size() && std::isdigit(static_cast<unsigned char>(line[k])) &&
          line[k + 1] == '.' && std::isdigit(static_cast<unsigned char>(line[k + 2])) &&
          k + 3 < line.size() && line[k + 3] == 's') {
        return true;
      }
    }
  }
  return false;
}

class TerminalTest : public E2eTest {
 protected:
  std::vector<std::string> Args(std::vector<std::string> extra) {
    std::vector<std::string> argv = {kDeepbox, "run", "--label", kTerminalLabel};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
  std::vector<std::string> TermEnv(std::map<std::string, std::string> extra = {}) {
    extra.emplace("TERM", "xterm-256color");
    return Env(std::move(extra));
  }
};

TEST_F(TerminalTest, SpinnerStreamedTextToolLinesAndColours) {
  PtyProcess p(Args({"--model", "replay:" + kFibReplay, kFibTask}), TermEnv());
  int code = p.Wait();
  const std::string& out = p.output();
  EXPECT_EQ(code, 0) << out;
  // The spinner, redrawn in place with elapsed time, while the sandbox is claimed.
  EXPECT_THAT(out, HasSubstr("Claiming a local sandbox"));
  EXPECT_TRUE(HasSpinnerFrame(out, "Claiming a local sandbox")) << out;
  EXPECT_THAT(out, HasSubstr("\r\x1b[K"));  // cleared before other output
  EXPECT_THAT(out, HasSubstr("Thinking"));
  // The model's text, tool lines, todos, the answer and the totals.
  EXPECT_THAT(out, HasSubstr("I'll plan this first"));
  EXPECT_THAT(out, HasSubstr("write_file"));
  EXPECT_THAT(out, HasSubstr("/workspace/fib.py"));
  EXPECT_THAT(out, HasSubstr("python3 /workspace/fib.py"));
  EXPECT_THAT(out, HasSubstr("✓"));
  EXPECT_THAT(out, HasSubstr("Todos"));
  EXPECT_THAT(out, HasSubstr("0, 1, 1, 2, 3, 5, 8, 13, 21, 34"));
  EXPECT_THAT(out, HasSubstr("tokens"));
  EXPECT_TRUE(HasSgr(out)) << "no colours on a terminal";
  EXPECT_THAT(out, HasSubstr("\x1b[32m✓\x1b[0m"));
  EXPECT_THAT(Sandboxes(kTerminalLabel), IsEmpty());
}

TEST_F(TerminalTest, NoColorMeansNoColours) {
  PtyProcess p(Args({"--model", "replay:" + kFibReplay, kFibTask}), TermEnv({{"NO_COLOR", "1"}}));
  EXPECT_EQ(p.Wait(), 0) << p.output();
  EXPECT_THAT(p.output(), HasSubstr("Claiming a local sandbox"));  // the spinner stays
  EXPECT_THAT(p.output(), HasSubstr("✓"));
  EXPECT_FALSE(HasSgr(p.output())) << p.output();
}

TEST_F(TerminalTest, NoColorFlag) {
  PtyProcess p(Args({"--no-color", "--model", "replay:" + kFibReplay, kFibTask}), TermEnv());
  EXPECT_EQ(p.Wait(), 0) << p.output();
  EXPECT_FALSE(HasSgr(p.output())) << p.output();
}

TEST_F(TerminalTest, JsonOnATerminalIsPlainJsonLines) {
  PtyProcess p(Args({"--json", "--model", "replay:" + kFibReplay, kFibTask}), TermEnv());
  EXPECT_EQ(p.Wait(), 0) << p.output();
  EXPECT_FALSE(HasSgr(p.output()));
  EXPECT_THAT(p.output(), Not(HasSubstr("Claiming")));  // no spinner
  // Every line is a JSON object (the notice about the replay included).
  auto events = JsonLines(p.output());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().at("type").as_string(), "notice");
  EXPECT_EQ(events.back().at("type").as_string(), "result");
  EXPECT_EQ(events.back().at("exit_code").as_int64(), 0);
}

TEST_F(TerminalTest, InteractivePromptRunsEachLineOnTheSameSandbox) {
  WriteFile(
      dir_ / "two.jsonl",
      R"({"deepbox_replay": 1, "scripted": true, "model": "anthropic:claude-sonnet-4-6"})"
      "\n"
      R"({"response": {"tool_calls": [{"id": "t1", "name": "write_file", "input": {"file_path": "/workspace/a.txt", "content": "kept between tasks"}}]}})"
      "\n"
      R"({"response": {"text": "wrote a.txt"}})"
      "\n"
      R"({"response": {"tool_calls": [{"id": "t2", "name": "execute", "input": {"command": "cat /workspace/a.txt"}}]}})"
      "\n"
      R"({"response": {"text": "read it back"}})"
      "\n");
  PtyProcess p(Args({"--model", "replay:" + (dir_ / "two.jsonl").string()}), TermEnv());
  ASSERT_TRUE(p.WaitFor("›")) << p.output();  // the prompt
  p.Write("write a file\r");
  ASSERT_TRUE(p.WaitFor("wrote a.txt")) << p.output();
  p.Write("read it\r");  // read at the next prompt
  ASSERT_TRUE(p.WaitFor("read it back")) << p.output();
  p.Write("/exit\r");
  EXPECT_EQ(p.Wait(), 0) << p.output();
  EXPECT_THAT(p.output(), HasSubstr("kept between tasks"));  // the folded execute output
  EXPECT_THAT(Sandboxes(kTerminalLabel), IsEmpty());
}

TEST_F(TerminalTest, InteractivePromptEditsLinesAndRecallsHistory) {
  FakeAnthropicServer server({.api_key = "sk-ant-e2e"});
  server.Enqueue(ScriptedTurn::Text("first answer"));
  server.Enqueue(ScriptedTurn::Text("second answer"));
  PtyProcess p(Args({}), TermEnv({{"ANTHROPIC_API_KEY", "sk-ant-e2e"},
                                  {"ANTHROPIC_BASE_URL", server.url()}}));
  ASSERT_TRUE(p.WaitFor("Ctrl-D or /exit ends the session")) << p.output();
  ASSERT_TRUE(p.WaitForNext("›")) << p.output();  // the prompt
  // A typo fixed with the arrow keys: the cursor moves, nothing of the escape
  // sequence reaches the model.
  p.Write("wrte a file");
  for (int i = 0; i < 9; ++i) p.Write("\x1b[D");  // Left: to just after "wr"
  p.Write("i\r");
  // WaitForNext past the answer: libedit redraws the edited line with its
  // prompt, and that redraw must not be taken for the next prompt (a Ctrl-D
  // typed ahead while the task still runs is not an end-of-session key).
  ASSERT_TRUE(p.WaitForNext("first answer")) << p.output();
  ASSERT_TRUE(p.WaitForNext("›")) << p.output();
  // Up recalls the line.
  p.Write("\x1b[A\r");
  ASSERT_TRUE(p.WaitForNext("second answer")) << p.output();
  ASSERT_TRUE(p.WaitForNext("›")) << p.output();
  p.Write("\x04");  // Ctrl-D on an empty line ends the session
  EXPECT_EQ(p.Wait(), 0) << p.output();
  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  auto last_user_text = [](const json::object& body) {
    const auto& msgs = body.at("messages").as_array();
    const auto& content = msgs.back().at("content");
    if (content.is_string()) return std::string(content.as_string());
    return std::string(content.as_array().back().at("text").as_string());
  };
  EXPECT_EQ(last_user_text(requests[0].json), "write a file");
  EXPECT_EQ(last_user_text(requests[1].json), "write a file");
  // History is kept for the next session, readable by its owner only.
  fs::path history = dir_ / "xdg" / "deepbox" / "run_history";
  ASSERT_TRUE(fs::exists(history));
  EXPECT_THAT(ReadFile(history), HasSubstr("write"));
  EXPECT_EQ(fs::status(history).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_THAT(Sandboxes(kTerminalLabel), IsEmpty());
}

TEST_F(TerminalTest, CtrlCCancelsTheTaskNotTheSession) {
  FakeAnthropicServer server({.api_key = "sk-ant-e2e"});
  server.Enqueue(ScriptedTurn::ToolCalls(
      {ScriptedToolCall("toolu_sleep", "execute", {{"command", "sleep 1000"}})}));
  server.Enqueue(ScriptedTurn::Text("still here"));
  PtyProcess p(Args({}), TermEnv({{"ANTHROPIC_API_KEY", "sk-ant-e2e"},
                                  {"ANTHROPIC_BASE_URL", server.url()}}));
  ASSERT_TRUE(p.WaitForNext("›")) << p.output();  // the prompt
  // Ctrl-C at the prompt abandons the line only.
  p.Write("never sent");
  p.Write("\x03");
  ASSERT_TRUE(p.WaitForNext("›")) << p.output();  // a fresh prompt
  p.Write("sleep for a while\r");
  ASSERT_TRUE(p.WaitFor("execute sleep 1000")) << p.output();
  std::string id = WaitForSandbox(kTerminalLabel);
  p.Write("\x03");
  ASSERT_TRUE(p.WaitFor("task cancelled")) << p.output();
  ASSERT_TRUE(p.WaitForNext("›")) << p.output();  // the session goes on
  p.Write("are you there?\r");
  ASSERT_TRUE(p.WaitFor("still here")) << p.output();
  // Same sandbox throughout.
  auto list = Sandboxes(kTerminalLabel);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].at("id").as_string(), id);
  p.Write("/exit\r");
  EXPECT_EQ(p.Wait(), 0) << p.output();
  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);  // the abandoned line was never sent
  EXPECT_THAT(ToJson(requests[1].json), HasSubstr("are you there?"));
  EXPECT_THAT(ToJson(requests[1].json), Not(HasSubstr("never sent")));
  EXPECT_THAT(Sandboxes(kTerminalLabel), IsEmpty());
}

TEST_F(TerminalTest, ManualApprovalShowsTheChangeAndTakesOneKey) {
  WriteFile(
      dir_ / "approve.jsonl",
      R"({"deepbox_replay": 1, "scripted": true, "model": "anthropic:claude-sonnet-4-6"})"
      "\n"
      R"({"response": {"tool_calls": [{"id": "t1", "name": "execute", "input": {"command": "echo approved-run"}}]}})"
      "\n"
      R"({"request": {"tool_results": ["t1"]}, "response": {"tool_calls": [{"id": "t2", "name": "execute", "input": {"command": "echo never-run"}}]}})"
      "\n"
      R"({"request": {"tool_results": ["t2"]}, "response": {"tool_calls": [{"id": "t3", "name": "execute", "input": {"command": "echo original"}}]}})"
      "\n"
      R"({"request": {"tool_results": ["t3"]}, "response": {"tool_calls": [{"id": "t4", "name": "write_file", "input": {"file_path": "/workspace/a.txt", "content": "alpha\nbeta\n"}}]}})"
      "\n"
      R"({"request": {"tool_results": ["t4"]}, "response": {"tool_calls": [{"id": "t5", "name": "edit_file", "input": {"file_path": "/workspace/a.txt", "old_string": "beta", "new_string": "gamma"}}]}})"
      "\n"
      R"({"request": {"tool_results": ["t5"]}, "response": {"tool_calls": [{"id": "t6", "name": "execute", "input": {"command": "cat /workspace/a.txt"}}]}})"
      "\n"
      R"({"request": {"tool_results": ["t6"]}, "response": {"tool_calls": [{"id": "t7", "name": "execute", "input": {"command": "echo asked-no-more"}}]}})"
      "\n"
      R"({"request": {"tool_results": ["t7"]}, "response": {"text": "all done"}})"
      "\n");
  PtyProcess p(Args({"--approve", "manual", "--model",
                     "replay:" + (dir_ / "approve.jsonl").string(), kFibTask}),
               TermEnv());
  // The command itself, and a single key answers (no Enter). A key counts
  // once its question is shown (typed earlier, it is dropped).
  ASSERT_TRUE(p.WaitFor("$ echo approved-run")) << p.output();
  ASSERT_TRUE(p.WaitForNext("[y]es"));
  p.Write("y");
  ASSERT_TRUE(p.WaitFor("⎿ approved-run")) << p.output();
  ASSERT_TRUE(p.WaitFor("$ echo never-run"));
  ASSERT_TRUE(p.WaitForNext("[y]es"));
  p.Write("r");
  ASSERT_TRUE(p.WaitFor("reason (told to the model)"));
  p.Write("not this one\r");
  ASSERT_TRUE(p.WaitFor("$ echo original")) << p.output();
  ASSERT_TRUE(p.WaitForNext("[y]es"));
  p.Write("e");
  ASSERT_TRUE(p.WaitFor("new arguments"));
  p.Write(R"({"command": "echo edited-run"})"
          "\r");
  // write_file shows the content, edit_file a diff.
  ASSERT_TRUE(p.WaitFor("(writes 2 lines")) << p.output();
  ASSERT_TRUE(p.WaitFor("+beta"));
  ASSERT_TRUE(p.WaitForNext("[y]es"));
  p.Write("y");
  ASSERT_TRUE(p.WaitFor("+++ after")) << p.output();
  ASSERT_TRUE(p.WaitFor("+gamma"));
  ASSERT_TRUE(p.WaitForNext("[y]es"));
  p.Write("y");
  // "always": this execute and the next run without another question.
  ASSERT_TRUE(p.WaitFor("$ cat /workspace/a.txt")) << p.output();
  ASSERT_TRUE(p.WaitForNext("[y]es"));
  p.Write("a");
  ASSERT_TRUE(p.WaitFor("all done")) << p.output();
  EXPECT_EQ(p.Wait(), 0) << p.output();
  const std::string& out = p.output();
  EXPECT_THAT(out, HasSubstr("edited-run"));
  EXPECT_THAT(out, HasSubstr("approved (always, as you chose for execute)"));
  EXPECT_THAT(out, HasSubstr("⎿ asked-no-more"));
  EXPECT_THAT(out, HasSubstr("⎿ alpha  (+1 more line)"));  // cat after the edit: alpha, gamma
  // The rejected command never ran: its output never appears (only its command line).
  EXPECT_THAT(out, Not(HasSubstr("⎿ never-run")));
  EXPECT_THAT(out, Not(HasSubstr(R"({"command":"echo approved-run"})")));  // not raw JSON
  EXPECT_THAT(Sandboxes(kTerminalLabel), IsEmpty());
}

TEST_F(TerminalTest, CtrlCAtTheApprovalPromptEndsTheRun) {
  WriteFile(
      dir_ / "ask.jsonl",
      R"({"deepbox_replay": 1, "scripted": true, "model": "anthropic:claude-sonnet-4-6"})"
      "\n"
      R"({"response": {"tool_calls": [{"id": "t1", "name": "execute", "input": {"command": "echo x"}}]}})"
      "\n");
  PtyProcess p(
      Args({"--approve", "manual", "--model", "replay:" + (dir_ / "ask.jsonl").string(), kFibTask}),
      TermEnv());
  ASSERT_TRUE(p.WaitFor("[y]es")) << p.output();
  p.Write("\x03");
  EXPECT_EQ(p.Wait(), run::kRunExitInterrupted) << p.output();
  EXPECT_THAT(p.output(), HasSubstr("interrupted (Ctrl-C)"));
  EXPECT_THAT(Sandboxes(kTerminalLabel), IsEmpty());
}

TEST_F(TerminalTest, CtrlCOnTheTerminalDuringAToolCall) {
  FakeAnthropicServer server({.api_key = "sk-ant-e2e"});
  server.Enqueue(ScriptedTurn::ToolCalls(
      {ScriptedToolCall("toolu_sleep", "execute", {{"command", "sleep 1000"}})}));
  PtyProcess p(Args({kFibTask}), TermEnv({{"ANTHROPIC_API_KEY", "sk-ant-e2e"},
                                          {"ANTHROPIC_BASE_URL", server.url()}}));
  ASSERT_TRUE(p.WaitFor("execute sleep 1000")) << p.output();  // the running tool's spinner
  WaitForSandbox(kTerminalLabel);
  p.Write("\x03");  // Ctrl-C: SIGINT to the terminal's foreground process group
  EXPECT_EQ(p.Wait(), run::kRunExitInterrupted) << p.output();
  EXPECT_THAT(p.output(), HasSubstr("interrupted (Ctrl-C)"));
  EXPECT_THAT(Sandboxes(kTerminalLabel), IsEmpty());
}

// Issue 21 H1: on a terminal, a project's .mcp.json is shown (the servers'
// commands) and used only after "y"; the answer is kept for exactly those
// contents (not asked again), and a changed file is asked about again.
TEST_F(TerminalTest, ProjectFilesAreAskedAboutOnceAndBoundToTheirContent) {
  fs::path proj = dir_ / "proj";
  fs::create_directories(proj);
  const fs::path marker = dir_ / "ran";
  auto plant = [&](const std::string& word) {
    WriteFile(proj / ".mcp.json",
              R"({"mcpServers": {"lint": {"command": "sh", "args": ["-c", "echo )" + word + " >> " +
                  marker.string() + R"("]}}})");
  };
  plant("first");
  const std::string question = "Use them (and remember this answer until they change)? [y/N]";
  {
    PtyProcess p(Args({"--model", "replay:" + kFibReplay, kFibTask}), TermEnv(), proj);
    ASSERT_TRUE(p.WaitFor(question)) << p.output();
    EXPECT_THAT(p.output(), HasSubstr("lint: sh -c 'echo first >> " + marker.string() + "'"));
    EXPECT_FALSE(fs::exists(marker)) << "the server ran before the answer";
    p.Write("y\r");
    EXPECT_EQ(p.Wait(), 0) << p.output();
  }
  ASSERT_TRUE(Eventually([&] { return fs::exists(marker); }, 30s));
  EXPECT_EQ(ReadFile(marker), "first\n");
  // The decision is kept outside the directory, owner-only.
  fs::path trust = dir_ / "xdg" / "deepbox" / "trusted-projects";
  EXPECT_EQ(fs::status(trust).permissions() & fs::perms::all, fs::perms::owner_all);
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(proj)) entries += e.path().filename() != "" ? 1 : 0;
  EXPECT_EQ(entries, 1u);  // only .mcp.json: nothing is recorded in the directory
  {
    PtyProcess p(Args({"--model", "replay:" + kFibReplay, kFibTask}), TermEnv(), proj);
    EXPECT_EQ(p.Wait(), 0) << p.output();
    EXPECT_THAT(p.output(), Not(HasSubstr(question)));
  }
  ASSERT_TRUE(Eventually([&] { return ReadFile(marker) == "first\nfirst\n"; }, 30s))
      << ReadFile(marker);
  // Changed: asked again; "n" (or Enter) uses nothing.
  plant("second");
  {
    PtyProcess p(Args({"--model", "replay:" + kFibReplay, kFibTask}), TermEnv(), proj);
    ASSERT_TRUE(p.WaitFor(question)) << p.output();
    EXPECT_THAT(p.output(), HasSubstr("echo second"));
    p.Write("\r");
    EXPECT_EQ(p.Wait(), 0) << p.output();
    EXPECT_THAT(p.output(), HasSubstr("not using this directory's project files"));
  }
  EXPECT_EQ(ReadFile(marker), "first\nfirst\n");
  EXPECT_THAT(Sandboxes(kTerminalLabel), IsEmpty());
}

// Issue 29 L6: a model that sends nothing shows "Waiting for the model…" on a
// terminal after a few seconds, with when deepbox gives up on the stream.
TEST_F(TerminalTest, StalledModelShowsWaitingForTheModel) {
  SilentServer api;
  PtyProcess p(Args({"--model-idle-timeout", "30", kFibTask}),
               TermEnv({{"ANTHROPIC_API_KEY", "sk-ant-e2e"},
                        {"ANTHROPIC_BASE_URL", "http://127.0.0.1:" + std::to_string(api.port())}}));
  ASSERT_TRUE(
      p.WaitFor("Waiting for the model… (nothing received yet; retried after 30.0s of "
                "silence, --model-idle-timeout)"))
      << p.output();
  p.Write("\x03");
  EXPECT_EQ(p.Wait(), run::kRunExitInterrupted) << p.output();
  EXPECT_THAT(Sandboxes(kTerminalLabel), IsEmpty());
}

}  // namespace
}  // namespace deepbox::e2e
