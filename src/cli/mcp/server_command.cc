#include "cli/mcp/server_command.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "cli/mcp/sandbox_tools.h"
#include "common/terminal_text.h"
#include "local/lifecycle/selector.h"
#include "mcp/conformance_fixture.h"
#include "mcp/http_transport.h"
#include "mcp/server.h"
#include "mcp/stdio.h"
#include "sandbox/network_policy.h"
#include "sandbox/registry.h"

namespace deepbox::mcp {
namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "deepbox mcp: %s\n", SanitizeForTerminal(message).c_str());
  return code;
}

void Log(const std::string& message) { std::fprintf(stderr, "deepbox mcp: %s\n", message.c_str()); }

constexpr const char* kInstructions =
    "deepbox runs commands and file operations in isolated Linux sandboxes. Without a "
    "sandbox_id, tools use this client's default sandbox (created on first use, deleted when "
    "the client disconnects). Paths are real sandbox paths; relative ones are relative to the "
    "workspace root (/workspace). Use execute for commands; ls, read_file, write_file, "
    "edit_file, glob and grep for files; upload_file/download_file for binary files.";
constexpr const char* kHttpInstructions =
    "deepbox runs commands and file operations in isolated Linux sandboxes. Clients of the "
    "stateless protocol (MCP 2026-07-28) have no default sandbox: call sandbox_create first "
    "and pass its sandbox_id to every tool; session clients (the initialize handshake) may omit "
    "sandbox_id to use their default sandbox, deleted when the session ends. Paths are real "
    "sandbox paths; relative ones are relative to the workspace root (/workspace). Use execute "
    "for commands; ls, read_file, write_file, edit_file, glob and grep for files; "
    "upload_file/download_file for binary files.";

std::string RandomToken() {
  unsigned char raw[24];
  size_t got = 0;
  while (got < sizeof raw) {
    ssize_t n = ::getrandom(raw + got, sizeof raw - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  std::string out;
  for (unsigned char c : raw) out += fmt::format("{:02x}", c);
  return out;
}

Result<std::string> LoadToken(const McpArgs& args) {
  if (!args.token_file.empty()) {
    std::ifstream in(args.token_file);
    if (!in) return MakeSyscallError("open", errno, args.token_file);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string t = ss.str();
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
    if (t.empty()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("--token-file {}: the file is empty", args.token_file));
    }
    return t;
  }
  if (const char* env = std::getenv("DEEPBOX_MCP_TOKEN"); env != nullptr && *env != '\0') {
    return std::string(env);
  }
  return std::string();
}

bool IsLoopbackHost(const std::string& host) {
  return host == "127.0.0.1" || host == "::1" || host == "localhost" || host.rfind("127.", 0) == 0;
}

}  // namespace

int RunMcp(const McpArgs& args) {
  // Signals end the server through a signalfd, so every wait can watch it.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) {
    return Fail(kExitError, "pthread_sigmask failed");
  }
  int sfd = ::signalfd(-1, &set, SFD_CLOEXEC);
  if (sfd < 0) return Fail(kExitError, SyscallError("signalfd", errno).message);

  BrokerOptions bo;
  bo.default_provider = args.provider;
  for (const auto& l : args.labels) {
    auto kv = local::lifecycle::ParseLabel(l);
    if (!kv) return Fail(kExitUsage, "--label: " + kv.error().message);
    if (kv->first.rfind(kReservedLabelPrefix, 0) == 0) {
      return Fail(kExitUsage, fmt::format("--label {}: the {} labels are deepbox's own", l,
                                          kReservedLabelPrefix));
    }
    bo.defaults.labels[kv->first] = kv->second;
  }
  if (args.ttl_seconds < 0) return Fail(kExitUsage, "--ttl must be >= 0");
  bo.defaults.ttl = std::chrono::seconds(args.ttl_seconds);
  if (args.idle_suspend_seconds < 0) return Fail(kExitUsage, "--idle-suspend must be >= 0");
  bo.defaults.idle_suspend = std::chrono::seconds(args.idle_suspend_seconds);
  std::string network = args.network.empty() ? "none" : args.network;
  if (auto p = ParseNetworkPolicy(network); !p) {
    return Fail(kExitUsage, "--network: " + p.error().message);
  }
  bo.defaults.network = network;
  bo.defaults.image = args.image;
  // Read once, here, from the operator's environment, files or commands.
  auto secrets = ResolveSecretFlags(args.secrets);
  if (!secrets) return Fail(kExitUsage, "--secret: " + secrets.error().message);
  bo.defaults.secrets = std::move(*secrets);
  bo.allow_client_network = args.allow_client_network;
  bo.shared = args.shared;
  if (!args.attach_selector.empty()) {
    auto sel = local::lifecycle::Selector::Parse(args.attach_selector);
    if (!sel) return Fail(kExitUsage, "--attach-selector: " + sel.error().message);
    if (sel->empty()) return Fail(kExitUsage, "--attach-selector: the selector is empty");
    bo.attach_selector = args.attach_selector;
  }
  if (args.max_sandboxes < 0 || args.max_sandboxes_per_client < 0) {
    return Fail(kExitUsage, "--max-sandboxes and --max-sandboxes-per-client must be >= 0");
  }
  bo.max_per_server = static_cast<size_t>(args.max_sandboxes);
  bo.max_per_client = static_cast<size_t>(args.max_sandboxes_per_client);

  // The providers, made as every command makes them (sandbox/registry.h):
  // local always (its orphaned defaults are reaped below), k8s when it is
  // the default or one of its flags was given, each with the flags given
  // for it (the rest come from its environment variables and defaults).
  std::vector<std::string> names = {"local"};
  if (args.provider != "local") names.push_back(args.provider);
  const ProviderRegistry& providers = ProviderRegistry::Global();
  for (const auto& name : providers.Names()) {
    const ProviderRegistration* r = providers.Lookup(name);
    if (std::find(names.begin(), names.end(), name) == names.end() &&
        !args.settings.For(*r).empty()) {
      names.push_back(name);
    }
  }
  if (providers.Lookup(args.provider) == nullptr) {
    std::string known;
    for (const auto& n : providers.Names()) known += (known.empty() ? "" : ", ") + n;
    return Fail(kExitUsage, fmt::format("--provider {}: unknown sandbox provider (this deepbox "
                                        "has: {})",
                                        args.provider, known.empty() ? "none" : known));
  }
  std::vector<std::unique_ptr<SandboxProvider>> made;
  for (const auto& name : names) {
    const ProviderRegistration* registration = providers.Lookup(name);
    if (registration == nullptr) continue;  // --provider: said below
    ProviderRequest request;
    request.settings = args.settings.For(*registration);
    request.created_by = "deepbox-mcp";
    request.on_warning = [](const std::string& warning) {
      Log("warning: " + SanitizeForTerminal(warning));
    };
    // The server acts for its clients: only within each provider's own
    // scope (k8s: claims of its namespace), whatever its credentials reach.
    request.confined = true;
    auto p = providers.Make(name, request);
    if (!p) {
      std::string what = name == "local" ? "local sandboxes" : name == "k8s" ? "Kubernetes" : name;
      // A bad flag or variable value is a usage error; anything else (no
      // kubeconfig, no state directory) a failed start.
      int code = p.error().code == ErrorCode::kInvalidArgument ? kExitUsage : kExitError;
      return Fail(code, what + ": " + p.error().message);
    }
    made.push_back(std::move(*p));
  }
  auto broker = std::make_shared<SandboxBroker>(bo, std::move(made));
  // Default sandboxes of servers that died without cleaning up (SIGKILL).
  for (const auto& id : broker->ReapOrphanedDefaults()) {
    Log(fmt::format("deleted {}, the default sandbox of a deepbox mcp that is gone", id));
  }
  auto registry = std::make_shared<ToolRegistry>();
  SandboxToolsOptions to;
  to.stateless_clients = !args.listen.empty();
  if (args.conformance_fixture) {
    AddConformanceFixtureTools(*registry);
  } else {
    AddSandboxTools(*registry, broker, to);
  }
  ServerConfig sc;
  sc.instructions = args.listen.empty() ? kInstructions : kHttpInstructions;
  McpServer server(registry, sc);

  if (args.listen.empty()) {
    // stdout carries MCP messages only: keep a private copy of it (and of
    // stdin) and point fds 0 and 1 elsewhere, so nothing else (a child, a
    // library) can write into the protocol stream or hold the client's pipes.
    int in = ::fcntl(0, F_DUPFD_CLOEXEC, 3);
    int out = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
    if (in < 0 || out < 0) return Fail(kExitError, SyscallError("fcntl(F_DUPFD)", errno).message);
    int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull >= 0) {
      ::dup2(devnull, 0);
      ::close(devnull);
    }
    ::dup2(2, 1);
    StdioOptions so;
    so.in_fd = in;
    so.out_fd = out;
    so.stop_fd = sfd;
    so.on_close = [&] { broker->ReleaseOwner(so.owner); };
    auto st = ServeStdio(server, so);
    broker->ReleaseAll();
    ::close(in);
    ::close(out);
    if (!st) return Fail(kExitError, st.error().message);
    return 0;
  }

  auto endpoint = net::Endpoint::Parse(args.listen);
  if (!endpoint || endpoint->is_unix || endpoint->is_fd) {
    return Fail(kExitUsage, fmt::format("--listen {}: expected HOST:PORT", args.listen));
  }
  HttpTransportOptions ho;
  ho.allowed_origins = args.allowed_origins;
  ho.allowed_hosts = args.allowed_hosts;
  ho.session_idle_timeout = std::chrono::seconds(args.session_idle_seconds);
  ho.on_owner_gone = [broker](const std::string& owner) { broker->ReleaseOwner(owner); };
  if (args.no_auth) {
    if (!IsLoopbackHost(endpoint->host)) {
      return Fail(kExitUsage,
                  fmt::format("--no-auth is only allowed on a loopback address (127.0.0.1, ::1), "
                              "not {}",
                              endpoint->host.empty() ? "all interfaces" : endpoint->host));
    }
  } else {
    auto token = LoadToken(args);
    if (!token) return Fail(kExitUsage, token.error().message);
    ho.bearer_token = *token;
    if (ho.bearer_token.empty()) {
      ho.bearer_token = RandomToken();
      Log("bearer token (send it as Authorization: Bearer TOKEN; set DEEPBOX_MCP_TOKEN or "
          "--token-file to choose one): " +
          ho.bearer_token);
    }
  }
  auto http = McpHttpServer::Start(server, *endpoint, ho);
  if (!http) return Fail(kExitError, http.error().message);
  std::string host =
      endpoint->host.find(':') != std::string::npos ? "[" + endpoint->host + "]" : endpoint->host;
  Log(fmt::format("serving MCP (Streamable HTTP) on http://{}:{}/mcp", host, (*http)->port()));
  signalfd_siginfo info;
  while (::read(sfd, &info, sizeof info) < 0 && errno == EINTR) {
  }
  Log("stopping");
  (*http)->Stop();
  broker->ReleaseAll();
  return 0;
}

}  // namespace deepbox::mcp
