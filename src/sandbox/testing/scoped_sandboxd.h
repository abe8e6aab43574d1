// Test support: runs the real deepbox-sandboxd binary as a child process on a
// unix socket (and optionally loopback TCP) over a fresh temporary root, and
// connects a SandboxdClient to it. Destruction stops the daemon and removes
// the temporary directory.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/subprocess.h"
#include "common/testing/temp_dir.h"
#include "sandbox/sandboxd_client.h"

namespace deepbox::testing {

struct SandboxdOptions {
  std::vector<std::string> extra_args;  // e.g. {"--max-output", "1024"}
  std::string token;                    // passed via SANDBOXD_TOKEN
  bool tcp = false;                     // also listen on 127.0.0.1:<free port>
  std::string binary;                   // default: the build's bin/deepbox-sandboxd
  // false: no client() (a daemon that answers only health checks until a
  // token verifier arrives, --token-sha256-file); Connect() still works.
  bool connect = true;
};

class ScopedSandboxd {
 public:
  static Result<std::unique_ptr<ScopedSandboxd>> Start(SandboxdOptions options = {});
  ~ScopedSandboxd();

  const std::string& root() const { return root_; }  // the daemon's --root-dir
  const std::string& socket_path() const { return socket_; }
  std::string unix_url() const { return "unix:" + socket_; }
  std::string tcp_url() const;  // "" unless options.tcp
  int tcp_port() const { return port_; }
  pid_t pid() const { return daemon_.running() ? daemon_.pid() : -1; }
  SandboxdClient& client() { return *client_; }  // unless options.connect was false
  // A fresh client (e.g. with another token).
  Result<std::unique_ptr<SandboxdClient>> Connect(SandboxdClientOptions options = {}) const;
  // SIGKILLs the daemon (crash tests). Idempotent.
  void Kill();
  // Sends SIGTERM and waits; returns the exit status (as from waitpid).
  int Terminate();

  static std::string DefaultBinary();

 private:
  ScopedSandboxd() = default;
  std::optional<TempDir> dir_;  // removed after the daemon stopped
  std::string root_;
  std::string socket_;
  int port_ = 0;
  Subprocess daemon_;  // in the test's process group, its stdio the test's
  std::unique_ptr<SandboxdClient> client_;
};

}  // namespace deepbox::testing
