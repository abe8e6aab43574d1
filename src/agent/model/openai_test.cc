// The production OpenAI-compatible client against FakeOpenAiServer over real
// HTTP(S) on loopback.
#include "agent/model/openai.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/model/testing/fake_openai.h"
#include "agent/model/testing/late_cancel.h"

namespace deepbox::agent {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using testing::FakeOpenAiServer;
using ::testing::HasSubstr;
using testing::ScriptedToolCall;
using testing::ScriptedTurn;

struct RetryRecorder {
  std::vector<milliseconds> delays;
  RetryPolicy Policy(int max_retries = 5) {
    RetryPolicy p;
    p.max_retries = max_retries;
    p.base_delay = milliseconds(1);
    p.max_delay = milliseconds(4);
    p.sleep = [this](milliseconds d, const std::atomic<bool>* cancel) {
      delays.push_back(d);
      return cancel == nullptr || !cancel->load();
    };
    return p;
  }
};

std::unique_ptr<OpenAiModel> MakeModel(const FakeOpenAiServer& server, RetryPolicy retry,
                                       std::string key = "sk-test", std::string model = "gpt-4o") {
  OpenAiOptions o;
  o.model = std::move(model);
  o.api_key = std::move(key);
  o.base_url = server.url();
  o.http.ca_file = server.ca_file();
  o.http.retry = std::move(retry);
  auto m = OpenAiModel::Create(std::move(o));
  EXPECT_TRUE(m) << m.error().ToString();
  return m ? std::move(*m) : nullptr;
}

ModelRequest SimpleRequest() {
  ModelRequest r;
  r.system = "Be brief.";
  r.messages.push_back(Message::User("Hi"));
  return r;
}

TEST(OpenAiTest, AssemblesStreamedTextAndToolCallsFromFragments) {
  FakeOpenAiServer server({.text_delta_bytes = 2, .json_delta_bytes = 3, .write_bytes = 7});
  json::object input_a{{"command", "python3 fib.py | head -n 3"}, {"timeout", 30}};
  json::object input_b{{"file_path", "/fib.py"}, {"content", "print('ünïcode')\n"}};
  server.Enqueue(ScriptedTurn::ToolCalls({ScriptedToolCall("call_A", "execute", input_a),
                                          ScriptedToolCall("call_B", "write_file", input_b)},
                                         "Running both.")
                     .WithUsage(Usage{100, 20, 50, 0}));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  std::string streamed;
  std::vector<std::string> starts;
  StreamCallbacks cb;
  cb.on_text_delta = [&](std::string_view d) { streamed += d; };
  cb.on_tool_call_start = [&](const std::string& id, const std::string& name) {
    starts.push_back(id + ":" + name);
  };
  auto r = model->Generate(SimpleRequest(), cb);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->message.text, "Running both.");
  EXPECT_EQ(streamed, "Running both.");
  ASSERT_EQ(r->message.tool_calls.size(), 2u);
  EXPECT_EQ(r->message.tool_calls[0].id, "call_A");
  EXPECT_EQ(r->message.tool_calls[0].name, "execute");
  EXPECT_EQ(r->message.tool_calls[0].input, input_a);
  EXPECT_EQ(r->message.tool_calls[1].id, "call_B");
  EXPECT_EQ(r->message.tool_calls[1].input, input_b);
  EXPECT_THAT(starts, ElementsAre("call_A:execute", "call_B:write_file"));
  EXPECT_EQ(r->stop_reason, "tool_use");
  EXPECT_EQ(r->model, "gpt-4o");
  // prompt_tokens 150 of which 50 cached -> 100 uncached input + 50 cache reads.
  EXPECT_EQ(r->usage.input_tokens, 100);
  EXPECT_EQ(r->usage.cache_read_tokens, 50);
  EXPECT_EQ(r->usage.output_tokens, 20);
  EXPECT_NEAR(model->profile().CostUsd(r->usage), (100 * 2.5 + 50 * 1.25 + 20 * 10) / 1e6, 1e-12);
}

TEST(OpenAiTest, MapsTheConversationToChatMessages) {
  FakeOpenAiServer server;
  server.Enqueue(ScriptedTurn::Text("ok"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  ModelRequest req = SimpleRequest();
  req.tools = {ToolSpec{"ls", "Lists files",
                        json::object{{"type", "object"}, {"properties", json::object{}}}}};
  req.messages.push_back(Message::Assistant(
      "", {ToolCall{"call_1", "ls", {{"path", "/"}}, ""}, ToolCall{"call_2", "ls", {}, ""}}));
  req.messages.push_back(Message::Tool("call_1", "ls", "Path '/x': path_not_found", true));
  Message shot = Message::Tool("call_2", "ls", "['/a.png']");
  shot.images.push_back(ImageBlock{"image/png", "AAAA"});
  req.messages.push_back(shot);
  req.max_tokens = 512;
  auto r = model->Generate(req, {});
  ASSERT_TRUE(r) << r.error().ToString();  // the fake checks tool_call_id pairing

  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].path, "/v1/chat/completions");
  EXPECT_EQ(reqs[0].headers.Get("authorization"), "Bearer sk-test");
  const json::object& body = reqs[0].json;
  EXPECT_EQ(body.at("stream"), true);
  EXPECT_EQ(body.at("stream_options").at("include_usage"), true);
  EXPECT_EQ(body.at("max_tokens"), 512);
  EXPECT_EQ(body.at("tools").at(0).at("type"), "function");
  EXPECT_EQ(body.at("tools").at(0).at("function").at("name"), "ls");
  EXPECT_EQ(body.at("tools").at(0).at("function").at("parameters").at("type"), "object");
  const json::array& msgs = body.at("messages").as_array();
  ASSERT_EQ(msgs.size(), 6u);
  EXPECT_EQ(msgs[0].at("role"), "system");
  EXPECT_EQ(msgs[0].at("content"), "Be brief.");
  EXPECT_EQ(msgs[1].at("role"), "user");
  EXPECT_EQ(msgs[2].at("role"), "assistant");
  EXPECT_TRUE(msgs[2].at("content").is_null());
  EXPECT_EQ(msgs[2].at("tool_calls").at(0).at("id"), "call_1");
  EXPECT_EQ(msgs[2].at("tool_calls").at(0).at("function").at("arguments"), "{\"path\":\"/\"}");
  EXPECT_EQ(msgs[2].at("tool_calls").at(1).at("function").at("arguments"), "{}");
  EXPECT_EQ(msgs[3].at("role"), "tool");
  EXPECT_EQ(msgs[3].at("tool_call_id"), "call_1");
  EXPECT_EQ(msgs[3].at("content"), "Error: Path '/x': path_not_found");
  EXPECT_EQ(msgs[4].at("tool_call_id"), "call_2");
  EXPECT_EQ(msgs[4].at("content"), "['/a.png']");
  EXPECT_EQ(msgs[5].at("role"), "user");  // the tool's image follows the tool messages
  EXPECT_EQ(msgs[5].at("content").at(1).at("image_url").at("url"), "data:image/png;base64,AAAA");
}

TEST(OpenAiTest, FinishReasonsMapToAnthropicVocabulary) {
  FakeOpenAiServer server;
  server.Enqueue(ScriptedTurn::Text("cut").WithStopReason("max_tokens"));
  server.Enqueue(ScriptedTurn::Text("done"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  auto r1 = model->Generate(SimpleRequest(), {});
  ASSERT_TRUE(r1) << r1.error().ToString();
  EXPECT_EQ(r1->stop_reason, "max_tokens");
  auto r2 = model->Generate(SimpleRequest(), {});
  ASSERT_TRUE(r2) << r2.error().ToString();
  EXPECT_EQ(r2->stop_reason, "end_turn");
}

TEST(OpenAiTest, MalformedArgumentsAreReportedOnTheCall) {
  FakeOpenAiServer server;
  server.Enqueue(ScriptedTurn::ToolCalls({ScriptedToolCall::Raw("call_1", "ls", "{'path': '/'}")}));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  auto r = model->Generate(SimpleRequest(), {});
  ASSERT_TRUE(r) << r.error().ToString();
  ASSERT_EQ(r->message.tool_calls.size(), 1u);
  EXPECT_TRUE(r->message.tool_calls[0].input.empty());
  EXPECT_THAT(r->message.tool_calls[0].input_error, HasSubstr("{'path': '/'}"));
}

TEST(OpenAiTest, HugeUsageIsCapped) {
  FakeOpenAiServer server;
  server.Enqueue(ScriptedTurn::Text("hi").WithUsage(Usage{4000000000000000000, 7, 0, 0}));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  auto r = model->Generate(SimpleRequest(), {});
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->usage.input_tokens, kMaxTokenCount);
  EXPECT_EQ(r->usage.output_tokens, 7);
}

// A request past the context window is told apart by Error::reason (what
// the summarization middleware acts on), not by its text.
TEST(OpenAiTest, AContextOverflowIsSaidByItsReason) {
  FakeOpenAiServer server;
  server.Enqueue(ScriptedTurn::HttpError(400, "context_length_exceeded",
                                         "This model's maximum context length is 128000 tokens"));
  server.Enqueue(ScriptedTurn::HttpError(400, "invalid_value", "temperature must be <= 2"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  auto r = model->Generate(SimpleRequest(), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.error().reason, kReasonContextOverflow) << r.error().ToString();
  auto other = model->Generate(SimpleRequest(), {});
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().reason, "") << other.error().ToString();
}

TEST(OpenAiTest, RetriesRateLimitsDropsAndStreamErrors) {
  FakeOpenAiServer server;
  server.Enqueue(ScriptedTurn::RateLimited("3"));
  server.Enqueue(ScriptedTurn::DropMidStream());
  server.Enqueue(ScriptedTurn::StreamError("server_error", "The server had an error"));
  server.Enqueue(ScriptedTurn::HttpError(503, "", "Service Unavailable"));
  server.Enqueue(ScriptedTurn::Text("made it"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  int retries = 0;
  StreamCallbacks cb;
  cb.on_retry = [&](const RetryNotice&) { ++retries; };
  auto r = model->Generate(SimpleRequest(), cb);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->message.text, "made it");
  EXPECT_EQ(server.request_count(), 5u);
  EXPECT_EQ(retries, 4);
  ASSERT_EQ(rr.delays.size(), 4u);
  EXPECT_EQ(rr.delays[0], milliseconds(3000));
}

TEST(OpenAiTest, AWrongKeyIsNotRetriedAndSaysSo) {
  FakeOpenAiServer server({.api_key = "sk-right"});
  server.Enqueue(ScriptedTurn::Text("unused"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy(), "sk-wrong");
  auto r = model->Generate(SimpleRequest(), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnauthenticated);
  EXPECT_EQ(r.error().message,
            "OpenAI-compatible server rejected the API key (401 invalid_api_key): Incorrect API "
            "key provided: sk-wrong. You can find your API key at "
            "https://platform.openai.com/account/api-keys. Check OPENAI_API_KEY (and "
            "OPENAI_BASE_URL: " +
                server.url() + ").");
  EXPECT_EQ(server.request_count(), 1u);
  EXPECT_TRUE(rr.delays.empty());
}

TEST(OpenAiTest, ALocalServerNeedsNoKey) {
  FakeOpenAiServer server;
  server.Enqueue(ScriptedTurn::Text("local"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy(), "", "qwen2.5-coder:7b");
  auto r = model->Generate(SimpleRequest(), {});
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_FALSE(server.requests()[0].headers.Has("authorization"));
  EXPECT_EQ(model->name(), "openai:qwen2.5-coder:7b");
  EXPECT_EQ(model->profile().max_input_tokens, 0);

  OpenAiOptions real;
  real.model = "gpt-4o";
  auto missing = OpenAiModel::Create(real);  // api.openai.com without a key
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kUnauthenticated);
  EXPECT_THAT(missing.error().message, HasSubstr("OPENAI_API_KEY is not set"));
}

TEST(OpenAiTest, CancellationMidStream) {
  FakeOpenAiServer server;
  server.Enqueue(ScriptedTurn::Stall("Let me"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  std::atomic<bool> cancel{false};
  ModelRequest req = SimpleRequest();
  req.cancel = &cancel;
  StreamCallbacks cb;
  cb.on_text_delta = [&](std::string_view) { cancel = true; };
  auto r = model->Generate(req, cb);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kCancelled);
  EXPECT_EQ(server.request_count(), 1u);
}

TEST(OpenAiTest, CancelFdEndsAWaitOnASilentServer) {
  FakeOpenAiServer server;
  server.Enqueue(ScriptedTurn::SilentStall("Let me"));
  RetryRecorder rr;
  OpenAiOptions o;
  o.model = "gpt-4o";
  o.api_key = "sk-test";
  o.base_url = server.url();
  o.http.read_idle_timeout = milliseconds(60000);
  o.http.retry = rr.Policy(0);
  auto model = OpenAiModel::Create(o);
  ASSERT_TRUE(model);
  testing::LateCancel ctrl_c;
  ModelRequest req = SimpleRequest();
  req.cancel = ctrl_c.flag();
  req.cancel_fd = ctrl_c.fd();
  StreamCallbacks cb;
  cb.on_text_delta = [&](std::string_view) { ctrl_c.ArmForThisThread(); };
  auto r = (*model)->Generate(req, cb);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kCancelled) << r.error().ToString();
}

TEST(OpenAiTest, OverHttps) {
  FakeOpenAiServer server({.tls = true});
  server.Enqueue(ScriptedTurn::Text("tls ok"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  auto r = model->Generate(SimpleRequest(), {});
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->message.text, "tls ok");
}

}  // namespace
}  // namespace deepbox::agent
