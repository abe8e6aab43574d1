#include "sandbox/testing/scoped_sandboxd.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "net/conn.h"

namespace deepbox::testing {
namespace {

int FreePort() {
  auto l = net::Listener::Bind(*net::Endpoint::Parse("127.0.0.1:0"));
  return l ? l->port() : 0;
}

}  // namespace

std::string ScopedSandboxd::DefaultBinary() {
  if (const char* env = std::getenv("DEEPBOX_SANDBOXD_BIN"); env != nullptr) return env;
  return std::string(DEEPBOX_BIN_DIR) + "/deepbox-sandboxd";
}

Result<std::unique_ptr<ScopedSandboxd>> ScopedSandboxd::Start(SandboxdOptions options) {
  std::unique_ptr<ScopedSandboxd> s(new ScopedSandboxd());
  auto dir = TempDir::Make("deepbox-sbd", "/tmp");  // short: the socket path fits 107 bytes
  if (!dir) return tl::unexpected(dir.error());
  s->dir_.emplace(std::move(*dir));
  s->root_ = s->dir_->Path("root");
  s->socket_ = s->dir_->Path("sandboxd.sock");
  std::filesystem::create_directories(s->root_);
  std::string binary = options.binary.empty() ? DefaultBinary() : options.binary;
  std::vector<std::string> args = {binary, "--listen", "unix:" + s->socket_, "--root-dir",
                                   s->root_};
  if (options.tcp) {
    s->port_ = FreePort();
    args.push_back("--listen");
    args.push_back(fmt::format("127.0.0.1:{}", s->port_));
  }
  for (const auto& a : options.extra_args) args.push_back(a);
  SubprocessOptions spawn;
  spawn.argv = std::move(args);
  // Only the token given (none: no token at all), never the test's own.
  spawn.unset_env = {"SANDBOXD_TOKEN"};
  if (!options.token.empty()) spawn.env = {{"SANDBOXD_TOKEN", options.token}};
  spawn.new_process_group = false;
  // Its output is the test's: a failing test shows what the daemon said.
  spawn.stdin_from.inherit = true;
  spawn.stdout_to.inherit = true;
  spawn.stderr_to.inherit = true;
  auto daemon = Subprocess::Spawn(spawn);
  if (!daemon) return tl::unexpected(daemon.error());
  s->daemon_ = std::move(*daemon);
  // Wait for the socket to accept connections (bounded: 30 s under sanitizers).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    if (auto status = s->daemon_.TryWait()) {
      return MakeError(ErrorCode::kUnavailable,
                       fmt::format("deepbox-sandboxd exited during startup (status {})", *status));
    }
    auto ep = net::Endpoint::Parse("unix:" + s->socket_);
    if (auto c = net::Conn::Connect(*ep, net::DeadlineAfter(std::chrono::milliseconds(100))); c) {
      if (!options.tcp) break;
      auto tep = net::Endpoint::Parse(fmt::format("127.0.0.1:{}", s->port_));
      if (net::Conn::Connect(*tep, net::DeadlineAfter(std::chrono::milliseconds(100)))) break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return MakeError(ErrorCode::kTimeout, "deepbox-sandboxd did not start listening within 30 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!options.connect) return s;
  SandboxdClientOptions copts;
  copts.token = options.token;
  auto client = s->Connect(copts);
  if (!client) return tl::unexpected(client.error());
  s->client_ = std::move(*client);
  return s;
}

Result<std::unique_ptr<SandboxdClient>> ScopedSandboxd::Connect(
    SandboxdClientOptions options) const {
  return SandboxdClient::Connect(unix_url(), std::move(options));
}

std::string ScopedSandboxd::tcp_url() const {
  return port_ > 0 ? fmt::format("http://127.0.0.1:{}", port_) : "";
}

void ScopedSandboxd::Kill() {
  if (daemon_.running()) {
    daemon_.Signal(SIGKILL);
    daemon_.Wait();
  }
}

int ScopedSandboxd::Terminate() {
  if (!daemon_.running()) return -1;
  daemon_.Signal(SIGTERM);
  return daemon_.Wait();
}

ScopedSandboxd::~ScopedSandboxd() {
  client_.reset();
  Terminate();
}

}  // namespace deepbox::testing
