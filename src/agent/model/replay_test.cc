#include "agent/model/replay.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/model/anthropic.h"
#include "agent/model/testing/fake_anthropic.h"

namespace deepbox::agent {
namespace {

using testing::FakeAnthropicServer;
using ::testing::HasSubstr;
using testing::ScriptedToolCall;
using testing::ScriptedTurn;

class ReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("deepbox-replay-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::filesystem::path dir_;
};

// A scripted conversation in the documented format.
// clang-format off
constexpr char kScripted[] = R"jsonl({"deepbox_replay": 1, "description": "Fibonacci demo (scripted)", "scripted": true, "model": "anthropic:claude-sonnet-4-6"}
# comments and blank lines are ignored

{"response": {"text": "I'll write the script.", "tool_calls": [{"id": "toolu_w", "name": "write_file", "input": {"file_path": "/fib.py", "content": "print([0, 1, 1, 2])\n"}}], "usage": {"input_tokens": 900, "output_tokens": 60}}}
{"request": {"tool_results": ["toolu_w"]}, "response": {"text": "", "tool_calls": [{"id": "toolu_x", "name": "execute", "input": {"command": "python3 /fib.py"}}, {"id": "toolu_y", "name": "ls"}]}}
{"request": {"tool_results": [{"tool_call_id": "toolu_y", "name": "ls", "is_error": false}, "toolu_x"]}, "response": {"text": "Done — fib.py prints the sequence ✓.", "stop_reason": "end_turn"}}
)jsonl";
// clang-format on

std::vector<ToolSpec> Tools() {
  return {ToolSpec{"write_file", "", {}}, ToolSpec{"execute", "", {}}, ToolSpec{"ls", "", {}}};
}

// Drives a replay model through the scripted conversation the way the
// harness would; returns every delta and tool start seen.
std::vector<std::string> RunScripted(ChatModel& model, std::string* error = nullptr) {
  std::vector<std::string> events;
  StreamCallbacks cb;
  cb.on_text_delta = [&](std::string_view d) { events.push_back("text:" + std::string(d)); };
  cb.on_tool_call_start = [&](const std::string& id, const std::string& name) {
    events.push_back("tool:" + id + ":" + name);
  };
  ModelRequest req;
  req.tools = Tools();
  req.messages.push_back(Message::User("Write fib.py and run it."));
  for (int turn = 0; turn < 3; ++turn) {
    auto r = model.Generate(req, cb);
    if (!r) {
      if (error != nullptr) *error = r.error().message;
      return events;
    }
    req.messages.push_back(r->message);
    for (const auto& call : r->message.tool_calls) {
      req.messages.push_back(Message::Tool(call.id, call.name, "result of " + call.name));
    }
  }
  return events;
}

TEST_F(ReplayTest, ParsesTheDocumentedFormat) {
  auto file = ParseReplay(kScripted, "fib.jsonl");
  ASSERT_TRUE(file) << file.error().ToString();
  EXPECT_TRUE(file->header.scripted);
  EXPECT_EQ(file->header.description, "Fibonacci demo (scripted)");
  EXPECT_EQ(file->header.model, "anthropic:claude-sonnet-4-6");
  ASSERT_EQ(file->turns.size(), 3u);
  const ModelResponse& first = file->turns[0].response;
  EXPECT_EQ(first.stop_reason, "tool_use");  // defaulted from the tool calls
  EXPECT_EQ(first.usage.input_tokens, 900);
  EXPECT_EQ(first.message.tool_calls[0].input.at("file_path"), "/fib.py");
  EXPECT_FALSE(file->turns[0].expected_tool_results.has_value());
  EXPECT_EQ(file->turns[1].response.message.tool_calls[1].input, json::object{});
  EXPECT_EQ(*file->turns[2].expected_tool_results,
            (std::vector<std::string>{"toolu_y", "toolu_x"}));
}

TEST_F(ReplayTest, ReplaysDeterministicallyWithStreamedPieces) {
  std::string path = Write("fib.jsonl", kScripted);
  auto a = ReplayModel::Open(path, {.delta_bytes = 4});
  ASSERT_TRUE(a) << a.error().ToString();
  std::string error;
  std::vector<std::string> first = RunScripted(**a, &error);
  EXPECT_EQ(error, "");
  EXPECT_EQ((*a)->turns_served(), 3u);
  auto b = ReplayModel::Open(path, {.delta_bytes = 4});
  ASSERT_TRUE(b);
  EXPECT_EQ(RunScripted(**b), first);  // same events, same order

  std::string text;
  int pieces = 0;
  for (const auto& e : first) {
    if (e.starts_with("text:")) {
      text += e.substr(5);
      ++pieces;
      EXPECT_LE(e.size() - 5, 6u);  // ≤4 bytes, or one whole multi-byte character
    }
  }
  EXPECT_EQ(text, "I'll write the script.Done — fib.py prints the sequence ✓.");
  EXPECT_GT(pieces, 10);
  EXPECT_NE(std::find(first.begin(), first.end(), "tool:toolu_x:execute"), first.end());
  EXPECT_EQ((*a)->name(), "replay:" + path);
  EXPECT_EQ((*a)->profile().max_input_tokens, 200000);
}

TEST_F(ReplayTest, ExhaustionIsAClearError) {
  std::string path = Write("short.jsonl", R"({"deepbox_replay": 1, "scripted": true}
{"response": {"text": "one"}}
{"response": {"text": "two"}}
)");
  auto m = ReplayModel::Open(path);
  ASSERT_TRUE(m) << m.error().ToString();
  ModelRequest req;
  req.messages.push_back(Message::User("go"));
  EXPECT_EQ((*m)->Generate(req, {})->message.text, "one");
  EXPECT_EQ((*m)->Generate(req, {})->message.text, "two");
  auto r = (*m)->Generate(req, {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kResourceExhausted);
  EXPECT_EQ(r.error().message, "replay " + path + ": conversation exhausted after 2 turns");
}

TEST_F(ReplayTest, DivergingToolResultsAreRefusedWithoutConsumingTheTurn) {
  std::string path = Write("fib.jsonl", kScripted);
  auto m = ReplayModel::Open(path);
  ASSERT_TRUE(m);
  ModelRequest req;
  req.tools = Tools();
  req.messages.push_back(Message::User("go"));
  auto r1 = (*m)->Generate(req, {});
  ASSERT_TRUE(r1);
  req.messages.push_back(r1->message);
  // The harness answered a different call id than recorded.
  req.messages.push_back(Message::Tool("toolu_other", "write_file", "Updated file /fib.py"));
  auto bad = (*m)->Generate(req, {});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad.error().message,
            "replay " + path +
                ": turn 2 expects tool results for [toolu_w] but the request ends with tool "
                "results for [toolu_other]; the conversation has diverged from the recording");
  req.messages.back().tool_call_id = "toolu_w";
  auto good = (*m)->Generate(req, {});
  ASSERT_TRUE(good) << good.error().ToString();
  EXPECT_EQ(good->message.tool_calls.size(), 2u);
}

TEST_F(ReplayTest, AToolTheAgentDoesNotOfferIsRefused) {
  std::string path = Write("fib.jsonl", kScripted);
  auto m = ReplayModel::Open(path);
  ASSERT_TRUE(m);
  ModelRequest req;
  req.tools = {ToolSpec{"ls", "", {}}};
  req.messages.push_back(Message::User("go"));
  auto r = (*m)->Generate(req, {});
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message,
              HasSubstr("turn 1 calls tool 'write_file', which the agent does not offer "
                        "(offered: [ls])"));
}

TEST_F(ReplayTest, MalformedFilesNameTheLine) {
  auto no_header = ParseReplay("{\"response\": {\"text\": \"x\"}}\n", "a.jsonl");
  ASSERT_FALSE(no_header);
  EXPECT_THAT(no_header.error().message, HasSubstr("replay a.jsonl: line 1: not a deepbox replay"));
  auto bad_line = ParseReplay(
      "{\"deepbox_replay\": 1}\n\n{\"response\": {\"tool_calls\": [{\"name\": \"ls\"}]}}\n",
      "b.jsonl");
  ASSERT_FALSE(bad_line);
  EXPECT_EQ(bad_line.error().message, "replay b.jsonl: line 3: field 'id' is required");
  auto version = ParseReplay("{\"deepbox_replay\": 2}\n", "c.jsonl");
  ASSERT_FALSE(version);
  EXPECT_THAT(version.error().message, HasSubstr("unsupported replay format version 2"));
  auto missing = ReplayModel::Open((dir_ / "nope.jsonl").string());
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.error().message, HasSubstr("nope.jsonl: cannot read the file"));
}

TEST_F(ReplayTest, HostileNumbersInARecordingDoNotCrash) {
  // usage 1e400 was cast from infinity to int64 (undefined behaviour).
  auto file = ParseReplay("{\"deepbox_replay\": 1, \"max_input_tokens\": 1e400}\n", "a.jsonl");
  EXPECT_FALSE(file);
  file = ParseReplay(
      "{\"deepbox_replay\": 1}\n{\"response\": {\"text\": \"x\", \"usage\": "
      "{\"input_tokens\": 1e400, \"output_tokens\": -1, \"cache_read_tokens\": 1e15}}}\n",
      "b.jsonl");
  ASSERT_TRUE(file) << file.error().ToString();
  ASSERT_EQ(file->turns.size(), 1u);
  EXPECT_EQ(file->turns[0].response.usage.input_tokens, 0);
  EXPECT_EQ(file->turns[0].response.usage.output_tokens, 0);
  EXPECT_EQ(file->turns[0].response.usage.cache_read_tokens, kMaxTokenCount);
}

TEST_F(ReplayTest, CancellationStopsTheSimulatedStream) {
  std::string path = Write("fib.jsonl", kScripted);
  auto m = ReplayModel::Open(path, {.delta_bytes = 1});
  ASSERT_TRUE(m);
  std::atomic<bool> cancel{false};
  ModelRequest req;
  req.cancel = &cancel;
  req.messages.push_back(Message::User("go"));
  int deltas = 0;
  StreamCallbacks cb;
  cb.on_text_delta = [&](std::string_view) {
    if (++deltas == 3) cancel = true;
  };
  auto r = (*m)->Generate(req, cb);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kCancelled);
  EXPECT_EQ(deltas, 3);
}

// Record a conversation with the real client against the fake server, then
// replay the file: the same responses come back, and the replay accepts the
// same requests.
TEST_F(ReplayTest, RecordThenReplayRoundTrip) {
  FakeAnthropicServer server;
  server.Enqueue(ScriptedTurn::ToolCalls(
                     {ScriptedToolCall("toolu_1", "write_file",
                                       {{"file_path", "/fib.py"}, {"content", "print(1)\n"}}),
                      ScriptedToolCall("toolu_2", "ls", {{"path", "/"}})},
                     "Writing.")
                     .WithUsage(Usage{500, 40, 100, 7}));
  server.Enqueue(ScriptedTurn::Text("All done.").WithUsage(Usage{600, 10, 500, 0}));
  AnthropicOptions o;
  o.api_key = "sk-ant-test";
  o.base_url = server.url();
  auto inner = AnthropicModel::Create(o);
  ASSERT_TRUE(inner) << inner.error().ToString();
  std::string path = (dir_ / "rec.jsonl").string();
  auto rec = RecordingModel::Create(std::move(*inner), path);
  ASSERT_TRUE(rec) << rec.error().ToString();
  EXPECT_EQ((*rec)->name(), "anthropic:claude-sonnet-4-6");

  auto converse = [](ChatModel& model) {
    std::vector<ModelResponse> out;
    ModelRequest req;
    req.tools = {ToolSpec{"write_file", "", {}}, ToolSpec{"ls", "", {}}};
    req.messages.push_back(Message::User("go"));
    for (int i = 0; i < 2; ++i) {
      auto r = model.Generate(req, {});
      EXPECT_TRUE(r) << r.error().ToString();
      if (!r) break;
      out.push_back(*r);
      req.messages.push_back(r->message);
      for (const auto& c : r->message.tool_calls) {
        req.messages.push_back(Message::Tool(c.id, c.name, "ok", c.name == "ls"));
      }
    }
    return out;
  };
  std::vector<ModelResponse> live = converse(**rec);
  ASSERT_EQ(live.size(), 2u);
  rec->reset();  // closes the file

  std::string text = Read(path);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);
  auto file = ReadReplayFile(path);
  ASSERT_TRUE(file) << file.error().ToString();
  EXPECT_FALSE(file->header.scripted);
  EXPECT_EQ(file->header.model, "anthropic:claude-sonnet-4-6");
  EXPECT_EQ(*file->turns[1].expected_tool_results,
            (std::vector<std::string>{"toolu_1", "toolu_2"}));
  // The task is recorded with the call that started it, and the file is
  // private (it holds the prompts).
  EXPECT_EQ(file->turns[0].task.value_or("?"), "go");
  EXPECT_FALSE(file->turns[1].task.has_value());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto replay = ReplayModel::Open(path);
  ASSERT_TRUE(replay);
  std::vector<ModelResponse> replayed = converse(**replay);
  ASSERT_EQ(replayed.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(replayed[i].message.text, live[i].message.text);
    EXPECT_EQ(replayed[i].stop_reason, live[i].stop_reason);
    EXPECT_EQ(replayed[i].model, live[i].model);
    EXPECT_EQ(replayed[i].usage.input_tokens, live[i].usage.input_tokens);
    EXPECT_EQ(replayed[i].usage.output_tokens, live[i].usage.output_tokens);
    EXPECT_EQ(replayed[i].usage.cache_read_tokens, live[i].usage.cache_read_tokens);
    EXPECT_EQ(replayed[i].usage.cache_write_tokens, live[i].usage.cache_write_tokens);
    ASSERT_EQ(replayed[i].message.tool_calls.size(), live[i].message.tool_calls.size());
    for (size_t j = 0; j < live[i].message.tool_calls.size(); ++j) {
      EXPECT_EQ(replayed[i].message.tool_calls[j].id, live[i].message.tool_calls[j].id);
      EXPECT_EQ(replayed[i].message.tool_calls[j].name, live[i].message.tool_calls[j].name);
      EXPECT_EQ(replayed[i].message.tool_calls[j].input, live[i].message.tool_calls[j].input);
    }
  }
}

// A replay file can also be served over HTTP by the fake server (what the
// end-to-end tests of `deepbox run` do with the Fibonacci script).
TEST_F(ReplayTest, AScriptedFileServedByTheFakeServer) {
  std::string path = Write("fib.jsonl", kScripted);
  auto script = testing::ScriptFromReplayFile(path);
  ASSERT_TRUE(script) << script.error().ToString();
  FakeAnthropicServer server;
  server.Enqueue(std::move(*script));
  AnthropicOptions o;
  o.api_key = "sk-ant-test";
  o.base_url = server.url();
  auto model = AnthropicModel::Create(o);
  ASSERT_TRUE(model);
  auto from_http = RunScripted(**model);
  auto replay = ReplayModel::Open(path);
  ASSERT_TRUE(replay);
  auto from_file = RunScripted(**replay);
  auto join = [](const std::vector<std::string>& events) {
    std::string text, tools;
    for (const auto& e : events) {
      if (e.starts_with("text:")) text += e.substr(5);
      if (e.starts_with("tool:")) tools += e + ";";
    }
    return text + "|" + tools;
  };
  EXPECT_EQ(join(from_http), join(from_file));
  EXPECT_EQ(server.pending_turns(), 0u);
}

TEST_F(ReplayTest, TheFakeServerAsAProcess) {
  std::string path = Write("fib.jsonl", kScripted);
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::close(out[0]);
    ::close(out[1]);
    ::execl(DEEPBOX_BIN_DIR "/deepbox-fake-model-server", "deepbox-fake-model-server", "--script",
            path.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  std::string url;
  char c = 0;
  while (::read(out[0], &c, 1) == 1 && c != '\n') url += c;
  ::close(out[0]);
  std::vector<std::string> events;
  if (url.starts_with("http://127.0.0.1:")) {
    AnthropicOptions o;
    o.api_key = "sk-ant-test";
    o.base_url = url;
    auto model = AnthropicModel::Create(o);
    if (model) events = RunScripted(**model);
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(url.starts_with("http://127.0.0.1:")) << "first line: '" << url << "'";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::string text;
  for (const auto& e : events) {
    if (e.starts_with("text:")) text += e.substr(5);
  }
  EXPECT_EQ(text, "I'll write the script.Done — fib.py prints the sequence ✓.");
}

}  // namespace
}  // namespace deepbox::agent
