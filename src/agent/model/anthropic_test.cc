// The production Anthropic client against FakeAnthropicServer over real
// HTTP(S) on loopback.
#include "agent/model/anthropic.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/model/testing/fake_anthropic.h"
#include "agent/model/testing/late_cancel.h"

namespace deepbox::agent {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using testing::FakeAnthropicServer;
using testing::FakeServerOptions;
using ::testing::HasSubstr;
using testing::ScriptedToolCall;
using testing::ScriptedTurn;

// Records backoff waits instead of sleeping.
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

std::unique_ptr<AnthropicModel> MakeModel(const FakeAnthropicServer& server, RetryPolicy retry,
                                          std::string key = "sk-ant-test") {
  AnthropicOptions o;
  o.api_key = std::move(key);
  o.base_url = server.url();
  o.http.ca_file = server.ca_file();
  o.http.retry = std::move(retry);
  auto m = AnthropicModel::Create(std::move(o));
  EXPECT_TRUE(m) << m.error().ToString();
  return m ? std::move(*m) : nullptr;
}

ModelRequest SimpleRequest(std::string text = "Hello?") {
  ModelRequest r;
  r.system = "You are terse.";
  r.messages.push_back(Message::User(std::move(text)));
  return r;
}

// Collects the streaming callbacks.
struct Observed {
  std::vector<std::string> deltas;
  std::vector<std::pair<std::string, std::string>> tool_starts;
  int retries = 0;
  std::vector<RetryNotice> notices;
  StreamCallbacks Callbacks() {
    StreamCallbacks cb;
    cb.on_text_delta = [this](std::string_view d) { deltas.emplace_back(d); };
    cb.on_tool_call_start = [this](const std::string& id, const std::string& name) {
      tool_starts.emplace_back(id, name);
    };
    cb.on_retry = [this](const RetryNotice& n) {
      ++retries;
      notices.push_back(n);
    };
    return cb;
  }
  std::string Joined() const {
    std::string s;
    for (const auto& d : deltas) s += d;
    return s;
  }
};

int CountCacheControl(const json::value& v) {
  int n = 0;
  if (v.is_object()) {
    for (const auto& [k, child] : v.as_object())
      n += (k == "cache_control") + CountCacheControl(child);
  } else if (v.is_array()) {
    for (const auto& child : v.as_array()) n += CountCacheControl(child);
  }
  return n;
}

TEST(AnthropicTest, StreamsTextDeltasSplitAtAwkwardPlaces) {
  FakeAnthropicServer server({.text_delta_bytes = 3, .write_bytes = 5});
  const std::string text = "Héllo wörld — 👋 the answer is \"42\".\nDone.";
  server.Enqueue(ScriptedTurn::Text(text));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  Observed obs;
  auto r = model->Generate(SimpleRequest(), obs.Callbacks());
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->message.role, Role::kAssistant);
  EXPECT_EQ(r->message.text, text);
  EXPECT_EQ(obs.Joined(), text);
  EXPECT_GT(obs.deltas.size(), 10u);  // delivered as it arrived, not at the end
  EXPECT_TRUE(r->message.tool_calls.empty());
  EXPECT_EQ(r->stop_reason, "end_turn");
  EXPECT_EQ(r->model, "claude-sonnet-4-6");
  EXPECT_EQ(obs.retries, 0);

  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].path, "/v1/messages");
  EXPECT_EQ(reqs[0].headers.Get("x-api-key"), "sk-ant-test");
  EXPECT_EQ(reqs[0].headers.Get("anthropic-version"), "2023-06-01");
  EXPECT_EQ(reqs[0].headers.Get("content-type"), "application/json");
  EXPECT_EQ(reqs[0].json.at("model"), "claude-sonnet-4-6");
  EXPECT_EQ(reqs[0].json.at("max_tokens"), 16000);
  EXPECT_EQ(reqs[0].json.at("stream"), true);
  EXPECT_EQ(reqs[0].json.at("system").at(0).at("text"), "You are terse.");
}

TEST(AnthropicTest, ParallelToolCallsWithInputSplitIntoTinyFragments) {
  FakeAnthropicServer server({.json_delta_bytes = 1});
  json::object input_a{{"file_path", "/src/a \"quoted\" ü.py"},
                       {"offset", 3},
                       {"nested", json::object{{"k", json::array{1, 2, nullptr}}}}};
  server.Enqueue(ScriptedTurn::ToolCalls(
      {ScriptedToolCall("toolu_01A", "read_file", input_a), ScriptedToolCall("toolu_01B", "ls")},
      "Let me look."));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  Observed obs;
  ModelRequest req = SimpleRequest();
  req.tools = {ToolSpec{"read_file", "Reads a file", {}}, ToolSpec{"ls", "Lists", {}}};
  auto r = model->Generate(req, obs.Callbacks());
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->message.text, "Let me look.");
  ASSERT_EQ(r->message.tool_calls.size(), 2u);
  EXPECT_EQ(r->message.tool_calls[0].id, "toolu_01A");
  EXPECT_EQ(r->message.tool_calls[0].name, "read_file");
  EXPECT_EQ(r->message.tool_calls[0].input, input_a);
  EXPECT_EQ(r->message.tool_calls[0].input_error, "");
  EXPECT_EQ(r->message.tool_calls[1].id, "toolu_01B");
  EXPECT_TRUE(r->message.tool_calls[1].input.empty());  // empty accumulated input = {}
  EXPECT_EQ(r->stop_reason, "tool_use");
  EXPECT_THAT(obs.tool_starts,
              ElementsAre(std::pair<std::string, std::string>("toolu_01A", "read_file"),
                          std::pair<std::string, std::string>("toolu_01B", "ls")));
  // Tools go out with an object input_schema.
  auto reqs = server.requests();
  const auto& tools = reqs[0].json.at("tools").as_array();
  ASSERT_EQ(tools.size(), 2u);
  EXPECT_EQ(tools[0].at("input_schema").at("type"), "object");
  EXPECT_EQ(tools[0].at("description"), "Reads a file");
}

TEST(AnthropicTest, MalformedToolInputIsReportedOnTheCall) {
  FakeAnthropicServer server;
  server.Enqueue(ScriptedTurn::ToolCalls({ScriptedToolCall::Raw("toolu_x", "ls", "{\"path\": ")}));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  auto r = model->Generate(SimpleRequest(), {});
  ASSERT_TRUE(r) << r.error().ToString();
  ASSERT_EQ(r->message.tool_calls.size(), 1u);
  EXPECT_TRUE(r->message.tool_calls[0].input.empty());
  EXPECT_THAT(r->message.tool_calls[0].input_error, HasSubstr("not a JSON object"));
  EXPECT_THAT(r->message.tool_calls[0].input_error, HasSubstr("{\"path\":"));
}

TEST(AnthropicTest, ToolResultsAreGroupedIntoOneUserMessage) {
  FakeAnthropicServer server;
  server.Enqueue(ScriptedTurn::Text("ok"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  ModelRequest req;
  req.messages.push_back(Message::User("List and read."));
  req.messages.push_back(Message::Assistant(
      "Sure.", {ToolCall{"toolu_1", "ls", {{"path", "/"}}, ""},
                ToolCall{"toolu_2", "read_file", {{"file_path", "/x.png"}}, ""}}));
  req.messages.push_back(
      Message::Tool("toolu_1", "ls", "Error: Path '/': permission_denied", true));
  Message image_result = Message::Tool("toolu_2", "read_file", "");
  image_result.images.push_back(ImageBlock{"image/png", "iVBORw0KGgo="});
  req.messages.push_back(image_result);
  req.messages.push_back(Message::User("Also, hurry."));
  auto r = model->Generate(req, {});
  ASSERT_TRUE(r) << r.error().ToString();  // the fake checks tool_use/tool_result pairing

  auto reqs = server.requests();
  const json::array& msgs = reqs[0].json.at("messages").as_array();
  ASSERT_EQ(msgs.size(), 3u);
  EXPECT_EQ(msgs[1].at("role"), "assistant");
  const json::array& asst = msgs[1].at("content").as_array();
  ASSERT_EQ(asst.size(), 3u);
  EXPECT_EQ(asst[0].at("type"), "text");
  EXPECT_EQ(asst[1].at("type"), "tool_use");
  EXPECT_EQ(asst[1].at("id"), "toolu_1");
  EXPECT_EQ(asst[1].at("input").at("path"), "/");
  EXPECT_EQ(msgs[2].at("role"), "user");
  const json::array& user = msgs[2].at("content").as_array();
  ASSERT_EQ(user.size(), 3u);
  EXPECT_EQ(user[0].at("type"), "tool_result");
  EXPECT_EQ(user[0].at("tool_use_id"), "toolu_1");
  EXPECT_EQ(user[0].at("content"), "Error: Path '/': permission_denied");
  EXPECT_EQ(user[0].at("is_error"), true);
  EXPECT_EQ(user[1].at("type"), "tool_result");
  EXPECT_EQ(user[1].at("tool_use_id"), "toolu_2");
  EXPECT_FALSE(user[1].as_object().contains("is_error"));
  const json::array& img = user[1].at("content").as_array();
  ASSERT_EQ(img.size(), 1u);
  EXPECT_EQ(img[0].at("type"), "image");
  EXPECT_EQ(img[0].at("source").at("media_type"), "image/png");
  EXPECT_EQ(img[0].at("source").at("data"), "iVBORw0KGgo=");
  EXPECT_EQ(user[2].at("type"), "text");
  EXPECT_EQ(user[2].at("text"), "Also, hurry.");
}

TEST(AnthropicTest, CacheControlOnSystemLastToolAndTheMovingTail) {
  FakeAnthropicServer server;
  server.Enqueue(ScriptedTurn::ToolCalls({ScriptedToolCall("toolu_1", "ls")}));
  server.Enqueue(ScriptedTurn::Text("done"));
  server.Enqueue(ScriptedTurn::Text("uncached"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  ModelRequest req = SimpleRequest("first");
  req.tools = {ToolSpec{"ls", "", {}}, ToolSpec{"read_file", "", {}}, ToolSpec{"grep", "", {}}};
  auto r1 = model->Generate(req, {});
  ASSERT_TRUE(r1) << r1.error().ToString();
  req.messages.push_back(r1->message);
  req.messages.push_back(Message::Tool("toolu_1", "ls", "['/a']"));
  auto r2 = model->Generate(req, {});
  ASSERT_TRUE(r2) << r2.error().ToString();

  auto reqs = server.requests();
  for (const auto& rec : reqs) {
    const json::object& body = rec.json;
    EXPECT_EQ(CountCacheControl(body), 3);
    EXPECT_LE(CountCacheControl(body), 4);
    EXPECT_EQ(body.at("system").at(0).at("cache_control").at("type"), "ephemeral");
    const json::array& tools = body.at("tools").as_array();
    EXPECT_FALSE(tools[0].as_object().contains("cache_control"));
    EXPECT_FALSE(tools[1].as_object().contains("cache_control"));
    EXPECT_EQ(tools[2].at("cache_control").at("type"), "ephemeral");
    const json::array& msgs = body.at("messages").as_array();
    const json::array& tail = msgs.back().at("content").as_array();
    EXPECT_EQ(tail.back().at("cache_control").at("type"), "ephemeral");
  }
  // The breakpoint moved: the first user message no longer carries one.
  const json::array& msgs2 = reqs[1].json.at("messages").as_array();
  ASSERT_EQ(msgs2.size(), 3u);
  EXPECT_EQ(CountCacheControl(msgs2[0]), 0);
  EXPECT_EQ(msgs2[2].at("content").at(0).at("type"), "tool_result");

  req.prompt_caching = false;
  auto r3 = model->Generate(req, {});
  ASSERT_TRUE(r3) << r3.error().ToString();
  EXPECT_EQ(CountCacheControl(server.requests()[2].json), 0);
}

TEST(AnthropicTest, UsageAndCost) {
  FakeAnthropicServer server;
  server.Enqueue(ScriptedTurn::Text("hi").WithUsage(Usage{1200, 345, 50000, 2000}));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  auto r = model->Generate(SimpleRequest(), {});
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->usage.input_tokens, 1200);
  EXPECT_EQ(r->usage.output_tokens, 345);  // from message_delta
  EXPECT_EQ(r->usage.cache_read_tokens, 50000);
  EXPECT_EQ(r->usage.cache_write_tokens, 2000);
  ModelProfile p = model->profile();
  EXPECT_EQ(p.max_input_tokens, 200000);
  EXPECT_NEAR(p.CostUsd(r->usage), (1200 * 3 + 345 * 15 + 50000 * 0.30 + 2000 * 3.75) / 1e6, 1e-12);
  EXPECT_EQ(model->name(), "anthropic:claude-sonnet-4-6");
}

TEST(AnthropicTest, HugeOrNegativeUsageIsCappedNotOverflowed) {
  // The harness adds the four counts: INT64_MAX from a hostile server used to
  // overflow there.
  FakeAnthropicServer server;
  server.Enqueue(ScriptedTurn::Text("hi").WithUsage(Usage{INT64_MAX, INT64_MAX, INT64_MAX, -5}));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  auto r = model->Generate(SimpleRequest(), {});
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->usage.input_tokens, kMaxTokenCount);
  EXPECT_EQ(r->usage.output_tokens, kMaxTokenCount);
  EXPECT_EQ(r->usage.cache_read_tokens, kMaxTokenCount);
  EXPECT_EQ(r->usage.cache_write_tokens, 0);
  Usage total = r->usage;
  for (int i = 0; i < 10; ++i) total += r->usage;
  EXPECT_EQ(total.input_tokens, 11 * kMaxTokenCount);
}

TEST(AnthropicTest, RetriesA429HonouringRetryAfter) {
  FakeAnthropicServer server;
  server.Enqueue(ScriptedTurn::RateLimited("7"));
  server.Enqueue(ScriptedTurn::RateLimited("").WithHeader("retry-after-ms", "1234"));
  server.Enqueue(ScriptedTurn::Text("finally"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  Observed obs;
  auto r = model->Generate(SimpleRequest(), obs.Callbacks());
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->message.text, "finally");
  EXPECT_EQ(server.request_count(), 3u);
  EXPECT_EQ(obs.retries, 2);
  ASSERT_EQ(obs.notices.size(), 2u);
  EXPECT_EQ(obs.notices[0].attempt, 1);
  EXPECT_EQ(obs.notices[0].max_attempts, 6);
  EXPECT_EQ(obs.notices[0].delay, milliseconds(7000));
  EXPECT_EQ(obs.notices[0].error.code, ErrorCode::kResourceExhausted);
  EXPECT_EQ(obs.notices[1].delay, milliseconds(1234));
  EXPECT_THAT(rr.delays, ElementsAre(milliseconds(7000), milliseconds(1234)));
}

TEST(AnthropicTest, Retries529And500WithBackoff) {
  FakeAnthropicServer server;
  server.Enqueue(ScriptedTurn::Overloaded());
  server.Enqueue(ScriptedTurn::ServerError());
  server.Enqueue(ScriptedTurn::HttpError(408, "timeout_error", "Request timeout"));
  server.Enqueue(ScriptedTurn::Text("ok"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  auto r = model->Generate(SimpleRequest(), {});
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(server.request_count(), 4u);
  ASSERT_EQ(rr.delays.size(), 3u);
  EXPECT_LE(rr.delays[0], milliseconds(1));
  EXPECT_LE(rr.delays[1], milliseconds(2));
  EXPECT_LE(rr.delays[2], milliseconds(4));
}

TEST(AnthropicTest, GivesUpAfterMaxRetriesWithTheLastError) {
  FakeAnthropicServer server;
  for (int i = 0; i < 3; ++i) server.Enqueue(ScriptedTurn::Overloaded());
  server.Enqueue(ScriptedTurn::Text("never reached"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy(/*max_retries=*/2));
  auto r = model->Generate(SimpleRequest(), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(r.error().message,
            "Anthropic API unavailable (529 overloaded_error): Overloaded (gave up after 3 "
            "attempts)");
  EXPECT_EQ(server.request_count(), 3u);
}

TEST(AnthropicTest, RetriesAConnectionDroppedBeforeAnyOutput) {
  FakeAnthropicServer server;
  server.Enqueue(ScriptedTurn::DropMidStream());
  server.Enqueue(ScriptedTurn::Text("second try"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  Observed obs;
  auto r = model->Generate(SimpleRequest(), obs.Callbacks());
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->message.text, "second try");
  EXPECT_EQ(obs.Joined(), "second try");
  EXPECT_EQ(server.request_count(), 2u);
  EXPECT_EQ(obs.retries, 1);
}

TEST(AnthropicTest, ADropAfterStreamedOutputIsNotRetried) {
  FakeAnthropicServer server;
  server.Enqueue(ScriptedTurn::DropMidStream("Partial answ"));
  server.Enqueue(ScriptedTurn::Text("unused"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  Observed obs;
  auto r = model->Generate(SimpleRequest(), obs.Callbacks());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(r.error().message, HasSubstr("connection closed mid-response"));
  EXPECT_THAT(r.error().message, HasSubstr("after part of the response was streamed"));
  EXPECT_EQ(obs.Joined(), "Partial answ");
  EXPECT_EQ(server.request_count(), 1u);
}

TEST(AnthropicTest, RetriesAMidStreamOverloadedErrorEvent) {
  FakeAnthropicServer server;
  server.Enqueue(ScriptedTurn::StreamError("overloaded_error", "Overloaded"));
  server.Enqueue(ScriptedTurn::Text("recovered"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  auto r = model->Generate(SimpleRequest(), {});
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->message.text, "recovered");
  EXPECT_EQ(server.request_count(), 2u);
}

TEST(AnthropicTest, AContextOverflowIsSaidByItsReason) {
  FakeAnthropicServer server;
  server.Enqueue(ScriptedTurn::HttpError(400, "invalid_request_error",
                                         "prompt is too long: 210000 tokens > 200000 maximum"));
  server.Enqueue(ScriptedTurn::HttpError(400, "invalid_request_error", "max_tokens: too big"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  auto r = model->Generate(SimpleRequest(), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, kReasonContextOverflow) << r.error().ToString();
  auto other = model->Generate(SimpleRequest(), {});
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().reason, "") << other.error().ToString();
}

TEST(AnthropicTest, AMidStreamInvalidRequestErrorIsFinal) {
  FakeAnthropicServer server;
  server.Enqueue(ScriptedTurn::StreamError("invalid_request_error", "prompt is too long"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  auto r = model->Generate(SimpleRequest(), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.error().message,
            "Anthropic API stream error (invalid_request_error): prompt is too long");
  EXPECT_EQ(r.error().reason, kReasonContextOverflow);
  EXPECT_EQ(server.request_count(), 1u);
}

TEST(AnthropicTest, AWrongKeyFailsAtOnceWithAnActionableMessage) {
  FakeAnthropicServer server({.api_key = "sk-ant-right"});
  server.Enqueue(ScriptedTurn::Text("unused"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy(), "sk-ant-wrong");
  auto r = model->Generate(SimpleRequest(), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnauthenticated);
  EXPECT_EQ(r.error().message,
            "Anthropic API key rejected (401 authentication_error): invalid x-api-key. Check "
            "ANTHROPIC_API_KEY.");
  EXPECT_EQ(server.request_count(), 1u);
  EXPECT_TRUE(rr.delays.empty());
}

TEST(AnthropicTest, ClientErrorsAreNotRetriedAndNameTheServersTypeAndMessage) {
  FakeAnthropicServer server;
  server.Enqueue(ScriptedTurn::HttpError(400, "invalid_request_error", "messages.0: bad"));
  server.Enqueue(ScriptedTurn::HttpError(403, "permission_error", "not allowed"));
  server.Enqueue(ScriptedTurn::HttpError(404, "not_found_error", "model: claude-nope"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  auto r400 = model->Generate(SimpleRequest(), {});
  ASSERT_FALSE(r400);
  EXPECT_EQ(r400.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(r400.error().message,
            "Anthropic API rejected the request (400 invalid_request_error): messages.0: bad");
  auto r403 = model->Generate(SimpleRequest(), {});
  ASSERT_FALSE(r403);
  EXPECT_EQ(r403.error().code, ErrorCode::kPermissionDenied);
  EXPECT_THAT(r403.error().message, HasSubstr("(403 permission_error): not allowed"));
  auto r404 = model->Generate(SimpleRequest(), {});
  ASSERT_FALSE(r404);
  EXPECT_EQ(r404.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(r404.error().message, HasSubstr("(404 not_found_error): model: claude-nope"));
  EXPECT_THAT(r404.error().message, HasSubstr("Check the model name ('claude-sonnet-4-6')"));
  EXPECT_EQ(server.request_count(), 3u);
  EXPECT_TRUE(rr.delays.empty());
}

TEST(AnthropicTest, AMissingKeyIsExplained) {
  AnthropicOptions o;
  auto m = AnthropicModel::Create(o);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code, ErrorCode::kUnauthenticated);
  EXPECT_EQ(m.error().message,
            "ANTHROPIC_API_KEY is not set. Export it (export ANTHROPIC_API_KEY=sk-ant-...), or "
            "run with --model replay:FILE to use a recorded conversation.");
}

TEST(AnthropicTest, CancellationMidStreamAbortsTheCall) {
  FakeAnthropicServer server;
  server.Enqueue(ScriptedTurn::Stall("Thinking about it"));
  server.Enqueue(ScriptedTurn::Text("must not be requested"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  std::atomic<bool> cancel{false};
  ModelRequest req = SimpleRequest();
  req.cancel = &cancel;
  StreamCallbacks cb;
  std::string seen;
  cb.on_text_delta = [&](std::string_view d) {
    seen += d;
    cancel = true;  // Ctrl-C as soon as text shows up
  };
  auto r = model->Generate(req, cb);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kCancelled);
  EXPECT_FALSE(seen.empty());
  EXPECT_EQ(server.request_count(), 1u);
  EXPECT_EQ(server.pending_turns(), 1u);
}

TEST(AnthropicTest, CancelFdEndsAWaitOnASilentServer) {
  // A stream that goes quiet: no bytes arrive to notice the flag with, so
  // only the fd can end the wait (before it, Ctrl-C waited for the idle timeout).
  FakeAnthropicServer server;
  server.Enqueue(ScriptedTurn::SilentStall("Thinking about it"));
  RetryRecorder rr;
  AnthropicOptions o;
  o.api_key = "sk-ant-test";
  o.base_url = server.url();
  o.http.read_idle_timeout = milliseconds(60000);
  o.http.retry = rr.Policy(0);
  auto model = AnthropicModel::Create(o);
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

TEST(AnthropicTest, TheRequestTimeoutEndsAStalledStream) {
  FakeAnthropicServer server;
  server.Enqueue(ScriptedTurn::Stall(""));  // pings forever: only the deadline can end it
  RetryRecorder rr;
  AnthropicOptions o;
  o.api_key = "sk-ant-test";
  o.base_url = server.url();
  o.http.request_timeout = milliseconds(300);
  o.http.retry = rr.Policy(0);
  auto model = AnthropicModel::Create(o);
  ASSERT_TRUE(model);
  auto r = (*model)->Generate(SimpleRequest(), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kTimeout);
  EXPECT_THAT(r.error().message, HasSubstr("timed out"));
}

TEST(AnthropicTest, AlreadyCancelledSendsNothing) {
  FakeAnthropicServer server;
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  std::atomic<bool> cancel{true};
  ModelRequest req = SimpleRequest();
  req.cancel = &cancel;
  auto r = model->Generate(req, {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kCancelled);
  EXPECT_EQ(server.request_count(), 0u);
}

TEST(AnthropicTest, HttpsWithATestCa) {
  FakeAnthropicServer server({.tls = true});
  server.Enqueue(ScriptedTurn::Text("secure"));
  server.Enqueue(ScriptedTurn::Text("again"));
  ASSERT_EQ(server.url().rfind("https://127.0.0.1:", 0), 0u);
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  auto r = model->Generate(SimpleRequest(), {});
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->message.text, "secure");
  auto again = model->Generate(SimpleRequest(), {});  // a second call on the same client
  ASSERT_TRUE(again) << again.error().ToString();
  EXPECT_EQ(again->message.text, "again");

  // Without the test CA the certificate is refused.
  AnthropicOptions o;
  o.api_key = "sk-ant-test";
  o.base_url = server.url();
  o.http.ca_pem = testing::FakeAnthropicServer({.tls = true}).ca_pem();  // another CA
  RetryRecorder rr2;
  o.http.retry = rr2.Policy();
  auto untrusting = AnthropicModel::Create(o);
  ASSERT_TRUE(untrusting) << untrusting.error().ToString();
  auto refused = (*untrusting)->Generate(SimpleRequest(), {});
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().message, HasSubstr("TLS handshake"));
  EXPECT_THAT(refused.error().message, HasSubstr("SSL_CERT_FILE"));
  EXPECT_TRUE(rr2.delays.empty());  // a certificate problem is not retried
  EXPECT_EQ(server.request_count(), 2u);
}

TEST(AnthropicTest, TheFakeRejectsWhatTheRealApiRejects) {
  json::object too_many{{"model", "m"}, {"max_tokens", 10}};
  json::array msgs;
  for (int i = 0; i < 5; ++i) {
    msgs.push_back(json::object{
        {"role", i % 2 ? "assistant" : "user"},
        {"content",
         json::array{json::object{{"type", "text"},
                                  {"text", "x"},
                                  {"cache_control", json::object{{"type", "ephemeral"}}}}}}});
  }
  too_many["messages"] = msgs;
  EXPECT_EQ(testing::ValidateAnthropicRequest(too_many),
            "A maximum of 4 blocks with cache_control may be provided. Found 5.");

  json::object dangling{{"model", "m"}, {"max_tokens", 10}};
  dangling["messages"] =
      json::array{json::object{{"role", "user"}, {"content", "hi"}},
                  json::object{{"role", "assistant"},
                               {"content", json::array{json::object{{"type", "tool_use"},
                                                                    {"id", "toolu_9"},
                                                                    {"name", "ls"},
                                                                    {"input", json::object{}}}}}},
                  json::object{{"role", "user"}, {"content", "no result"}}};
  EXPECT_THAT(testing::ValidateAnthropicRequest(dangling),
              HasSubstr("`tool_use` ids were found without `tool_result` blocks immediately "
                        "after: toolu_9"));
}

}  // namespace
}  // namespace deepbox::agent
