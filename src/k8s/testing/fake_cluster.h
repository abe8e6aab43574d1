// Test-only: the whole stand-in for a cluster with agent-sandbox, as the
// provider tests, the k8s end-to-end tests and bench/k8s use it: the fake
// API server, the fake controller (started), a real deepbox-sandboxd standing
// in for every pod, the test sandbox router in front of it, and one seeded
// SandboxWarmPool whose sandboxes are Ready when Start() returns.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/error.h"
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
};

class FakeCluster {
 public:
  static Result<std::unique_ptr<FakeCluster>> Start(FakeClusterOptions options = {});
  ~FakeCluster();  // stops the controller before the servers go

  FakeApiServer& server() { return *server_; }
  FakeController& controller() { return *controller_; }
  deepbox::testing::ScopedSandboxd& daemon() { return *daemon_; }
  TestRouter& router() { return *router_; }
  const FakeClusterOptions& options() const { return options_; }

  // True once the warm pool reports all its replicas ready (false after `timeout`).
  bool WaitPoolReady(std::chrono::milliseconds timeout = std::chrono::seconds(30));

 private:
  FakeCluster() = default;
  FakeClusterOptions options_;
  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<FakeController> controller_;
  std::unique_ptr<deepbox::testing::ScopedSandboxd> daemon_;
  std::unique_ptr<TestRouter> router_;
};

}  // namespace deepbox::k8s::testing
