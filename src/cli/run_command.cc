// `deepbox run`: the command line of the agent (CLI11 lives here only; the
// work is in run_session.cc).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/provider_flags.h"
#include "cli/run_config.h"
#include "cli/run_exit_codes.h"
#include "cli/run_session.h"
#include "cli/run_threads.h"
#include "sandbox/network_policy.h"

namespace deepbox::cli {

void RegisterRunCommand(CLI::App& app) {
  using run::RunFlags;
  auto flags = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Run the deep agent on TASK in a fresh sandbox: every tool call (files, shell) runs\n"
      "inside it. The sandbox is claimed first (local by default, or from a Kubernetes\n"
      "SandboxWarmPool with --sandbox k8s) and released when the run ends: on success,\n"
      "error, Ctrl-C and SIGTERM alike (unless --keep-sandbox).\n"
      "Without TASK: an interactive prompt if stdin is a terminal (each line is a task for\n"
      "the same agent and sandbox; arrow keys edit and recall earlier tasks, Ctrl-C cancels\n"
      "the task being run, Ctrl-D or /exit ends), else the task is read from stdin.\n"
      "Output: the transcript goes to stdout on a terminal; when stdout is not a terminal\n"
      "(run TASK > answer.txt) only the final answer goes there, progress to stderr.\n"
      "Examples:\n"
      "  deepbox run \"Write fib.py that prints the first 10 Fibonacci numbers and run it\"\n"
      "  deepbox run --model replay:examples/fib/fib.replay.jsonl \"...\"   # offline\n"
      "  deepbox run --approve manual --keep-sandbox\n"
      "  deepbox run --sandbox k8s --namespace agents --label team=ml --json \"...\"");
  cmd->add_option("task", flags->task, "The task for the agent (see above when absent)");
  cmd->add_option("--sandbox", flags->sandbox,
                  "Where tools run: local (this machine, default) or k8s (a SandboxClaim from a\n"
                  "SandboxWarmPool). Env DEEPBOX_SANDBOX")
      ->check(CLI::IsMember({"local", "k8s"}));
  cmd->add_option("--model,-m", flags->model,
                  "claude-sonnet-4-6 (default), anthropic:MODEL, openai:MODEL or replay:FILE (a\n"
                  "recorded or scripted conversation, no API key needed). Env DEEPBOX_MODEL");
  cmd->add_option("--approve", flags->approve,
                  "auto (default): tools run without asking. manual: execute, write_file,\n"
                  "edit_file and delete wait for you to approve, reject, edit the arguments\n"
                  "(JSON) or respond instead (asked on the terminal)")
      ->check(CLI::IsMember({"auto", "manual"}));
  cmd->add_option("--label,-l", flags->labels,
                  "Label K=V on the sandbox (repeatable); find it with `deepbox sandbox ls\n"
                  "--selector K=V` or `kubectl get sandboxclaim -l K=V`")
      ->allow_extra_args(false);  // one K=V per --label: `--label a=b TASK` leaves TASK
  cmd->add_option("--ttl", flags->ttl_seconds,
                  "Delete the sandbox SECONDS after the claim even if deepbox dies (k8s:\n"
                  "shutdown_after_seconds); 0 = no TTL. Default 3600");
  cmd->add_option("--idle-suspend", flags->idle_suspend_seconds,
                  "Suspend the sandbox after SECONDS unused (its processes end, its files\n"
                  "stay; the next use resumes it); 0 = never. Default: 600 with\n"
                  "--keep-sandbox, else never. Local sandboxes only");
  cmd->add_flag("--keep-sandbox", flags->keep_sandbox,
                "Do not delete the sandbox at the end; print how to reach and delete it\n"
                "(the TTL still applies). Ctrl-C still deletes it");
  cmd->add_flag("--fork-subagents", flags->fork_subagents,
                "Let the agent run a sub-agent in a fork of the sandbox: the `task` tool\n"
                "gets an optional argument sandbox: \"fork\" (a new sandbox holding a copy of\n"
                "the files as they are, deleted when the sub-agent ends; its changes never\n"
                "reach this sandbox). This changes the tool from deepagents' own. Providers\n"
                "that can fork sandboxes only (local; k8s through its daemon)");
  cmd->add_option("--thread", flags->thread_id,
                  "Continue the conversation thread ID (printed at the end of every run;\n"
                  "`deepbox threads ls` lists them); a new ID starts a thread with that name.\n"
                  "IDs use letters, digits, '-', '_' and '.'. It goes on in its last run's\n"
                  "sandbox if that one was kept (--keep-sandbox) and still exists (a suspended\n"
                  "one is resumed), or in the one --sandbox-id names; else in a new one (the\n"
                  "model is told that its earlier files are not there)");
  cmd->add_option("--sandbox-id", flags->sandbox_id,
                  "Run in this existing sandbox instead of claiming one, e.g. one kept with\n"
                  "--keep-sandbox: a local id (`deepbox sandbox ls`) or, with --sandbox k8s,\n"
                  "NAMESPACE/CLAIM (`deepbox sandbox ls --provider k8s`). It is left as it was\n"
                  "at the end; labels, --ttl and the limits are the sandbox's own");
  cmd->add_option("--skills", flags->skills,
                  "A skills directory on this machine (<dir>/<name>/SKILL.md; repeatable, later\n"
                  "ones win): copied into the sandbox and listed to the agent. Default: those of\n"
                  "~/.deepagents/agent/skills and ./.deepagents/skills that exist (the project's\n"
                  "as for ./.mcp.json: only once trusted, never through a symlink); `none` = none")
      ->allow_extra_args(false);
  cmd->add_option("--memory-file", flags->memory_files,
                  "An AGENTS.md memory file on this machine (repeatable): copied into the\n"
                  "sandbox and given to the agent with every request (its edits stay in the\n"
                  "sandbox). Default: those of ~/.deepagents/agent/AGENTS.md and\n"
                  "./.deepagents/AGENTS.md that exist (the project's only once trusted, as\n"
                  "./.mcp.json); `none` = none")
      ->allow_extra_args(false);
  cmd->add_option(
         "--mcp-config", flags->mcp_configs,
         "MCP servers for the agent from this .mcp.json-format file (repeatable), besides\n"
         "~/.config/deepbox/.mcp.json. Their tools appear as mcp__<server>__<tool> and\n"
         "need approval under --approve manual. Host-side servers (the default) run as\n"
         "you, outside the sandbox: they are your trusted configuration (${VAR} is\n"
         "expanded in this file and in ~/.config/deepbox/.mcp.json only). \"sandbox\": true\n"
         "in an entry starts a stdio server inside the sandbox instead, with its\n"
         "isolation. Format: docs/mcp.md.\n"
         "Project files: ./.mcp.json, ./.deepagents/AGENTS.md and ./.deepagents/skills of\n"
         "the directory you run in are untrusted (a cloned repository or a directory\n"
         "copied out of a sandbox can plant them). On a terminal deepbox shows them (the\n"
         "servers' commands and URLs) and asks once; the answer is kept in\n"
         "~/.local/state/deepbox/trusted-projects for exactly those contents (a changed\n"
         "file is asked about again). Without a terminal (or with --json) they are\n"
         "ignored with a notice: name them (--mcp-config ./.mcp.json, ...) to use them.\n"
         "A project's .mcp.json never gets ${VAR} expanded")
      ->allow_extra_args(false);
  cmd->add_flag("--no-mcp", flags->no_mcp, "Start no MCP servers (ignore every .mcp.json)");
  cmd->add_flag("--json", flags->json,
                "One JSON object per line on stdout for every event, ending with\n"
                "{\"type\":\"result\",...} (stop reason, usage, cost, exit code); no spinner\n"
                "and no colours. Format: docs/run-json.md");
  cmd->add_option("--max-steps", flags->max_steps,
                  "Stop after N model turns (exit 6). Default 1000");
  cmd->add_flag("--no-color", flags->no_color, "No colours (also NO_COLOR=1)");
  cmd->add_option("--config", flags->config_file,
                  "Settings file (YAML or JSON, see below); flags > environment > file >\n"
                  "defaults. Env DEEPBOX_CONFIG");
  cmd->add_option("--record", flags->record_path,
                  "Record the model conversation to FILE (replay it with --model replay:FILE)");
  cmd->add_option("--system-prompt", flags->system_prompt,
                  "Instructions placed before deepbox's own (default: deepbox's base prompt)");
  cmd->add_option("--threads-dir", flags->threads_dir,
                  "Where threads are saved (created 0700). Env DEEPBOX_THREADS_DIR; default\n"
                  "$DEEPBOX_STATE_DIR/threads when DEEPBOX_STATE_DIR is set, else\n"
                  "$XDG_STATE_HOME/deepbox/threads, else ~/.local/state/deepbox/threads");
  cmd->add_option("--model-idle-timeout", flags->model_idle_timeout_seconds,
                  "Give up on a model stream (and retry it) after SECONDS without a byte from\n"
                  "the API, before its answer starts too. Env DEEPBOX_MODEL_IDLE_TIMEOUT;\n"
                  "default 90. On a terminal, \"Waiting for the model…\" shows after 5 s of\n"
                  "silence");
  cmd->add_option("--secret", flags->secrets,
                  "A secret the sandbox can use but never read (repeatable):\n"
                  "NAME=SOURCE@HOST[,HOST...], SOURCE env:VAR, file:PATH or cmd:COMMAND.\n"
                  "$NAME inside holds a placeholder that the sandbox's egress proxy replaces\n"
                  "with the value in HTTPS requests to those HOSTs only (see `deepbox sandbox\n"
                  "create --help`). Needs --network public or allow=... naming the HOSTs");
  auto image_raw = std::make_shared<std::string>();
  CLI::Option* image_opt =
      cmd->add_option(
             "--image", *image_raw,
             "local: run the sandbox on an OCI image (pulled on first use; alone: the\n"
             "default image, the k8s template's), e.g. --image=python:3.12-slim-bookworm;\n"
             "see `deepbox sandbox create --help`. k8s: the SandboxTemplate sets the\n"
             "image: a warm pool of the template whose first container runs REF")
          ->expected(0, 1);
  cmd->add_option("--network", flags->network,
                  "local: none (loopback only), public (internet egress, private and\n"
                  "special-purpose ranges and the host's LAN refused; see\n"
                  "DEEPBOX_NETWORK_ALLOW_CIDRS in docs/security.md) or allow=NAME[,NAME...]\n"
                  "(only those names over HTTP(S), e.g. allow=pypi.org,*.github.com;\n"
                  "NAME:PORT!plain for a non-TLS CONNECT tunnel). Default: public where the\n"
                  "host supports it, else none")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            auto p = ParseNetworkPolicy(v);
            return p ? std::string() : p.error().message;
          },
          "none|public|allow=NAMES"));
  // The providers' settings (--pool, --memory, ..., --namespace, --warm-pool,
  // ...), as their providers declare them.
  AddProviderSettingFlags(cmd, flags->provider_settings);
  cmd->footer(std::string(run::kRunEnvironmentHelp) + "\n" + run::kRunConfigFileHelp + "\n" +
              run::kRunExitCodesHelp);
  cmd->callback([flags, image_raw, image_opt] {
    if (image_opt->count() > 0) {
      cli::DefaultImageIfEmpty(image_opt, *image_raw);
      flags->image = *image_raw;
    }
    SetExitCode(run::RunAgentCommand(*flags));
  });

  // `deepbox threads`: the conversations `run` saved (registered with run,
  // whose threads they are).
  CLI::App* threads = app.add_subcommand("threads", "Conversation threads saved by `deepbox run`");
  threads->require_subcommand(1);
  auto tflags = std::make_shared<run::ThreadsFlags>();
  CLI::App* ls = threads->add_subcommand(
      "ls",
      "List the saved threads, newest first: id, last change, runs and the last task.\n"
      "Continue one with: deepbox run --thread ID TASK");
  ls->add_option("--threads-dir", tflags->threads_dir,
                 "Where threads are saved. Env DEEPBOX_THREADS_DIR; default\n"
                 "$DEEPBOX_STATE_DIR/threads when DEEPBOX_STATE_DIR is set, else\n"
                 "$XDG_STATE_HOME/deepbox/threads, else ~/.local/state/deepbox/threads");
  ls->add_flag("--json", tflags->json,
               "A JSON array (id, path, modified_at, runs, last_task, ...)");
  ls->callback([tflags] { SetExitCode(run::ThreadsListCommand(*tflags)); });
}

}  // namespace deepbox::cli
