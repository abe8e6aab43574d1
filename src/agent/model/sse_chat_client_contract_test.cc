// The contract every HTTP chat client (sse_chat_client.h) keeps, checked for
// each against its fake server over real HTTP(S) on loopback: streaming,
// tool calls, usage, retries, error mapping, cancellation and TLS. What only
// one dialect does is tested in anthropic_test.cc / openai_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <type_traits>
#include <utility>

#include "agent/model/anthropic.h"
#include "agent/model/openai.h"
#include "agent/model/testing/chat_test_support.h"
#include "agent/model/testing/fake_anthropic.h"
#include "agent/model/testing/fake_openai.h"
#include "agent/model/testing/late_cancel.h"

namespace deepbox::agent {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using testing::FakeAnthropicServer;
using testing::FakeOpenAiServer;
using testing::FakeServerOptions;
using ::testing::HasSubstr;
using testing::Observed;
using testing::RecordedRequest;
using testing::RetryRecorder;
using testing::ScriptedToolCall;
using testing::ScriptedTurn;

// USD per million tokens: input, output, cache read, cache write.
struct Prices {
  double input, output, cache_read, cache_write;
};

// What the contract cases need to know about each client.
struct AnthropicClient {
  using Model = AnthropicModel;
  using Options = AnthropicOptions;
  using Server = FakeAnthropicServer;
  static constexpr char kKey[] = "sk-ant-test";
  static constexpr char kRightKey[] = "sk-ant-right";
  static constexpr char kWrongKey[] = "sk-ant-wrong";
  static constexpr char kModel[] = "claude-sonnet-4-6";  // also what the fake reports
  static constexpr char kName[] = "anthropic:claude-sonnet-4-6";
  static constexpr int64_t kMaxInputTokens = 200000;
  static constexpr Prices kPrices{3, 15, 0.30, 3.75};
  static constexpr bool kReportsCacheWrites = true;
  // A stream `error` event the client retries.
  static constexpr char kRetryableStreamError[] = "api_error";
  static constexpr char kSchemaKey[] = "input_schema";

  static Options BaseOptions(const Server& server) {
    Options o;
    o.api_key = kKey;
    o.base_url = server.url();
    return o;
  }
  static void ExpectRequestBasics(const RecordedRequest& request) {
    EXPECT_EQ(request.path, "/v1/messages");
    EXPECT_EQ(request.headers.Get("x-api-key"), "sk-ant-test");
    EXPECT_EQ(request.headers.Get("anthropic-version"), "2023-06-01");
    EXPECT_EQ(request.headers.Get("content-type"), "application/json");
    EXPECT_EQ(request.json.at("model"), "claude-sonnet-4-6");
    EXPECT_EQ(request.json.at("max_tokens"), 16000);
    EXPECT_EQ(request.json.at("stream"), true);
    EXPECT_EQ(request.json.at("system").at(0).at("text"), "You are terse.");
  }
  // The tool as sent: the object with its description and schema.
  static const json::value& SentTool(const json::value& tool) { return tool; }
  static std::string GaveUpMessage() {
    return "Anthropic API unavailable (529 overloaded_error): Overloaded (gave up after 3 "
           "attempts)";
  }
  static std::string WrongKeyMessage(const Server&) {
    return "Anthropic API key rejected (401 authentication_error): invalid x-api-key. Check "
           "ANTHROPIC_API_KEY.";
  }
  static std::string Rejected400Message() {
    return "Anthropic API rejected the request (400 invalid_request_error): messages.0: bad";
  }
};

struct OpenAiClient {
  using Model = OpenAiModel;
  using Options = OpenAiOptions;
  using Server = FakeOpenAiServer;
  static constexpr char kKey[] = "sk-test";
  static constexpr char kRightKey[] = "sk-right";
  static constexpr char kWrongKey[] = "sk-wrong";
  static constexpr char kModel[] = "gpt-4o";
  static constexpr char kName[] = "openai:gpt-4o";
  static constexpr int64_t kMaxInputTokens = 128000;
  static constexpr Prices kPrices{2.5, 10, 1.25, 0};
  static constexpr bool kReportsCacheWrites = false;  // OpenAI has no cache writes
  static constexpr char kRetryableStreamError[] = "server_error";
  static constexpr char kSchemaKey[] = "parameters";

  static Options BaseOptions(const Server& server) {
    Options o;
    o.model = kModel;
    o.api_key = kKey;
    o.base_url = server.url();
    return o;
  }
  static void ExpectRequestBasics(const RecordedRequest& request) {
    EXPECT_EQ(request.path, "/v1/chat/completions");
    EXPECT_EQ(request.headers.Get("authorization"), "Bearer sk-test");
    EXPECT_EQ(request.headers.Get("content-type"), "application/json");
    EXPECT_EQ(request.json.at("model"), "gpt-4o");
    EXPECT_EQ(request.json.at("stream"), true);
    EXPECT_EQ(request.json.at("messages").at(0).at("content"), "You are terse.");
  }
  static const json::value& SentTool(const json::value& tool) { return tool.at("function"); }
  static std::string GaveUpMessage() {
    return "OpenAI-compatible server unavailable (529 overloaded_error): Overloaded (gave up "
           "after 3 attempts)";
  }
  static std::string WrongKeyMessage(const Server& server) {
    return "OpenAI-compatible server rejected the API key (401 invalid_api_key): Incorrect API "
           "key provided: sk-wrong. You can find your API key at "
           "https://platform.openai.com/account/api-keys. Check OPENAI_API_KEY (and "
           "OPENAI_BASE_URL: " +
           server.url() + ").";
  }
  static std::string Rejected400Message() {
    return "OpenAI-compatible server rejected the request (400 invalid_request_error): "
           "messages.0: bad";
  }
};

template <typename Client>
class ChatClientContractTest : public ::testing::Test {
 protected:
  using Model = typename Client::Model;
  using Options = typename Client::Options;
  using Server = typename Client::Server;

  // A client of `server` (trusting its CA) with `retry`; `adjust` edits the
  // options (before CreateTestModel sets base_url, ca_file and retry).
  static std::unique_ptr<Model> MakeModel(const Server& server, RetryPolicy retry,
                                          const std::function<void(Options&)>& adjust = {}) {
    Options o = Client::BaseOptions(server);
    if (adjust) adjust(o);
    return testing::CreateTestModel<Model>(std::move(o), server, std::move(retry));
  }

  static ModelRequest SimpleRequest() {
    ModelRequest r;
    r.system = "You are terse.";
    r.messages.push_back(Message::User("Hello?"));
    return r;
  }
};

class ClientNames {
 public:
  template <typename Client>
  static std::string GetName(int) {
    return std::is_same_v<Client, AnthropicClient> ? "Anthropic" : "OpenAi";
  }
};

using Clients = ::testing::Types<AnthropicClient, OpenAiClient>;
TYPED_TEST_SUITE(ChatClientContractTest, Clients, ClientNames);

TYPED_TEST(ChatClientContractTest, StreamsTextDeltasSplitAtAwkwardPlaces) {
  typename TypeParam::Server server({.text_delta_bytes = 3, .write_bytes = 5});
  const std::string text = "Héllo wörld — 👋 the answer is \"42\".\nDone.";
  server.Enqueue(ScriptedTurn::Text(text));
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy());
  Observed obs;
  auto r = model->Generate(this->SimpleRequest(), obs.Callbacks());
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->message.role, Role::kAssistant);
  EXPECT_EQ(r->message.text, text);
  EXPECT_EQ(obs.Joined(), text);
  EXPECT_GT(obs.deltas.size(), 10u);  // delivered as it arrived, not at the end
  EXPECT_TRUE(r->message.tool_calls.empty());
  EXPECT_EQ(r->stop_reason, "end_turn");
  EXPECT_EQ(r->model, TypeParam::kModel);
  EXPECT_EQ(obs.retries, 0);

  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  TypeParam::ExpectRequestBasics(reqs[0]);
}

TYPED_TEST(ChatClientContractTest, ParallelToolCallsWithInputSplitIntoTinyFragments) {
  typename TypeParam::Server server({.json_delta_bytes = 1});
  json::object input_a{{"file_path", "/src/a \"quoted\" ü.py"},
                       {"offset", 3},
                       {"nested", json::object{{"k", json::array{1, 2, nullptr}}}}};
  server.Enqueue(ScriptedTurn::ToolCalls(
      {ScriptedToolCall("toolu_01A", "read_file", input_a), ScriptedToolCall("toolu_01B", "ls")},
      "Let me look."));
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy());
  Observed obs;
  ModelRequest req = this->SimpleRequest();
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
  // Tools go out with an object schema.
  auto reqs = server.requests();
  const auto& tools = reqs[0].json.at("tools").as_array();
  ASSERT_EQ(tools.size(), 2u);
  EXPECT_EQ(TypeParam::SentTool(tools[0]).at(TypeParam::kSchemaKey).at("type"), "object");
  EXPECT_EQ(TypeParam::SentTool(tools[0]).at("description"), "Reads a file");
}

TYPED_TEST(ChatClientContractTest, AssemblesStreamedTextAndToolCallsFromFragments) {
  typename TypeParam::Server server(
      {.text_delta_bytes = 2, .json_delta_bytes = 3, .write_bytes = 7});
  json::object input_a{{"command", "python3 fib.py | head -n 3"}, {"timeout", 30}};
  json::object input_b{{"file_path", "/fib.py"}, {"content", "print('ünïcode')\n"}};
  server.Enqueue(ScriptedTurn::ToolCalls({ScriptedToolCall("call_A", "execute", input_a),
                                          ScriptedToolCall("call_B", "write_file", input_b)},
                                         "Running both.")
                     .WithUsage(Usage{100, 20, 50, 0}));
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy());
  std::string streamed;
  std::vector<std::string> starts;
  StreamCallbacks cb;
  cb.on_text_delta = [&](std::string_view d) { streamed += d; };
  cb.on_tool_call_start = [&](const std::string& id, const std::string& name) {
    starts.push_back(id + ":" + name);
  };
  auto r = model->Generate(this->SimpleRequest(), cb);
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
  EXPECT_EQ(r->model, TypeParam::kModel);
  // 100 uncached input tokens + 50 cache reads (OpenAI: prompt_tokens 150, 50 cached).
  EXPECT_EQ(r->usage.input_tokens, 100);
  EXPECT_EQ(r->usage.cache_read_tokens, 50);
  EXPECT_EQ(r->usage.output_tokens, 20);
  constexpr Prices p = TypeParam::kPrices;
  EXPECT_NEAR(model->profile().CostUsd(r->usage),
              (100 * p.input + 50 * p.cache_read + 20 * p.output) / 1e6, 1e-12);
}

TYPED_TEST(ChatClientContractTest, MalformedToolInputIsReportedOnTheCall) {
  // (what the server streams, what the error quotes of it)
  const std::pair<std::string, std::string> cases[] = {{"{\"path\": ", "{\"path\":"},
                                                       {"{'path': '/'}", "{'path': '/'}"}};
  for (const auto& [raw, quoted] : cases) {
    SCOPED_TRACE(raw);
    typename TypeParam::Server server;
    server.Enqueue(ScriptedTurn::ToolCalls({ScriptedToolCall::Raw("toolu_x", "ls", raw)}));
    RetryRecorder rr;
    auto model = this->MakeModel(server, rr.Policy());
    auto r = model->Generate(this->SimpleRequest(), {});
    ASSERT_TRUE(r) << r.error().ToString();
    ASSERT_EQ(r->message.tool_calls.size(), 1u);
    EXPECT_TRUE(r->message.tool_calls[0].input.empty());
    EXPECT_THAT(r->message.tool_calls[0].input_error, HasSubstr("not a JSON object"));
    EXPECT_THAT(r->message.tool_calls[0].input_error, HasSubstr(quoted));
  }
}

TYPED_TEST(ChatClientContractTest, StopReasonsInAnthropicVocabulary) {
  typename TypeParam::Server server;
  server.Enqueue(ScriptedTurn::Text("cut").WithStopReason("max_tokens"));
  server.Enqueue(ScriptedTurn::Text("done"));
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy());
  auto r1 = model->Generate(this->SimpleRequest(), {});
  ASSERT_TRUE(r1) << r1.error().ToString();
  EXPECT_EQ(r1->stop_reason, "max_tokens");
  auto r2 = model->Generate(this->SimpleRequest(), {});
  ASSERT_TRUE(r2) << r2.error().ToString();
  EXPECT_EQ(r2->stop_reason, "end_turn");
}

TYPED_TEST(ChatClientContractTest, UsageAndCost) {
  typename TypeParam::Server server;
  server.Enqueue(ScriptedTurn::Text("hi").WithUsage(Usage{1200, 345, 50000, 2000}));
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy());
  auto r = model->Generate(this->SimpleRequest(), {});
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->usage.input_tokens, 1200);
  EXPECT_EQ(r->usage.output_tokens, 345);  // Anthropic: from message_delta
  EXPECT_EQ(r->usage.cache_read_tokens, 50000);
  const int64_t cache_writes = TypeParam::kReportsCacheWrites ? 2000 : 0;
  EXPECT_EQ(r->usage.cache_write_tokens, cache_writes);
  ModelProfile profile = model->profile();
  EXPECT_EQ(profile.max_input_tokens, TypeParam::kMaxInputTokens);
  constexpr Prices p = TypeParam::kPrices;
  EXPECT_NEAR(
      profile.CostUsd(r->usage),
      (1200 * p.input + 345 * p.output + 50000 * p.cache_read + cache_writes * p.cache_write) / 1e6,
      1e-12);
  EXPECT_EQ(model->name(), TypeParam::kName);
}

TYPED_TEST(ChatClientContractTest, HugeUsageIsCapped) {
  typename TypeParam::Server server;
  server.Enqueue(ScriptedTurn::Text("hi").WithUsage(Usage{4000000000000000000, 7, 0, 0}));
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy());
  auto r = model->Generate(this->SimpleRequest(), {});
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->usage.input_tokens, kMaxTokenCount);
  EXPECT_EQ(r->usage.output_tokens, 7);
}

TYPED_TEST(ChatClientContractTest, RetriesA429HonouringRetryAfter) {
  typename TypeParam::Server server;
  server.Enqueue(ScriptedTurn::RateLimited("7"));
  server.Enqueue(ScriptedTurn::RateLimited("").WithHeader("retry-after-ms", "1234"));
  server.Enqueue(ScriptedTurn::Text("finally"));
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy());
  Observed obs;
  auto r = model->Generate(this->SimpleRequest(), obs.Callbacks());
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

TYPED_TEST(ChatClientContractTest, Retries529And500WithBackoff) {
  typename TypeParam::Server server;
  server.Enqueue(ScriptedTurn::Overloaded());
  server.Enqueue(ScriptedTurn::ServerError());
  server.Enqueue(ScriptedTurn::HttpError(408, "timeout_error", "Request timeout"));
  server.Enqueue(ScriptedTurn::Text("ok"));
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy());
  auto r = model->Generate(this->SimpleRequest(), {});
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(server.request_count(), 4u);
  ASSERT_EQ(rr.delays.size(), 3u);
  EXPECT_LE(rr.delays[0], milliseconds(1));
  EXPECT_LE(rr.delays[1], milliseconds(2));
  EXPECT_LE(rr.delays[2], milliseconds(4));
}

TYPED_TEST(ChatClientContractTest, GivesUpAfterMaxRetriesWithTheLastError) {
  typename TypeParam::Server server;
  for (int i = 0; i < 3; ++i) server.Enqueue(ScriptedTurn::Overloaded());
  server.Enqueue(ScriptedTurn::Text("never reached"));
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy(/*max_retries=*/2));
  auto r = model->Generate(this->SimpleRequest(), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(r.error().message, TypeParam::GaveUpMessage());
  EXPECT_EQ(server.request_count(), 3u);
}

TYPED_TEST(ChatClientContractTest, RetriesAConnectionDroppedBeforeAnyOutput) {
  typename TypeParam::Server server;
  server.Enqueue(ScriptedTurn::DropMidStream());
  server.Enqueue(ScriptedTurn::Text("second try"));
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy());
  Observed obs;
  auto r = model->Generate(this->SimpleRequest(), obs.Callbacks());
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->message.text, "second try");
  EXPECT_EQ(obs.Joined(), "second try");
  EXPECT_EQ(server.request_count(), 2u);
  EXPECT_EQ(obs.retries, 1);
}

TYPED_TEST(ChatClientContractTest, ADropAfterStreamedOutputIsNotRetried) {
  typename TypeParam::Server server;
  server.Enqueue(ScriptedTurn::DropMidStream("Partial answ"));
  server.Enqueue(ScriptedTurn::Text("unused"));
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy());
  Observed obs;
  auto r = model->Generate(this->SimpleRequest(), obs.Callbacks());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(r.error().message, HasSubstr("connection closed mid-response"));
  EXPECT_THAT(r.error().message, HasSubstr("after part of the response was streamed"));
  EXPECT_EQ(obs.Joined(), "Partial answ");
  EXPECT_EQ(server.request_count(), 1u);
}

TYPED_TEST(ChatClientContractTest, RetriesAMidStreamOverloadedErrorEvent) {
  typename TypeParam::Server server;
  server.Enqueue(ScriptedTurn::StreamError("overloaded_error", "Overloaded"));
  server.Enqueue(ScriptedTurn::Text("recovered"));
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy());
  auto r = model->Generate(this->SimpleRequest(), {});
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->message.text, "recovered");
  EXPECT_EQ(server.request_count(), 2u);
}

TYPED_TEST(ChatClientContractTest, RetriesRateLimitsDropsAndStreamErrors) {
  typename TypeParam::Server server;
  server.Enqueue(ScriptedTurn::RateLimited("3"));
  server.Enqueue(ScriptedTurn::DropMidStream());
  server.Enqueue(
      ScriptedTurn::StreamError(TypeParam::kRetryableStreamError, "The server had an error"));
  server.Enqueue(ScriptedTurn::HttpError(503, "", "Service Unavailable"));
  server.Enqueue(ScriptedTurn::Text("made it"));
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy());
  int retries = 0;
  StreamCallbacks cb;
  cb.on_retry = [&](const RetryNotice&) { ++retries; };
  auto r = model->Generate(this->SimpleRequest(), cb);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->message.text, "made it");
  EXPECT_EQ(server.request_count(), 5u);
  EXPECT_EQ(retries, 4);
  ASSERT_EQ(rr.delays.size(), 4u);
  EXPECT_EQ(rr.delays[0], milliseconds(3000));
}

// A request past the context window is told apart by Error::reason (what
// the summarization middleware acts on), not by its text. Each client knows
// both APIs' wordings (Anthropic's message, OpenAI's code).
TYPED_TEST(ChatClientContractTest, AContextOverflowIsSaidByItsReason) {
  typename TypeParam::Server server;
  server.Enqueue(ScriptedTurn::HttpError(400, "invalid_request_error",
                                         "prompt is too long: 210000 tokens > 200000 maximum"));
  server.Enqueue(ScriptedTurn::HttpError(400, "context_length_exceeded",
                                         "This model's maximum context length is 128000 tokens"));
  server.Enqueue(ScriptedTurn::HttpError(400, "invalid_request_error", "max_tokens: too big"));
  server.Enqueue(ScriptedTurn::HttpError(400, "invalid_value", "temperature must be <= 2"));
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy());
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    auto r = model->Generate(this->SimpleRequest(), {});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.error().reason, std::string(i < 2 ? kReasonContextOverflow : ""))
        << r.error().ToString();
  }
  EXPECT_TRUE(rr.delays.empty());
}

TYPED_TEST(ChatClientContractTest, AWrongKeyFailsAtOnceWithAnActionableMessage) {
  typename TypeParam::Server server({.api_key = TypeParam::kRightKey});
  server.Enqueue(ScriptedTurn::Text("unused"));
  RetryRecorder rr;
  auto model =
      this->MakeModel(server, rr.Policy(), [](auto& o) { o.api_key = TypeParam::kWrongKey; });
  auto r = model->Generate(this->SimpleRequest(), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnauthenticated);
  EXPECT_EQ(r.error().message, TypeParam::WrongKeyMessage(server));
  EXPECT_EQ(server.request_count(), 1u);
  EXPECT_TRUE(rr.delays.empty());
}

TYPED_TEST(ChatClientContractTest, ClientErrorsAreNotRetriedAndNameTheServersTypeAndMessage) {
  typename TypeParam::Server server;
  server.Enqueue(ScriptedTurn::HttpError(400, "invalid_request_error", "messages.0: bad"));
  server.Enqueue(ScriptedTurn::HttpError(403, "permission_error", "not allowed"));
  server.Enqueue(ScriptedTurn::HttpError(404, "not_found_error", "model: claude-nope"));
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy());
  auto r400 = model->Generate(this->SimpleRequest(), {});
  ASSERT_FALSE(r400);
  EXPECT_EQ(r400.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(r400.error().message, TypeParam::Rejected400Message());
  auto r403 = model->Generate(this->SimpleRequest(), {});
  ASSERT_FALSE(r403);
  EXPECT_EQ(r403.error().code, ErrorCode::kPermissionDenied);
  EXPECT_THAT(r403.error().message, HasSubstr("(403 permission_error): not allowed"));
  auto r404 = model->Generate(this->SimpleRequest(), {});
  ASSERT_FALSE(r404);
  EXPECT_EQ(r404.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(r404.error().message, HasSubstr("(404 not_found_error): model: claude-nope"));
  EXPECT_THAT(r404.error().message,
              HasSubstr("Check the model name ('" + std::string(TypeParam::kModel) + "')"));
  EXPECT_EQ(server.request_count(), 3u);
  EXPECT_TRUE(rr.delays.empty());
}

TYPED_TEST(ChatClientContractTest, CancellationMidStreamAbortsTheCall) {
  typename TypeParam::Server server;
  server.Enqueue(ScriptedTurn::Stall("Thinking about it"));
  server.Enqueue(ScriptedTurn::Text("must not be requested"));
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy());
  std::atomic<bool> cancel{false};
  ModelRequest req = this->SimpleRequest();
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

TYPED_TEST(ChatClientContractTest, CancelFdEndsAWaitOnASilentServer) {
  // A stream that goes quiet: no bytes arrive to notice the flag with, so
  // only the fd can end the wait (before it, Ctrl-C waited for the idle timeout).
  typename TypeParam::Server server;
  server.Enqueue(ScriptedTurn::SilentStall("Thinking about it"));
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy(0),
                               [](auto& o) { o.http.read_idle_timeout = milliseconds(60000); });
  testing::LateCancel ctrl_c;
  ModelRequest req = this->SimpleRequest();
  req.cancel = ctrl_c.flag();
  req.cancel_fd = ctrl_c.fd();
  StreamCallbacks cb;
  cb.on_text_delta = [&](std::string_view) { ctrl_c.ArmForThisThread(); };
  auto r = model->Generate(req, cb);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kCancelled) << r.error().ToString();
}

TYPED_TEST(ChatClientContractTest, TheRequestTimeoutEndsAStalledStream) {
  typename TypeParam::Server server;
  server.Enqueue(ScriptedTurn::Stall(""));  // keep-alives forever: only the deadline can end it
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy(0),
                               [](auto& o) { o.http.request_timeout = milliseconds(300); });
  auto r = model->Generate(this->SimpleRequest(), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kTimeout);
  EXPECT_THAT(r.error().message, HasSubstr("timed out"));
}

TYPED_TEST(ChatClientContractTest, AlreadyCancelledSendsNothing) {
  typename TypeParam::Server server;
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy());
  std::atomic<bool> cancel{true};
  ModelRequest req = this->SimpleRequest();
  req.cancel = &cancel;
  auto r = model->Generate(req, {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kCancelled);
  EXPECT_EQ(server.request_count(), 0u);
}

TYPED_TEST(ChatClientContractTest, HttpsWithATestCa) {
  typename TypeParam::Server server({.tls = true});
  server.Enqueue(ScriptedTurn::Text("secure"));
  server.Enqueue(ScriptedTurn::Text("again"));
  ASSERT_EQ(server.url().rfind("https://127.0.0.1:", 0), 0u);
  RetryRecorder rr;
  auto model = this->MakeModel(server, rr.Policy());
  auto r = model->Generate(this->SimpleRequest(), {});
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->message.text, "secure");
  auto again = model->Generate(this->SimpleRequest(), {});  // a second call on the same client
  ASSERT_TRUE(again) << again.error().ToString();
  EXPECT_EQ(again->message.text, "again");

  // Without the test CA the certificate is refused.
  typename TypeParam::Options o = TypeParam::BaseOptions(server);
  o.http.ca_pem = typename TypeParam::Server({.tls = true}).ca_pem();  // another CA
  RetryRecorder rr2;
  o.http.retry = rr2.Policy();
  auto untrusting = TypeParam::Model::Create(o);
  ASSERT_TRUE(untrusting) << untrusting.error().ToString();
  auto refused = (*untrusting)->Generate(this->SimpleRequest(), {});
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().message, HasSubstr("TLS handshake"));
  EXPECT_THAT(refused.error().message, HasSubstr("SSL_CERT_FILE"));
  EXPECT_TRUE(rr2.delays.empty());  // a certificate problem is not retried
  EXPECT_EQ(server.request_count(), 2u);
}

}  // namespace
}  // namespace deepbox::agent
