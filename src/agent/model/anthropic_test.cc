// The production Anthropic client against FakeAnthropicServer over real
// HTTP(S) on loopback: what only this dialect does (what every HTTP chat
// client does is in sse_chat_client_contract_test.cc).
#include "agent/model/anthropic.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/model/testing/chat_test_support.h"
#include "agent/model/testing/fake_anthropic.h"

namespace deepbox::agent {
namespace {

using testing::FakeAnthropicServer;
using ::testing::HasSubstr;
using testing::RetryRecorder;
using testing::ScriptedToolCall;
using testing::ScriptedTurn;

std::unique_ptr<AnthropicModel> MakeModel(const FakeAnthropicServer& server, RetryPolicy retry) {
  return testing::CreateTestModel<AnthropicModel>(AnthropicOptions{.api_key = "sk-ant-test"},
                                                  server, std::move(retry));
}

ModelRequest SimpleRequest(std::string text = "Hello?") {
  ModelRequest r;
  r.system = "You are terse.";
  r.messages.push_back(Message::User(std::move(text)));
  return r;
}

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

TEST(AnthropicTest, AMissingKeyIsExplained) {
  AnthropicOptions o;
  auto m = AnthropicModel::Create(o);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code, ErrorCode::kUnauthenticated);
  EXPECT_EQ(m.error().message,
            "ANTHROPIC_API_KEY is not set. Export it (export ANTHROPIC_API_KEY=sk-ant-...), or "
            "run with --model replay:FILE to use a recorded conversation.");
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
