// Reaching a claimed sandbox's daemon (deepbox-sandboxd in the pod) the way the
// upstream SDK does (reference §3, §5): through the sandbox router with the
// X-Sandbox-ID / -Namespace / -Port / -Pod-IP headers, reached by
//  (a) a `kubectl port-forward svc/sandbox-router-svc <free port>:8080` child
//      that we start, watch (restarted once if it dies) and stop,
//  (b) a direct URL (a router or Gateway address), or
//  (c) in cluster, the pod IP itself (no router).
// The result is a base URL plus default headers for a SandboxdClient.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"
#include "k8s/claim.h"
#include "k8s/subprocess.h"
#include "net/http.h"

namespace deepbox::k8s {

struct DaemonEndpoint {
  std::string base_url;  // "http://127.0.0.1:43121"
  net::Headers headers;  // sent with every request (router headers)
};

struct RouterTarget {
  std::string sandbox_id;      // the Sandbox (pod) name
  std::string namespace_name;  // "default"
  int port = 8888;             // the daemon's port in the pod
  std::string pod_ip;          // "" = let the router resolve the name
  std::string router_token;    // "" = no Authorization header
};
net::Headers RouterHeaders(const RouterTarget& target);

struct PortForwardOptions {
  std::string kubectl = "kubectl";
  // Global flags placed before "port-forward" (e.g. --kubeconfig, --context).
  std::vector<std::string> kubectl_args;
  std::string service = "svc/sandbox-router-svc";
  int remote_port = 8080;
  std::string namespace_name = "agent-sandbox-system";
  std::chrono::milliseconds ready_timeout{30000};
  std::chrono::milliseconds poll_interval{50};
  int max_restarts = 1;
  std::chrono::milliseconds stop_grace{2000};
  std::vector<std::pair<std::string, std::string>> env;  // for the child
};

// A `kubectl port-forward` child in its own process group. Thread-safe.
class PortForward {
 public:
  static Result<std::unique_ptr<PortForward>> Start(PortForwardOptions options);
  ~PortForward();

  int local_port() const { return port_; }
  std::string base_url() const;
  // OK while the tunnel is up (restarts included); the reason once it is gone.
  Status Health() const;
  pid_t pid() const;
  int restarts() const;
  // Blocks until the child has been replaced `n` times or the tunnel died for
  // good (tests); false after `timeout`.
  bool WaitForRestarts(int n, std::chrono::milliseconds timeout);
  // SIGTERM, then SIGKILL after the grace period; reaps. Idempotent.
  void Stop();

 private:
  PortForward() = default;
  Status Launch();  // spawns the child and waits until the port accepts
  void Monitor();
  std::string OutputTail() const;

  PortForwardOptions options_;
  int port_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Child child_;
  UniqueFd output_;   // the child's stdout+stderr
  std::string tail_;  // last few KiB of its output
  std::optional<Error> dead_;
  int restarts_ = 0;
  bool stopping_ = false;
  UniqueFd stop_fd_;  // eventfd: wakes the monitor
  std::thread monitor_;
};

enum class ConnectionMode { kPortForward, kDirect, kInCluster };

struct ConnectionOptions {
  ConnectionMode mode = ConnectionMode::kPortForward;
  PortForwardOptions port_forward;
  std::string direct_url;  // kDirect: "http://gateway.example" (router behind it)
  int daemon_port = 8888;  // X-Sandbox-Port, and the port dialled in cluster
  std::string router_token;
  bool send_pod_ip = true;  // X-Sandbox-Pod-IP (needed for warm sandboxes)
};

// One sandbox's way in: the endpoint, and the port-forward behind it if any.
class SandboxConnection {
 public:
  static Result<std::unique_ptr<SandboxConnection>> Open(const ConnectionOptions& options,
                                                         const ClaimedSandbox& sandbox);
  ~SandboxConnection();

  const DaemonEndpoint& endpoint() const { return endpoint_; }
  Status Health() const;
  PortForward* port_forward() { return forward_.get(); }  // null unless kPortForward
  void Close();

 private:
  SandboxConnection() = default;
  DaemonEndpoint endpoint_;
  std::unique_ptr<PortForward> forward_;
};

}  // namespace deepbox::k8s
