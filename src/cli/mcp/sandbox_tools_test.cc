#include "cli/mcp/sandbox_tools.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "agent/testing/tool_runner.h"
#include "cli/mcp/testing/daemon_provider.h"
#include "common/base64.h"
#include "mcp/testing/test_registry.h"

namespace deepbox::mcp {
namespace {

using agent::testing::Args;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class ToolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(deepbox::testing::ScopedSandboxd::DefaultBinary().c_str(), X_OK) != 0) {
      GTEST_SKIP() << "no deepbox-sandboxd binary";
    }
    Make({});
  }
  void Make(SandboxToolsOptions options) {
    auto b = std::make_unique<testing::DaemonProvider>();
    provider_ = b.get();
    std::vector<std::unique_ptr<SandboxProvider>> v;
    v.push_back(std::move(b));
    broker_ = std::make_shared<SandboxBroker>(BrokerOptions{}, std::move(v));
    registry_ = ToolRegistry();
    AddSandboxTools(registry_, broker_, options);
  }

  json::object Call(const std::string& name, json::object args,
                    testing::PlainContext* ctx = nullptr) {
    testing::PlainContext local;
    json::object params;
    params["name"] = name;
    params["arguments"] = std::move(args);
    auto r = registry_.Call(params, ctx ? *ctx : local);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : json::object{};
  }
  static std::string Text(const json::object& result) {
    return std::string(result.at("content").at(0).at("text").as_string());
  }
  static std::string SandboxOf(const json::object& result) {
    return std::string(result.at("_meta").at(kMetaSandboxId).as_string());
  }

  testing::DaemonProvider* provider_ = nullptr;
  std::shared_ptr<SandboxBroker> broker_;
  ToolRegistry registry_;
};

TEST_F(ToolsTest, SchemasAreStrictAndTakeASandboxId) {
  std::vector<std::string> names;
  for (const auto& t : registry_.tools()) {
    names.push_back(t.name);
    EXPECT_EQ(t.input_schema.at("additionalProperties"), false) << t.name;
    EXPECT_EQ(t.input_schema.at("type"), "object") << t.name;
    bool lifecycle = t.name == "sandbox_create" || t.name == "sandbox_list";
    EXPECT_EQ(t.input_schema.at("properties").as_object().contains("sandbox_id"), !lifecycle)
        << t.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"sandbox_create", "sandbox_list", "sandbox_delete",
                                             "sandbox_pause", "sandbox_suspend", "sandbox_resume",
                                             "sandbox_snapshot", "execute", "ls", "read_file",
                                             "write_file", "edit_file", "glob", "grep",
                                             "upload_file", "download_file"}));
}

TEST_F(ToolsTest, FileToolsAnswerExactlyAsTheAgentsTools) {
  auto w =
      Call("write_file", Args({{"file_path", "notes/a.txt"}, {"content", "alpha\nbeta\ngamma\n"}}));
  ASSERT_EQ(w.at("isError"), false) << Text(w);
  std::string id = SandboxOf(w);
  EXPECT_EQ(provider_->created(), 1);  // the default sandbox, made by the first call

  // The same calls through the agent's own tools on the same sandbox.
  auto sandbox = broker_->Get(id);
  ASSERT_TRUE(sandbox);
  agent::testing::ToolRunner runner(**sandbox, agent::MakeFilesystemTools());
  struct Case {
    const char* tool;
    json::object args;
  } cases[] = {
      {"read_file", Args({{"file_path", "notes/a.txt"}})},
      {"read_file", Args({{"file_path", "notes/a.txt"}, {"offset", 1}, {"limit", 1}})},
      {"read_file", Args({{"file_path", "missing.txt"}})},
      {"ls", Args({{"path", "notes"}})},
      {"glob", Args({{"pattern", "**/*.txt"}})},
      {"grep", Args({{"pattern", "eta"}})},
      {"grep", Args({{"pattern", "a"}, {"output_mode", "count"}})},
  };
  for (auto& c : cases) {
    auto mcp = Call(c.tool, c.args);
    auto direct = runner.Run(c.tool, c.args);
    EXPECT_EQ(Text(mcp), direct.text) << c.tool << " " << ToJson(c.args);
    EXPECT_EQ(mcp.at("isError").as_bool(), direct.is_error) << c.tool;
    EXPECT_EQ(SandboxOf(mcp), id);
  }
  auto e =
      Call("edit_file",
           Args({{"file_path", "notes/a.txt"}, {"old_string", "beta"}, {"new_string", "BETA"}}));
  auto e2 = runner.Run(
      "edit_file",
      Args({{"file_path", "notes/a.txt"}, {"old_string", "BETA"}, {"new_string", "beta"}}));
  EXPECT_EQ(e.at("isError"), false) << Text(e);
  EXPECT_FALSE(e2.is_error) << e2.text;
  EXPECT_EQ(Text(e), e2.text);  // the message names the file, not the strings
  auto again = Call("write_file", Args({{"file_path", "notes/a.txt"}, {"content", "x"}}));
  auto direct_again =
      runner.Run("write_file", Args({{"file_path", "notes/a.txt"}, {"content", "x"}}));
  EXPECT_EQ(Text(again), direct_again.text);
  EXPECT_EQ(again.at("isError").as_bool(), direct_again.is_error);
}

TEST_F(ToolsTest, BadArgumentsAreActionableToolErrors) {
  auto r = Call("read_file", Args({{"file_path", "/workspace/a"}, {"offset", "5"}}));
  EXPECT_EQ(r.at("isError"), true);
  EXPECT_EQ(Text(r),
            "Invalid arguments for tool read_file:\n - 'offset' must be an integer, not a "
            "string\nFix the arguments and call the tool again.");
  r = Call("execute", Args({{"cmd", "ls"}}));
  EXPECT_EQ(r.at("isError"), true);
  EXPECT_NE(Text(r).find("missing required argument 'command'"), std::string::npos);
  EXPECT_NE(Text(r).find("unknown argument 'cmd'"), std::string::npos);
  EXPECT_EQ(provider_->created(), 0);  // nothing ran, no sandbox made
  r = Call("execute", Args({{"command", "true"}, {"sandbox_id", "sb-00000000dead"}}));
  EXPECT_EQ(r.at("isError"), true);
  EXPECT_NE(Text(r).find("no sandbox 'sb-00000000dead'"), std::string::npos) << Text(r);
}

TEST_F(ToolsTest, ExecuteStreamsProgressAndReportsTheExitStatus) {
  testing::PlainContext ctx;
  auto r = Call("execute", Args({{"command", "echo one; echo two >&2; exit 3"}}), &ctx);
  ASSERT_EQ(r.at("isError"), false) << Text(r);
  EXPECT_EQ(Text(r), "one\ntwo\n\n[Command failed with exit code 3]");
  EXPECT_EQ(r.at("structuredContent").at("exit_code"), 3);
  EXPECT_EQ(r.at("structuredContent").at("timed_out"), false);
  EXPECT_EQ(r.at("structuredContent").at("sandbox_id"), json::value(SandboxOf(r)));
  std::string streamed;
  double last = 0;
  for (const auto& [p, m] : ctx.progress) {
    EXPECT_GT(p, last);
    last = p;
    streamed += m;
  }
  EXPECT_EQ(streamed, "one\ntwo\n");
  // Its start and end as log messages (sent only to a client that set a
  // level): the end is a warning, the command having failed.
  ASSERT_EQ(ctx.logs.size(), 2u);
  EXPECT_EQ(ctx.logs[0].level, LogLevel::kInfo);
  EXPECT_EQ(ctx.logs[0].logger, "deepbox.execute");
  EXPECT_EQ(ctx.logs[0].data.at("command"), "echo one; echo two >&2; exit 3");
  EXPECT_EQ(ctx.logs[0].data.at("sandbox_id"), json::value(SandboxOf(r)));
  EXPECT_EQ(ctx.logs[1].level, LogLevel::kWarning);
  EXPECT_EQ(ctx.logs[1].data.at("exit_code"), 3);
  EXPECT_EQ(ctx.logs[1].data.at("output_bytes"), 8);

  auto t = Call("execute", Args({{"command", "sleep 30"}, {"timeout", 1}}));
  EXPECT_EQ(t.at("structuredContent").at("exit_code"), 124);
  EXPECT_EQ(t.at("structuredContent").at("timed_out"), true);
  EXPECT_NE(Text(t).find("Command timed out after 1 seconds"), std::string::npos) << Text(t);
}

TEST_F(ToolsTest, CancellingExecuteKillsTheCommand) {
  testing::PlainContext ctx;
  std::thread canceller([&] {
    // Cancel once the command has started (it printed its marker).
    for (int i = 0; i < 3000; ++i) {
      bool started = false;
      for (const auto& [p, m] : ctx.progress) started = started || m.find("started") != m.npos;
      if (started) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ctx.cancel = true;
  });
  auto r =
      Call("execute", Args({{"command", "echo $$ > pid; echo started; exec sleep 300"}}), &ctx);
  canceller.join();
  EXPECT_NE(Text(r).find("[Command cancelled]"), std::string::npos) << Text(r);
  // The daemon kills its process group; give the kill a moment to land.
  std::string state;
  for (int i = 0; i < 300; ++i) {
    state = Text(Call("execute", Args({{"command",
                                        "kill -0 $(cat pid) 2>/dev/null && echo alive "
                                        "|| echo gone"}})));
    if (state.find("gone") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(state.find("gone"), std::string::npos) << state;
}

TEST_F(ToolsTest, BinaryFilesRoundTrip) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  bytes += std::string("\0\xff\x80", 3);
  auto up = Call("upload_file", Args({{"file_path", "bin/data.bin"},
                                      {"content_base64", Base64Encode(bytes)},
                                      {"mode", 0755}}));
  ASSERT_EQ(up.at("isError"), false) << Text(up);
  auto sb = broker_->Get(SandboxOf(up));
  ASSERT_TRUE(sb);
  std::string root = (*sb)->root();
  EXPECT_EQ(up.at("structuredContent").at("path"), json::value(root + "/bin/data.bin"));
  EXPECT_EQ(up.at("structuredContent").at("size"), static_cast<int64_t>(bytes.size()));
  auto down = Call("download_file", Args({{"file_path", "bin/data.bin"}}));
  ASSERT_EQ(down.at("isError"), false) << Text(down);
  const auto& res = down.at("content").at(1).at("resource");
  EXPECT_EQ(res.at("uri"), json::value("file://" + root + "/bin/data.bin"));
  EXPECT_EQ(Base64Decode(std::string(res.at("blob").as_string())), bytes);
  auto mode = Call("execute", Args({{"command", "stat -c %a bin/data.bin"}}));
  EXPECT_EQ(Text(mode).substr(0, 4), "755\n");
  auto bad = Call("upload_file", Args({{"file_path", "x"}, {"content_base64", "!!!"}}));
  EXPECT_EQ(bad.at("isError"), true);
  auto dir = Call("download_file", Args({{"file_path", "bin"}}));
  EXPECT_EQ(dir.at("isError"), true);
}

TEST_F(ToolsTest, Lifecycle) {
  auto c = Call("sandbox_create",
                Args({{"labels", json::object{{"team", "ml"}}}, {"ttl_seconds", 120}}));
  ASSERT_EQ(c.at("isError"), false) << Text(c);
  std::string id = std::string(c.at("structuredContent").at("sandbox_id").as_string());
  EXPECT_EQ(c.at("structuredContent").at("labels").at("team"), "ml");
  auto w =
      Call("write_file", Args({{"file_path", "f"}, {"content", "in " + id}, {"sandbox_id", id}}));
  EXPECT_EQ(SandboxOf(w), id);
  EXPECT_EQ(provider_->created(), 1);  // no default sandbox was needed

  auto l = Call("sandbox_list", Args({{"selector", "team=ml"}}));
  ASSERT_EQ(l.at("isError"), false) << Text(l);
  ASSERT_EQ(l.at("structuredContent").at("sandboxes").as_array().size(), 1u);
  EXPECT_EQ(l.at("structuredContent").at("default_sandbox_id"), nullptr);
  auto none = Call("sandbox_list", Args({{"selector", "team=web"}}));
  EXPECT_EQ(Text(none), "No sandboxes.");
  auto bad = Call("sandbox_create", Args({{"labels", json::object{{"bad key!", "v"}}}}));
  EXPECT_EQ(bad.at("isError"), true);
  auto badsel = Call("sandbox_list", Args({{"selector", "=="}}));
  EXPECT_EQ(badsel.at("isError"), true);

  auto d = Call("sandbox_delete", Args({{"sandbox_id", id}}));
  EXPECT_EQ(Text(d), "Deleted sandbox " + id + ".");
  EXPECT_FALSE(provider_->Exists(id));
  auto gone = Call("read_file", Args({{"file_path", "f"}, {"sandbox_id", id}}));
  EXPECT_EQ(gone.at("isError"), true);

  auto md = Call("sandbox_create", Args({{"make_default", true}}));
  std::string def = std::string(md.at("structuredContent").at("sandbox_id").as_string());
  auto uses = Call("execute", Args({{"command", "true"}}));
  EXPECT_EQ(SandboxOf(uses), def);
}

TEST_F(ToolsTest, LongOutputKeepsItsHeadAndTailAndIsSavedWhole) {
  // 300 000 bytes of "y\n", then the line a model needs.
  auto r = Call("execute",
                Args({{"command", "yes | head -c 300000; echo IMPORTANT-ERROR-AT-END; exit 1"}}));
  ASSERT_EQ(r.at("isError"), false) << Text(r).substr(0, 200);
  std::string t = Text(r);
  EXPECT_LE(t.size(), 81000u);
  EXPECT_THAT(t, StartsWith("y\ny\ny\n"));
  EXPECT_THAT(t, HasSubstr("IMPORTANT-ERROR-AT-END\n\n[Command failed with exit code 1]"));
  EXPECT_THAT(t, HasSubstr("the output was 300023 bytes"));
  const auto& st = r.at("structuredContent");
  EXPECT_EQ(st.at("exit_code"), 1);
  EXPECT_EQ(st.at("output_bytes"), 300023);
  std::string path(st.at("output_file").as_string());
  auto sb = broker_->Get(SandboxOf(r));
  ASSERT_TRUE(sb);
  EXPECT_THAT(path, StartsWith((*sb)->root() + "/large_tool_results/execute_"));
  EXPECT_THAT(t, HasSubstr("All of it is saved in " + path));
  // The omitted count is what is missing between the two parts shown.
  size_t open = t.find("\n\n... [");
  size_t close = t.find("] ...\n\n");
  ASSERT_NE(open, std::string::npos);
  ASSERT_NE(close, std::string::npos);
  uint64_t omitted = std::stoull(t.substr(open + 7));
  size_t shown =
      open + (t.size() - close - 7) - std::string("\n[Command failed with exit code 1]").size();
  EXPECT_EQ(omitted + shown, 300023u);
  std::string expected;
  for (int i = 0; i < 150000; ++i) expected += "y\n";
  expected += "IMPORTANT-ERROR-AT-END\n\n[Command failed with exit code 1]";
  auto saved = (*sb)->Download(path);
  ASSERT_TRUE(saved) << saved.error().message;
  EXPECT_EQ(*saved, expected);
  // A short output is returned whole, as before.
  auto small = Call("execute", Args({{"command", "echo hi"}}));
  EXPECT_EQ(Text(small), "hi\n\n[Command succeeded with exit code 0]");
  EXPECT_FALSE(small.at("structuredContent").as_object().contains("output_file"));
}

TEST_F(ToolsTest, OutputBeyondTheSavedCapKeepsItsHeadAndTailInTheFile) {
  SandboxToolsOptions o;
  o.max_inline_output_bytes = 1000;
  o.max_saved_output_bytes = 20000;
  Make(o);
  auto r = Call("execute", Args({{"command", "yes | head -c 100000; echo END"}}));
  std::string t = Text(r);
  EXPECT_LE(t.size(), 1700u) << t;
  EXPECT_THAT(t, HasSubstr("END\n\n[Command succeeded with exit code 0]"));
  EXPECT_THAT(t, HasSubstr("the output was 100004 bytes"));
  std::string path(r.at("structuredContent").at("output_file").as_string());
  EXPECT_THAT(t, HasSubstr("Its first 15000 and last 5000 bytes are saved in " + path));
  auto sb = broker_->Get(SandboxOf(r));
  auto saved = (*sb)->Download(path);
  ASSERT_TRUE(saved);
  EXPECT_THAT(*saved, HasSubstr("\n\n... [80004 bytes not saved] ...\n\n"));
  EXPECT_THAT(*saved, StartsWith("y\ny\n"));
  EXPECT_THAT(*saved, HasSubstr("y\nEND\n\n[Command succeeded with exit code 0]"));
}

TEST_F(ToolsTest, ASandboxThatDiesIsOneClearErrorAndItsReplacementIsAnnounced) {
  auto w = Call("write_file", Args({{"file_path", "work.txt"}, {"content", "work"}}));
  std::string id = SandboxOf(w);
  std::string socket = provider_->daemon(id)->socket_path();
  provider_->daemon(id)->Kill();
  auto r = Call("read_file", Args({{"file_path", "work.txt"}}));
  EXPECT_EQ(r.at("isError"), true);
  std::string t = Text(r);
  EXPECT_THAT(t, HasSubstr("sandbox '" + id + "' is gone: its daemon was killed"));
  EXPECT_THAT(t, HasSubstr("Its files are lost"));
  EXPECT_THAT(t, HasSubstr("the next call without sandbox_id starts a new, empty default"));
  EXPECT_THAT(t, Not(HasSubstr("unix:")));
  EXPECT_THAT(t, Not(HasSubstr(socket)));
  EXPECT_THAT(t, Not(HasSubstr("connect(")));
  EXPECT_THAT(t, Not(HasSubstr("ECONNREFUSED")));
  auto next = Call("read_file", Args({{"file_path", "work.txt"}}));
  std::string fresh = SandboxOf(next);
  EXPECT_NE(fresh, id);
  EXPECT_THAT(Text(next),
              StartsWith("Note: this call ran in a new, empty default sandbox (" + fresh + ")"));
  EXPECT_THAT(Text(next), HasSubstr("the files it held are lost"));
  EXPECT_THAT(Text(next), HasSubstr("file_not_found"));
  auto third = Call("execute", Args({{"command", "echo ok"}}));
  EXPECT_EQ(Text(third), "ok\n\n[Command succeeded with exit code 0]");

  // An explicit sandbox: no replacement, the same clear error each time.
  auto c = Call("sandbox_create", Args({}));
  std::string made(c.at("structuredContent").at("sandbox_id").as_string());
  ASSERT_TRUE(Call("execute", Args({{"command", "true"}, {"sandbox_id", made}})).at("isError") ==
              false);
  provider_->daemon(made)->Kill();
  int before = provider_->created();
  for (int i = 0; i < 2; ++i) {
    auto e = Call("execute", Args({{"command", "true"}, {"sandbox_id", made}}));
    EXPECT_EQ(e.at("isError"), true);
    EXPECT_THAT(Text(e), HasSubstr("sandbox '" + made + "' is gone"));
    EXPECT_THAT(Text(e), Not(HasSubstr("unix:")));
    if (i == 0) {
      EXPECT_THAT(Text(e), HasSubstr("create a new sandbox with sandbox_create"));
    }
  }
  EXPECT_EQ(provider_->created(), before);
}

TEST_F(ToolsTest, DescriptionsAreTrueForMcp) {
  for (const auto& tool : registry_.tools()) {
    for (const char* deepagents_only : {"SandboxBackendProtocol", "Offloaded large tool results",
                                        "may be offloaded", "this tool errors otherwise"}) {
      EXPECT_THAT(tool.description, Not(HasSubstr(deepagents_only))) << tool.name;
    }
    if (tool.name == "execute") {
      EXPECT_THAT(tool.description, HasSubstr("the default timeout is 1800 seconds"));
      EXPECT_THAT(tool.description, HasSubstr("Output longer than 80000 bytes"));
    }
    if (tool.input_schema.at("properties").as_object().contains("sandbox_id") &&
        !tool.name.starts_with("sandbox_")) {
      EXPECT_THAT(
          std::string(
              tool.input_schema.at("properties").at("sandbox_id").at("description").as_string()),
          HasSubstr("Omit it to use this client's default sandbox"))
          << tool.name;
    }
  }
  SandboxToolsOptions http;
  http.stateless_clients = true;
  Make(http);
  const ToolDef* read = registry_.Find("read_file");
  ASSERT_NE(read, nullptr);
  EXPECT_THAT(
      std::string(
          read->input_schema.at("properties").at("sandbox_id").at("description").as_string()),
      HasSubstr("must pass it: call sandbox_create first"));
  const ToolDef* create = registry_.Find("sandbox_create");
  EXPECT_THAT(
      std::string(
          create->input_schema.at("properties").at("network").at("description").as_string()),
      HasSubstr("none, the default and the only one this server allows"));
}

}  // namespace
}  // namespace deepbox::mcp
