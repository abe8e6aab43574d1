#include "k8s/testing/fake_cluster.h"

#include "k8s/testing/fixtures.h"

namespace deepbox::k8s::testing {

Result<std::unique_ptr<FakeCluster>> FakeCluster::Start(FakeClusterOptions options) {
  std::unique_ptr<FakeCluster> c(new FakeCluster());
  c->options_ = std::move(options);
  auto server = FakeApiServer::Start();
  if (!server) return tl::unexpected(server.error());
  c->server_ = std::move(*server);
  c->controller_ =
      std::make_unique<FakeController>(c->server_->shared_store(), c->options_.controller);
  c->controller_->Start();
  auto daemon = deepbox::testing::ScopedSandboxd::Start();
  if (!daemon) return tl::unexpected(daemon.error());
  c->daemon_ = std::move(*daemon);
  auto router = TestRouter::Start(c->options_.router_token);
  if (!router) return tl::unexpected(router.error());
  c->router_ = std::move(*router);
  // Every pod IP the fake controller hands out is this one daemon.
  c->router_->SetDefaultBackend(c->daemon_->unix_url());
  SeedPool(c->server_->store(), c->options_.namespace_name, c->options_.warm_pool,
           c->options_.template_name, c->options_.replicas);
  if (!c->WaitPoolReady()) {
    return MakeError(ErrorCode::kTimeout, "the fake warm pool did not become ready");
  }
  return c;
}

FakeCluster::~FakeCluster() {
  if (controller_) controller_->Stop();
}

bool FakeCluster::WaitPoolReady(std::chrono::milliseconds timeout) {
  return WaitUntil(
      [&] {
        return PoolReadyReplicas(server_->store(), options_.namespace_name, options_.warm_pool) ==
               options_.replicas;
      },
      timeout);
}

}  // namespace deepbox::k8s::testing
