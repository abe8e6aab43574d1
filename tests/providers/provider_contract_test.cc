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

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/providers.h"
#include "common/testing/temp_dir.h"
#include "k8s/settings.h"
#include "k8s/testing/fake_cluster.h"
#include "local/lifecycle/provider.h"
#include "local/namespaces.h"
#include "sandbox/provider.h"
#include "sandbox/registry.h"
#include "sandbox/snapshot_store.h"

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
      state_dir_.reset();
      unsetenv("DEEPBOX_STATE_DIR");
    }
  }
  std::string Unavailable() override {
    if (!local::UserNamespacesAvailable()) return "user namespaces are not available here";
    if (access((kBinDir + "/deepbox").c_str(), X_OK) != 0) return "deepbox is not built";
    auto dir = deepbox::testing::TempDir::Make("dbx-pc",
                                               "/tmp");  // short: socket paths must fit 107 bytes
    if (!dir) return dir.error().ToString();
    state_dir_.emplace(std::move(*dir));
    state_ = state_dir_->path().string();
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
  std::optional<deepbox::testing::TempDir> state_dir_;
  std::string state_;
};

class K8sWorld : public ProviderWorld {
 public:
  // pod_daemons > 0: each pod its own daemon and files (FakeClusterOptions).
  explicit K8sWorld(int pod_daemons = 0) : pod_daemons_(pod_daemons) {}
  std::string Unavailable() override {
    k8s::testing::FakeClusterOptions options;
    options.replicas = 2;
    options.pod_daemons = pod_daemons_;
    auto cluster = k8s::testing::FakeCluster::Start(std::move(options));
    if (!cluster) return "the fake cluster did not start: " + cluster.error().ToString();
    cluster_ = std::move(*cluster);
    auto dir = deepbox::testing::TempDir::Make("dbx-pc-k8s", "/tmp");
    if (!dir) return dir.error().ToString();
    tmp_.emplace(std::move(*dir));
    dir_ = tmp_->path().string();
    if (auto st = cluster_->server().WriteKubeconfig(dir_ + "/kubeconfig", "default"); !st) {
      return "no kubeconfig: " + st.error().ToString();
    }
    // The claim key and the snapshots are the user's: here the test's own.
    setenv("DEEPBOX_K8S_CLAIM_KEY_FILE", (dir_ + "/claim-key").c_str(), 1);
    setenv("DEEPBOX_SNAPSHOT_DIR", (dir_ + "/snapshots").c_str(), 1);
    return "";
  }
  ~K8sWorld() override {
    if (!dir_.empty()) {
      tmp_.reset();
      unsetenv("DEEPBOX_K8S_CLAIM_KEY_FILE");
      unsetenv("DEEPBOX_SNAPSHOT_DIR");
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
  int pod_daemons_;
  std::unique_ptr<k8s::testing::FakeCluster> cluster_;
  std::optional<deepbox::testing::TempDir> tmp_;
  std::string dir_;
};

class ProviderContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    cli::RegisterBuiltinProviders();
    if (GetParam() == "local") {
      world_ = std::make_unique<LocalWorld>();
    } else {
      world_ = std::make_unique<K8sWorld>(PodDaemons());
    }
    if (std::string why = world_->Unavailable(); !why.empty()) GTEST_SKIP() << why;
    auto p = ProviderRegistry::Global().Make(world_->name(), world_->Request());
    ASSERT_TRUE(p) << p.error().ToString();
    provider_ = std::move(*p);
  }

  // k8s: how many pods get a daemon (and files) of their own; 0 = one
  // daemon stands in for every pod.
  virtual int PodDaemons() const { return 0; }

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

// What `sandbox exec` and `cp` use: the daemon's client, the provider's
// gone-check after a failed call, and its wording of a failure.
TEST_P(ProviderContractTest, ConnectDaemonReachesTheSandboxAndSaysWhenItIsGone) {
  auto made = provider_->Create(Options());
  ASSERT_TRUE(made) << made.error().ToString();
  auto access = provider_->ConnectDaemon(made->id);
  ASSERT_TRUE(access) << access.error().ToString();
  ASSERT_NE(access->client, nullptr);
  ASSERT_TRUE(access->why_gone);
  ASSERT_TRUE(access->explain);
  ExecRequest req;
  req.shell = "echo through the daemon > daemon.txt && cat daemon.txt";
  auto r = access->client->Exec(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->stdout_data, "through the daemon\n");
  // A failure of the sandbox's own (a missing file) is not "gone".
  Error missing(ErrorCode::kNotFound, "no such file: nothing.txt");
  EXPECT_FALSE(access->why_gone(missing).has_value());
  EXPECT_EQ(access->explain(missing).code, ErrorCode::kNotFound);

  // Deleted meanwhile: a call that fails now is explained as the sandbox gone.
  ASSERT_TRUE(provider_->Delete(made->id));
  auto gone = access->why_gone(Error(ErrorCode::kUnavailable, "the connection was reset"));
  ASSERT_TRUE(gone.has_value());
  EXPECT_EQ(gone->code, ErrorCode::kNotFound) << gone->ToString();
  access->client.reset();

  auto missing_sandbox = provider_->ConnectDaemon(world_->MissingId());
  ASSERT_FALSE(missing_sandbox);
  EXPECT_EQ(missing_sandbox.error().code, ErrorCode::kNotFound)
      << missing_sandbox.error().ToString();
  auto bad = provider_->ConnectDaemon("../etc");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument) << bad.error().ToString();
}

// A name is unique among the provider's sandboxes and works where the id
// does (k8s: it is the claim's name).
TEST_P(ProviderContractTest, ANamedSandboxIsFoundByItsNameAndTheNameIsUnique) {
  ClaimOptions o = Options();
  o.name = "pc-named-" + std::to_string(getpid());
  auto made = provider_->Create(o);
  ASSERT_TRUE(made) << made.error().ToString();
  auto by_name = provider_->Inspect(o.name);
  ASSERT_TRUE(by_name) << by_name.error().ToString();
  EXPECT_EQ(by_name->id, made->id);
  {
    auto lease = provider_->Attach(o.name);
    ASSERT_TRUE(lease) << lease.error().ToString();
    EXPECT_TRUE((*lease)->sandbox().Write("named.txt", "by name"));
  }
  auto twice = provider_->Create(o);
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().code, ErrorCode::kConflict) << twice.error().ToString();
  EXPECT_THAT(twice.error().message, HasSubstr(o.name));
  // The refused create left the sandbox of that name alone.
  auto still = provider_->Inspect(o.name);
  ASSERT_TRUE(still) << still.error().ToString();
  EXPECT_EQ(still->id, made->id);
  ASSERT_TRUE(provider_->Delete(o.name));
  // The name is free again once its sandbox is gone.
  auto again = provider_->Create(o);
  ASSERT_TRUE(again) << again.error().ToString();
  EXPECT_NE(again->id, GetParam() == "local" ? made->id : "");
  ASSERT_TRUE(provider_->Delete(again->id));
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

// Snapshots, restores and forks, where every sandbox has files of its own
// (k8s: a daemon per pod), so that a restore or fork that copied nothing, or
// one that shares its source's files, fails.
class ProviderSnapshotTest : public ProviderContractTest {
 protected:
  int PodDaemons() const override { return 12; }

  // Runs `shell` in sandbox `id` (at its root); its stdout.
  std::string Run(const std::string& id, const std::string& shell) {
    auto lease = provider_->Attach(id);
    EXPECT_TRUE(lease) << lease.error().ToString();
    if (!lease) return "";
    ExecRequest req;
    req.shell = shell;
    auto r = (*lease)->sandbox().Exec(req);
    EXPECT_TRUE(r) << r.error().ToString();
    if (!r) return "";
    EXPECT_EQ(r->exit_code, 0) << shell << ": " << r->stderr_data;
    return r->stdout_data;
  }

  // Every entry of sandbox `id`'s files: type, mode, size, mtime, name (as
  // bytes), link target, and each file's SHA-256.
  std::string Tree(const std::string& id) {
    return Run(id,
               "find . -mindepth 1 -name lost+found -prune -o "
               "\\( -type f -printf 'f %m %s %Ts %p\\n' \\) -o "
               "\\( -type d -printf 'd %m %p\\n' \\) -o "
               "\\( -type l -printf 'l %p -> %l\\n' \\) -o -printf '? %p\\n' | LC_ALL=C sort; "
               "find . -name lost+found -prune -o -type f -exec sha256sum {} + | LC_ALL=C sort");
  }

  std::string Made() {
    auto made = provider_->Create(Options());
    EXPECT_TRUE(made) << made.error().ToString();
    return made ? made->id : "";
  }

  // Sandboxes and snapshots this test made, removed at its end.
  void TearDown() override {
    if (!provider_) return;
    for (const auto& id : made_) (void)provider_->Delete(id);
    for (const auto& name : snapshots_) (void)provider_->DeleteSnapshot(name);
  }
  std::vector<std::string> made_;
  std::vector<std::string> snapshots_;
};

// A tree with what a workspace holds: nested and empty directories, text
// and binary files, modes, an old mtime, symlinks within it, a name that is
// not UTF-8.
constexpr const char* kMakeTree = R"SH(set -e
mkdir -p src/deep/er empty
printf 'print("hi")\n' > src/main.py
printf 'bin\000ary\377\376' > src/deep/blob.bin
head -c 200000 /dev/urandom > src/deep/er/random.dat
ln -s main.py src/link-to-main
ln -s ../deep/er/random.dat src/deep/rel-link
printf x > "$(printf 'caf\351')"
chmod 0750 src/deep; chmod 0755 src/main.py; chmod 0600 src/deep/blob.bin
touch -d '2001-02-03 04:05:06' src/deep/er/random.dat
)SH";

TEST_P(ProviderSnapshotTest, ARestoreHoldsTheSnapshotsFilesByteForByte) {
  std::string src = Made();
  ASSERT_FALSE(src.empty());
  made_.push_back(src);
  Run(src, kMakeTree);
  const std::string before = Tree(src);
  ASSERT_THAT(before, HasSubstr("l ./src/link-to-main -> main.py"));
  ASSERT_THAT(before, HasSubstr("./caf\351"));
  ASSERT_THAT(before, HasSubstr("d 750 ./src/deep"));
  ASSERT_THAT(before, HasSubstr("f 600 9 "));  // the binary file

  auto snap = provider_->Snapshot(src, SnapshotOptions{"contract-tree"});
  ASSERT_TRUE(snap) << snap.error().ToString();
  snapshots_.push_back(snap->name);
  EXPECT_EQ(snap->name, "contract-tree");
  EXPECT_EQ(snap->provider, GetParam());
  EXPECT_EQ(snap->source_id, src);
  EXPECT_GT(snap->size_bytes, 200000);
  // The source is as it was.
  EXPECT_EQ(Tree(src), before);

  auto taken = provider_->Snapshot(src, SnapshotOptions{"contract-tree"});
  ASSERT_FALSE(taken);
  EXPECT_EQ(taken.error().code, ErrorCode::kConflict) << taken.error().ToString();

  auto restored = provider_->CreateFromSnapshot("contract-tree", Options());
  ASSERT_TRUE(restored) << restored.error().ToString();
  made_.push_back(restored->id);
  EXPECT_NE(restored->id, src);
  EXPECT_EQ(restored->labels.at("deepbox.dev/snapshot"), "contract-tree");
  EXPECT_EQ(Tree(restored->id), before);
  // Its own files: a change there is not the source's.
  Run(restored->id, "echo changed > src/main.py");
  EXPECT_EQ(Tree(src), before);

  // The snapshot outlives its source; removed, it is gone.
  ASSERT_TRUE(provider_->Delete(src));
  auto listed = provider_->ListSnapshots();
  ASSERT_TRUE(listed) << listed.error().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name, "contract-tree");
  EXPECT_EQ((*listed)[0].provider, GetParam());
  ASSERT_TRUE(provider_->DeleteSnapshot("contract-tree"));
  listed = provider_->ListSnapshots();
  ASSERT_TRUE(listed);
  EXPECT_TRUE(listed->empty());
  auto gone = provider_->CreateFromSnapshot("contract-tree", Options());
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ErrorCode::kNotFound) << gone.error().ToString();
}

// What a copy through the daemons' tar stream (k8s) does not keep, asserted
// so that a change is seen: FIFOs are left out, setuid/setgid/sticky bits
// dropped, hard links become separate files (same bytes), and a directory
// is made with the restoring daemon's umask (no group/other write). The
// local copy (local/tree_copy.h) keeps all of them.
TEST_P(ProviderSnapshotTest, WhatOnlyTheLocalCopyKeeps) {
  std::string src = Made();
  ASSERT_FALSE(src.empty());
  made_.push_back(src);
  Run(src,
      "set -e; printf a > f; ln f hard; mkfifo fifo; chmod 4755 f; mkdir open sticky; "
      "chmod 0777 open; chmod 1777 sticky");
  const std::string list =
      "find . -mindepth 1 -name lost+found -prune -o -printf '%y %m %n %p\\n' "
      "| LC_ALL=C sort; cat hard";
  const std::string before = Run(src, list);
  ASSERT_EQ(before,
            "d 1777 2 ./sticky\nd 777 2 ./open\nf 4755 2 ./f\nf 4755 2 ./hard\np 644 1 "
            "./fifo\na");
  auto snap = provider_->Snapshot(src, SnapshotOptions{"special"});
  ASSERT_TRUE(snap) << snap.error().ToString();
  snapshots_.push_back(snap->name);
  auto restored = provider_->CreateFromSnapshot("special", Options());
  ASSERT_TRUE(restored) << restored.error().ToString();
  made_.push_back(restored->id);
  if (GetParam() == "local") {
    EXPECT_EQ(Run(restored->id, list), before);
  } else {
    EXPECT_EQ(Run(restored->id, list),
              "d 755 2 ./open\nd 755 2 ./sticky\nf 755 1 ./f\nf 755 1 ./hard\na");
  }
}

TEST_P(ProviderSnapshotTest, ForksAreIndependentOfEachOtherAndOfTheirSource) {
  std::string src = Made();
  ASSERT_FALSE(src.empty());
  made_.push_back(src);
  Run(src, "mkdir -p d && echo original > d/f.txt");
  auto forks = provider_->Fork(src, 2, Options());
  ASSERT_TRUE(forks) << forks.error().ToString();
  ASSERT_EQ(forks->size(), 2u);
  for (const auto& f : *forks) made_.push_back(f.id);
  const std::string a = (*forks)[0].id, b = (*forks)[1].id;
  EXPECT_NE(a, b);
  EXPECT_NE(a, src);
  for (const auto& f : *forks) {
    EXPECT_EQ(Run(f.id, "cat d/f.txt"), "original\n") << f.id;
    auto info = provider_->Inspect(f.id);
    ASSERT_TRUE(info) << info.error().ToString();
    // The source's id, as a label value can hold it (k8s: NS.CLAIM).
    std::string from = src;
    std::replace(from.begin(), from.end(), '/', '.');
    EXPECT_EQ(info->labels.at("deepbox.dev/forked-from"), from) << f.id;
  }
  Run(a, "echo only-a > d/f.txt; echo new > a-only");
  EXPECT_EQ(Run(b, "cat d/f.txt; ls | grep -vx lost+found"), "original\nd\n");
  EXPECT_EQ(Run(src, "cat d/f.txt; ls | grep -vx lost+found"), "original\nd\n");
  Run(src, "echo later > d/f.txt");
  EXPECT_EQ(Run(b, "cat d/f.txt"), "original\n");
  // No snapshot is left of the copy a fork went through.
  auto listed = provider_->ListSnapshots();
  ASSERT_TRUE(listed) << listed.error().ToString();
  EXPECT_TRUE(listed->empty());
  auto too_many = provider_->Fork(src, 33, Options());
  ASSERT_FALSE(too_many);
  EXPECT_EQ(too_many.error().code, ErrorCode::kInvalidArgument);
}

// Both providers keep their snapshots in one store: each lists the other's
// (with its provider) and may remove it, and refuses to restore it.
TEST_P(ProviderSnapshotTest, ASnapshotOfTheOtherProviderIsListedButNotRestored) {
  const std::string other = GetParam() == "local" ? "k8s" : "local";
  auto store = SnapshotStore::Open();
  ASSERT_TRUE(store) << store.error().ToString();
  auto pending = store->Begin("of-" + other);
  ASSERT_TRUE(pending) << pending.error().ToString();
  fs::create_directory((*pending)->dir() / "files");
  { std::ofstream((*pending)->dir() / "workspace.tar") << "not for this provider"; }
  SnapshotInfo info;
  info.provider = other;
  info.source_id = other == "k8s" ? "default/some-claim" : "sb-0123456789ab";
  info.size_bytes = 4096;
  ASSERT_TRUE((*pending)->Commit(info));
  auto listed = provider_->ListSnapshots();
  ASSERT_TRUE(listed) << listed.error().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].provider, other);
  auto refused = provider_->CreateFromSnapshot("of-" + other, Options());
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(refused.error().message,
            fmt::format("snapshot 'of-{0}' was taken of a {0} sandbox; restore it with "
                        "--provider {0}",
                        other));
  auto none = provider_->List(Label());
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());  // nothing was created
  ASSERT_TRUE(provider_->DeleteSnapshot("of-" + other));
  EXPECT_TRUE(provider_->ListSnapshots()->empty());
}

INSTANTIATE_TEST_SUITE_P(Providers, ProviderSnapshotTest, ::testing::Values("local", "k8s"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace deepbox
