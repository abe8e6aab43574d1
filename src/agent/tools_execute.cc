#include "agent/tools_execute.h"

#include <mutex>

#include "agent/format.h"
#include "common/utf8.h"

namespace deepbox::agent {
namespace {

class ExecuteTool : public Tool {
 public:
  explicit ExecuteTool(ExecuteToolOptions o) : options_(o) {
    spec_.name = "execute";
    // deepagents 0.7.32's execute tool (with the glob and grep tools offered).
    spec_.description =
        "Executes a shell command in an isolated sandbox and returns combined stdout/stderr "
        "with the exit code (truncated if very large).\n"
        "\n"
        "Usage:\n"
        "- Quote paths containing spaces (e.g. cd \"/path/with spaces\").\n"
        "- Chain commands with ';' or '&&' (use '&&' when a command depends on the previous); "
        "do not use newlines except inside quoted strings.\n"
        "- Use absolute paths and avoid `cd` so the working directory stays stable; use "
        "the optional timeout to override the default.\n"
        "- You MUST avoid using search commands like find and grep. Instead use the grep, "
        "glob tools to search. Use read_file rather than cat/head/tail.\n"
        "    - execute(command=\"find . -name '*.py'\")  # Use glob tool instead\n"
        "    - execute(command=\"grep -r 'pattern' .\")  # Use grep tool instead\n"
        "\n"
        "Only available on backends implementing SandboxBackendProtocol; otherwise it returns "
        "an error.";
    json::object integer;
    integer["type"] = "integer";
    json::object null_type;
    null_type["type"] = "null";
    json::object timeout;
    timeout["anyOf"] = json::array{integer, null_type};
    timeout["default"] = nullptr;
    timeout["description"] =
        "Optional timeout in seconds for this command. Overrides the default timeout.";
    spec_.input_schema = SchemaObject(
        {{"command", SchemaString("Shell command to execute in the sandbox environment.")},
         {"timeout", timeout}},
        {"command"});
  }

  const ToolSpec& spec() const override { return spec_; }

  ToolResult Invoke(ToolContext& ctx, const json::object& args) override {
    std::string command = ArgString(args, "command");
    std::optional<int64_t> timeout = ArgOptInt(args, "timeout");
    if (timeout) {
      if (*timeout < 0) {
        return ToolResult::Err("Error: timeout must be non-negative, got " +
                               std::to_string(*timeout) + ".");
      }
      if (*timeout > options_.max_timeout_seconds) {
        return ToolResult::Err("Error: timeout " + std::to_string(*timeout) +
                               "s exceeds maximum allowed (" +
                               std::to_string(options_.max_timeout_seconds) + "s).");
      }
    }
    int64_t seconds = timeout ? (*timeout == 0 ? options_.max_timeout_seconds : *timeout)
                              : options_.default_timeout_seconds;
    ExecRequest req;
    req.shell = command;
    req.timeout = std::chrono::seconds(seconds);
    req.max_output_bytes = options_.max_output_bytes;

    std::mutex mu;
    std::string output;
    bool truncated = false;
    std::string pending;  // bytes held back to keep UTF-8 sequences whole
    auto on_output = [&](OutputStream, std::string_view data) -> bool {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (output.size() < options_.max_output_bytes) {
          size_t room = options_.max_output_bytes - output.size();
          if (data.size() > room) truncated = true;
          output.append(data.substr(0, room));
        } else if (!data.empty()) {
          truncated = true;
        }
        if (ctx.on_output) {
          // Output arrives as the command's exact bytes: show valid text.
          pending.append(data);
          size_t n = Utf8CompletePrefix(pending);
          if (n > 0) {
            ctx.on_output(SanitizeUtf8(std::string_view(pending).substr(0, n)));
            pending.erase(0, n);
          }
        }
      }
      return !ctx.cancelled();
    };
    auto r = ctx.sandbox->ExecStream(req, on_output);
    if (ctx.on_output && !pending.empty()) ctx.on_output(SanitizeUtf8(pending));  // a cut sequence
    if (!r && (r.error().code == ErrorCode::kCancelled || ctx.cancelled())) {
      return ToolResult::Err(FormatExecuteOutput(SanitizeUtf8(output), std::nullopt, truncated) +
                             "\n[Command cancelled]");
    }
    if (!r) {
      return ToolResult::Err("Error: Execution failed: " + r.error().message);
    }
    if (r->truncated()) truncated = true;
    // Some implementations fill the result instead of streaming.
    if (output.empty() && !r->combined.empty()) output = r->combined;
    std::optional<int> exit_code;
    switch (r->kind) {
      case ExitKind::kExited:
        exit_code = r->exit_code;
        break;
      case ExitKind::kSignaled:
      case ExitKind::kKilled:
        exit_code = 128 + (r->signal ? r->signal : 9);
        break;
      case ExitKind::kTimedOut: {
        if (!output.empty() && output.back() != '\n') output += "\n";
        int64_t secs = seconds > 0
                           ? seconds
                           : std::chrono::duration_cast<std::chrono::seconds>(r->duration).count();
        output += "Command timed out after " + std::to_string(secs) + " seconds";
        exit_code = 124;
        break;
      }
      case ExitKind::kSpawnFailed:
        if (!output.empty() && output.back() != '\n') output += "\n";
        output += r->error.empty() ? "Command could not be started" : r->error;
        exit_code = 127;
        break;
    }
    if (std::string oom = OomKillNote(*r); !oom.empty()) {
      if (!output.empty() && output.back() != '\n') output += "\n";
      output += "Command " + oom;
    }
    if (ctx.cancelled()) {
      return ToolResult::Err(FormatExecuteOutput(SanitizeUtf8(output), exit_code, truncated) +
                             "\n[Command cancelled]");
    }
    return ToolResult::Ok(FormatExecuteOutput(SanitizeUtf8(output), exit_code, truncated));
  }

 private:
  ToolSpec spec_;
  ExecuteToolOptions options_;
};

}  // namespace

ToolPtr MakeExecuteTool(ExecuteToolOptions options) {
  return std::make_shared<ExecuteTool>(options);
}

}  // namespace deepbox::agent
