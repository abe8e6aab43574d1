#include "agent/model/factory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>

#include "agent/model/testing/fake_anthropic.h"
#include "agent/model/testing/fake_openai.h"

namespace deepbox::agent {
namespace {

using testing::FakeAnthropicServer;
using testing::FakeOpenAiServer;
using ::testing::HasSubstr;
using testing::ScriptedTurn;

// Clears the model environment for a test and restores it afterwards.
class FactoryTest : public ::testing::Test {
 protected:
  static constexpr const char* kVars[] = {"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
                                          "OPENAI_API_KEY", "OPENAI_BASE_URL", "SSL_CERT_FILE"};
  void SetUp() override {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      saved_.emplace_back(v, old ? std::optional<std::string>(old) : std::nullopt);
      ::unsetenv(v);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  static ModelConfig Fast() {
    ModelConfig c;
    c.retry.max_retries = 0;
    return c;
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST_F(FactoryTest, ParsesModelSpecs) {
  auto bare = ParseModelSpec("claude-sonnet-4-6");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->provider, ModelProvider::kAnthropic);
  EXPECT_EQ(bare->model, "claude-sonnet-4-6");
  EXPECT_EQ(ParseModelSpec("")->model, "claude-sonnet-4-6");
  EXPECT_EQ(ParseModelSpec("anthropic:claude-haiku-4-5")->model, "claude-haiku-4-5");
  auto oa = ParseModelSpec("openai:qwen2.5-coder:7b");
  ASSERT_TRUE(oa);
  EXPECT_EQ(oa->provider, ModelProvider::kOpenAi);
  EXPECT_EQ(oa->model, "qwen2.5-coder:7b");
  auto rp = ParseModelSpec("replay:/tmp/a:b.jsonl");
  ASSERT_TRUE(rp);
  EXPECT_EQ(rp->provider, ModelProvider::kReplay);
  EXPECT_EQ(rp->model, "/tmp/a:b.jsonl");
  auto unknown = ParseModelSpec("gpt-4o");
  ASSERT_FALSE(unknown);
  EXPECT_THAT(unknown.error().message,
              HasSubstr("use anthropic:MODEL, openai:MODEL (e.g. openai:gpt-4o) or replay:FILE"));
  EXPECT_FALSE(ParseModelSpec("gemini:pro"));
  EXPECT_FALSE(ParseModelSpec("openai:"));
  EXPECT_FALSE(ParseModelSpec("replay:"));
}

TEST_F(FactoryTest, MissingAnthropicKeySaysHowToProvideOne) {
  auto m = CreateChatModel("claude-sonnet-4-6", Fast());
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code, ErrorCode::kUnauthenticated);
  EXPECT_EQ(m.error().message,
            "ANTHROPIC_API_KEY is not set. Export it (export ANTHROPIC_API_KEY=sk-ant-...), or "
            "run with --model replay:FILE to use a recorded conversation.");
  ::setenv("ANTHROPIC_API_KEY", "sk-ant-env", 1);
  ModelConfig explicit_empty = Fast();
  explicit_empty.anthropic_api_key = "";  // a value overrides the environment
  EXPECT_FALSE(CreateChatModel("claude-sonnet-4-6", explicit_empty));
  auto from_env = CreateChatModel("claude-sonnet-4-6", Fast());
  ASSERT_TRUE(from_env) << from_env.error().ToString();
  EXPECT_EQ((*from_env)->name(), "anthropic:claude-sonnet-4-6");
  EXPECT_EQ((*from_env)->profile().max_input_tokens, 200000);
}

// ANTHROPIC_BASE_URL at an HTTPS fake, trusted through SSL_CERT_FILE.
TEST_F(FactoryTest, EnvironmentSelectsServerKeyAndCa) {
  FakeAnthropicServer server({.tls = true, .api_key = "sk-ant-env"});
  server.Enqueue(ScriptedTurn::Text("over tls"));
  ::setenv("ANTHROPIC_API_KEY", "sk-ant-env", 1);
  ::setenv("ANTHROPIC_BASE_URL", server.url().c_str(), 1);
  ::setenv("SSL_CERT_FILE", server.ca_file().c_str(), 1);
  auto m = CreateChatModel("anthropic:claude-haiku-4-5", Fast());
  ASSERT_TRUE(m) << m.error().ToString();
  ModelRequest req;
  req.messages.push_back(Message::User("hi"));
  auto r = (*m)->Generate(req, {});
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->message.text, "over tls");
  EXPECT_EQ(server.requests()[0].json.at("model"), "claude-haiku-4-5");
}

TEST_F(FactoryTest, OpenAiFromEnvironmentAndRecording) {
  FakeOpenAiServer server;
  server.Enqueue(ScriptedTurn::Text("local model"));
  ::setenv("OPENAI_BASE_URL", server.url().c_str(), 1);
  std::string rec = (std::filesystem::temp_directory_path() /
                     ("deepbox-factory-" + std::to_string(::getpid()) + ".jsonl"))
                        .string();
  ModelConfig c = Fast();
  c.record_path = rec;
  c.max_input_tokens = 32768;
  auto m = CreateChatModel("openai:llama3", c);
  ASSERT_TRUE(m) << m.error().ToString();
  EXPECT_EQ((*m)->name(), "openai:llama3");
  EXPECT_EQ((*m)->profile().max_input_tokens, 32768);
  ModelRequest req;
  req.messages.push_back(Message::User("hi"));
  auto r = (*m)->Generate(req, {});
  ASSERT_TRUE(r) << r.error().ToString();
  m->reset();
  auto replay = CreateChatModel("replay:" + rec, Fast());
  ASSERT_TRUE(replay) << replay.error().ToString();
  auto again = (*replay)->Generate(req, {});
  ASSERT_TRUE(again) << again.error().ToString();
  EXPECT_EQ(again->message.text, "local model");
  std::filesystem::remove(rec);

  auto missing = CreateChatModel("replay:/nonexistent/x.jsonl", Fast());
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.error().message, HasSubstr("replay /nonexistent/x.jsonl: cannot read"));
}

}  // namespace
}  // namespace deepbox::agent
