// `deepbox acp`: the command line of the ACP agent (the work is in
// acp_server.cc).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "acp/protocol.h"
#include "acp/terminal_spool.h"
#include "cli/acp_server.h"
#include "cli/cli.h"
#include "cli/provider_flags.h"
#include "cli/run_config.h"
#include "common/byte_size.h"

namespace deepbox::cli {

namespace {

struct AcpFlags {
  run::RunFlags run;
  std::string mode = "approve-all";
  std::string max_project_size = "256MiB";
  uint64_t max_project_files = 50000;
  int64_t idle_pause_seconds = 300;
  int64_t idle_suspend_seconds = 1800;
};

// An editor keeps a session for hours: a day unless --ttl says otherwise
// (the TTL still deletes the sandbox of a deepbox that died).
constexpr int64_t kAcpDefaultTtlSeconds = 24 * 3600;

int RunAcpCommand(const AcpFlags& flags) {
  run::RunFlags rf = flags.run;
  if (!rf.ttl_seconds) rf.ttl_seconds = kAcpDefaultTtlSeconds;
  rf.json = true;  // no terminal UI anywhere
  auto resolved = run::ResolveRunConfig(rf);
  if (!resolved) {
    std::fprintf(stderr, "deepbox acp: %s\n", resolved.error().message.c_str());
    return 2;
  }
  AcpConfig config;
  config.run = std::move(*resolved);
  auto mode = acp::ParseModeId(flags.mode);
  if (!mode) {
    std::fprintf(stderr, "deepbox acp: --mode: approve-all, approve-execute or auto\n");
    return 2;
  }
  config.mode = *mode;
  auto size = ParseByteSize(flags.max_project_size, "--max-project-size");
  if (!size) {
    std::fprintf(stderr, "deepbox acp: %s\n", size.error().message.c_str());
    return 2;
  }
  config.copy.max_bytes = *size;
  config.copy.max_files = flags.max_project_files;
  if (flags.idle_pause_seconds < 0) {
    std::fprintf(stderr, "deepbox acp: --idle-pause: SECONDS, 0 or more (0 = never)\n");
    return 2;
  }
  config.idle_pause = std::chrono::seconds(flags.idle_pause_seconds);
  if (flags.idle_suspend_seconds < 0) {
    std::fprintf(stderr, "deepbox acp: --idle-suspend: SECONDS, 0 or more (0 = never)\n");
    return 2;
  }
  config.idle_suspend = std::chrono::seconds(flags.idle_suspend_seconds);
  return RunAcpServer(config);
}

// `deepbox acp-view SPOOL`: what `deepbox acp` asks the editor's terminal to
// run for a command that runs in the sandbox. It follows the spool and
// exits with the command's status; run by hand it only shows that file.
int RunAcpViewCommand(const std::string& spool) {
  auto code = acp::FollowSpool(spool, STDOUT_FILENO);
  if (!code) {
    std::fprintf(stderr, "\ndeepbox acp-view: %s\n", code.error().message.c_str());
    return code.error().code == ErrorCode::kInvalidArgument ? 2 : 125;
  }
  return *code;
}

}  // namespace

void RegisterAcpCommand(CLI::App& app) {
  auto spool = std::make_shared<std::string>();
  CLI::App* view = app.add_subcommand(
      "acp-view",
      "Show a command that `deepbox acp` runs in a sandbox, in an editor's terminal:\n"
      "follows SPOOL (the output `deepbox acp` writes as the sandbox streams it) and\n"
      "exits with the command's status. Nothing but that file is read.");
  view->group("");  // not listed: the editor runs it, through terminal/create
  view->add_option("spool", *spool, "The spool file `deepbox acp` named")->required();
  view->callback([spool] { SetExitCode(RunAcpViewCommand(*spool)); });

  auto flags = std::make_shared<AcpFlags>();
  CLI::App* cmd = app.add_subcommand(
      "acp",
      "Serve the deep agent to an editor over the Agent Client Protocol (ACP, JSON-RPC on\n"
      "stdin/stdout; Zed, JetBrains AI Assistant): the editor starts `deepbox acp`. Each\n"
      "session copies the editor's project (its .gitignore honoured, symlinks never\n"
      "followed, at most --max-project-size) into a sandbox of its own, and every tool\n"
      "runs there. A file the agent changes is shown to the editor as a diff and\n"
      "written to the project by the editor (fs/write_text_file), after you allow it\n"
      "when the mode asks; deepbox never writes the project itself. Sessions are\n"
      "deepbox threads (session/load continues one). Setup: docs/acp.md.");
  cmd->add_option("--model,-m", flags->run.model,
                  "claude-sonnet-4-6 (default), anthropic:MODEL, openai:MODEL or replay:FILE.\n"
                  "The key comes from the environment (ANTHROPIC_API_KEY / OPENAI_API_KEY):\n"
                  "set it in the editor's agent server settings. Env DEEPBOX_MODEL");
  cmd->add_option("--mode", flags->mode,
                  "The sessions' first mode (the editor can switch): approve-all (default:\n"
                  "file changes and commands ask), approve-execute (commands ask), auto")
      ->check(CLI::IsMember({"approve-all", "approve-execute", "auto"}));
  cmd->add_option("--sandbox", flags->run.sandbox,
                  "Where tools run: local (default) or k8s. Env DEEPBOX_SANDBOX")
      ->check(CLI::IsMember({"local", "k8s"}));
  cmd->add_option("--max-project-size", flags->max_project_size,
                  "Refuse a project larger than this (after .gitignore), e.g. 512MiB.\n"
                  "Default 256MiB");
  cmd->add_option("--max-project-files", flags->max_project_files,
                  "Refuse a project with more files than this (after .gitignore). Default 50000");
  cmd->add_option("--idle-pause", flags->idle_pause_seconds,
                  "Pause a session's sandbox after SECONDS with no prompt running: its\n"
                  "processes are frozen (memory kept, no CPU) until the next prompt resumes\n"
                  "it. 0 = never. Default 300");
  cmd->add_option("--idle-suspend", flags->idle_suspend_seconds,
                  "Suspend a session's sandbox after SECONDS with no prompt running: every\n"
                  "process in it ends (memory freed, files kept) and the next prompt resumes\n"
                  "it with fresh processes (the editor's stdio MCP servers are started again\n"
                  "in it). 0 = never. Default 1800");
  cmd->add_option("--ttl", flags->run.ttl_seconds,
                  "Delete a session's sandbox SECONDS after it was made even if deepbox dies;\n"
                  "0 = no TTL. Default 86400");
  cmd->add_option("--network", flags->run.network,
                  "local: none, public or allow=NAME[,NAME...] (as `deepbox run --network`)");
  cmd->add_option("--label,-l", flags->run.labels, "Label K=V on the sandboxes (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--max-steps", flags->run.max_steps, "Model turns per prompt. Default 1000");
  cmd->add_option("--system-prompt", flags->run.system_prompt,
                  "Instructions placed before deepbox's own");
  cmd->add_option("--threads-dir", flags->run.threads_dir,
                  "Where sessions (threads) are saved. Env DEEPBOX_THREADS_DIR; default as\n"
                  "`deepbox run`'s");
  cmd->add_option("--config", flags->run.config_file,
                  "Settings file, as `deepbox run --config`. Env DEEPBOX_CONFIG");
  cmd->add_option("--model-idle-timeout", flags->run.model_idle_timeout_seconds,
                  "Give up on a silent model stream after SECONDS (and retry). Default 90");
  AddProviderSettingFlags(cmd, flags->run.provider_settings);
  cmd->callback([flags] { SetExitCode(RunAcpCommand(*flags)); });
}

}  // namespace deepbox::cli
