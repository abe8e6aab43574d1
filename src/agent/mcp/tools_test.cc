#include "agent/mcp/tools.h"

#include <gtest/gtest.h>

#include <mutex>

#include "agent/deep_agent.h"
#include "agent/testing/scripted_model.h"
#include "agent/testing/test_sandbox.h"
#include "mcp/http_transport.h"
#include "mcp/testing/test_registry.h"

namespace deepbox::agent {
namespace {

std::string TestServer() { return std::string(DEEPBOX_BIN_DIR) + "/mcp_test_server"; }

struct Problems {
  std::mutex mu;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& m) {
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(m);
    };
  }
};

McpServerConfig Stdio(std::string name, std::vector<std::string> cmd) {
  McpServerConfig c;
  c.name = std::move(name);
  c.command = std::move(cmd);
  c.source = "test";
  return c;
}

ToolPtr Find(const McpToolset& set, const std::string& name) {
  for (const auto& t : set.tools()) {
    if (t->name() == name) return t;
  }
  return nullptr;
}

ToolResult Invoke(Tool& tool, json::object args, std::string* streamed = nullptr) {
  ToolContext ctx;
  if (streamed) ctx.on_output = [&](std::string_view s) { *streamed += s; };
  return tool.Invoke(ctx, args);
}

TEST(McpTools, NamesAreWhatModelApisAccept) {
  EXPECT_EQ(McpToolName("files", "read_file"), "mcp__files__read_file");
  EXPECT_EQ(McpToolName("my server", "a.b/c"), "mcp__my_server__a_b_c");
  std::string longname = McpToolName(std::string(40, 's'), std::string(40, 't'));
  EXPECT_EQ(longname.size(), 64u);
  EXPECT_NE(longname, McpToolName(std::string(40, 's'), std::string(39, 't') + "u"));
}

TEST(McpTools, HostStdioServersModernAndLegacy) {
  Problems problems;
  McpToolsetOptions o;
  o.on_problem = problems.sink();
  auto set = McpToolset::Start(
      {Stdio("modern", {TestServer()}), Stdio("legacy", {TestServer(), "--legacy"}),
       Stdio("missing", {"/nonexistent/server"})},
      o);
  EXPECT_EQ(set->tools().size(), 10u);  // 5 tools on each of two servers
  ASSERT_EQ(problems.lines.size(), 1u);
  EXPECT_NE(problems.lines[0].find("MCP server 'missing' (test) did not start"), std::string::npos)
      << problems.lines[0];
  auto describe = set->Describe();
  ASSERT_EQ(describe.size(), 2u);
  // In the order given (LoadMcpConfigs sorts by name).
  EXPECT_EQ(describe[0], "modern: 5 tools (stdio, protocol 2026-07-28)");
  EXPECT_EQ(describe[1], "legacy: 5 tools (stdio, protocol 2025-11-25)");
  for (const char* server : {"modern", "legacy"}) {
    auto echo = Find(*set, McpToolName(server, "echo"));
    ASSERT_TRUE(echo);
    EXPECT_EQ(echo->spec().input_schema.at("required").at(0), "text");
    auto r = Invoke(*echo, {{"text", "hi"}});
    EXPECT_FALSE(r.is_error);
    EXPECT_EQ(r.text, "hi");
    std::string streamed;
    auto p = Invoke(*Find(*set, McpToolName(server, "progress")), {{"count", 2}}, &streamed);
    EXPECT_EQ(p.text, "done with progress");
    EXPECT_EQ(streamed, "step 1step 2");
    auto f = Invoke(*Find(*set, McpToolName(server, "fail")), {});
    EXPECT_TRUE(f.is_error);
  }
}

TEST(McpTools, AServerThatCrashesIsReportedOnceAndWithdrawn) {
  Problems problems;
  McpToolsetOptions o;
  o.on_problem = problems.sink();
  auto set = McpToolset::Start({Stdio("boom", {TestServer()})}, o);
  auto crash = Find(*set, "mcp__boom__crash");
  ASSERT_TRUE(crash);
  auto r = Invoke(*crash, {});
  EXPECT_TRUE(r.is_error);
  EXPECT_NE(r.text.find("the MCP server 'boom' stopped"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("exited with status 3: boom"), std::string::npos) << r.text;
  auto again = Invoke(*Find(*set, "mcp__boom__echo"), {{"text", "x"}});
  EXPECT_TRUE(again.is_error);
  EXPECT_NE(again.text.find("is not running"), std::string::npos) << again.text;
  ASSERT_EQ(problems.lines.size(), 1u);
  EXPECT_NE(problems.lines[0].find("MCP server 'boom' stopped"), std::string::npos);
  EXPECT_NE(problems.lines[0].find("its tools are withdrawn"), std::string::npos);
}

// Withdrawn means the model is no longer offered them: the turn after the
// crash lists none of the dead server's tools, the others stay.
TEST(McpTools, ADeadServersToolsLeaveTheModelsToolList) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto set = McpToolset::Start({Stdio("boom", {TestServer()}), Stdio("ok", {TestServer()})}, {});
  ASSERT_TRUE(Find(*set, "mcp__boom__crash"));
  auto model = std::make_shared<testing::ScriptedModel>();
  model->Tools({testing::Call("c1", "mcp__boom__crash", {})});
  model->Text("done");
  DeepAgentOptions ao;
  ao.model = model;
  ao.sandbox = &sbd->client();
  ao.tools = set->tools();
  auto agent = DeepAgent::Create(std::move(ao));
  ASSERT_TRUE(agent) << agent.error().message;
  auto result = (*agent)->Run("crash it", RunCallbacks{});
  EXPECT_EQ(result.stop_reason, StopReason::kCompleted);
  const auto requests = model->requests();
  ASSERT_EQ(requests.size(), 2u);
  auto offered = [](const auto& request, std::string_view prefix) {
    int n = 0;
    for (const auto& s : request.tools) n += s.name.rfind(prefix, 0) == 0;
    return n;
  };
  EXPECT_GT(offered(requests[0], "mcp__boom__"), 0);
  EXPECT_EQ(offered(requests[1], "mcp__boom__"), 0);
  EXPECT_EQ(offered(requests[1], "mcp__ok__"), offered(requests[0], "mcp__ok__"));
  EXPECT_GT(offered(requests[1], "read_file"), 0);
}

TEST(McpTools, StdioServerInsideTheSandbox) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  McpToolsetOptions o;
  o.sandbox = &sbd->client();
  auto c = Stdio("boxed", {TestServer()});
  c.sandbox = true;
  c.env["MARK"] = "in-sandbox";
  Problems problems;
  o.on_problem = problems.sink();
  auto set = McpToolset::Start({c}, o);
  ASSERT_TRUE(problems.lines.empty()) << problems.lines[0];
  auto echo = Find(*set, "mcp__boxed__echo");
  ASSERT_TRUE(echo);
  EXPECT_EQ(Invoke(*echo, {{"text", "from the sandbox"}}).text, "from the sandbox");
  set->Close();
  // No sandbox, no server: reported, not run on the host instead.
  McpToolsetOptions none;
  none.on_problem = problems.sink();
  auto unboxed = McpToolset::Start({c}, none);
  EXPECT_TRUE(unboxed->tools().empty());
  EXPECT_NE(problems.lines.back().find("there is no sandbox"), std::string::npos);
}

// After a suspend the sandbox's processes are gone: RestartSandboxed starts
// its servers again. The server reads its arguments from the sandbox, so
// each start can list other tools, or refuse to start.
TEST(McpTools, SandboxedServersStartAgainWithTheToolsTheyStillHave) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& box = sbd->client();
  const std::string args = box.root() + "/mcp-args";
  const std::string refuse = box.root() + "/mcp-refuse";
  ASSERT_TRUE(box.Write(args, ""));
  McpToolsetOptions o;
  o.sandbox = &box;
  Problems problems;
  o.on_problem = problems.sink();
  auto c = Stdio(
      "boxed", {"/bin/sh", "-c",
                "test -e " + refuse + " && exit 7; exec " + TestServer() + " $(cat " + args + ")"});
  c.sandbox = true;
  auto host = Stdio("host", {TestServer()});  // on the host: never started again
  auto set = McpToolset::Start({c, host}, o);
  ASSERT_TRUE(problems.lines.empty()) << problems.lines[0];
  auto echo = Find(*set, "mcp__boxed__echo");
  auto crash = Find(*set, "mcp__boxed__crash");
  ASSERT_TRUE(echo && crash);
  EXPECT_EQ(Invoke(*echo, {{"text", "before"}}).text, "before");

  // Started again without `crash`: withdrawn, and a call says why.
  ASSERT_TRUE(box.Write(args, "--no-crash"));
  EXPECT_EQ(set->RestartSandboxed(), 1u);
  ASSERT_EQ(problems.lines.size(), 1u);
  EXPECT_EQ(problems.lines[0],
            "MCP server 'boxed' started again without crash: that tool is "
            "withdrawn");
  EXPECT_EQ(Invoke(*echo, {{"text", "after"}}).text, "after");
  EXPECT_FALSE(crash->Available());
  auto gone = Invoke(*crash, {});
  EXPECT_TRUE(gone.is_error);
  EXPECT_NE(gone.text.find("no longer has the tool 'crash'"), std::string::npos) << gone.text;

  // A server that does not start again: its tools answer naming it.
  ASSERT_TRUE(box.Write(refuse, ""));
  set->RestartSandboxed();
  ASSERT_EQ(problems.lines.size(), 2u);
  EXPECT_NE(problems.lines[1].find("MCP server 'boxed' (test) did not start again after the "
                                   "sandbox was suspended"),
            std::string::npos)
      << problems.lines[1];
  EXPECT_FALSE(echo->Available());
  auto refused = Invoke(*echo, {{"text", "x"}});
  EXPECT_TRUE(refused.is_error);
  EXPECT_NE(refused.text.find("the MCP server 'boxed' is not running"), std::string::npos)
      << refused.text;
  EXPECT_EQ(Invoke(*Find(*set, "mcp__host__echo"), {{"text", "host"}}).text, "host");

  // The next resume tries again; with `crash` back, it is offered again.
  ASSERT_TRUE(box.Delete(refuse));
  ASSERT_TRUE(box.Write(args, ""));
  set->RestartSandboxed();
  EXPECT_EQ(problems.lines.size(), 2u);
  EXPECT_TRUE(echo->Available() && crash->Available());
  EXPECT_EQ(Invoke(*echo, {{"text", "again"}}).text, "again");
  auto describe = set->Describe();
  EXPECT_EQ(describe[0], "boxed: 5 tools (stdio in the sandbox, protocol 2026-07-28)");
}

// Tools a server gained are not added mid-thread: reported only.
TEST(McpTools, ToolsAServerGainedOnARestartAreNotOffered) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& box = sbd->client();
  const std::string args = box.root() + "/mcp-args";
  ASSERT_TRUE(box.Write(args, "--no-crash"));
  McpToolsetOptions o;
  o.sandbox = &box;
  Problems problems;
  o.on_problem = problems.sink();
  auto c = Stdio("grows", {"/bin/sh", "-c", "exec " + TestServer() + " $(cat " + args + ")"});
  c.sandbox = true;
  auto set = McpToolset::Start({c}, o);
  EXPECT_EQ(set->tools().size(), 4u);
  ASSERT_TRUE(box.Write(args, ""));
  set->RestartSandboxed();
  EXPECT_EQ(set->tools().size(), 4u);
  EXPECT_FALSE(Find(*set, "mcp__grows__crash"));
  ASSERT_EQ(problems.lines.size(), 1u);
  EXPECT_EQ(problems.lines[0],
            "MCP server 'grows' started again with new tools, not offered in this session (start "
            "a new one for them): crash");
}

TEST(McpTools, HttpServer) {
  mcp::McpServer server(mcp::testing::TestRegistry(), mcp::ServerConfig{});
  mcp::HttpTransportOptions ho;
  ho.bearer_token = "t0k";
  auto http = mcp::McpHttpServer::Start(server, net::Endpoint::Parse("127.0.0.1:0").value(), ho);
  ASSERT_TRUE(http);
  McpServerConfig c;
  c.name = "web";
  c.http = true;
  c.url = "http://127.0.0.1:" + std::to_string((*http)->port()) + "/mcp";
  c.headers["Authorization"] = "Bearer t0k";
  auto set = McpToolset::Start({c}, {});
  auto echo = Find(*set, "mcp__web__echo");
  ASSERT_TRUE(echo);
  EXPECT_EQ(Invoke(*echo, {{"text", "over http"}}).text, "over http");
}

TEST(McpTools, TheAgentCallsThemThroughItsApprovalPath) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto set = McpToolset::Start({Stdio("t", {TestServer()})}, {});
  auto model = std::make_shared<testing::ScriptedModel>();
  model->Tools({testing::Call("c1", "mcp__t__echo", {{"text", "approved"}})});
  model->Tools({testing::Call("c2", "mcp__t__echo", {{"text", "rejected"}})});
  model->Text("done");
  DeepAgentOptions ao;
  ao.model = model;
  ao.sandbox = &sbd->client();
  ao.tools = set->tools();
  for (const auto& n : set->tool_names()) ao.interrupt_on[n] = InterruptConfig{};
  auto agent = DeepAgent::Create(std::move(ao));
  ASSERT_TRUE(agent) << agent.error().message;
  int asked = 0;
  RunCallbacks cb;
  cb.on_interrupt = [&](const InterruptRequest& req) {
    ++asked;
    EXPECT_EQ(req.action_requests.at(0).name, asked == 1 ? "mcp__t__echo" : "mcp__t__echo");
    return std::vector<Decision>{asked == 1 ? Decision::Approve() : Decision::Reject("no")};
  };
  auto result = (*agent)->Run("use the tool", cb);
  EXPECT_EQ(result.stop_reason, StopReason::kCompleted);
  EXPECT_EQ(asked, 2);
  std::vector<std::string> tool_texts;
  for (const auto& m : result.messages) {
    if (m.role == Role::kTool) tool_texts.push_back(m.text);
  }
  ASSERT_EQ(tool_texts.size(), 2u);
  EXPECT_EQ(tool_texts[0], "approved");
  EXPECT_NE(tool_texts[1], "rejected");  // never ran
  // The model was offered the tool with the server's schema.
  bool offered = false;
  const auto requests = model->requests();  // a copy: iterate what outlives the loop
  ASSERT_FALSE(requests.empty());
  for (const auto& s : requests[0].tools) {
    offered = offered || (s.name == "mcp__t__echo" && s.input_schema.contains("properties"));
  }
  EXPECT_TRUE(offered);
}

}  // namespace
}  // namespace deepbox::agent
