// Reaching a claimed sandbox's daemon (deepbox-sandboxd in the pod) the way the
// upstream SDK does (reference §3, §5): through the sandbox router with the
// X-Sandbox-ID / -Namespace / -Port / -Pod-IP headers, reached by
//  (a) a `kubectl port-forward --address 127.0.0.1 svc/sandbox-router-svc :8080`
//      child that we start, watch (restarted once if it dies, on the same
//      port) and stop. kubectl picks the port and prints it; we read it back
//      and check in /proc that the listener is the child's before anything is
//      sent (socket_owner.h): no gap in which another local user could take
//      the port and receive the router token,
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
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/subprocess.h"
#include "common/unique_fd.h"
#include "k8s/claim.h"
#include "net/http.h"

namespace deepbox::k8s {

struct DaemonEndpoint {
  std::string base_url;  // "http://127.0.0.1:43121"
  net::Headers headers;  // sent with every request (router headers)
  // The router in front of the daemon, for error messages ("the sandbox
  // router (through kubectl port-forward on 127.0.0.1:43121)"); "" when the
  // daemon is dialled directly (in cluster).
  std::string router;
  int daemon_port = 8888;
};

// An answer that did not come from the daemon (the sandbox client reports a
// non-daemon body as "sandbox daemon answered HTTP N: ...") came from the
// router in front of it: say so, and what to check for that status (401/403:
// the router token; 400: the X-Sandbox-* headers; 502/503/504: the pod and the
// daemon's port). Any other error is returned as it is.
Error NameRouterError(Error error, const DaemonEndpoint& endpoint);
// Whether `error` (from the sandbox client, before NameRouterError) says the
// pod did not answer: a router's 502/503/504, or (no router) a connection
// that could not be made or was cut (UNAVAILABLE).
bool PodDidNotAnswer(const Error& error);

struct RouterTarget {
  std::string sandbox_id;      // the Sandbox (pod) name
  std::string namespace_name;  // "default"
  int port = 8888;             // the daemon's port in the pod
  std::string pod_ip;          // "" = let the router resolve the name
  std::string router_token;    // "" = no Authorization header
};
net::Headers RouterHeaders(const RouterTarget& target);

// The port in kubectl's "Forwarding from 127.0.0.1:PORT -> REMOTE" line;
// INVALID_ARGUMENT for any other line, another address or remote port.
Result<int> ParseForwardingLine(std::string_view line, int remote_port);

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
  // OK while the tunnel is up; the reason once it is gone. While the child is
  // being replaced (or has died and is about to be), waits for the outcome:
  // nothing is sent to the port before the new listener has been checked.
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
  // Spawns the child (on `port`, or one kubectl picks when 0), reads back the
  // port it listens on and checks that the listener is the child's.
  Status Launch(int port);
  void Monitor();
  void DrainLocked();  // reads what the child wrote (stdout dropped, stderr kept)
  std::string OutputTail() const;

  PortForwardOptions options_;
  int port_ = 0;  // set once by Start (restarts reuse it)
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  Subprocess child_;
  UniqueFd stdout_;   // "Handling connection for ..." lines
  UniqueFd stderr_;   // errors
  std::string tail_;  // last few KiB of its stderr
  std::optional<Error> dead_;
  int restarts_ = 0;
  bool restarting_ = false;
  bool stopping_ = false;
  UniqueFd stop_fd_;  // eventfd: wakes the monitor
  std::thread monitor_;
};

enum class ConnectionMode { kPortForward, kDirect, kInCluster };

// How long a minted scoped router token is valid: a sandbox in use for longer
// is refused by the router (401) and must be attached again.
inline constexpr std::chrono::hours kScopedRouterTokenLifetime{24};

struct ConnectionOptions {
  ConnectionMode mode = ConnectionMode::kPortForward;
  PortForwardOptions port_forward;
  std::string direct_url;  // kDirect: "http://gateway.example" (router behind it)
  int daemon_port = 8888;  // X-Sandbox-Port, and the port dialled in cluster
  std::string router_token;
  // The Go router's scoped-token secret: each sandbox gets its own token
  // (router_token.h), valid for kScopedRouterTokenLifetime. A scoped token,
  // minted or given as router_token, goes without X-Sandbox-Pod-IP (such a
  // router refuses that header; it finds the pod by name itself).
  std::string router_token_secret;
  bool send_pod_ip = true;  // X-Sandbox-Pod-IP (needed for warm sandboxes)
};

// The endpoint SandboxConnection::Open would give, without opening anything:
// for a port-forward base_url is "" (the tunnel's port is known only once it
// is up) and `router` says what is forwarded to. The errors of Open's
// checks (a bad router token, a scoped token for another sandbox).
Result<DaemonEndpoint> PlanEndpoint(const ConnectionOptions& options,
                                    const ClaimedSandbox& sandbox);

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
