// Test-only: the whole stand-in for a cluster with agent-sandbox, as the
// provider tests, the k8s end-to-end tests and bench/k8s use it: the fake
// API server, the fake controller (started), a real deepbox-sandboxd standing
// in for every pod, the test sandbox router in front of it, and one seeded
// SandboxWarmPool whose sandboxes are Ready when Start() returns.
#pragma once

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
#include "common/testing/temp_dir.h"
#include "k8s/testing/fake_api_server.h"
#include "k8s/testing/fake_controller.h"
#include "k8s/testing/test_router.h"
#include "sandbox/testing/scoped_sandboxd.h"

namespace deepbox::k8s::testing {

struct FakeClusterOptions {
  FakeControllerOptions controller;
  std::string router_token = "router-secret";
  std::string namespace_name = "default";
  std::string warm_pool = "deepagents-warmpool";
  std::string template_name = "deepbox-sandbox-template";
  int replicas = 1;
  // The daemon checks claim tokens as deploy/k8s's template configures it
  // (--token-sha256-file): kubelet's part -- the claimed Sandbox's pod
  // annotation (deepbox.dev/sandboxd-token-sha256) into that file -- is
  // played here, `verifier_delay` after the controller wrote it. The one
  // daemon stands in for every pod: the last claimed Sandbox's verifier
  // holds. Its client() is then absent (it would need a token).
  bool owner_tokens = false;
  std::chrono::milliseconds verifier_delay{0};
  // > 0: the first `pod_daemons` pod IPs the controller hands out each lead
  // to a daemon of their own (pods with their own files, e.g. to tell a fork
  // from its source); a pod past them reaches no daemon (the router's 502).
  // Files then do not survive a suspend: the resumed pod is a new one.
  int pod_daemons = 0;
};

class FakeCluster {
 public:
  static Result<std::unique_ptr<FakeCluster>> Start(FakeClusterOptions options = {});
  ~FakeCluster();  // stops the controller before the servers go

  FakeApiServer& server() { return *server_; }
  FakeController& controller() { return *controller_; }
  deepbox::testing::ScopedSandboxd& daemon() { return *daemon_; }
  // pod_daemons: the daemon of the i-th pod IP (10.244.0.<10 + i>).
  deepbox::testing::ScopedSandboxd& pod_daemon(int i) { return *pod_daemons_.at(i); }
  TestRouter& router() { return *router_; }
  const FakeClusterOptions& options() const { return options_; }

  // True once the warm pool reports all its replicas ready (false after `timeout`).
  bool WaitPoolReady(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // owner_tokens: the verifier file the daemon reads.
  const std::string& verifier_file() const { return verifier_file_; }

 private:
  FakeCluster() = default;
  FakeClusterOptions options_;
  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<FakeController> controller_;
  std::unique_ptr<deepbox::testing::ScopedSandboxd> daemon_;
  std::vector<std::unique_ptr<deepbox::testing::ScopedSandboxd>> pod_daemons_;
  std::unique_ptr<TestRouter> router_;
  std::optional<deepbox::testing::TempDir> verifier_dir_;
  std::string verifier_file_;
  // owner_tokens: the verifier to write and when ("kubelet").
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::optional<std::pair<std::chrono::steady_clock::time_point, std::string>> pending_;
  std::string written_;
  std::thread kubelet_;
  void Kubelet();
  // Swaps a new verifier file in, as kubelet updates a downward API file
  // (mu_ held).
  void WriteVerifierLocked(const std::string& text);
};

}  // namespace deepbox::k8s::testing
