// The terminal UI's formatting and the --json event encoding, written to a
// pipe (the terminal behaviour is tested end to end in tests/e2e).
#include "cli/run_ui.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "cli/line_diff.h"
#include "cli/run_format.h"
#include "cli/run_signals.h"

namespace deepbox::run {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

std::string Drain(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

struct Pipes {
  int out[2];
  int err[2];
  Pipes() {
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(err, O_CLOEXEC), 0);
  }
  ~Pipes() {
    for (int fd : {out[0], err[0]}) close(fd);
  }
  std::pair<std::string, std::string> Finish() {
    close(out[1]);
    close(err[1]);
    return {Drain(out[0]), Drain(err[0])};
  }
};

agent::AgentEvent ToolEnd(std::string name, std::string arg, bool ok, std::string preview) {
  agent::AgentEvent e;
  e.type = agent::EventType::kToolCallEnd;
  e.tool_call_id = "toolu_1";
  e.tool_name = std::move(name);
  e.main_argument = std::move(arg);
  e.ok = ok;
  e.duration = 1234ms;
  e.output_preview = std::move(preview);
  return e;
}

TEST(RunUiTest, Formatting) {
  EXPECT_EQ(FormatDuration(12ms), "12ms");
  EXPECT_EQ(FormatDuration(1234ms), "1.2s");
  EXPECT_EQ(FormatDuration(125000ms), "2m05s");
  EXPECT_EQ(FormatTokens(0), "0");
  EXPECT_EQ(FormatTokens(1234567), "1,234,567");
  EXPECT_EQ(FormatTokens(999), "999");
  EXPECT_EQ(FoldOutput("0\n1\n1\n2\n[Command succeeded with exit code 0]", 80),
            "0  (+3 more lines)");
  EXPECT_EQ(FoldOutput("\n\n  only  \n", 80), "only");
  EXPECT_EQ(FoldOutput("abcdefghij", 5), "abcd…");
  EXPECT_EQ(FoldOutput("", 5), "");
}

TEST(RunUiTest, TranscriptWithoutColours) {
  Pipes p;
  {
    auto ui_owner = MakeRunUi(
        {.json = false, .color = false, .spinner = false, .out_fd = p.out[1], .err_fd = p.err[1]});
    RunUi& ui = *ui_owner;
    ui.RunStarted("task", "th-1", "replay:x");
    agent::AgentEvent t;
    t.type = agent::EventType::kTextDelta;
    t.text = "I'll write ";
    ui.OnEvent(t);
    t.text = "it.";
    ui.OnEvent(t);
    agent::AgentEvent u;
    u.type = agent::EventType::kUsage;
    ui.OnEvent(u);
    ui.OnEvent(ToolEnd("write_file", "/workspace/fib.py", true, "Updated file /workspace/fib.py"));
    ui.OnEvent(ToolEnd("execute", "python3 fib.py", true,
                       "Traceback\nboom\n[Command failed with exit code 1]"));
    agent::AgentEvent todos;
    todos.type = agent::EventType::kTodoUpdate;
    todos.todos = json::array{json::object{{"content", "Write fib.py"}, {"status", "completed"}},
                              json::object{{"content", "Run it"}, {"status", "in_progress"}}};
    ui.OnEvent(todos);
    ui.OnEvent(todos);  // unchanged: not shown again
    agent::RunResult r;
    r.steps = 3;
    r.usage.input_tokens = 1500;
    r.usage.output_tokens = 20;
    r.cost_usd = 0.0123;
    ui.RunFinished(r, 2500ms);
  }
  auto [out, err] = p.Finish();
  EXPECT_THAT(out, HasSubstr("I'll write it.\n"));
  EXPECT_THAT(out, HasSubstr("✓ write_file  /workspace/fib.py  · 1.2s\n"));
  EXPECT_THAT(out, HasSubstr("✗ execute  python3 fib.py  · exit 1, 1.2s\n"));
  EXPECT_THAT(out, HasSubstr("⎿ Traceback  (+2 more lines)"));
  EXPECT_THAT(out, HasSubstr("✔ Write fib.py"));
  EXPECT_THAT(out, HasSubstr("▸ Run it"));
  EXPECT_EQ(out.find("☰ Todos"), out.rfind("☰ Todos"));
  EXPECT_THAT(err, HasSubstr("3 steps · tokens 1,500 in, 20 out, cache 0 read / 0 write"));
  EXPECT_THAT(err, HasSubstr("$0.0123"));
  EXPECT_THAT(out + err, Not(HasSubstr("\x1b[")));
}

TEST(RunUiTest, ColoursWhenAsked) {
  Pipes p;
  {
    auto ui_owner = MakeRunUi(
        {.json = false, .color = true, .spinner = false, .out_fd = p.out[1], .err_fd = p.err[1]});
    RunUi& ui = *ui_owner;
    ui.OnEvent(ToolEnd("ls", "/workspace", true, "fib.py"));
  }
  auto [out, err] = p.Finish();
  EXPECT_THAT(out, HasSubstr("\x1b[32m✓\x1b[0m"));
}

TEST(RunUiTest, JsonEventsOnePerLine) {
  Pipes p;
  {
    auto ui_owner = MakeRunUi(
        {.json = true, .color = true, .spinner = true, .out_fd = p.out[1], .err_fd = p.err[1]});
    RunUi& ui = *ui_owner;
    ui.Start();
    ui.StartSpinner("ignored in json mode");
    ui.SandboxReady("sb-1", "local", 10ms);
    agent::AgentEvent t;
    t.type = agent::EventType::kTextDelta;
    t.text = "héllo \"quoted\"\n";
    ui.OnEvent(t);
    ui.OnEvent(ToolEnd("execute", "echo hi", true, "hi"));
    RunSummary s;
    s.exit_code = 0;
    s.stop_reason = "completed";
    s.sandbox_id = "sb-1";
    ui.Result(s);
  }
  auto [out, err] = p.Finish();
  EXPECT_EQ(err, "");
  std::vector<json::object> events;
  size_t start = 0;
  for (size_t nl; (nl = out.find('\n', start)) != std::string::npos; start = nl + 1) {
    auto o = ParseJsonObject(std::string_view(out).substr(start, nl - start));
    ASSERT_TRUE(o.has_value()) << out;
    events.push_back(*o);
  }
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].at("type").as_string(), "sandbox");
  EXPECT_EQ(events[1].at("type").as_string(), "text_delta");
  EXPECT_EQ(events[1].at("text").as_string(), "héllo \"quoted\"\n");
  EXPECT_EQ(events[2].at("type").as_string(), "tool_call_end");
  EXPECT_EQ(events[2].at("duration_ms").as_int64(), 1234);
  EXPECT_EQ(events[3].at("type").as_string(), "result");
  EXPECT_EQ(events[3].at("exit_code").as_int64(), 0);
}

// True when `s` holds nothing a terminal would act on: no C0 control but
// \n, no DEL, no C1 control (raw or as UTF-8), no bidi override.
bool Inert(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7f) return false;
    if (c >= 0x80 && c <= 0x9f && (i == 0 || static_cast<unsigned char>(s[i - 1]) != 0xc2)) {
      continue;  // a continuation byte of some other character
    }
    if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(s[i + 1]) <= 0x9f) {
      return false;
    }
  }
  return s.find("\u202e") == std::string_view::npos;
}

// Issue 16: text from the model and the sandbox (OSC 52 clipboard writes,
// title changes, cursor moves, carriage returns, bidi overrides) reaches the
// terminal inert.
TEST(RunUiTest, HostileTextReachesTheTerminalInert) {
  const std::string osc52 = "\x1b]52;c;cm0gLXJmIH4=\x07";
  const std::string title = "\x1b]0;pwned\x1b\\";
  Pipes p;
  {
    auto ui_owner = MakeRunUi(
        {.json = false, .color = false, .spinner = false, .out_fd = p.out[1], .err_fd = p.err[1]});
    RunUi& ui = *ui_owner;
    agent::AgentEvent t;
    t.type = agent::EventType::kTextDelta;
    t.text = "model says " + osc52 + "hi\x1b[2J\x1b[H\n";
    ui.OnEvent(t);
    ui.OnEvent(ToolEnd("ls" + title, "/workspace\x1b[1A\rfake", true,
                       "\x1b[31mred\x1b[0m\r\n\u009b2Jnext\u202eevil"));
    ui.OnEvent(
        ToolEnd("execute", "rm -rf ~\rls", false, "out\x07\n[Command failed with exit code 7]"));
    agent::AgentEvent todos;
    todos.type = agent::EventType::kTodoUpdate;
    todos.todos = json::array{json::object{{"content", "a\u202eb" + osc52}, {"status", "pending"}}};
    ui.OnEvent(todos);
    agent::AgentEvent sub;
    sub.type = agent::EventType::kError;
    sub.depth = 1;
    sub.agent = "helper" + title;
    sub.text = "failed \x1b[8mhidden";
    ui.OnEvent(sub);
    agent::AgentEvent fin;
    fin.type = agent::EventType::kFinalMessage;
    fin.text = "done" + osc52;
    ui.OnEvent(fin);
    ui.ErrorLine("sandbox daemon said: " + osc52 +
                 "\x9b"
                 "31m bad");
    ui.Notice("note " + title);
    ui.SandboxReady("sb" + title, "local", 5ms);
    ui.SandboxReleased("sb-1", true, "kept " + osc52);
  }
  auto [out, err] = p.Finish();
  EXPECT_TRUE(Inert(out)) << out;
  EXPECT_TRUE(Inert(err)) << err;
  EXPECT_THAT(out, HasSubstr("model says hi\n"));
  EXPECT_THAT(out, HasSubstr("✓ ls  /workspace …  · 1.2s\n"));
  EXPECT_THAT(out, HasSubstr("⎿ red  (+1 more line)"));
  EXPECT_THAT(out, HasSubstr("✗ execute  rm -rf ~ …  · exit 7, 1.2s"));
  EXPECT_THAT(out, HasSubstr("○ a\xEF\xBF\xBD"
                             "b\n"));
  EXPECT_THAT(out, HasSubstr("! helper: failed hidden"));
  EXPECT_THAT(err, HasSubstr("deepbox: sandbox daemon said: "));
  EXPECT_THAT(err, HasSubstr("deepbox: note \n"));
  EXPECT_THAT(err, HasSubstr("sandbox sb ready"));
  EXPECT_THAT(err, HasSubstr("kept the sandbox: kept \n"));
}

TEST(RunUiTest, ApprovalPromptShowsHostileArgumentsInert) {
  int tty[2];
  ASSERT_EQ(pipe2(tty, O_CLOEXEC), 0);
  int in[2];
  ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
  int ev[2];
  ASSERT_EQ(pipe2(ev, O_CLOEXEC), 0);
  ASSERT_EQ(write(in[1], "a\n", 2), 2);
  agent::InterruptRequest req;
  agent::ActionRequest a;
  a.tool_call_id = "c1";
  a.name = "execute\x1b]0;t\x07";
  // JSON escapes ESC but not U+009B (CSI as a C1 control) nor U+202E.
  a.args = json::object{{"command", "ls \u009b2J \u202e"}};
  req.action_requests.push_back(a);
  {
    auto ui_owner = MakeRunUi(
        {.json = false, .color = false, .spinner = false, .out_fd = tty[1], .err_fd = tty[1]});
    RunUi& ui = *ui_owner;
    LineReader reader(in[0], ev[0]);
    auto d = ui.Approve(req, reader, tty[1]);
    ASSERT_TRUE(d);
    ASSERT_EQ(d->size(), 1u);
    EXPECT_EQ((*d)[0].type, agent::DecisionType::kApprove);
  }
  close(tty[1]);
  std::string shown = Drain(tty[0]);
  EXPECT_TRUE(Inert(shown)) << shown;
  EXPECT_THAT(shown, HasSubstr("approve? execute\n"));
  for (int fd : {tty[0], in[0], in[1], ev[0], ev[1]}) close(fd);
}

TEST(RunUiTest, RejectedCallsAndRetriesAreShown) {
  Pipes p;
  {
    auto ui_owner = MakeRunUi(
        {.json = false, .color = false, .spinner = false, .out_fd = p.out[1], .err_fd = p.err[1]});
    RunUi& ui = *ui_owner;
    agent::AgentEvent r;
    r.type = agent::EventType::kToolCallRejected;
    r.tool_call_id = "toolu_9";
    r.tool_name = "read_file";
    r.main_argument = "/workspace/a.txt";
    r.text = "1 validation error for read_file\nlimit\n  Input should be a valid integer";
    ui.OnEvent(r);
    r.tool_name = "no_such_tool";
    r.main_argument = "";
    r.text = "Error: no_such_tool is not a valid tool, try one of [ls, read_file].";
    ui.OnEvent(r);
    agent::AgentEvent retry;
    retry.type = agent::EventType::kRetry;
    retry.text = "Anthropic API rate limit (HTTP 429): slow down";
    retry.attempt = 1;
    retry.max_attempts = 6;
    retry.duration = 7000ms;
    ui.OnEvent(retry);
  }
  auto [out, err] = p.Finish();
  EXPECT_THAT(out, HasSubstr("✗ read_file  /workspace/a.txt  · rejected before it ran\n"));
  EXPECT_THAT(out, HasSubstr("⎿ 1 validation error for read_file  (+2 more lines)\n"));
  EXPECT_THAT(out, HasSubstr("✗ no_such_tool  · rejected before it ran\n"));
  EXPECT_THAT(out, HasSubstr("⎿ Error: no_such_tool is not a valid tool"));
  EXPECT_THAT(err, HasSubstr("deepbox: the model API failed (attempt 1 of 6): Anthropic API rate "
                             "limit (HTTP 429): slow down; retrying in 7.0s\n"));
}

TEST(RunUiTest, JsonEventsCarryAVersionAndPlainDecimalCost) {
  Pipes p;
  {
    auto ui_owner = MakeRunUi({.json = true, .out_fd = p.out[1], .err_fd = p.err[1]});
    RunUi& ui = *ui_owner;
    agent::RunResult r;
    r.cost_usd = 0.0123;
    ui.RunFinished(r, 10ms);
    agent::AgentEvent retry;
    retry.type = agent::EventType::kRetry;
    retry.text = "busy";
    retry.attempt = 2;
    retry.max_attempts = 6;
    retry.duration = 1500ms;
    ui.OnEvent(retry);
    RunSummary s;
    s.cost_usd = 0.000004;
    ui.Result(s);
  }
  auto [out, err] = p.Finish();
  EXPECT_THAT(out, HasSubstr(R"({"type":"run_end","version":1,)"));
  EXPECT_THAT(out, HasSubstr(R"("cost_usd":0.012300,)"));
  EXPECT_THAT(
      out, HasSubstr(R"({"type":"retry","version":1,"error":"busy","attempt":2,"max_attempts":6,)"
                     R"("delay_ms":1500})"));
  EXPECT_THAT(out, HasSubstr(R"("cost_usd":0.000004,)"));
  EXPECT_THAT(out, Not(HasSubstr("E-")));
  size_t start = 0;
  for (size_t nl; (nl = out.find('\n', start)) != std::string::npos; start = nl + 1) {
    auto o = ParseJsonObject(std::string_view(out).substr(start, nl - start));
    ASSERT_TRUE(o.has_value()) << out;
    EXPECT_EQ(o->at("version").as_int64(), kJsonEventsVersion);
  }
}

TEST(RunUiTest, ApprovalsShowWhatWillChange) {
  agent::ActionRequest exec{"t1", "execute", json::object{{"command", "rm -rf build\nmake"}}, ""};
  EXPECT_EQ(DescribeAction(exec, false), "⏸ approve? execute\n  $ rm -rf build\n    make\n");
  agent::ActionRequest write{
      "t2", "write_file",
      json::object{{"file_path", "/workspace/a.py"}, {"content", "one\ntwo\nthree\n"}}, ""};
  EXPECT_EQ(
      DescribeAction(write, false, 2),
      "⏸ approve? write_file /workspace/a.py (writes 3 lines, 14 bytes; replaces the file if "
      "it exists)\n  +one\n  +two\n  … 1 more line\n");
  agent::ActionRequest edit{"t3", "edit_file",
                            json::object{{"file_path", "/workspace/a.py"},
                                         {"old_string", "a = 1\nb = 2\nc = 3"},
                                         {"new_string", "a = 1\nb = 20\nc = 3"}},
                            ""};
  EXPECT_EQ(DescribeAction(edit, false),
            "⏸ approve? edit_file /workspace/a.py (one occurrence)\n  --- before\n  +++ after\n"
            "   a = 1\n  -b = 2\n  +b = 20\n   c = 3\n");
  agent::ActionRequest del{"t4", "delete", json::object{{"file_path", "/workspace/old"}}, ""};
  EXPECT_THAT(DescribeAction(del, false), HasSubstr("delete /workspace/old (deletes it"));
  // Nothing a model wrote reaches the terminal raw.
  agent::ActionRequest evil{"t5", "execute", json::object{{"command", "ls\x1b]0;pwned\x07"}}, ""};
  EXPECT_THAT(DescribeAction(evil, false), Not(HasSubstr("\x1b")));
}

TEST(RunUiTest, ApprovalTakesOneKey) {
  // Not a terminal here (a pipe): the key is the first character of a line;
  // on a terminal no Enter is needed (tests/e2e/terminal_test.cc).
  int tty[2], in[2], ev[2];
  ASSERT_EQ(pipe2(tty, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(ev, O_CLOEXEC), 0);
  ASSERT_EQ(write(in[1], "x\nn\ny\n", 6), 6);  // an unknown key, then no, then yes
  agent::InterruptRequest req;
  req.action_requests.push_back({"c1", "execute", json::object{{"command", "rm -rf /"}}, ""});
  req.action_requests.push_back({"c2", "execute", json::object{{"command", "ls"}}, ""});
  {
    auto ui_owner = MakeRunUi(
        {.json = false, .color = false, .spinner = false, .out_fd = tty[1], .err_fd = tty[1]});
    RunUi& ui = *ui_owner;
    LineReader reader(in[0], ev[0]);
    auto d = ui.Approve(req, reader, tty[1]);
    ASSERT_TRUE(d);
    ASSERT_EQ(d->size(), 2u);
    EXPECT_EQ((*d)[0].type, agent::DecisionType::kReject);
    EXPECT_EQ((*d)[1].type, agent::DecisionType::kApprove);
  }
  close(tty[1]);
  std::string shown = Drain(tty[0]);
  EXPECT_THAT(shown, HasSubstr("$ rm -rf /\n"));
  EXPECT_THAT(shown, HasSubstr("press one of the keys in brackets"));
  EXPECT_THAT(shown, HasSubstr("rejected\n"));
  EXPECT_THAT(shown, HasSubstr("approved\n"));
  for (int fd : {tty[0], in[0], in[1], ev[0], ev[1]}) close(fd);
}

TEST(RunUiTest, LineDiff) {
  EXPECT_EQ(LineDiff("a\nb\nc", "a\nc\nd"), (std::vector<std::string>{" a", "-b", " c", "+d"}));
  EXPECT_EQ(LineDiff("", "x"), (std::vector<std::string>{"+x"}));
  EXPECT_EQ(LineDiff("x", ""), (std::vector<std::string>{"-x"}));
}

TEST(LineReaderTest, LinesAndInterrupt) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  int ev[2];
  ASSERT_EQ(pipe2(ev, O_CLOEXEC), 0);
  std::string data = "one\r\ntwo\nlast";
  ASSERT_EQ(write(fds[1], data.data(), data.size()), static_cast<ssize_t>(data.size()));
  LineReader r(fds[0], ev[0]);
  EXPECT_EQ(r.ReadLine().value_or("?"), "one");
  EXPECT_EQ(r.ReadLine().value_or("?"), "two");
  ASSERT_EQ(write(ev[1], "x", 1), 1);  // interrupt while waiting for more
  EXPECT_FALSE(r.ReadLine().has_value());
  EXPECT_TRUE(r.interrupted());
  for (int fd : {fds[0], fds[1], ev[0], ev[1]}) close(fd);
}

}  // namespace
}  // namespace deepbox::run
