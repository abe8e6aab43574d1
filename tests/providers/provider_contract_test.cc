// One lifecycle, every provider: each test runs against the local provider
// (real sandboxes on this machine) and the k8s provider (the production
// client against the fake cluster: API server, controller, router and a real
// daemon standing in for the pods), both made through the registry as the
// CLI makes them. A provider that cannot do a verb says so (UNIMPLEMENTED,
// naming itself), never a silent no-op.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cli/providers.h"
#include "k8s/settings.h"
#include "k8s/testing/fake_cluster.h"
#include "local/lifecycle/provider.h"
#include "local/namespaces.h"
#include "sandbox/provider.h"
#include "sandbox/registry.h"

namespace deepbox {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

const std::string kBinDir = DEEPBOX_BIN_DIR;

// Where a provider lives for one test, and how the registry is asked for it.
class ProviderWorld {
 public:
  virtual ~ProviderWorld() = default;
  // Empty when it can run here, else why not (the test is skipped).
  virtual std::string Unavailable() = 0;
  virtual ProviderRequest Request() = 0;
  virtual std::string name() const = 0;
  // A well-formed id of this provider that names no sandbox.
  virtual std::string MissingId() const = 0;
};

class LocalWorld : public ProviderWorld {
 public:
  ~LocalWorld() override {
    if (!state_.empty()) {
      if (auto p = local::lifecycle::LocalSandboxProvider::Create(Options())) {
        if (auto all = (*p)->ListMeta()) {
          for (const auto& m : *all) (void)(*p)->Delete(m.id);
        }
      }
      std::error_code ec;
      fs::remove_all(state_, ec);
      unsetenv("DEEPBOX_STATE_DIR");
    }
  }
  std::string Unavailable() override {
    if (!local::UserNamespacesAvailable()) return "user namespaces are not available here";
    if (access((kBinDir + "/deepbox").c_str(), X_OK) != 0) return "deepbox is not built";
    char tmpl[] = "/tmp/dbx-pc-XXXXXX";  // short: socket paths must fit 107 bytes
    if (mkdtemp(tmpl) == nullptr) return "mkdtemp failed";
    state_ = tmpl;
    // The provider finds its state dir and binaries the way the CLI does.
    setenv("DEEPBOX_STATE_DIR", state_.c_str(), 1);
    setenv("DEEPBOX_BINARY", (kBinDir + "/deepbox").c_str(), 1);
    setenv("DEEPBOX_SANDBOXD", (kBinDir + "/deepbox-sandboxd").c_str(), 1);
    return "";
  }
  ProviderRequest Request() override {
    ProviderRequest r;
    r.settings = {{"pool", ""}, {"memory", "512M"}};
    return r;
  }
  std::string name() const override { return "local"; }
  std::string MissingId() const override { return "sb-0123456789ab"; }

 private:
  local::lifecycle::LocalProviderOptions Options() const {
    local::lifecycle::LocalProviderOptions o;
    o.state_dir = state_;
    o.deepbox_binary = kBinDir + "/deepbox";
    o.sandboxd_binary = kBinDir + "/deepbox-sandboxd";
    return o;
  }
  std::string state_;
};

class K8sWorld : public ProviderWorld {
 public:
  std::string Unavailable() override {
    k8s::testing::FakeClusterOptions options;
    options.replicas = 2;
    auto cluster = k8s::testing::FakeCluster::Start(std::move(options));
    if (!cluster) return "the fake cluster did not start: " + cluster.error().ToString();
    cluster_ = std::move(*cluster);
    char tmpl[] = "/tmp/dbx-pc-k8s-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return "mkdtemp failed";
    dir_ = tmpl;
    if (auto st = cluster_->server().WriteKubeconfig(dir_ + "/kubeconfig", "default"); !st) {
      return "no kubeconfig: " + st.error().ToString();
    }
    // The claim key is the user's: here one of the test's own.
    setenv("DEEPBOX_K8S_CLAIM_KEY_FILE", (dir_ + "/claim-key").c_str(), 1);
    return "";
  }
  ~K8sWorld() override {
    if (!dir_.empty()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
      unsetenv("DEEPBOX_K8S_CLAIM_KEY_FILE");
    }
  }
  ProviderRequest Request() override {
    ProviderRequest r;
    r.settings = {{"kubeconfig", dir_ + "/kubeconfig"},
                  {"namespace", "default"},
                  {"warm-pool", cluster_->options().warm_pool},
                  {"router-url", cluster_->router().url()},
                  {"router-token", cluster_->options().router_token},
                  {"ready-timeout", "30"}};
    return r;
  }
  std::string name() const override { return "k8s"; }
  std::string MissingId() const override { return "default/no-such-claim"; }

 private:
  std::unique_ptr<k8s::testing::FakeCluster> cluster_;
  std::string dir_;
};

class ProviderContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    cli::RegisterBuiltinProviders();
    if (GetParam() == "local") {
      world_ = std::make_unique<LocalWorld>();
    } else {
      world_ = std::make_unique<K8sWorld>();
    }
    if (std::string why = world_->Unavailable(); !why.empty()) GTEST_SKIP() << why;
    auto p = ProviderRegistry::Global().Make(world_->name(), world_->Request());
    ASSERT_TRUE(p) << p.error().ToString();
    provider_ = std::move(*p);
  }

  // A label selector unique to this test.
  std::string Label() const { return "contract-test=" + std::to_string(getpid()); }
  ClaimOptions Options() const {
    ClaimOptions o;
    o.labels = {{"contract-test", std::to_string(getpid())}};
    o.ttl = 600s;
    return o;
  }

  std::unique_ptr<ProviderWorld> world_;
  std::unique_ptr<SandboxProvider> provider_;
};

TEST_P(ProviderContractTest, RegistryKnowsTheProviderAndItsIdForm) {
  const ProviderRegistration* r = ProviderRegistry::Global().Lookup(GetParam());
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(provider_->name(), GetParam());
  EXPECT_FALSE(provider_->description().empty());
  EXPECT_TRUE(provider_->OwnsId(world_->MissingId()));
  EXPECT_EQ(ProviderRegistry::Global().ForId(world_->MissingId()), r);
  EXPECT_FALSE(provider_->OwnsId(""));
  EXPECT_FALSE(provider_->OwnsId("../etc"));
  // Each id form is one provider's only.
  for (const auto& other : ProviderRegistry::Global().Names()) {
    if (other == GetParam()) continue;
    EXPECT_FALSE(ProviderRegistry::Global().Lookup(other)->owns_id(world_->MissingId())) << other;
  }
  auto bad = ProviderRegistry::Global().Make(GetParam(), ProviderRequest{{{"no-such", "1"}}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(bad.error().message, HasSubstr("no setting 'no-such'"));
}

TEST_P(ProviderContractTest, ClaimRunsCommandsAndReleaseDeletes) {
  auto lease = provider_->Claim(Options());
  ASSERT_TRUE(lease) << lease.error().ToString();
  Sandbox& sb = (*lease)->sandbox();
  std::string id = sb.id();
  EXPECT_TRUE(provider_->OwnsId(id)) << id;
  ASSERT_TRUE(sb.Write("contract.txt", "written through the lease\n"));
  ExecRequest req;
  req.shell = "cat contract.txt";
  auto r = sb.Exec(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->stdout_data, "written through the lease\n");
  auto listed = provider_->List(Label());
  ASSERT_TRUE(listed) << listed.error().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].id, id);
  EXPECT_EQ((*listed)[0].provider, GetParam());
  EXPECT_EQ((*listed)[0].labels.at("contract-test"), std::to_string(getpid()));
  ASSERT_TRUE((*lease)->Release());
  ASSERT_TRUE((*lease)->Release());  // idempotent
  auto after = provider_->Inspect(id);
  ASSERT_FALSE(after);
  EXPECT_EQ(after.error().code, ErrorCode::kNotFound) << after.error().ToString();
  auto gone = provider_->WhyGone(id);
  ASSERT_TRUE(gone.has_value());
  EXPECT_EQ(gone->code, ErrorCode::kNotFound);
  auto empty = provider_->List(Label());
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
}

TEST_P(ProviderContractTest, CreatedSandboxOutlivesAttachedLeasesUntilDeleted) {
  auto made = provider_->Create(Options());
  ASSERT_TRUE(made) << made.error().ToString();
  EXPECT_EQ(made->provider, GetParam());
  EXPECT_TRUE(provider_->OwnsId(made->id)) << made->id;
  EXPECT_FALSE(provider_->WhyGone(made->id).has_value());
  auto info = provider_->Inspect(made->id);
  ASSERT_TRUE(info) << info.error().ToString();
  EXPECT_EQ(info->id, made->id);
  EXPECT_FALSE(info->created_at.empty());
  EXPECT_FALSE(info->expires_at.empty());  // it has a TTL
  {
    auto lease = provider_->Attach(made->id);
    ASSERT_TRUE(lease) << lease.error().ToString();
    EXPECT_EQ((*lease)->sandbox().id(), made->id);
    ASSERT_TRUE((*lease)->sandbox().Write("kept.txt", "still here"));
    EXPECT_THAT((*lease)->Describe(), HasSubstr(made->id));
  }  // a borrowed lease leaves the sandbox as it was
  auto again = provider_->Attach(made->id);
  ASSERT_TRUE(again) << again.error().ToString();
  auto read = (*again)->sandbox().Read("kept.txt", {});
  ASSERT_TRUE(read) << read.error().ToString();
  EXPECT_EQ(read->content, "still here");
  again->reset();
  ASSERT_TRUE(provider_->Delete(made->id));
  auto second = provider_->Delete(made->id);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::kNotFound);
  auto attach = provider_->Attach(made->id);
  ASSERT_FALSE(attach);
  EXPECT_EQ(attach.error().code, ErrorCode::kNotFound) << attach.error().ToString();
}

TEST_P(ProviderContractTest, MissingIdsAreNotFound) {
  std::string id = world_->MissingId();
  auto info = provider_->Inspect(id);
  ASSERT_FALSE(info);
  EXPECT_EQ(info.error().code, ErrorCode::kNotFound);
  auto del = provider_->Delete(id);
  ASSERT_FALSE(del);
  EXPECT_EQ(del.error().code, ErrorCode::kNotFound);
  auto attach = provider_->Attach(id);
  ASSERT_FALSE(attach);
  EXPECT_EQ(attach.error().code, ErrorCode::kNotFound);
  auto gone = provider_->WhyGone(id);
  ASSERT_TRUE(gone.has_value());
  EXPECT_EQ(gone->code, ErrorCode::kNotFound);
}

TEST_P(ProviderContractTest, DeleteMatchingTakesOnlyWhatMatches) {
  ClaimOptions mine = Options();
  mine.labels["contract-group"] = "a";
  ClaimOptions other = Options();
  other.labels["contract-group"] = "b";
  auto a1 = provider_->Create(mine);
  ASSERT_TRUE(a1) << a1.error().ToString();
  auto b1 = provider_->Create(other);
  ASSERT_TRUE(b1) << b1.error().ToString();
  auto refused = provider_->DeleteMatching("");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  auto bad = provider_->DeleteMatching("=oops");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  auto deleted = provider_->DeleteMatching(Label() + ",contract-group=a");
  ASSERT_TRUE(deleted) << deleted.error().ToString();
  ASSERT_EQ(deleted->size(), 1u);
  EXPECT_EQ((*deleted)[0], a1->id);
  auto left = provider_->List(Label());
  ASSERT_TRUE(left);
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].id, b1->id);
  EXPECT_TRUE(provider_->Delete(b1->id));
}

TEST_P(ProviderContractTest, WatchReportsADeletionFromOutside) {
  auto made = provider_->Create(Options());
  ASSERT_TRUE(made) << made.error().ToString();
  std::atomic<bool> gone{false};
  auto watch = provider_->Watch(made->id, [&](const Error&) { gone = true; });
  if (!watch) {
    // Watching is optional; then a failed call's WhyGone is the way to know.
    EXPECT_EQ(watch.error().code, ErrorCode::kUnimplemented) << watch.error().ToString();
    EXPECT_THAT(watch.error().message, HasSubstr("the " + GetParam() + " provider cannot"));
    ASSERT_TRUE(provider_->Delete(made->id));
    EXPECT_TRUE(provider_->WhyGone(made->id).has_value());
    return;
  }
  EXPECT_FALSE(gone.load());
  ASSERT_TRUE(provider_->Delete(made->id));
  for (int i = 0; i < 300 && !gone.load(); ++i) std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(gone.load());
  (*watch)->Stop();
}

// Every durable-workspace verb either works -- and then does what it says:
// the files survive, a restore and a fork hold them -- or says which
// provider cannot and why; what a verb made is cleaned up.
TEST_P(ProviderContractTest, DurableVerbsWorkOrSayWhoCannot) {
  auto made = provider_->Create(Options());
  ASSERT_TRUE(made) << made.error().ToString();
  {
    auto lease = provider_->Attach(made->id);
    ASSERT_TRUE(lease) << lease.error().ToString();
    ASSERT_TRUE((*lease)->sandbox().Write("durable.txt", "kept"));
  }
  std::string who = "the " + GetParam() + " provider cannot";
  auto lacks = [&](const Error& e) {
    EXPECT_EQ(e.code, ErrorCode::kUnimplemented) << e.ToString();
    EXPECT_THAT(e.message, HasSubstr(who));
  };
  auto files_kept = [&](const std::string& id) {
    auto lease = provider_->Attach(id);  // wakes a paused or suspended one
    ASSERT_TRUE(lease) << lease.error().ToString();
    auto read = (*lease)->sandbox().Read("durable.txt", {});
    ASSERT_TRUE(read) << id << ": " << read.error().ToString();
    EXPECT_EQ(read->content, "kept") << id;
  };
  if (auto st = provider_->Pause(made->id); st) {
    files_kept(made->id);
  } else if (st.error().message.find("no cgroup freezer") == std::string::npos) {
    lacks(st.error());
  }
  // k8s: the fake cluster's pods keep /workspace on an emptyDir (force).
  if (auto st = provider_->Suspend(made->id, SuspendOptions{.force = true}); st) {
    EXPECT_TRUE(provider_->Resume(made->id)) << GetParam();
    files_kept(made->id);
  } else {
    lacks(st.error());
  }
  if (auto snap = provider_->Snapshot(made->id, {}); snap) {
    EXPECT_EQ(snap->source_id, made->id);
    auto listed = provider_->ListSnapshots();
    ASSERT_TRUE(listed) << listed.error().ToString();
    bool found = false;
    for (const auto& s : *listed) found = found || s.name == snap->name;
    EXPECT_TRUE(found) << snap->name;
    auto restored = provider_->CreateFromSnapshot(snap->name, Options());
    ASSERT_TRUE(restored) << restored.error().ToString();
    files_kept(restored->id);
    EXPECT_TRUE(provider_->Delete(restored->id));
    EXPECT_TRUE(provider_->DeleteSnapshot(snap->name));
    auto again = provider_->DeleteSnapshot(snap->name);
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error().code, ErrorCode::kNotFound);
  } else {
    lacks(snap.error());
  }
  if (auto forks = provider_->Fork(made->id, 2, Options()); forks) {
    ASSERT_EQ(forks->size(), 2u);
    for (const auto& f : *forks) {
      files_kept(f.id);
      EXPECT_TRUE(provider_->Delete(f.id));
    }
  } else {
    lacks(forks.error());
  }
  auto del = provider_->Delete(made->id);
  EXPECT_TRUE(del) << del.error().ToString();
}

INSTANTIATE_TEST_SUITE_P(Providers, ProviderContractTest, ::testing::Values("local", "k8s"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace deepbox
