// execute, delete, write_todos, permissions, glob timeout and path mapping,
// against the real deepbox-sandboxd daemon.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "agent/background.h"
#include "agent/format.h"
#include "agent/permissions.h"
#include "agent/testing/test_sandbox.h"
#include "agent/testing/tool_runner.h"
#include "agent/text.h"
#include "agent/tools_execute.h"
#include "agent/tools_fs.h"
#include "agent/tools_todos.h"
#include "common/utf8.h"
#include "sandbox/testing/hostile_daemon.h"

namespace deepbox::agent {
namespace {

using testing::Args;
using testing::ToolRunner;

std::vector<ToolPtr> AllTools(ExecuteToolOptions eo = {}, FsToolOptions fo = {}) {
  auto t = MakeFilesystemTools(fo);
  t.push_back(MakeExecuteTool(eo));
  t.push_back(MakeWriteTodosTool());
  return t;
}

// A daemon answering lines for any offset: read_file with offset INT64_MAX
// used to overflow computing the line numbers (undefined behaviour).
TEST(ReadFileTool, HugeOffsetAgainstAHostileDaemonIsAnError) {
  auto d = deepbox::testing::HostileDaemon::Start();
  ASSERT_TRUE(d) << d.error().ToString();
  (*d)->Answer("/deepbox/v1/fs/read",
               R"({"content_base64":"YQpi","size":3,"total_lines":-1,"start_line":0,)"
               R"("lines_returned":2,"more_lines":true})");
  auto client = (*d)->Connect();
  ASSERT_TRUE(client) << client.error().ToString();
  ToolRunner run(**client, AllTools());
  std::string err = run.Err(
      "read_file", Args({{"file_path", "/workspace/a.txt"}, {"offset", INT64_MAX}, {"limit", 5}}));
  EXPECT_NE(err.find("exceeds file length"), std::string::npos) << err;
  // A sane offset over the same answer reads the two lines.
  EXPECT_NE(run.Ok("read_file", Args({{"file_path", "/workspace/a.txt"}, {"offset", 3}})).find("a"),
            std::string::npos);
}

// The optional arguments are pydantic's `T | None` (anyOf [T, null]), as
// deepagents declares them; their values are still checked.
TEST(ToolSchemas, OptionalArgumentsAreValidated) {
  ToolPtr grep = MakeGrepTool();
  EXPECT_EQ(ValidateToolArgs(grep->spec(), Args({{"pattern", "x"}, {"max_count", 5}})),
            std::nullopt);
  json::object none = Args({{"pattern", "x"}});
  none["max_count"] = nullptr;
  none["path"] = nullptr;
  EXPECT_EQ(ValidateToolArgs(grep->spec(), none), std::nullopt);
  auto zero = ValidateToolArgs(grep->spec(), Args({{"pattern", "x"}, {"max_count", 0}}));
  ASSERT_TRUE(zero.has_value());
  EXPECT_NE(zero->find("max_count: Input should be greater than 0"), std::string::npos) << *zero;
  auto text = ValidateToolArgs(grep->spec(), Args({{"pattern", "x"}, {"path", 3}}));
  ASSERT_TRUE(text.has_value());
  EXPECT_NE(text->find("path: Input should be a valid string"), std::string::npos) << *text;
  ToolPtr execute = MakeExecuteTool();
  auto timeout = ValidateToolArgs(execute->spec(), Args({{"command", "x"}, {"timeout", "soon"}}));
  ASSERT_TRUE(timeout.has_value());
  EXPECT_NE(timeout->find("timeout: Input should be a valid integer"), std::string::npos);
}

TEST(ExecuteTool, SuccessFailureAndStderr) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  ToolRunner run(sbd->client(), AllTools());
  EXPECT_EQ(run.Ok("execute", Args({{"command", "echo hi"}})),
            "hi\n\n[Command succeeded with exit code 0]");
  // A failing command is still a successful tool call.
  EXPECT_EQ(run.Ok("execute", Args({{"command", "echo oops >&2; exit 3"}})),
            "oops\n\n[Command failed with exit code 3]");
  // Runs in the workspace root.
  EXPECT_EQ(run.Ok("execute", Args({{"command", "pwd"}})),
            sbd->client().root() + "\n\n[Command succeeded with exit code 0]");
  EXPECT_EQ(run.streamed(), "hi\noops\n" + sbd->client().root() + "\n");
}

// Exec output is the command's exact bytes; what the model and the terminal
// see is valid UTF-8.
TEST(ExecuteTool, BinaryOutputBecomesValidText) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  ToolRunner run(sbd->client(), AllTools());
  EXPECT_EQ(
      run.Ok("execute", Args({{"command", "printf 'ok\\377\\376end\\n'; printf '\\342\\202'"}})),
      "ok\uFFFD\uFFFDend\n\uFFFD\n[Command succeeded with exit code 0]");
  EXPECT_TRUE(IsValidUtf8(run.streamed())) << run.streamed();
  EXPECT_EQ(run.streamed(), "ok\uFFFD\uFFFDend\n\uFFFD");
}

TEST(ExecuteTool, TimeoutValidationAndExpiry) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  ToolRunner run(sbd->client(), AllTools());
  EXPECT_EQ(run.Err("execute", Args({{"command", "true"}, {"timeout", -1}})),
            "Error: timeout must be non-negative, got -1.");
  EXPECT_EQ(run.Err("execute", Args({{"command", "true"}, {"timeout", 3601}})),
            "Error: timeout 3601s exceeds maximum allowed (3600s).");
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(run.Ok("execute", Args({{"command", "echo start; sleep 30"}, {"timeout", 1}})),
            "start\nCommand timed out after 1 seconds\n[Command failed with exit code 124]");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(15));
}

TEST(ExecuteTool, OutputTruncation) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  ExecuteToolOptions eo;
  eo.max_output_bytes = 100;
  ToolRunner run(sbd->client(), AllTools(eo));
  std::string out = run.Ok("execute", Args({{"command", "head -c 5000 /dev/zero | tr '\\0' a"}}));
  EXPECT_EQ(out, std::string(100, 'a') +
                     "\n[Command succeeded with exit code 0]\n[Output was truncated due to size "
                     "limits]");
}

TEST(ExecuteTool, CancelKillsTheCommand) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  auto tool = MakeExecuteTool();
  std::atomic<bool> cancel{false};
  ToolContext ctx;
  ctx.sandbox = &sbd->client();
  ctx.root = sbd->client().root();
  ctx.cancel = &cancel;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancel = true;
  });
  auto t0 = std::chrono::steady_clock::now();
  // The stream callback stops the command at its next output.
  ToolCall chatty{"c2", "execute",
                  Args({{"command", "while true; do echo tick; sleep 0.05; done"}}), ""};
  ctx.call = &chatty;
  ToolResult r = tool->Invoke(ctx, chatty.input);
  canceller.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_TRUE(r.is_error);
  EXPECT_TRUE(r.text.ends_with("\n[Command cancelled]")) << r.text;
}

TEST(DeleteTool, FilesDirectoriesAndMissing) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  ToolRunner run(sb, AllTools());
  std::string root = sb.root();
  ASSERT_TRUE(sb.Upload(root + "/d/a/b.txt", "x"));
  ASSERT_TRUE(sb.Upload(root + "/f.txt", "x"));
  EXPECT_EQ(run.Ok("delete", Args({{"file_path", root + "/f.txt"}})), "Deleted " + root + "/f.txt");
  EXPECT_EQ(run.Ok("delete", Args({{"file_path", root + "/d"}})), "Deleted " + root + "/d");
  EXPECT_FALSE(sb.Stat(root + "/d"));
  EXPECT_EQ(run.Err("delete", Args({{"file_path", root + "/f.txt"}})),
            "Error: '" + root + "/f.txt' not found");
  EXPECT_EQ(run.Err("delete", Args({{"file_path", "../x"}})),
            "Error: Path traversal not allowed: ../x");
}

TEST(WriteTodos, PythonReprAndValidation) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  ToolRunner run(sbd->client(), AllTools());
  auto todos = ParseJson(R"([{"content":"Write fib.py","status":"completed"},)"
                         R"({"content":"Run it","status":"in_progress"}])");
  ASSERT_TRUE(todos);
  EXPECT_EQ(run.Ok("write_todos", Args({{"todos", *todos}})),
            "Updated todo list to [{'content': 'Write fib.py', 'status': 'completed'}, "
            "{'content': 'Run it', 'status': 'in_progress'}]");
  EXPECT_EQ(run.state().todos.size(), 2u);
  auto bad = ParseJson(R"([{"content":"x","status":"done"}])");
  EXPECT_EQ(run.Err("write_todos", Args({{"todos", *bad}})),
            "Error: todo status must be 'pending', 'in_progress' or 'completed', got 'done'");
}

TEST(Paths, RelativePathsLandInTheWorkspaceRoot) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  ToolRunner run(sb, AllTools());
  EXPECT_EQ(run.Ok("write_file", Args({{"file_path", "fib.py"}, {"content", "print(1)\n"}})),
            "Updated file " + sb.root() + "/fib.py");
  EXPECT_EQ(run.Ok("read_file", Args({{"file_path", "./fib.py"}})),
            "@@ lines 1-1 of 1 @@\nprint(1)");
  // This test daemon is confined to its root (it is not a sandbox's init).
  EXPECT_EQ(run.Err("read_file", Args({{"file_path", "/etc/hostname"}})),
            "Error: File '/etc/hostname': permission_denied");
  EXPECT_EQ(run.Ok("glob", Args({{"pattern", "*.py"}})), "['" + sb.root() + "/fib.py']");
  EXPECT_EQ(run.Ok("grep", Args({{"pattern", "print"}})), sb.root() + "/fib.py");
}

TEST(Permissions, DenyAndFilter) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  Sandbox& sb = sbd->client();
  std::string root = sb.root();
  auto perms = PermissionSet::Create({
      {{FsOperation::kRead, FsOperation::kWrite}, {root + "/secrets/**"}, PermissionMode::kDeny},
      {{FsOperation::kWrite}, {root + "/ro/**"}, PermissionMode::kDeny},
  });
  ASSERT_TRUE(perms);
  ASSERT_TRUE(sb.Upload(root + "/secrets/key", "k"));
  ASSERT_TRUE(sb.Upload(root + "/ro/doc.txt", "needle"));
  ASSERT_TRUE(sb.Upload(root + "/ok.txt", "needle"));
  ToolRunner run(sb, AllTools(), &*perms);
  EXPECT_EQ(run.Err("read_file", Args({{"file_path", root + "/secrets/key"}})),
            "Error: permission denied for read on " + root + "/secrets/key");
  EXPECT_EQ(run.Err("write_file", Args({{"file_path", root + "/ro/doc.txt"}, {"content", "x"}})),
            "Error: permission denied for write on " + root + "/ro/doc.txt");
  EXPECT_EQ(run.Err("edit_file", Args({{"file_path", root + "/ro/doc.txt"},
                                       {"old_string", "needle"},
                                       {"new_string", "x"}})),
            "Error: permission denied for write on " + root + "/ro/doc.txt");
  EXPECT_EQ(run.Ok("read_file", Args({{"file_path", root + "/ro/doc.txt"}})),
            "@@ lines 1-1 of 1 @@\nneedle");
  // Listings leave denied entries out.
  EXPECT_EQ(run.Err("ls", Args({{"path", root + "/secrets"}})),
            "Error: permission denied for read on " + root + "/secrets");
  std::string ls = run.Ok("ls", Args({{"path", root}}));
  EXPECT_EQ(ls.find("/secrets/key"), std::string::npos);
  EXPECT_EQ(run.Ok("glob", Args({{"pattern", "*"}, {"path", root}})),
            "['" + root + "/ok.txt', '" + root + "/ro/doc.txt']");
  ASSERT_TRUE(sb.Upload(root + "/secrets/needle.txt", "needle"));
  EXPECT_EQ(run.Ok("grep", Args({{"pattern", "needle"}, {"path", root}})),
            root + "/ok.txt\n" + root + "/ro/doc.txt");
  // Deleting an ancestor of a protected subtree is refused.
  EXPECT_EQ(run.Err("delete", Args({{"file_path", root + "/ro"}})),
            "Error: permission denied for write on " + root + "/ro (matches deny rule(s): " + root +
                "/ro/**)");
}

// A Sandbox whose Glob is slow: forwards everything else to the daemon.
class SlowGlobSandbox : public Sandbox {
 public:
  explicit SlowGlobSandbox(Sandbox& inner) : inner_(inner) {}
  std::string id() const override { return inner_.id(); }
  std::string root() const override { return inner_.root(); }
  Result<ExecResult> Exec(const ExecRequest& r) override { return inner_.Exec(r); }
  Result<ExecResult> ExecStream(const ExecRequest& r, const OutputCallback& cb) override {
    return inner_.ExecStream(r, cb);
  }
  Result<FileInfo> Stat(const std::string& p) override { return inner_.Stat(p); }
  Result<std::vector<FileInfo>> List(const std::string& p) override { return inner_.List(p); }
  Result<ReadResult> Read(const std::string& p, const ReadOptions& o) override {
    return inner_.Read(p, o);
  }
  Status Write(const std::string& p, std::string_view c, uint32_t m) override {
    return inner_.Write(p, c, m);
  }
  Result<EditResult> Edit(const std::string& p, const std::string& a, const std::string& b,
                          bool all) override {
    return inner_.Edit(p, a, b, all);
  }
  Status Mkdir(const std::string& p, bool parents) override { return inner_.Mkdir(p, parents); }
  Status Move(const std::string& a, const std::string& b, bool o) override {
    return inner_.Move(a, b, o);
  }
  Status Delete(const std::string& p, bool r) override { return inner_.Delete(p, r); }
  Result<GlobResult> Glob(const std::string& pattern, const std::string& path,
                          size_t max) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    return inner_.Glob(pattern, path, max);
  }
  Result<GrepResult> Grep(const GrepRequest& r) override { return inner_.Grep(r); }
  Result<std::string> Download(const std::string& p) override { return inner_.Download(p); }
  Status Upload(const std::string& p, std::string_view c, uint32_t m) override {
    return inner_.Upload(p, c, m);
  }

 private:
  Sandbox& inner_;
};

TEST(GlobTool, Timeout) {
  DEEPBOX_AGENT_SANDBOX(sbd);
  SlowGlobSandbox slow(sbd->client());
  FsToolOptions fo;
  fo.glob_timeout = std::chrono::milliseconds(50);
  ToolRunner run(slow, AllTools({}, fo));
  EXPECT_EQ(run.Err("glob", Args({{"pattern", "*"}})),
            "Error: glob timed out after 10.0s. Try a more specific pattern or a narrower path.");
  // The abandoned call finishes in the background before the sandbox goes away.
  EXPECT_TRUE(WaitForDetached(std::chrono::seconds(5)));
}

}  // namespace
}  // namespace deepbox::agent
