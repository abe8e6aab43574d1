// deepbox-sandboxd: the daemon inside every sandbox. See docs/sandboxd-api.md.
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "net/http_server.h"
#include "net/openssl_loader.h"
#include "sandboxd/proc/reaper.h"
#include "sandboxd/proc/spawn.h"
#include "sandboxd/server/daemon.h"

namespace {

using namespace deepbox;
using namespace std::chrono_literals;

// Fault signals (SEGV, BUS, FPE, ILL) that a process of the sandbox sends us
// with kill() are not faults: as init we ignore them, as the kernel already
// does for a default disposition. This matters when a handler is installed
// (sanitizer builds install one and would take a sent SIGSEGV for a crash).
// Real faults go on to the previous handler, or kill us as before.
struct sigaction g_previous_fault_action[NSIG];

void OnFaultSignal(int sig, siginfo_t* info, void* context) {
  if (info != nullptr && info->si_code <= 0 && info->si_pid > 0) return;  // sent, not a fault
  const struct sigaction& prev = g_previous_fault_action[sig];
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, context);
    return;
  }
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler != nullptr) {
    prev.sa_handler(sig);
    return;
  }
  // Default action: returning re-runs the faulting instruction, which now dies.
  ::signal(sig, SIG_DFL);
}

void IgnoreSentFaultSignals() {
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) {
    struct sigaction sa {};
    sa.sa_sigaction = &OnFaultSignal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, &g_previous_fault_action[sig]);
  }
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "deepbox-sandboxd: %s\n", message.c_str());
  return 2;
}

// Every connection holds a descriptor and a request a few more (an exec's
// pipes and pidfd), so the soft RLIMIT_NOFILE (often 1024) would cap the
// connections below --http-max-connections' 1024 and turn the rest into
// accept() failures (EMFILE) that leave clients waiting. The soft limit goes
// up to the hard one (children get the original back: spawn.h), and the
// default connection cap leaves room for two descriptors per connection plus
// the daemon's own: min(1024, (limit - 64) / 2). Returns that cap.
Result<size_t> RaiseOpenFilesLimit() {
  struct rlimit nofile {};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) != 0) {
    return MakeSyscallError("getrlimit", errno, "RLIMIT_NOFILE");
  }
  const rlim_t started_with = nofile.rlim_cur;
  if (nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &nofile) != 0) {
      return MakeSyscallError("setrlimit", errno, "RLIMIT_NOFILE");
    }
  }
  if (auto s = sandboxd::proc::SetChildOpenFilesLimit(started_with); !s) {
    return tl::unexpected(s.error());
  }
  // The daemon's own descriptors (listeners, eventfds, epoll, reaper) are
  // about 20; a sandbox configured with a tiny limit still gets a few
  // connections.
  constexpr size_t kDefaultMaxConnections = 1024;
  const rlim_t own = std::min<rlim_t>(64, nofile.rlim_cur / 4);
  const rlim_t room = (nofile.rlim_cur - own) / 2;
  return std::clamp<size_t>(static_cast<size_t>(std::min<rlim_t>(room, kDefaultMaxConnections)), 4,
                            kDefaultMaxConnections);
}

// --env-file: NAME=VALUE lines into this process's environment, which every
// command inherits. Before any thread exists (setenv is not thread-safe).
Status LoadEnvFile(const std::string& path) {
  for (int i = 0; i < 300 && access(path.c_str(), F_OK) != 0; ++i) usleep(100 * 1000);
  std::ifstream in(path);
  if (!in) return MakeError(ErrorCode::kNotFound, fmt::format("cannot read --env-file '{}'", path));
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    size_t eq = line.find('=');
    std::string name = line.substr(0, eq == std::string::npos ? 0 : eq);
    bool ok = !name.empty() && !(name[0] >= '0' && name[0] <= '9');
    for (char c : name) {
      ok = ok &&
           (c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'));
    }
    if (!ok) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("--env-file '{}' line {}: expected NAME=VALUE", path, number));
    }
    if (setenv(name.c_str(), line.c_str() + eq + 1, 1) != 0) {
      return MakeSyscallError("setenv", errno, name);
    }
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  // First: no process of the sandbox (same uid) may ptrace us, read our memory
  // or borrow our fds (the listener) through /proc/<pid>/fd or pidfd_getfd.
  // Children get dumpable back at exec.
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    std::fprintf(stderr, "deepbox-sandboxd: prctl(PR_SET_DUMPABLE): %s\n", std::strerror(errno));
    return 2;
  }
  CLI::App app{
      "deepbox-sandboxd: serves files, search and processes inside a sandbox.\n"
      "Speaks the deepbox API (/deepbox/v1/...), the upstream python-runtime API\n"
      "(/execute, /upload, ...) and the upstream sandboxd REST API (/v1/files/...).\n"
      "See docs/sandboxd-api.md.",
      "deepbox-sandboxd"};
  sandboxd::DaemonConfig config;
  std::vector<std::string> listen;
  std::string listen_host = "0.0.0.0";
  int rest_port = 8888;
  int grpc_port = 0;
  std::string token_file;
  double default_timeout_s = 1800;
  double shutdown_timeout_s = 10;
  double idle_timeout_s = 60;
  double header_timeout_s = 20;
  double body_timeout_s = 60;
  uint64_t body_min_rate = 1024;
  double write_timeout_s = 300;
  size_t max_connections = 0;
  size_t stream_chunk_size = 0;
  app.add_option("--listen", listen,
                 "Where to listen: unix:/path/to.sock, HOST:PORT, or fd:N (a listening\n"
                 "socket passed by the launcher; deepbox's local sandboxes use fd:3)\n"
                 "(repeatable). Default: --listen-host:--rest-port");
  std::string files_root = "auto";
  app.add_option("--root-dir", config.root_dir,
                 "The workspace: the upstream APIs' root (every path they take is\n"
                 "confined to it), the default working directory of commands, and\n"
                 "where relative paths of the deepbox API resolve")
      ->capture_default_str();
  app.add_option("--exec-cwd", config.exec_cwd,
                 "The working directory of commands that name none (default: --root-dir);\n"
                 "deepbox passes an image's WorkingDir");
  app.add_option("--files-root", files_root,
                 "Root of the deepbox file API (/deepbox/v1/fs/..., glob, grep,\n"
                 "downloads, uploads, tar, exec cwd). 'auto': '/' when this daemon is\n"
                 "its sandbox's init (PID 1: a deepbox local sandbox, a container), so\n"
                 "file tools see what commands see (kernel pseudo filesystems such as\n"
                 "/proc are refused; the sandbox's mounts are the boundary); else\n"
                 "--root-dir, so a daemon started outside a sandbox stays confined.\n"
                 "Give a directory (e.g. '/') to choose; it must contain --root-dir")
      ->capture_default_str();
  app.add_option("--listen-host", listen_host, "Upstream-compatible: host to listen on")
      ->capture_default_str();
  app.add_option("--rest-port", rest_port, "Upstream-compatible: TCP port to listen on")
      ->capture_default_str();
  app.add_option("--grpc-port", grpc_port,
                 "Also listen on --listen-host:PORT (upstream sandboxd's gRPC port). Every\n"
                 "listener serves both HTTP/1.1 and gRPC over cleartext HTTP/2 (prior\n"
                 "knowledge): process.v1.ProcessService/Execute. 0: no extra listener");
  app.add_option("--token-file", token_file,
                 "File holding the token every request but the health checks must\n"
                 "carry, in X-Sandboxd-Token or as Authorization: Bearer (or set\n"
                 "SANDBOXD_TOKEN)");
  std::vector<std::string> env_files;
  app.add_option("--env-file", env_files,
                 "NAME=VALUE lines added to the environment of every command (repeatable;\n"
                 "empty lines and lines starting with # skipped), read at start: e.g. a\n"
                 "secrets proxy sidecar's placeholders (deepbox egress-proxy --share-dir).\n"
                 "A missing file is waited for up to 30 s (the sidecar may still be writing)");
  app.add_option("--token-sha256-file", config.token_sha256_file,
                 "File holding only the token's verifier, 'sha256:' + base64url of\n"
                 "its SHA-256 (deploy/k8s: the claim's annotation through a downward\n"
                 "API volume), re-read when it changes. While it is missing or empty\n"
                 "only the health checks (/, /healthz, /v1/health,\n"
                 "/deepbox/v1/health) are served: an unclaimed pod takes no command");
  app.add_option("--default-timeout", default_timeout_s,
                 "Default command timeout in seconds (0 = none)")
      ->capture_default_str();
  app.add_option("--max-output", config.max_output_bytes,
                 "Default cap on captured output per stream, in bytes")
      ->capture_default_str();
  double exec_record_retention_s = 600;
  app.add_option("--exec-record-retention", exec_record_retention_s,
                 "Seconds an identified exec's record (exec_id: re-attach after a cut\n"
                 "stream) is kept after its command ended")
      ->capture_default_str();
  app.add_option("--process-log-bytes", config.max_log_bytes,
                 "Output kept per background process, in bytes (the oldest is dropped\n"
                 "beyond it)")
      ->capture_default_str();
  app.add_option("--metadata-env-prefix", config.metadata_env_prefix,
                 "Environment prefix exposed by /v1/metadata")
      ->capture_default_str();
  app.add_option("--shutdown-timeout", shutdown_timeout_s,
                 "Seconds running requests get after SIGTERM before processes are killed")
      ->capture_default_str();
  app.add_option("--http-idle-timeout", idle_timeout_s,
                 "Seconds a kept-alive connection waits for its next request")
      ->capture_default_str();
  app.add_option("--http-header-timeout", header_timeout_s,
                 "Seconds a request's line and headers may take from their first byte\n"
                 "(a new connection: from accept); then 408 and close")
      ->capture_default_str();
  app.add_option("--http-body-timeout", body_timeout_s,
                 "Longest silence in a request body, in seconds, and the grace before\n"
                 "--http-body-min-rate applies; then 408 and close")
      ->capture_default_str();
  app.add_option("--http-body-min-rate", body_min_rate,
                 "Least rate of a request body in bytes/s after the grace, a client\n"
                 "ahead of it banking at most --http-body-timeout of credit (0 = silence\n"
                 "bound only). Uploads have no size cap, so no fixed time bounds a\n"
                 "body; this rate bounds a client that drips one")
      ->capture_default_str();
  app.add_option("--http-write-timeout", write_timeout_s,
                 "Seconds a response may make no progress (the client takes no byte)\n"
                 "before the connection is cut; a slow but moving download is not cut")
      ->capture_default_str();
  app.add_option("--http-max-connections", max_connections,
                 "Connections served at once (more get 503); default: 1024, or fewer\n"
                 "when RLIMIT_NOFILE leaves too little room");
  app.add_option("--stream-chunk-size", stream_chunk_size,
                 "Accepted for upstream compatibility (ignored)");
  app.add_option("--shell", config.shell, "Shell used for shell-string commands")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  for (auto [name, value] : {std::pair{"--http-idle-timeout", idle_timeout_s},
                             {"--http-header-timeout", header_timeout_s},
                             {"--http-body-timeout", body_timeout_s},
                             {"--http-write-timeout", write_timeout_s},
                             {"--exec-record-retention", exec_record_retention_s}}) {
    if (!(value >= 0 && value <= 86400 * 365)) {
      return Fail(fmt::format("{} must be between 0 and one year of seconds", name));
    }
  }
  if (config.max_log_bytes == 0) return Fail("--process-log-bytes must be at least 1");
  // Before any thread starts (children of every thread get the original).
  auto fd_room = RaiseOpenFilesLimit();
  if (!fd_room) return Fail(fd_room.error().ToString());

  for (const auto& path : env_files) {
    if (auto st = LoadEnvFile(path); !st) return Fail(st.error().message);
  }

  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in) return Fail(fmt::format("cannot read --token-file '{}'", token_file));
    std::stringstream ss;
    ss << in.rdbuf();
    config.token = ss.str();
    while (!config.token.empty() && std::isspace(static_cast<unsigned char>(config.token.back()))) {
      config.token.pop_back();
    }
    if (config.token.empty()) return Fail(fmt::format("--token-file '{}' is empty", token_file));
  } else if (const char* t = std::getenv("SANDBOXD_TOKEN"); t != nullptr && *t != '\0') {
    config.token = t;
  }
  if (!config.token.empty() && !config.token_sha256_file.empty()) {
    return Fail("--token-sha256-file and --token-file/SANDBOXD_TOKEN exclude each other");
  }
  // Tokens are checked with OpenSSL (net/token_digest.h), which this
  // daemon loads on first use: one that could not check them must not start.
  if (!config.token.empty() || !config.token_sha256_file.empty()) {
    if (auto openssl = net::LoadLibOpenSsl("checking the token"); !openssl) {
      return Fail(openssl.error().message);
    }
  }
  // The token must not leak into commands' environments.
  ::unsetenv("SANDBOXD_TOKEN");
  config.default_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(default_timeout_s * 1000));
  config.exec_record_retention =
      std::chrono::milliseconds(static_cast<int64_t>(exec_record_retention_s * 1000));
  auto shutdown_grace = std::chrono::milliseconds(static_cast<int64_t>(shutdown_timeout_s * 1000));

  if (listen.empty()) {
    listen.push_back(listen_host.find(':') != std::string::npos
                         ? fmt::format("[{}]:{}", listen_host, rest_port)
                         : fmt::format("{}:{}", listen_host, rest_port));
  }

  if (::getpid() == 1) IgnoreSentFaultSignals();
  // SIGTERM/SIGINT are taken by sigwaitinfo below, never async: blocked before
  // any thread starts, so every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  sandboxd::proc::IgnoreSigpipe();
  // Orphans re-parented to us (as PID 1 or subreaper) must be reaped.
  if (::getpid() != 1) (void)sandboxd::proc::BecomeSubreaper();
  auto reaper = sandboxd::proc::Reaper::Start();
  if (!reaper) return Fail("starting the reaper: " + reaper.error().ToString());

  if (files_root == "auto") {
    config.files_root = ::getpid() == 1 ? "/" : "";
  } else {
    config.files_root = files_root;
  }
  auto daemon = sandboxd::Daemon::Create(config);
  if (!daemon) return Fail(daemon.error().message);

  auto seconds = [](double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
  net::ServerOptions options;
  options.idle_timeout = seconds(idle_timeout_s);
  options.header_timeout = seconds(header_timeout_s);
  options.body_timeout = seconds(body_timeout_s);
  options.body_min_rate = body_min_rate;
  options.write_timeout = seconds(write_timeout_s);
  options.max_connections = max_connections > 0 ? max_connections : *fd_room;
  options.server_header = "deepbox-sandboxd/" + std::string(kVersion);
  options.stream_request_body = &sandboxd::Daemon::StreamsRequestBody;
  sandboxd::Daemon* d = daemon->get();
  // gRPC (process.v1.ProcessService, the upstream SDK's sandboxd runtime) on
  // every listener: a connection that opens with the HTTP/2 preface.
  sandboxd::GrpcServerOptions grpc_options;
  grpc_options.idle_timeout = seconds(idle_timeout_s);
  grpc_options.authorize = [d](const std::string& method, const net::Headers& metadata) {
    return d->GrpcUnauthorized(method, metadata);
  };
  const sandboxd::GrpcHandler grpc_handler = [d](const sandboxd::GrpcCall& call) {
    return d->HandleGrpc(call);
  };
  options.serve_h2_prior_knowledge = [&grpc_options, &grpc_handler](net::Conn& conn,
                                                                    std::string_view received) {
    sandboxd::ServeGrpcConnection(conn, received, grpc_options, grpc_handler, conn.cancel_fd());
  };
  if (grpc_port < 0 || grpc_port > 65535) return Fail("--grpc-port must be from 0 to 65535");
  if (grpc_port > 0) {
    listen.push_back(listen_host.find(':') != std::string::npos
                         ? fmt::format("[{}]:{}", listen_host, grpc_port)
                         : fmt::format("{}:{}", listen_host, grpc_port));
  }
  std::vector<std::unique_ptr<net::HttpServer>> servers;
  for (const auto& spec : listen) {
    auto ep = net::Endpoint::Parse(spec);
    if (!ep) return Fail(fmt::format("--listen '{}': {}", spec, ep.error().message));
    auto server = net::HttpServer::Create(
        *ep, [d](net::Request& req, net::ResponseWriter& w) { d->Handle(req, w); }, options);
    if (!server) return Fail(fmt::format("cannot listen on {}: {}", spec, server.error().message));
    std::string where = ep->is_unix || ep->is_fd
                            ? ep->ToString()
                            : fmt::format("{}:{}", ep->host, (*server)->port());
    std::fprintf(stderr, "deepbox-sandboxd %s: listening on %s, root %s, files root %s%s\n",
                 std::string(kVersion).c_str(), where.c_str(), config.root_dir.c_str(),
                 (*daemon)->files_root().path().c_str(),
                 !config.token.empty()               ? ", token required"
                 : !config.token_sha256_file.empty() ? ", token (by verifier) required"
                                                     : "");
    servers.push_back(std::move(*server));
  }
  for (auto& s : servers) s->Start();

  int sig = 0;
  for (;;) {
    siginfo_t info{};
    sig = sigwaitinfo(&stop_signals, &info);
    if (sig < 0) continue;  // EINTR
    // As the sandbox's init, a stop request can only come from outside: the
    // kernel shows a sender in an ancestor PID namespace as pid 0. A process of
    // the sandbox (pid > 0 here) must not be able to take its daemon down.
    if (::getpid() == 1 && info.si_pid > 0) {
      std::fprintf(stderr, "deepbox-sandboxd: ignoring %s from pid %d inside the sandbox\n",
                   sig == SIGTERM ? "SIGTERM" : "SIGINT", static_cast<int>(info.si_pid));
      continue;
    }
    break;
  }
  std::fprintf(stderr, "deepbox-sandboxd: %s received, shutting down\n",
               sig == SIGTERM ? "SIGTERM" : "SIGINT");
  // Stop accepting; running requests get the grace period; then processes die.
  std::thread stopper([&] {
    for (auto& s : servers) s->Stop(shutdown_grace);
  });
  stopper.join();
  (*daemon)->BeginShutdown(2s);
  servers.clear();
  daemon->reset();
  return 0;
}
