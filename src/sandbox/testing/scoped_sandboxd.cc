#include "sandbox/testing/scoped_sandboxd.h"

#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "net/conn.h"

extern char** environ;

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
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string_view(*e).starts_with("SANDBOXD_TOKEN=")) continue;
    env_strings.emplace_back(*e);
  }
  if (!options.token.empty()) env_strings.push_back("SANDBOXD_TOKEN=" + options.token);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, binary.c_str(), nullptr, nullptr, argv.data(), envp.data());
  if (rc != 0) return MakeSyscallError("posix_spawn", rc, binary);
  s->pid_ = pid;
  // Wait for the socket to accept connections (bounded: 30 s under sanitizers).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      s->pid_ = -1;
      return MakeError(ErrorCode::kUnavailable,
                       fmt::format("deepbox-sandboxd exited during startup (status {})", status));
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
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

int ScopedSandboxd::Terminate() {
  int status = -1;
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  return status;
}

ScopedSandboxd::~ScopedSandboxd() {
  client_.reset();
  if (pid_ > 0) Terminate();
}

}  // namespace deepbox::testing
