#include "k8s/testing/fake_cluster.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "k8s/claim_token.h"
#include "k8s/testing/fixtures.h"
#include "k8s/util.h"

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
  deepbox::testing::SandboxdOptions daemon_options;
  if (c->options_.owner_tokens) {
    auto dir = deepbox::testing::TempDir::Make("deepbox-fake-kubelet");
    if (!dir) return tl::unexpected(dir.error());
    c->verifier_dir_.emplace(std::move(*dir));
    c->verifier_file_ = c->verifier_dir_->Path("token-sha256");
    daemon_options.extra_args = {"--token-sha256-file", c->verifier_file_};
    daemon_options.tcp = true;  // a "peer pod" reaches it directly
    daemon_options.connect = false;
    // kubelet: the claimed Sandbox's pod annotation into the file.
    c->server_->store().AddListener([raw = c.get()](const StoreEvent& ev) {
      if (ev.key.plural != "sandboxes" || ev.type == "DELETED") return;
      const json::value* refs = Find(ev.object, {"metadata", "ownerReferences"});
      bool claimed = false;
      if (refs != nullptr && refs->is_array()) {
        for (const auto& r : refs->get_array()) {
          claimed = claimed || FindString(r, {"kind"}) == "SandboxClaim";
        }
      }
      std::string verifier = FindString(
          ev.object, {"spec", "podTemplate", "metadata", "annotations", kTokenVerifierAnnotation});
      if (!claimed || verifier.empty()) return;
      std::lock_guard lock(raw->mu_);
      if (verifier == raw->written_ || (raw->pending_ && raw->pending_->second == verifier)) {
        return;
      }
      // The one daemon stands in for a new pod: its file starts empty (no
      // owner yet), not with the previous claim's verifier -- before the
      // claim can be seen Ready, so no client meets the old owner's.
      if (!raw->written_.empty()) raw->WriteVerifierLocked("");
      raw->pending_.emplace(std::chrono::steady_clock::now() + raw->options_.verifier_delay,
                            verifier);
      raw->cv_.notify_all();
    });
    c->kubelet_ = std::thread([raw = c.get()] { raw->Kubelet(); });
  }
  auto daemon = deepbox::testing::ScopedSandboxd::Start(daemon_options);
  if (!daemon) return tl::unexpected(daemon.error());
  c->daemon_ = std::move(*daemon);
  auto router = TestRouter::Start(c->options_.router_token);
  if (!router) return tl::unexpected(router.error());
  c->router_ = std::move(*router);
  if (c->options_.pod_daemons > 0) {
    // The IPs in the order the fake controller hands them out, each its daemon.
    for (int i = 0; i < c->options_.pod_daemons; ++i) {
      auto d = deepbox::testing::ScopedSandboxd::Start(daemon_options);
      if (!d) return tl::unexpected(d.error());
      c->router_->SetBackend(fmt::format("{}{}:8888", c->options_.controller.pod_ip_prefix, 10 + i),
                             (*d)->unix_url());
      c->pod_daemons_.push_back(std::move(*d));
    }
  } else {
    // Every pod IP the fake controller hands out is this one daemon.
    c->router_->SetDefaultBackend(c->daemon_->unix_url());
  }
  SeedPool(c->server_->store(), c->options_.namespace_name, c->options_.warm_pool,
           c->options_.template_name, c->options_.replicas);
  if (!c->WaitPoolReady()) {
    return MakeError(ErrorCode::kTimeout, "the fake warm pool did not become ready");
  }
  return c;
}

FakeCluster::~FakeCluster() {
  if (controller_) controller_->Stop();
  if (kubelet_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    kubelet_.join();
  }
  daemon_.reset();
  pod_daemons_.clear();
  verifier_dir_.reset();
}

void FakeCluster::Kubelet() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (stop_) return;
    if (!pending_) {
      cv_.wait(lock);
      continue;
    }
    if (std::chrono::steady_clock::now() < pending_->first) {
      cv_.wait_until(lock, pending_->first);
      continue;
    }
    std::string verifier = std::move(pending_->second);
    pending_.reset();
    WriteVerifierLocked(verifier);
  }
}

void FakeCluster::WriteVerifierLocked(const std::string& text) {
  std::string tmp = verifier_file_ + ".next";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
  }
  std::filesystem::rename(tmp, verifier_file_);
  written_ = text;
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
