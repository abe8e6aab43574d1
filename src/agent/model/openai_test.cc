// The production OpenAI-compatible client against FakeOpenAiServer over real
// HTTP(S) on loopback: what only this dialect does (what every HTTP chat
// client does is in sse_chat_client_contract_test.cc).
#include "agent/model/openai.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/model/testing/chat_test_support.h"
#include "agent/model/testing/fake_openai.h"

namespace deepbox::agent {
namespace {

using testing::FakeOpenAiServer;
using ::testing::HasSubstr;
using testing::RetryRecorder;
using testing::ScriptedTurn;

std::unique_ptr<OpenAiModel> MakeModel(const FakeOpenAiServer& server, RetryPolicy retry,
                                       std::string key = "sk-test", std::string model = "gpt-4o") {
  return testing::CreateTestModel<OpenAiModel>(
      OpenAiOptions{.model = std::move(model), .api_key = std::move(key)}, server,
      std::move(retry));
}

ModelRequest BeBriefRequest() {
  ModelRequest r;
  r.system = "Be brief.";
  r.messages.push_back(Message::User("Hi"));
  return r;
}

TEST(OpenAiTest, MapsTheConversationToChatMessages) {
  FakeOpenAiServer server;
  server.Enqueue(ScriptedTurn::Text("ok"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy());
  ModelRequest req = BeBriefRequest();
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

TEST(OpenAiTest, ALocalServerNeedsNoKey) {
  FakeOpenAiServer server;
  server.Enqueue(ScriptedTurn::Text("local"));
  RetryRecorder rr;
  auto model = MakeModel(server, rr.Policy(), "", "qwen2.5-coder:7b");
  auto r = model->Generate(BeBriefRequest(), {});
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

}  // namespace
}  // namespace deepbox::agent
