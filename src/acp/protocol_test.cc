#include "acp/protocol.h"

#include <gtest/gtest.h>

namespace deepbox::acp {
namespace {

TEST(ProtocolTest, InitializeNamesCapabilitiesAndAuth) {
  json::object r = InitializeResult(json::object{{"protocolVersion", 1}}, "1.2.3");
  EXPECT_EQ(r.at("protocolVersion").as_int64(), 1);
  EXPECT_TRUE(r.at("agentCapabilities").at("loadSession").as_bool());
  EXPECT_TRUE(r.at("agentCapabilities").at("promptCapabilities").at("image").as_bool());
  // HTTP MCP servers are taken (from the host), the old HTTP+SSE transport is not.
  EXPECT_TRUE(r.at("agentCapabilities").at("mcpCapabilities").at("http").as_bool());
  EXPECT_FALSE(r.at("agentCapabilities").at("mcpCapabilities").at("sse").as_bool());
  const auto& sessions = r.at("agentCapabilities").at("sessionCapabilities").as_object();
  for (const char* method : {"list", "close", "delete", "resume", "fork"}) {
    EXPECT_TRUE(sessions.contains(method)) << method;
  }
  const auto& auth = r.at("authMethods").as_array();
  ASSERT_FALSE(auth.empty());
  EXPECT_EQ(auth[0].at("vars").at(0).at("name").as_string(), "ANTHROPIC_API_KEY");
  // A version we do not speak is answered with ours.
  EXPECT_EQ(InitializeResult(json::object{{"protocolVersion", 9}}, "x").at("protocolVersion"), 1);
}

TEST(ProtocolTest, SessionInfoTitleIsTheFirstPromptsFirstLine) {
  auto info = SessionInfoJson("th-1", "/p", "Fix the bug  \r\nin calc.py", "2026-12-07T04:00:00Z");
  EXPECT_EQ(info.at("sessionId"), "th-1");
  EXPECT_EQ(info.at("cwd"), "/p");
  EXPECT_EQ(info.at("title"), "Fix the bug");
  EXPECT_EQ(info.at("updatedAt"), "2026-12-07T04:00:00Z");
  // Long: cut at 80 bytes, never inside a character.
  std::string long_prompt = std::string(79, 'a') + "\xc3\xa9tail";
  EXPECT_EQ(SessionInfoJson("t", "/p", long_prompt, "").at("title").as_string(),
            std::string(79, 'a') + "\u2026");
  auto bare = SessionInfoJson("t", "/p", "", "");
  EXPECT_FALSE(bare.contains("title"));
  EXPECT_FALSE(bare.contains("updatedAt"));
}

TEST(ProtocolTest, ClientCapabilities) {
  auto c = ParseClientCapabilities(*ParseJsonObject(
      R"({"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":false},"terminal":true}})"));
  EXPECT_TRUE(c.read_text_file);
  EXPECT_FALSE(c.write_text_file);
  EXPECT_TRUE(c.terminal);
  EXPECT_FALSE(ParseClientCapabilities({}).write_text_file);
}

TEST(ProtocolTest, Modes) {
  for (auto m : {ApprovalMode::kApproveAll, ApprovalMode::kApproveExecute, ApprovalMode::kAuto}) {
    EXPECT_EQ(ParseModeId(ModeId(m)), m);
  }
  EXPECT_FALSE(ParseModeId("yolo"));
  json::object modes = ModesJson(ApprovalMode::kAuto);
  EXPECT_EQ(modes.at("currentModeId").as_string(), "auto");
  EXPECT_EQ(modes.at("availableModes").as_array().size(), 3u);
}

TEST(ProtocolTest, ProjectPaths) {
  EXPECT_EQ(ProjectPathFor("/workspace", "/home/u/p", "/workspace/src/a.py"), "/home/u/p/src/a.py");
  EXPECT_EQ(ProjectPathFor("/workspace", "/home/u/p/", "src/./b/../a.py"), "/home/u/p/src/a.py");
  EXPECT_FALSE(ProjectPathFor("/workspace", "/p", "/workspace/../etc/passwd"));
  EXPECT_FALSE(ProjectPathFor("/workspace", "/p", "/tmp/x"));
  EXPECT_FALSE(ProjectPathFor("/workspace", "/p", "/workspace"));
  EXPECT_FALSE(ProjectPathFor("/workspace", "/p", "/workspace/.git/hooks/pre-commit"));
  EXPECT_FALSE(ProjectPathFor("/workspace", "/p", "/workspace/large_tool_results/x"));
  EXPECT_FALSE(ProjectPathFor("/workspace", "/p", "/workspacex/a"));
  EXPECT_EQ(NormalizeAbsolutePath("/../a//b/./c/.."), "/a/b");
}

TEST(ProtocolTest, ParsePrompt) {
  auto t = ParsePrompt(*ParseJsonObject(
      R"({"prompt":[{"type":"text","text":"fix it"},{"type":"resource_link","name":"a.py","uri":"file:///p/a.py"},
          {"type":"resource","resource":{"uri":"file:///p/b.py","text":"x = 1"}},
          {"type":"image","mimeType":"image/png","data":"iVBORw0KGgo="}]})"));
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->text,
            "fix it\n[@a.py](file:///p/a.py)\n<context ref=\"file:///p/b.py\">\nx = 1\n</context>");
  ASSERT_EQ(t->images.size(), 1u);
  EXPECT_EQ(t->images[0].mime_type, "image/png");
  EXPECT_EQ(t->images[0].base64_data, "iVBORw0KGgo=");
  // What the model API does not take, and an image by URI only.
  for (const char* bad :
       {R"({"prompt":[{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/tiff"}]})",
        R"({"prompt":[{"type":"image","data":"","uri":"file:///a.png","mimeType":"image/png"}]})",
        R"({"prompt":[{"type":"image","data":"%%%not base64","mimeType":"image/png"}]})",
        R"({"prompt":[{"type":"audio","data":"AAAA","mimeType":"audio/wav"}]})"}) {
    EXPECT_FALSE(ParsePrompt(*ParseJsonObject(bad))) << bad;
  }
  EXPECT_FALSE(ParsePrompt({}));
}

TEST(ProtocolTest, PermissionAnswers) {
  auto parse = [](const char* text) { return ParsePermissionAnswer(*ParseJson(text)); };
  EXPECT_EQ(parse(R"({"outcome":{"outcome":"selected","optionId":"allow_once"}})"),
            PermissionAnswer::kAllowOnce);
  EXPECT_EQ(parse(R"({"outcome":{"outcome":"selected","optionId":"allow_always"}})"),
            PermissionAnswer::kAllowAlways);
  EXPECT_EQ(parse(R"({"outcome":{"outcome":"selected","optionId":"reject_once"}})"),
            PermissionAnswer::kReject);
  EXPECT_EQ(parse(R"({"outcome":{"outcome":"selected","optionId":"whatever"}})"),
            PermissionAnswer::kReject);
  EXPECT_EQ(parse(R"({"outcome":{"outcome":"cancelled"}})"), PermissionAnswer::kCancelled);
  EXPECT_EQ(parse("null"), PermissionAnswer::kCancelled);
}

TEST(ProtocolTest, UpdatesAndContent) {
  json::object plan = PlanUpdate(
      *ParseJson(R"([{"content":"a","status":"completed"},{"content":"b","status":"weird"}])")
           ->if_array());
  EXPECT_EQ(plan.at("sessionUpdate").as_string(), "plan");
  EXPECT_EQ(plan.at("entries").at(1).at("status").as_string(), "pending");
  json::object d = DiffContent("/p/a", std::nullopt, "new");
  EXPECT_TRUE(d.at("oldText").is_null());
  json::object t = TerminalContent("term-1");
  EXPECT_EQ(t.at("type").as_string(), "terminal");
  EXPECT_EQ(t.at("terminalId").as_string(), "term-1");
  EXPECT_EQ(ToolKind("edit_file"), "edit");
  EXPECT_EQ(ToolKind("execute"), "execute");
  EXPECT_EQ(ToolTitle("execute", "make"), "Run `make`");
}

}  // namespace
}  // namespace deepbox::acp
