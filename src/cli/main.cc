// deepbox: the command-line entry point. Command families register
// themselves here (see cli.h); the implementations live in *_command.cc.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/provider_flags.h"
#include "cli/providers.h"
#include "common/version.h"
#include "local/lifecycle/supervisor.h"
#include "sandbox/network_policy.h"
#include "sandbox/registry.h"

namespace deepbox::cli {
namespace {

int g_exit_code = kExitOk;

constexpr const char* kExitCodesHelp =
    "Exit codes: 0 success, 1 the operation failed, 2 usage error (bad flag, label or\n"
    "selector), 3 no such sandbox (or it expired), 4 this host cannot run sandboxes\n"
    "or cannot give what was asked, e.g. --network public (see `deepbox doctor`).\n"
    "`deepbox sandbox exec` exits with the command's status instead (see its --help).\n"
    "Environment: DEEPBOX_STATE_DIR (state directory; default /run/deepbox as root,\n"
    "else $XDG_RUNTIME_DIR/deepbox), DEEPBOX_SANDBOXD (the deepbox-sandboxd binary;\n"
    "default: next to deepbox).";

// --network: none | public | allow=NAME[,NAME...] (checked like the provider does).
CLI::Validator NetworkValidator() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        auto policy = deepbox::ParseNetworkPolicy(value);
        return policy ? std::string() : policy.error().message;
      },
      "none|public|allow=NAMES");
}

constexpr const char* kExecHelp =
    "Exit codes: the command's own exit status; otherwise\n"
    "  2      usage error: a bad flag or --env K=V, no command, a malformed sandbox id,\n"
    "         -it without a terminal on stdin\n"
    "  3      no such sandbox (or it expired or was deleted, also while the command ran)\n"
    "  124    the command timed out (--timeout, or the daemon's default) and was killed\n"
    "  125    deepbox failed (e.g. the sandbox's daemon is unreachable or refused the\n"
    "         request, such as a --cwd that does not exist)\n"
    "  126    the command could not be started (e.g. permission denied)\n"
    "  127    the command was not found\n"
    "  128+N  the command was killed by signal N (137: SIGKILL, also when the sandbox\n"
    "         killed it, e.g. at its memory limit)\n"
    "  141    stdout or stderr was closed (e.g. `| head -1`): the command was stopped,\n"
    "         silently, as SIGPIPE would stop it\n"
    "  130, 143, 129  Ctrl-C (SIGINT), SIGTERM or SIGHUP: without -t the command in the\n"
    "         sandbox is stopped too (SIGTERM, SIGKILL after a grace period) and deepbox\n"
    "         waits for it to end (up to 10 s; a second signal does not wait); with -t\n"
    "         the signal ends the session and the command with it\n"
    "With 2, 3 and 124 to 127 deepbox also prints a message on stderr, which tells them\n"
    "from the same codes of the command itself.\n"
    "Environment: DEEPBOX_STATE_DIR (state directory; default /run/deepbox as root,\n"
    "else $XDG_RUNTIME_DIR/deepbox).";

// --provider and the providers' settings (declared by the providers,
// provider_flags.h). `creation`: also the settings only used to make
// sandboxes (limits, pools, the ready timeout).
void AddClusterFlags(CLI::App* cmd, ClusterFlags& f, bool creation = false) {
  std::vector<std::string> names = ProviderRegistry::Global().Names();
  std::string help = "Where sandboxes are:";
  for (const auto& name : names) {
    help += "\n" + name + ": " + ProviderRegistry::Global().Lookup(name)->summary;
  }
  cmd->add_option("--provider", f.provider, help)
      ->check(CLI::IsMember(names))
      ->capture_default_str();
  ProviderFlagSet set;
  set.creation = creation;
  AddProviderSettingFlags(cmd, f.settings, set);
}

}  // namespace

void SetExitCode(int code) { g_exit_code = code; }
int ExitCode() { return g_exit_code; }

void RegisterSandboxCommands(CLI::App& app) {
  CLI::App* sandbox =
      app.add_subcommand("sandbox",
                         "Create, use and delete sandboxes (also on Kubernetes: --provider k8s\n"
                         "for create/ls/rm, NAMESPACE/CLAIM ids for exec, cp, snapshot, fork...)");
  sandbox->require_subcommand(1);
  sandbox->footer(kExitCodesHelp);

  auto create_args = std::make_shared<SandboxCreateArgs>();
  CLI::App* create = sandbox->add_subcommand(
      "create",
      "Create a sandbox (or claim a warm one from the pool) and print its id.\n"
      "It lives until `deepbox sandbox rm` or its TTL, whatever happens to this command.\n"
      "--provider k8s claims a SandboxClaim from a warm pool instead (id NAMESPACE/CLAIM;\n"
      "--json adds the router URL and X-Sandbox-* headers that reach its daemon).");
  create
      ->add_option("--label,-l", create_args->labels,
                   "Label K=V (repeatable); select with `ls/rm --selector`")
      ->allow_extra_args(false);
  create
      ->add_option("--ttl", create_args->ttl_seconds,
                   "Delete the sandbox SECONDS after creation, even if nobody does (as\n"
                   "`deepbox run`); 0 = never (with a warning)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  create
      ->add_option("--network", create_args->network,
                   "none: loopback only; public: internet egress (IPv4 and IPv6),\n"
                   "private/metadata/loopback/special-purpose ranges, the host's LAN and\n"
                   "its services refused (DEEPBOX_NETWORK_ALLOW_CIDRS=CIDR,... reopens named\n"
                   "ranges), no ingress; allow=NAME[,NAME...]: only those names over\n"
                   "HTTP(S), e.g. allow=pypi.org,files.pythonhosted.org,*.github.com, through\n"
                   "a filtering proxy (HTTP(S)_PROXY is set inside; a CONNECT tunnel must\n"
                   "carry TLS for that name unless the entry ends in !plain, e.g.\n"
                   "git.example.com:22!plain). A wildcard for a CDN's names allows domain\n"
                   "fronting to any site on it. Default: public where this host\n"
                   "supports it, else none (with a warning); an explicit public or allow\n"
                   "that this host cannot provide fails (exit 4). See `deepbox doctor`")
      ->check(NetworkValidator());
  create->add_option("--rootfs", create_args->rootfs,
                     "Root filesystem directory (e.g. an unpacked OCI image) instead of the\n"
                     "host's system directories (a missing one is a usage error, exit 2)");
  CLI::Option* create_image =
      create
          ->add_option("--image", create_args->image,
                       "Run the sandbox on an OCI image: python:3.12-slim-bookworm,\n"
                       "REGISTRY:PORT/REPO:TAG or ...@sha256:DIGEST; alone, the default image\n"
                       "(the k8s template's). Pulled on first use (`deepbox image pull`),\n"
                       "its layers read-only under a writable layer of the sandbox's own;\n"
                       "its Env and WorkingDir apply, its User and Entrypoint do not (the\n"
                       "sandbox runs as uid 1000, its daemon is its service). Not with\n"
                       "--rootfs. k8s: the image is the SandboxTemplate's, so this claims from a\n"
                       "warm pool of the template whose first container runs REF (normalised:\n"
                       "python:3.12 = docker.io/library/python:3.12; a digest must be equal,\n"
                       "a tag too); none: exit 1, naming each template's image")
          ->expected(0, 1);
  create
      ->add_option("--idle-suspend", create_args->idle_suspend_seconds,
                   "Suspend the sandbox after SECONDS unused: no request, command or\n"
                   "background process (its processes end, its files stay; the next use\n"
                   "resumes it). 0 = never (the default). Local sandboxes only")
      ->check(CLI::NonNegativeNumber);
  create->add_option("--name", create_args->name,
                     "A name for the sandbox, unique among yours, usable wherever its id is\n"
                     "(exec, cp NAME:PATH, rm, pause, snapshot, run --sandbox-id ...). k8s: the\n"
                     "claim's name (a DNS label, unique in its namespace): the id NAMESPACE/NAME");
  create->add_option("--from-snapshot", create_args->from_snapshot,
                     "A new sandbox holding the files of snapshot NAME (`deepbox sandbox\n"
                     "snapshot ID`): locally never a warm one; with --provider k8s (a\n"
                     "snapshot of a Kubernetes sandbox) a new claim the files are uploaded to");
  create->add_option(
      "--secret", create_args->secrets,
      "A secret the sandbox can use but never read (repeatable):\n"
      "NAME=SOURCE@HOST[,HOST...][;query], SOURCE one of env:VAR (your environment),\n"
      "file:PATH, cmd:COMMAND (its output, e.g. cmd:gh auth token). Inside, $NAME\n"
      "holds a placeholder (deepbox-secret-...); the sandbox's egress proxy puts the\n"
      "real value into HTTPS requests to those HOSTs only (any header; TLS to them\n"
      "ends at the proxy with a CA made for this sandbox, which it trusts) and logs\n"
      "every use (`deepbox sandbox logs --network ID`); ;query: also in URL queries.\n"
      "Needs --network public or\n"
      "allow=... listing the HOSTs; never a warm sandbox. Local sandboxes only");
  create->add_flag("--json", create_args->json, "Print the sandbox's record as JSON");
  create->add_flag("--cold", create_args->cold,
                   "Always create a new sandbox (skip the pool). A warm sandbox is only\n"
                   "taken when its network, rootfs, image and limits are exactly the ones asked\n"
                   "for");
  AddClusterFlags(create, create_args->cluster, /*creation=*/true);
  create->callback([create_args, create_image] {
    DefaultImageIfEmpty(create_image, create_args->image);
    SetExitCode(RunSandboxCreate(*create_args));
  });

  auto exec_args = std::make_shared<SandboxExecArgs>();
  CLI::App* exec = sandbox->add_subcommand(
      "exec",
      "Run a command in a sandbox, like `docker exec`:\n"
      "  deepbox sandbox exec [-i] [-t] ID -- COMMAND [ARG...]\n"
      "Output is streamed byte for byte (binary output stays intact); the exit status\n"
      "is the command's (see below). Examples:\n"
      "  deepbox sandbox exec ID -- tar c -C /workspace . > workspace.tar\n"
      "  deepbox sandbox exec -i ID -- sh -c 'cat > data.bin' < data.bin\n"
      "  deepbox sandbox exec -it ID -- bash          (an interactive shell)");
  exec->add_option("--timeout", exec_args->timeout_seconds,
                   "Kill the command after S seconds (exit 124); 0 = the daemon's default\n"
                   "(30 min; none with -i or -t, where the command ends with deepbox)")
      ->check(CLI::NonNegativeNumber);
  exec->add_option("--cwd,-w", exec_args->cwd,
                   "Working directory: /workspace (the default) or a directory beneath it;\n"
                   "relative paths are relative to /workspace");
  exec->add_option("--env,-e", exec_args->env, "Environment variable K=V (repeatable)")
      ->allow_extra_args(false);
  exec->add_flag("--interactive,--stdin,-i", exec_args->interactive,
                 "Keep stdin open: stream it to the command as it arrives (its EOF closes\n"
                 "the command's stdin)");
  exec->add_flag("--tty,-t", exec_args->tty,
                 "Run the command on a pseudo-terminal in the sandbox (stdout and stderr\n"
                 "merge, as on any terminal). With -i, stdin must be a terminal: it is put\n"
                 "in raw mode (every key, ^C included, goes to the command), its window\n"
                 "size follows, and it is restored at the end");
  exec->add_option("id", exec_args->id,
                   "Sandbox id (NAMESPACE/CLAIM: a Kubernetes claim, reached as `deepbox run`\n"
                   "reaches it: KUBECONFIG, AGENT_SANDBOX_ROUTER_URL/_TOKEN)")
      ->required();
  exec->add_option("command", exec_args->command, "The command and its arguments (after --)")
      ->required();
  exec->positionals_at_end();  // everything after ID belongs to the command
  exec->footer(kExecHelp);
  exec->callback([exec_args] { SetExitCode(RunSandboxExec(*exec_args)); });

  auto ls_args = std::make_shared<SandboxLsArgs>();
  CLI::App* ls =
      sandbox->add_subcommand("ls", "List sandboxes (also cleans up those whose supervisor died)");
  ls->alias("list");
  ls->add_option("--selector,-s", ls_args->selector,
                 "Only sandboxes whose labels match: K=V, K!=V, K, !K (comma = and)");
  ls->add_flag("--json", ls_args->json, "Print the records as a JSON array");
  ls->add_flag("--quiet,-q", ls_args->quiet, "Print ids only (k8s: NAMESPACE/NAME)");
  AddClusterFlags(ls, ls_args->cluster);
  ls->callback([ls_args] { SetExitCode(RunSandboxLs(*ls_args)); });

  auto inspect_args = std::make_shared<SandboxInspectArgs>();
  CLI::App* inspect = sandbox->add_subcommand(
      "inspect",
      "Show one sandbox: state, image (k8s: its SandboxTemplate's), labels, times,\n"
      "limits, and how a client reaches its daemon. --json prints one object with\n"
      "the same fields for every provider: id, provider, state, image, labels,\n"
      "created_at, expires_at, ttl_remaining_seconds, url, headers, token, owner\n"
      "(local: also socket, limits, status; k8s: also namespace, claim, sandbox,\n"
      "warm_pool, template, resources, pod_ips, router). A local sandbox is one of\n"
      "this user's (its daemon is a Unix socket in the user's state directory, no\n"
      "token). A claim is shown to whoever may read it, its daemon token\n"
      "(X-Sandboxd-Token) only to its owner, the user whose claim key made it, and\n"
      "only with --json; the router token is never printed. Exit 3: no such sandbox");
  inspect
      ->add_option("id", inspect_args->id,
                   "Sandbox id or name (k8s: NAMESPACE/CLAIM, or CLAIM with --provider k8s)")
      ->required();
  inspect->add_flag("--json", inspect_args->json, "Print the record as one JSON object");
  AddClusterFlags(inspect, inspect_args->cluster);
  inspect->callback([inspect_args] { SetExitCode(RunSandboxInspect(*inspect_args)); });

  auto rm_args = std::make_shared<SandboxRmArgs>();
  CLI::App* rm = sandbox->add_subcommand(
      "rm",
      "Delete sandboxes by id or label selector: kills every process, removes the\n"
      "workspace, cgroups, socket and state; returns when nothing is left");
  rm->alias("delete");
  rm->add_option("ids", rm_args->ids, "Sandbox ids (k8s: claim names or NAMESPACE/NAME)");
  rm->add_option("--selector,-s", rm_args->selector,
                 "Delete every sandbox whose labels match: K=V, K!=V, K, !K (comma = and);\n"
                 "k8s: any Kubernetes label selector, applied to the SandboxClaims of\n"
                 "one namespace only (the controller then deletes their pods)");
  AddClusterFlags(rm, rm_args->cluster);
  rm->callback([rm_args] { SetExitCode(RunSandboxRm(*rm_args)); });

  // The durable-workspace verbs: same id, files, labels and TTL throughout.
  struct ModeVerb {
    const char* name;
    SandboxModeVerb verb;
    const char* help;
  };
  for (const ModeVerb& m :
       {ModeVerb{"pause", SandboxModeVerb::kPause,
                 "Freeze every process of sandboxes: they keep their memory and use no\n"
                 "CPU until resumed (in milliseconds). Local sandboxes only (cgroup\n"
                 "freezer); a paused sandbox resumes by itself when next used (exec, cp,\n"
                 "an attached run). Its TTL keeps counting"},
        ModeVerb{"suspend", SandboxModeVerb::kSuspend,
                 "Suspend sandboxes: EVERY PROCESS IN THEM ENDS (memory and CPU are\n"
                 "freed); /workspace, the labels and the TTL (which keeps counting) stay.\n"
                 "`resume`, or the next use (exec, cp, an attached run), starts fresh\n"
                 "processes on the same files. Locally a suspended sandbox outlives its\n"
                 "supervisor process (killed, or a host restart when DEEPBOX_STATE_DIR is\n"
                 "on disk): the next resume takes it over, files intact"},
        ModeVerb{"resume", SandboxModeVerb::kResume,
                 "Resume paused or suspended sandboxes (a running one is left as it is)"}}) {
    auto mode_args = std::make_shared<SandboxModeArgs>();
    mode_args->verb = m.verb;
    CLI::App* cmd = sandbox->add_subcommand(m.name, m.help);
    cmd->add_option("ids", mode_args->ids, "Sandbox ids (k8s: NAMESPACE/CLAIM)")->required();
    // The id's form says which provider; these say how Kubernetes ids are reached.
    AddClusterFlags(cmd, mode_args->cluster);
    if (m.verb == SandboxModeVerb::kSuspend) {
      cmd->add_flag("--force", mode_args->force,
                    "k8s: suspend even a sandbox whose /workspace is an emptyDir (not a\n"
                    "volume): ITS FILES ARE LOST");
    }
    cmd->callback([mode_args] { SetExitCode(RunSandboxMode(*mode_args)); });
  }

  // The network policy of a running sandbox, and its egress log.
  auto net_args = std::make_shared<SandboxNetworkArgs>();
  CLI::App* net = sandbox->add_subcommand(
      "network",
      "Change the network policy of a running sandbox: new connections follow it at\n"
      "once, open ones it refuses are closed; the change is logged (`sandbox logs\n"
      "--network`) and `sandbox ls --json` shows the policy in force. Only a sandbox\n"
      "created with --network allow=... can change (between allowlists and none);\n"
      "prints the policy now in force");
  net->add_option("id", net_args->id, "Sandbox id or name")->required();
  net->add_option("--allow", net_args->allow_edit,
                  "Edit the allowlist: +NAME adds, -NAME removes (comma-separated; no sign\n"
                  "adds), e.g. --allow +pypi.org,-example.com; removing the last name\n"
                  "leaves none");
  net->add_option("--mode", net_args->mode, "Replace the policy: none or allow=NAME[,NAME...]")
      ->check(NetworkValidator());
  AddClusterFlags(net, net_args->cluster);
  net->callback([net_args] { SetExitCode(RunSandboxNetwork(*net_args)); });

  auto logs_args = std::make_shared<SandboxLogsArgs>();
  CLI::App* logs = sandbox->add_subcommand(
      "logs",
      "Show a sandbox's logs. --network: every connection and request its egress\n"
      "proxy allowed or refused (time, host, port, TLS name, bytes each way, the\n"
      "rule or the reason, which secrets were put in, never their values), and\n"
      "each policy change; kept to a bounded size (the oldest go first)");
  logs->add_option("id", logs_args->id, "Sandbox id or name")->required();
  logs->add_flag("--network", logs_args->network, "The egress log");
  logs->add_flag("--json", logs_args->json, "One JSON object per line, as stored");
  logs->add_option("--tail,-n", logs_args->tail, "Only the last N entries (0 = all)");
  AddClusterFlags(logs, logs_args->cluster);
  logs->callback([logs_args] { SetExitCode(RunSandboxLogs(*logs_args)); });

  // Snapshots and forks: the workspace's files, not memory or processes.
  auto snap_args = std::make_shared<SnapshotArgs>();
  CLI::App* snap = sandbox->add_subcommand(
      "snapshot",
      "Copy a sandbox's files (its /workspace; not its memory or processes) into a\n"
      "snapshot that outlives it; print its name. A running local sandbox is paused\n"
      "for the copy (where the host has a cgroup freezer) so that no file is caught\n"
      "half-written, then resumed; a Kubernetes one (NAMESPACE/CLAIM) is copied while\n"
      "it runs (its daemon sends a tar of /workspace; a pod cannot be frozen).\n"
      "`sandbox create --from-snapshot NAME` restores it (--provider k8s for a\n"
      "Kubernetes one). Snapshots of every provider are kept in one directory on\n"
      "disk: $DEEPBOX_SNAPSHOT_DIR, else $DEEPBOX_STATE_DIR/snapshots when that is\n"
      "set, else $XDG_STATE_HOME/deepbox/snapshots, else\n"
      "~/.local/state/deepbox/snapshots (root without HOME: /var/lib/deepbox/\n"
      "snapshots), and share a quota ($DEEPBOX_SNAPSHOT_QUOTA, default 20G).\n"
      "  deepbox sandbox snapshot ls | rm NAME...");
  snap->add_option("id", snap_args->id, "Sandbox id (k8s: NAMESPACE/CLAIM)");
  snap->add_option("--name", snap_args->name,
                   "Snapshot name (letters, digits, _ . -; default ID-RANDOM)");
  snap->add_flag("--json", snap_args->json, "Print the snapshot's record as JSON");
  AddClusterFlags(snap, snap_args->cluster);
  auto snap_ls_args = std::make_shared<SnapshotLsArgs>();
  CLI::App* snap_ls =
      snap->add_subcommand("ls", "List the snapshots of every provider, their sizes and the total");
  snap_ls->alias("list");
  snap_ls->add_flag("--json", snap_ls_args->json, "Print the records as a JSON array");
  snap_ls->callback([snap_ls_args] { SetExitCode(RunSnapshotLs(*snap_ls_args)); });
  auto snap_rm_args = std::make_shared<SnapshotRmArgs>();
  CLI::App* snap_rm = snap->add_subcommand("rm", "Remove snapshots");
  snap_rm->alias("delete");
  snap_rm->add_option("names", snap_rm_args->names, "Snapshot names")->required();
  snap_rm->callback([snap_rm_args] { SetExitCode(RunSnapshotRm(*snap_rm_args)); });
  snap->callback([snap, snap_args] {
    if (!snap->get_subcommands().empty()) return;  // ls / rm ran
    if (snap_args->id.empty()) {
      SetExitCode(ReportError(Error(ErrorCode::kInvalidArgument,
                                    "give a sandbox id (or: deepbox sandbox snapshot ls | rm)")));
      return;
    }
    SetExitCode(RunSandboxSnapshot(*snap_args));
  });

  auto fork_args = std::make_shared<SandboxForkArgs>();
  CLI::App* fork_cmd = sandbox->add_subcommand(
      "fork",
      "Make new sandboxes holding a sandbox's files as they are now (its /workspace;\n"
      "not its memory or processes), e.g. to try several fixes from one state. A\n"
      "local source is paused for the copy where it can be (its /workspace disk\n"
      "image is cloned, frozen: a reflink where the host file system can), and the\n"
      "forks get its network (none stays none); a Kubernetes one is copied once\n"
      "while it runs (through the snapshot directory, see `sandbox snapshot\n"
      "--help`) into new claims. Prints the new ids; all or none");
  fork_cmd->add_option("id", fork_args->id, "Sandbox id (k8s: NAMESPACE/CLAIM)")->required();
  fork_cmd->add_option("-n,--count", fork_args->count, "How many (1-32)")->capture_default_str();
  fork_cmd->add_option("--label,-l", fork_args->labels, "Label K=V on the new sandboxes")
      ->allow_extra_args(false);
  fork_cmd->add_option("--ttl", fork_args->ttl_seconds, "TTL of the new sandboxes (0 = none)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  fork_cmd
      ->add_option("--network", fork_args->network,
                   "Network of the new sandboxes: none, public or allow=NAME[,NAME...]\n"
                   "(default: the source's)")
      ->check(NetworkValidator());
  fork_cmd->add_flag("--json", fork_args->json, "Print the new ids as a JSON array");
  AddClusterFlags(fork_cmd, fork_args->cluster);  // after -n (--count): no -n for --namespace
  fork_cmd->callback([fork_args] { SetExitCode(RunSandboxFork(*fork_args)); });

  auto cp_args = std::make_shared<SandboxCpArgs>();
  CLI::App* cp = sandbox->add_subcommand(
      "cp",
      "Copy a file or directory between the host and a sandbox:\n"
      "  deepbox sandbox cp ./src ID:/workspace/src    (host -> sandbox)\n"
      "  deepbox sandbox cp ID:out.txt ./out.txt       (sandbox -> host)\n"
      "A sandbox path is absolute or relative to /workspace. If DST is an existing\n"
      "directory (or ends in /), SRC is copied into it under its own name; DIR/. copies\n"
      "a directory's contents. Symlinks are copied as symlinks, never followed; into a\n"
      "sandbox, a symlink that points outside the copied tree (an absolute target, or\n"
      "one that climbs out with ..) is skipped with a one-line note, and so are FIFOs,\n"
      "sockets and devices; out of a sandbox, symlinks come as they are, and a note\n"
      "names every .mcp.json or .deepagents/ written (files `deepbox run` reads: it uses\n"
      "them only after asking you). Any size up to the free disk space:\n"
      "both directions stream, files are replaced atomically, and a failed copy removes\n"
      "what it created. The sandbox is not trusted: names come from SRC and DST, and\n"
      "nothing is written outside DST.\n"
      "Exit codes: 0 copied; 1 the copy failed (e.g. a missing file on either side);\n"
      "2 bad arguments; 3 no such sandbox.");
  cp->add_option("src", cp_args->src,
                 "SRC: host path or ID:PATH (ID may be a Kubernetes NAMESPACE/CLAIM)")
      ->required();
  cp->add_option("dst", cp_args->dst, "DST: host path or ID:PATH")->required();
  cp->callback([cp_args] { SetExitCode(RunSandboxCp(*cp_args)); });
}

void RegisterPoolCommands(CLI::App& app) {
  CLI::App* pool = app.add_subcommand("pool", "Warm pools of ready sandboxes");
  pool->require_subcommand(1);
  auto args = std::make_shared<PoolServeArgs>();
  CLI::App* serve = pool->add_subcommand(
      "serve",
      "Keep N sandboxes warm, refilling as they are claimed (by `deepbox sandbox\n"
      "create`, or any local provider with the same pool; 0.1 s after a claim, so\n"
      "that its first commands get the CPU first). Runs until SIGTERM/Ctrl-C;\n"
      "the warm sandboxes outlive it and a restarted pool adopts them. Drain with\n"
      "`deepbox sandbox rm --selector deepbox.dev/pool=NAME`.\n"
      "A claim takes a warm sandbox only if it asks for the same network, rootfs,\n"
      "image (by digest) and limits (--memory ...; the defaults are those of\n"
      "`sandbox create` and `run`).");
  serve->add_option("--replicas,-n", args->replicas, "Number of warm sandboxes to keep")
      ->required()
      ->check(CLI::NonNegativeNumber);
  serve->add_option("--name", args->name, "Pool name")->capture_default_str();
  serve
      ->add_option("--network", args->network,
                   "Network of the warm sandboxes (none|public|allow=NAMES; default: host\n"
                   "default)")
      ->check(NetworkValidator());
  serve->add_option("--rootfs", args->rootfs, "Root filesystem directory of the warm sandboxes");
  CLI::Option* serve_image =
      serve
          ->add_option("--image", args->image,
                       "OCI image of the warm sandboxes (pulled at start; alone: the default\n"
                       "image); claims with the same --image take them")
          ->expected(0, 1);
  serve->add_option("--parallel", args->parallel, "Sandboxes created at once")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  ProviderFlagSet limits;
  limits.providers = {"local"};
  limits.only = {"memory", "max-processes", "cpus", "disk"};
  AddProviderSettingFlags(serve, args->settings, limits);
  serve->callback([args, serve_image] {
    DefaultImageIfEmpty(serve_image, args->image);
    SetExitCode(RunPoolServe(*args));
  });
}

void RegisterDoctorCommand(CLI::App& app) {
  auto args = std::make_shared<DoctorArgs>();
  CLI::App* doctor = app.add_subcommand(
      "doctor",
      "Report what this host supports: user namespaces, seccomp, cgroups and which\n"
      "limits are enforced by what, the public network mode, the state directory,\n"
      "whether a model key (ANTHROPIC_API_KEY / OPENAI_API_KEY) is set for `run` and `acp`.\n"
      "Exits 0 if sandboxes can run here, 4 if not.");
  doctor->add_flag("--json", args->json, "Print the report as JSON");
  AddClusterFlags(doctor, args->cluster);
  doctor->callback([args] { SetExitCode(RunDoctor(*args)); });
}

void RegisterImageCommands(CLI::App& app) {
  CLI::App* image = app.add_subcommand(
      "image",
      "OCI images in the local cache (pulled, verified, layers stored once). Running\n"
      "sandboxes on an image (--image) is not there yet.");
  image->require_subcommand(1);
  auto pull_args = std::make_shared<ImagePullArgs>();
  CLI::App* pull = image->add_subcommand(
      "pull",
      "Pull an image from its registry into the cache: python:3.12-slim-bookworm,\n"
      "registry:port/repo:tag, repo@sha256:... . Credentials come from\n"
      "$REGISTRY_AUTH_FILE, $DOCKER_CONFIG/config.json or ~/.docker/config.json,\n"
      "through its credential helper (credHelpers, credsStore) when it names one.\n"
      "Mirrors, rewritten locations, insecure and blocked registries come from\n"
      "registries.conf as Podman reads it ($CONTAINERS_REGISTRIES_CONF, else\n"
      "~/.config/containers/registries.conf, else /etc/containers/registries.conf,\n"
      "and their registries.conf.d drop-ins); a mirror that fails is passed over.\n"
      "The cache is $DEEPBOX_IMAGE_DIR, else $DEEPBOX_STATE_DIR/images, else\n"
      "~/.local/state/deepbox/images.");
  pull->add_option("reference", pull_args->reference, "REF: the image")->required();
  pull->add_option("--registry-ca", pull_args->registry_ca,
                   "A CA certificate file (PEM) trusted for the registry, besides the system's")
      ->check(CLI::ExistingFile);
  pull->add_flag("--insecure", pull_args->insecure,
                 "Allow plain HTTP and unverified TLS for this registry (loopback registries\n"
                 "may use plain HTTP without it)");
  pull->add_flag("--json", pull_args->json, "One JSON event per line on stdout");
  pull->callback([pull_args] { SetExitCode(RunImagePull(*pull_args)); });

  auto ls_args = std::make_shared<ImageLsArgs>();
  CLI::App* ls = image->add_subcommand("ls", "The images in the cache");
  ls->alias("list");
  ls->add_flag("--json", ls_args->json, "Print the records as JSON");
  ls->callback([ls_args] { SetExitCode(RunImageLs(*ls_args)); });

  auto rm_args = std::make_shared<ImageRmArgs>();
  CLI::App* rm =
      image->add_subcommand("rm",
                            "Remove an image from the cache, with the layers no other image uses.\n"
                            "Exit codes: 0 removed; 3 no such image.");
  rm->alias("delete");
  rm->add_option("reference", rm_args->reference, "REF: the image, as pulled")->required();
  rm->callback([rm_args] { SetExitCode(RunImageRm(*rm_args)); });

  CLI::App* prune = image->add_subcommand(
      "prune", "Remove every blob and layer no image uses, and what interrupted pulls left");
  prune->callback([] { SetExitCode(RunImagePrune()); });
}

void RegisterEgressProxyCommand(CLI::App& app) {
  auto args = std::make_shared<EgressProxyArgs>();
  CLI::App* cmd = app.add_subcommand(
      "egress-proxy",
      "The secrets proxy on its own, as a pod's sidecar container\n"
      "(deploy/k8s/sandbox-template-secrets.yaml): HTTP(S)_PROXY for the agent\n"
      "container; placeholders become the --secret values in HTTPS requests to their\n"
      "hosts (TLS ended with a CA made at start; its key never leaves this process).\n"
      "--share-dir gets sandbox-ca.pem, bundle.pem (system bundle + CA) and\n"
      "secrets.env (NAME=placeholder, for deepbox-sandboxd --env-file). Every\n"
      "connection and request is logged as JSON lines. Runs until SIGTERM/SIGINT.");
  cmd->add_option("--listen", args->listen, "ADDRESS:PORT to serve on")->capture_default_str();
  cmd->add_option("--network", args->network,
                  "public: any public host (private, loopback and metadata ranges refused;\n"
                  "DEEPBOX_NETWORK_ALLOW_CIDRS reopens named ones); allow=NAME[,NAME...]: only\n"
                  "those")
      ->check(NetworkValidator())
      ->capture_default_str();
  cmd->add_option("--secret", args->secrets,
                  "NAME=SOURCE@HOST[,HOST...][;query], as `deepbox sandbox create --secret`\n"
                  "(in a pod: env:VAR with VAR from a Kubernetes Secret)");
  cmd->add_option("--share-dir", args->share_dir,
                  "Where to write the CA, the bundle and secrets.env for the agent container");
  cmd->add_option("--upstream-ca", args->upstream_ca,
                  "Trust only these CA certificates (PEM) upstream (default: the system's)");
  cmd->add_option("--nameserver", args->nameservers,
                  "A resolver to ask (repeatable; default: /etc/resolv.conf's)");
  cmd->add_option("--log", args->log, "The egress log: a file (rotated at 4 MiB) or - (stdout)")
      ->capture_default_str();
  cmd->callback([args] { SetExitCode(RunEgressProxy(*args)); });
}

namespace {

// An unknown or missing subcommand (`deepbox frob`, `deepbox sandbox frob`,
// `deepbox sandbox`): says which ones exist (CLI11 would only say that one is
// required, or that an argument was not expected). nullopt: CLI11 parses.
std::optional<int> CheckSubcommands(CLI::App& app, int argc, char** argv) {
  auto all = [](CLI::App* a) { return a->get_subcommands([](CLI::App*) { return true; }); };
  CLI::App* cur = &app;
  std::string path = "deepbox";
  auto names = [&](CLI::App* a) {
    std::string list;
    for (CLI::App* s : all(a)) list += (list.empty() ? "" : ", ") + s->get_name();
    return list;
  };
  for (int i = 1; i < argc; ++i) {
    if (all(cur).empty()) return std::nullopt;  // a command: its own arguments follow
    std::string arg = argv[i];
    if (arg.starts_with("-")) return std::nullopt;  // --help, --version, ...
    CLI::App* next = nullptr;
    for (CLI::App* s : all(cur)) {
      if (s->check_name(arg)) next = s;
    }
    // A command with arguments of its own besides its subcommands (`sandbox
    // snapshot ID` next to `sandbox snapshot ls`): CLI11 parses them.
    if (next == nullptr &&
        !cur->get_options([](const CLI::Option* o) { return o->get_positional(); }).empty()) {
      return std::nullopt;
    }
    if (next == nullptr) {
      std::fprintf(stderr, "deepbox: %s: unknown command '%s' (commands: %s; see `%s --help`)\n",
                   path.c_str(), arg.c_str(), names(cur).c_str(), path.c_str());
      return kExitUsage;
    }
    cur = next;
    path += " " + cur->get_name();
  }
  if (!all(cur).empty() && cur->get_require_subcommand_min() > 0) {
    std::fprintf(stderr, "deepbox: %s: a command is required (commands: %s; see `%s --help`)\n",
                 path.c_str(), names(cur).c_str(), path.c_str());
    return kExitUsage;
  }
  return std::nullopt;
}

}  // namespace

}  // namespace deepbox::cli

int main(int argc, char** argv) {
  using namespace deepbox::cli;
  // The hidden supervisor of one sandbox (see local/lifecycle/supervisor.h).
  if (argc >= 2 && std::strcmp(argv[1], "__supervise") == 0) {
    return deepbox::local::lifecycle::SuperviseMain(argc, argv);
  }
  signal(SIGPIPE, SIG_IGN);  // a closed stdout is a write error, not a crash
  RegisterBuiltinProviders();
  CLI::App app{"deepbox: run AI agents whose tools execute in isolated sandboxes.", "deepbox"};
  app.require_subcommand(1);
  app.footer(kExitCodesHelp);
  app.set_version_flag("--version", "deepbox " + std::string(deepbox::kVersion));
  RegisterSandboxCommands(app);
  RegisterPoolCommands(app);
  RegisterDoctorCommand(app);
  RegisterRunCommand(app);
  RegisterMcpCommand(app);  // deepbox mcp (mcp_command.cc, mcp/)
  RegisterAcpCommand(app);  // deepbox acp (acp_command.cc, acp_server.cc)
  RegisterEgressProxyCommand(app);
  RegisterImageCommands(app);
  if (auto code = CheckSubcommands(app, argc, argv)) return *code;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  return ExitCode();
}
