// The Kubernetes provider end to end, without a cluster: the production
// client against the fake API server (HTTPS, token auth), the fake controller
// adopting warm members, the fake kubectl port-forward (real TCP), the test
// router honouring the X-Sandbox headers, and the real deepbox-sandboxd
// standing in for the pod.
#include "k8s/provider.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/temp_dir.h"
#include "k8s/claim_token.h"
#include "k8s/operating_mode.h"
#include "k8s/testing/fake_api_server.h"
#include "k8s/testing/fake_cluster.h"
#include "k8s/testing/fake_controller.h"
#include "k8s/testing/fixtures.h"
#include "k8s/testing/test_router.h"
#include "net/http_client.h"
#include "net/token_digest.h"
#include "sandbox/testing/hostile_daemon.h"
#include "sandbox/testing/scoped_sandboxd.h"

namespace deepbox::k8s {
namespace {

using namespace std::chrono_literals;
using testing::ClaimNames;
using testing::FakeApiServer;
using testing::FakeController;
using testing::ResourceKey;
using testing::TestRouter;
using testing::WaitUntil;

// A private temporary directory (the claim key's), removed at the end.
using deepbox::testing::TempDir;

class ProviderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A named options object: with the default argument's temporary, GCC 12
    // at -O3 reports its std::function member as maybe-uninitialized (a
    // false positive).
    testing::FakeClusterOptions options;
    Configure(options);
    auto cluster = testing::FakeCluster::Start(std::move(options));
    ASSERT_TRUE(cluster) << cluster.error().ToString();
    cluster_ = std::move(*cluster);
    server_ = &cluster_->server();
    controller_ = &cluster_->controller();
    daemon_ = &cluster_->daemon();
    router_ = &cluster_->router();
  }
  // A fixture's own cluster options, before the cluster starts.
  virtual void Configure(testing::FakeClusterOptions& /*options*/) {}

  K8sProviderOptions Options() {
    K8sProviderOptions o;
    o.rest = server_->ClientConfig();
    o.claim_key_file = key_dir_.Path("claim-key");
    o.labels = {{"deepagents.example/claim", "true"}};
    o.ready_timeout = 30s;
    o.connection.router_token = "router-secret";
    auto& pf = o.connection.port_forward;
    pf.kubectl = std::string(DEEPBOX_BIN_DIR) + "/deepbox-fake-kubectl";
    pf.env = {{"DEEPBOX_FAKE_KUBECTL_TARGET", fmt::format("127.0.0.1:{}", router_->port())}};
    return o;
  }

  // A provider of `pool` that reaches its pods straight through the router.
  std::unique_ptr<K8sSandboxProvider> Provider(const std::string& pool = "deepagents-warmpool",
                                               std::chrono::milliseconds timeout = 30s) {
    K8sProviderOptions o = Options();
    o.warm_pool = pool;
    o.ready_timeout = timeout;
    o.connection.mode = ConnectionMode::kDirect;
    o.connection.direct_url = router_->url();
    auto made = K8sSandboxProvider::Create(o);
    EXPECT_TRUE(made) << made.error().ToString();
    return made ? std::move(*made) : nullptr;
  }

  const ResourceKey kClaimsKey{"extensions.agents.x-k8s.io", "sandboxclaims", "default"};
  std::unique_ptr<testing::FakeCluster> cluster_;
  FakeApiServer* server_ = nullptr;
  FakeController* controller_ = nullptr;
  deepbox::testing::ScopedSandboxd* daemon_ = nullptr;
  TestRouter* router_ = nullptr;
  TempDir key_dir_;
};

TEST_F(ProviderTest, ClaimRunCommandsAndRelease) {
  auto provider = K8sSandboxProvider::Create(Options());
  ASSERT_TRUE(provider) << provider.error().ToString();
  EXPECT_EQ((*provider)->name(), "k8s");
  ClaimOptions co;
  co.ttl = 3600s;
  auto lease = (*provider)->Claim(co);
  ASSERT_TRUE(lease) << lease.error().ToString();
  Sandbox& sb = (*lease)->sandbox();
  auto claims = ClaimNames(server_->store(), "default");
  ASSERT_EQ(claims.size(), 1u);
  EXPECT_EQ(sb.id(), "default/" + claims[0]);

  ASSERT_TRUE(
      sb.Write("fib.py", "a, b = 0, 1\nfor _ in range(10):\n    print(a)\n    a, b = b, a + b\n"));
  ExecRequest req;
  req.shell = "cat fib.py | head -1 && echo hello from the pod";
  auto r = sb.Exec(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->stdout_data, "a, b = 0, 1\nhello from the pod\n");
  auto read = sb.Read("fib.py", {});
  ASSERT_TRUE(read);
  EXPECT_NE(read->content.find("range(10)"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(daemon_->root() + "/fib.py"));

  // Every request went through the router with the sandbox's coordinates.
  auto routed = router_->requests();
  ASSERT_FALSE(routed.empty());
  for (const auto& rr : routed) {
    EXPECT_TRUE(rr.sandbox_id.starts_with("deepagents-warmpool-")) << rr.sandbox_id;
    EXPECT_EQ(rr.namespace_name, "default");
    EXPECT_EQ(rr.port, "8888");
    EXPECT_EQ(rr.pod_ip, "10.244.0.10");
  }
  std::string description = (*lease)->Describe();
  EXPECT_NE(description.find("kubectl delete sandboxclaim " + claims[0] + " -n default"),
            std::string::npos)
      << description;

  ASSERT_TRUE((*lease)->Release());
  ASSERT_TRUE((*lease)->Release());  // idempotent
  EXPECT_TRUE(ClaimNames(server_->store(), "default").empty());
}

TEST_F(ProviderTest, DestroyingTheLeaseReleasesUnlessKept) {
  auto provider = K8sSandboxProvider::Create(Options());
  ASSERT_TRUE(provider);
  {
    auto lease = (*provider)->Claim({});
    ASSERT_TRUE(lease) << lease.error().ToString();
  }
  EXPECT_TRUE(ClaimNames(server_->store(), "default").empty());
  ASSERT_TRUE(cluster_->WaitPoolReady());
  {
    auto lease = (*provider)->Claim({});
    ASSERT_TRUE(lease) << lease.error().ToString();
    (*lease)->Keep();
  }
  EXPECT_EQ(ClaimNames(server_->store(), "default").size(), 1u);
  auto removed = (*provider)->RemoveBySelector("deepagents.example/claim=true");
  ASSERT_TRUE(removed);
  EXPECT_EQ(removed->size(), 1u);
  EXPECT_TRUE(ClaimNames(server_->store(), "default").empty());
}

TEST_F(ProviderTest, SurvivesOnePortForwardDeathAndReportsTheSecond) {
  auto provider = K8sSandboxProvider::Create(Options());
  ASSERT_TRUE(provider);
  // Find the port-forward child through the fake kubectl's process: the lease
  // hides it, so kill every child of ours named deepbox-fake-kubectl.
  auto lease = (*provider)->Claim({});
  ASSERT_TRUE(lease) << lease.error().ToString();
  auto kill_forwarder = [&] {
    int killed = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      std::string pid = e.path().filename();
      if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream stat(e.path() / "stat");
      std::string s((std::istreambuf_iterator<char>(stat)), {});
      auto close = s.rfind(')');
      if (s.find("(deepbox-fake-ku") == std::string::npos || close == std::string::npos) continue;
      int ppid = std::atoi(s.c_str() + close + 4);  // ") S <ppid>"
      if (ppid != ::getpid()) continue;
      ::kill(std::atoi(pid.c_str()), SIGKILL);
      ++killed;
    }
    return killed;
  };
  ExecRequest req;
  req.argv = {"echo", "alive"};
  ASSERT_TRUE((*lease)->sandbox().Exec(req));
  ASSERT_EQ(kill_forwarder(), 1);
  // Restarted on the same port: commands keep working.
  ASSERT_TRUE(WaitUntil([&] {
    auto r = (*lease)->sandbox().Exec(req);
    return r.has_value() && r->stdout_data == "alive\n";
  }));
  ASSERT_EQ(kill_forwarder(), 1);
  Result<ExecResult> r = MakeError(ErrorCode::kInternal, "unset");
  ASSERT_TRUE(WaitUntil([&] {
    r = (*lease)->sandbox().Exec(req);
    return !r && r.error().message.find("port-forward") != std::string::npos;
  }));
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  // Depending on whether the second kill hit the restarted child while it was
  // still starting: either way the error says what happened.
  EXPECT_TRUE(r.error().message.find("after 1 restart") != std::string::npos ||
              r.error().message.find("restarting it failed") != std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("killed by signal 9"), std::string::npos);
  ASSERT_TRUE((*lease)->Release());
}

TEST_F(ProviderTest, AFailedConnectionDeletesTheClaim) {
  K8sProviderOptions o = Options();
  o.connection.router_token = "wrong";  // the router answers 401
  auto provider = K8sSandboxProvider::Create(o);
  ASSERT_TRUE(provider);
  auto lease = (*provider)->Claim({});
  ASSERT_FALSE(lease);
  const std::string& m = lease.error().message;
  // The claim worked; the message says so, names the router (not the daemon)
  // as the one that answered 401, and what to check.
  EXPECT_EQ(lease.error().reason, kReasonClaimedButUnreachable) << m;
  EXPECT_TRUE(m.starts_with("claimed sandbox ")) << m;
  EXPECT_NE(m.find("is Ready"), std::string::npos) << m;
  EXPECT_NE(m.find("the sandbox router (svc/sandbox-router-svc in namespace agent-sandbox-system, "
                   "through kubectl port-forward on 127.0.0.1:"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("answered HTTP 401: Invalid token."), std::string::npos) << m;
  EXPECT_NE(m.find("--router-token"), std::string::npos) << m;
  EXPECT_EQ(m.find("sandbox daemon answered"), std::string::npos) << m;
  EXPECT_EQ(lease.error().code, ErrorCode::kUnauthenticated);
  EXPECT_TRUE(ClaimNames(server_->store(), "default").empty());
}

// A router error during the run (here: the pod IP the router is sent to has
// no daemon behind it, so it answers 502) is reported as the router's, with
// what to check, for the calls of a claimed sandbox.
TEST_F(ProviderTest, RouterErrorsDuringTheRunNameTheRouter) {
  K8sProviderOptions o = Options();
  o.connection.mode = ConnectionMode::kDirect;
  o.connection.direct_url = router_->url();
  auto provider = K8sSandboxProvider::Create(o);
  ASSERT_TRUE(provider);
  auto lease = (*provider)->Claim({});
  ASSERT_TRUE(lease) << lease.error().ToString();
  // Every backend now points at a socket nobody listens on.
  std::string dead = "unix:/nonexistent/deepbox-test.sock";
  router_->SetDefaultBackend(dead);
  for (const auto& req : router_->requests()) {
    router_->SetBackend(fmt::format("{}:{}", req.pod_ip, req.port), dead);
  }
  auto st = (*lease)->sandbox().Stat(".");
  ASSERT_FALSE(st);
  EXPECT_NE(
      st.error().message.find("the sandbox router at " + router_->url() + " answered HTTP 502"),
      std::string::npos)
      << st.error().message;
  EXPECT_NE(st.error().message.find("listens on port 8888"), std::string::npos)
      << st.error().message;
  ASSERT_TRUE((*lease)->Release());
}

// The unit: which answers are the router's, and what each says to check.
TEST(NameRouterErrorTest, RewritesOnlyNonDaemonAnswersBehindARouter) {
  DaemonEndpoint via_router{"http://127.0.0.1:1", {}, "the sandbox router at http://r", 8888};
  Error e(
      ErrorCode::kUnauthenticated,
      R"(connecting to sandbox daemon: sandbox daemon answered HTTP 401: {"detail":"unauthenticated"})");
  Error named = NameRouterError(e, via_router);
  EXPECT_EQ(named.code, ErrorCode::kUnauthenticated);
  EXPECT_TRUE(named.message.starts_with(
      "connecting to sandbox daemon: the sandbox router at http://r answered HTTP 401: "
      "unauthenticated -- check the router token"))
      << named.message;
  EXPECT_NE(NameRouterError(Error(ErrorCode::kInternal,
                                  R"(x: sandbox daemon answered HTTP 400: {"detail":"Invalid )"
                                  R"(target IP address."})"),
                            via_router)
                .message.find("Invalid target IP address. -- the router rejected the "
                              "X-Sandbox-ID/-Namespace/-Port/-Pod-IP headers"),
            std::string::npos);
  // A daemon's own error, and any error without a router in front, stay as they are.
  Error daemon(ErrorCode::kNotFound, "no such file '/x'");
  EXPECT_EQ(NameRouterError(daemon, via_router).message, daemon.message);
  DaemonEndpoint in_cluster{"http://10.0.0.1:8888", {}, "", 8888};
  EXPECT_EQ(NameRouterError(e, in_cluster).message, e.message);
}

TEST_F(ProviderTest, DirectConnectionAndRejectedOptions) {
  K8sProviderOptions o = Options();
  o.connection.mode = ConnectionMode::kDirect;
  o.connection.direct_url = router_->url();
  auto provider = K8sSandboxProvider::Create(o);
  ASSERT_TRUE(provider);
  auto lease = (*provider)->Claim({});
  ASSERT_TRUE(lease) << lease.error().ToString();
  ExecRequest req;
  req.argv = {"true"};
  ASSERT_TRUE((*lease)->sandbox().Exec(req));
  ASSERT_TRUE((*lease)->Release());
  ClaimOptions none;
  none.network = "none";
  EXPECT_EQ((*provider)->Claim(none).error().code, ErrorCode::kUnimplemented);
  ClaimOptions rootfs;
  rootfs.rootfs = "/tmp/x";
  EXPECT_EQ((*provider)->Claim(rootfs).error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(ClaimNames(server_->store(), "default").empty());
}

// check_daemon = false: Claim() returns at the claim's Ready event without a
// request to the daemon; the first command is the first request (one round
// trip less before its result); what /info tells is read when first needed.
TEST_F(ProviderTest, WithoutTheDaemonCheckTheFirstCommandIsTheFirstRequest) {
  K8sProviderOptions o = Options();
  o.connection.mode = ConnectionMode::kDirect;
  o.connection.direct_url = router_->url();
  o.check_daemon = false;
  std::vector<ClaimStep> steps;
  o.observer = [&](ClaimStep step, const std::string&) { steps.push_back(step); };
  auto provider = K8sSandboxProvider::Create(o);
  ASSERT_TRUE(provider);
  size_t before = router_->requests().size();
  auto lease = (*provider)->Claim({});
  ASSERT_TRUE(lease) << lease.error().ToString();
  EXPECT_EQ((std::vector<ClaimStep>{ClaimStep::kCreated, ClaimStep::kReady, ClaimStep::kConnected}),
            steps);
  EXPECT_EQ(router_->requests().size(), before);
  ExecRequest req;
  req.argv = {"sh", "-c", "printf 'caf\\303\\251'"};
  auto r = (*lease)->sandbox().Exec(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->stdout_data, "caf\xc3\xa9");
  auto routed = router_->requests();
  ASSERT_EQ(routed.size(), before + 1);
  EXPECT_EQ(routed.back().target, "/deepbox/v1/exec");
  EXPECT_EQ(routed.back().status, 200);
  // The root comes from /info, read now.
  EXPECT_EQ((*lease)->sandbox().root(), daemon_->root());
  routed = router_->requests();
  ASSERT_EQ(routed.size(), before + 2);
  EXPECT_EQ(routed.back().target, "/deepbox/v1/info");
  // A streamed command works the same way.
  std::string out;
  req.argv = {"echo", "streamed"};
  auto streamed = (*lease)->sandbox().ExecStream(req, [&](OutputStream, std::string_view d) {
    out.append(d);
    return true;
  });
  ASSERT_TRUE(streamed) << streamed.error().ToString();
  EXPECT_EQ(out, "streamed\n");
  ASSERT_TRUE((*lease)->Release());
  EXPECT_TRUE(ClaimNames(server_->store(), "default").empty());
}

// Without the check, a router that refuses us fails the first call (named
// as the router's, with what to check) instead of the claim; a kept claim
// (`deepbox sandbox create`) is still checked before it is handed out.
TEST_F(ProviderTest, WithoutTheDaemonCheckTheFirstCallNamesTheRouter) {
  K8sProviderOptions o = Options();
  o.connection.mode = ConnectionMode::kDirect;
  o.connection.direct_url = router_->url();
  o.connection.router_token = "wrong";  // the router answers 401
  o.check_daemon = false;
  auto provider = K8sSandboxProvider::Create(o);
  ASSERT_TRUE(provider);
  auto lease = (*provider)->Claim({});
  ASSERT_TRUE(lease) << lease.error().ToString();
  ExecRequest req;
  req.argv = {"true"};
  auto r = (*lease)->sandbox().Exec(req);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnauthenticated);
  EXPECT_NE(r.error().message.find("the sandbox router at " + router_->url() +
                                   " answered HTTP 401: Invalid token."),
            std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("--router-token"), std::string::npos) << r.error().message;
  ASSERT_TRUE((*lease)->Release());
  ASSERT_TRUE(cluster_->WaitPoolReady());
  auto kept = (*provider)->ClaimAndKeep({});
  ASSERT_FALSE(kept);
  EXPECT_EQ(kept.error().reason, kReasonClaimedButUnreachable) << kept.error().message;
  EXPECT_TRUE(ClaimNames(server_->store(), "default").empty());
}

// Back-to-back claims over a direct router connection: each takes the
// refilled warm sandbox, answers, and leaves no claim behind. (The latency of
// this path is measured by bench/k8s, not here.)
TEST_F(ProviderTest, RepeatedClaimsThroughADirectConnection) {
  K8sProviderOptions o = Options();
  o.connection.mode = ConnectionMode::kDirect;
  o.connection.direct_url = router_->url();
  auto provider = K8sSandboxProvider::Create(o);
  ASSERT_TRUE(provider);
  ExecRequest req;
  req.argv = {"true"};
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(cluster_->WaitPoolReady());
    auto lease = (*provider)->Claim({});
    ASSERT_TRUE(lease) << lease.error().ToString();
    auto r = (*lease)->sandbox().Exec(req);
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_EQ(r->exit_code, 0);
    ASSERT_TRUE((*lease)->Release());
    EXPECT_TRUE(ClaimNames(server_->store(), "default").empty());
  }
}

// The lifecycle interface (sandbox/provider.h) on claims, as `deepbox sandbox
// ...` and `deepbox mcp` use any provider: Create keeps a claim, Inspect and
// List read it back alike, Attach borrows it, Watch sees it deleted, Delete
// and DeleteMatching delete only what they name.
TEST_F(ProviderTest, TheLifecycleThroughTheProviderInterface) {
  K8sProviderOptions o = Options();
  o.connection.mode = ConnectionMode::kDirect;
  o.connection.direct_url = router_->url();
  auto made = K8sSandboxProvider::Create(o);
  ASSERT_TRUE(made) << made.error().ToString();
  SandboxProvider& p = **made;
  EXPECT_EQ(p.description(), "k8s sandbox from warm pool default/deepagents-warmpool");
  EXPECT_TRUE(p.OwnsId("default/sandbox-claim-1a2b3c4d"));
  EXPECT_FALSE(p.OwnsId("sb-1a2b3c"));

  ClaimOptions co;
  co.labels = {{"team", "ml"}};
  co.ttl = 600s;
  auto info = p.Create(co);
  ASSERT_TRUE(info) << info.error().ToString();
  auto claims = ClaimNames(server_->store(), "default");
  ASSERT_EQ(claims.size(), 1u);
  const std::string name = claims[0];
  EXPECT_EQ(info->id, "default/" + name);
  EXPECT_EQ(info->provider, "k8s");
  EXPECT_EQ(info->state, "Ready");
  EXPECT_EQ(info->labels["team"], "ml");
  EXPECT_EQ(info->labels["deepagents.example/claim"], "true");
  EXPECT_FALSE(info->created_at.empty());
  auto stored =
      server_->store().Get({"extensions.agents.x-k8s.io", "sandboxclaims", "default"}, name);
  ASSERT_TRUE(stored);
  EXPECT_EQ(info->expires_at, FindString(*stored, {"spec", "lifecycle", "shutdownTime"}));
  EXPECT_FALSE(info->expires_at.empty());

  auto inspected = p.Inspect(info->id);
  ASSERT_TRUE(inspected) << inspected.error().ToString();
  EXPECT_EQ(inspected->id, info->id);
  EXPECT_EQ(inspected->provider, "k8s");
  EXPECT_EQ(inspected->state, "Ready");
  EXPECT_EQ(inspected->labels, info->labels);
  EXPECT_EQ(inspected->expires_at, info->expires_at);
  EXPECT_EQ(inspected->created_at, FindString(*stored, {"metadata", "creationTimestamp"}));
  auto bare = p.Inspect(name);  // a bare name is in the provider's namespace
  ASSERT_TRUE(bare) << bare.error().ToString();
  EXPECT_EQ(bare->id, info->id);
  EXPECT_EQ(p.Inspect("a/b/c").error().code, ErrorCode::kInvalidArgument);
  auto listed = p.List("team=ml");
  ASSERT_TRUE(listed) << listed.error().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].id, info->id);
  EXPECT_EQ((*listed)[0].state, "Ready");
  EXPECT_EQ((*listed)[0].labels, info->labels);
  auto none = p.List("team=other");
  ASSERT_TRUE(none) << none.error().ToString();
  EXPECT_TRUE(none->empty());

  // Attached, it is only borrowed: released, the claim stays.
  {
    auto lease = p.Attach(info->id);
    ASSERT_TRUE(lease) << lease.error().ToString();
    ExecRequest req;
    req.argv = {"echo", "attached"};
    auto r = (*lease)->sandbox().Exec(req);
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_EQ(r->stdout_data, "attached\n");
    EXPECT_EQ((*lease)->Describe(),
              fmt::format("default/{} (left as it was; delete it with: kubectl delete "
                          "sandboxclaim -n default {})",
                          name, name));
    ASSERT_TRUE((*lease)->Release());
  }
  EXPECT_EQ(ClaimNames(server_->store(), "default").size(), 1u);
  auto bad = p.Attach("Default/x");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("is not a Kubernetes sandbox id NAMESPACE/CLAIM"),
            std::string::npos)
      << bad.error().message;

  // The watch reports the deletion; then the claim is gone for every verb.
  std::mutex mu;
  std::optional<Error> gone;
  auto watch = p.Watch(info->id, [&](const Error& e) {
    std::lock_guard lock(mu);
    gone = e;
  });
  ASSERT_TRUE(watch) << watch.error().ToString();
  EXPECT_FALSE(p.WhyGone(info->id));
  ASSERT_TRUE(p.Delete(info->id));
  EXPECT_TRUE(WaitUntil([&] {
    std::lock_guard lock(mu);
    return gone.has_value();
  }));
  (*watch)->Stop();
  {
    std::lock_guard lock(mu);
    ASSERT_TRUE(gone);
    EXPECT_EQ(gone->code, ErrorCode::kNotFound) << gone->message;
  }
  auto why = p.WhyGone(info->id);
  ASSERT_TRUE(why);
  EXPECT_EQ(why->code, ErrorCode::kNotFound);
  auto again = p.Delete(info->id);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kNotFound);
  EXPECT_NE(again.error().message.find("no SandboxClaim " + name + " in namespace default"),
            std::string::npos)
      << again.error().message;
  EXPECT_EQ(p.Inspect(info->id).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(p.Attach(info->id).error().code, ErrorCode::kNotFound);

  // DeleteMatching deletes what matches (NAMESPACE/CLAIM ids), never everything.
  EXPECT_EQ(p.DeleteMatching("").error().code, ErrorCode::kInvalidArgument);
  ASSERT_TRUE(cluster_->WaitPoolReady());
  auto ml = p.Create(co);
  ASSERT_TRUE(ml) << ml.error().ToString();
  ASSERT_TRUE(cluster_->WaitPoolReady());
  ClaimOptions other;
  other.labels = {{"team", "other"}};
  auto kept = p.Create(other);
  ASSERT_TRUE(kept) << kept.error().ToString();
  EXPECT_EQ(kept->expires_at, "");  // no TTL
  auto deleted = p.DeleteMatching("team=ml");
  ASSERT_TRUE(deleted) << deleted.error().ToString();
  EXPECT_EQ(*deleted, std::vector<std::string>{ml->id});
  EXPECT_EQ(ClaimNames(server_->store(), "default"),
            std::vector<std::string>{kept->id.substr(std::string("default/").size())});
  ASSERT_TRUE(p.Delete(kept->id));
  EXPECT_TRUE(ClaimNames(server_->store(), "default").empty());

  // A warm pool cannot be asked for a cold sandbox.
  ClaimOptions cold;
  cold.allow_warm = false;
  EXPECT_EQ(p.Create(cold).error().code, ErrorCode::kUnimplemented);
  EXPECT_TRUE(ClaimNames(server_->store(), "default").empty());
}

// Issue 21 M6: the provider (and `deepbox doctor --provider k8s`) warns when
// no NetworkPolicy isolates the sandbox pods.
TEST_F(ProviderTest, WarnsWhenNoNetworkPolicySelectsTheSandboxPods) {
  std::vector<std::string> warnings;
  K8sProviderOptions o = Options();
  o.connection.mode = ConnectionMode::kDirect;
  o.connection.direct_url = router_->url();
  o.on_warning = [&](const std::string& w) { warnings.push_back(w); };
  auto provider = K8sSandboxProvider::Create(o);
  ASSERT_TRUE(provider);
  auto w = (*provider)->NetworkPolicyWarning();
  ASSERT_TRUE(w) << w.error().ToString();
  EXPECT_NE(w->find("no NetworkPolicy in namespace default selects the sandbox pods"),
            std::string::npos)
      << *w;
  EXPECT_NE(w->find("deepbox-sandbox-template"), std::string::npos) << *w;
  // Said once, at the first claim.
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(cluster_->WaitPoolReady());
    auto lease = (*provider)->Claim({});
    ASSERT_TRUE(lease) << lease.error().ToString();
    ASSERT_TRUE((*lease)->Release());
  }
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], *w);

  const ResourceKey nps{"networking.k8s.io", "networkpolicies", "default"};
  auto add_policy = [&](const std::string& name, const std::string& spec) {
    auto obj = ParseJsonObject(fmt::format(
        R"({{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{{"name":"{}"}},"spec":{}}})",
        name, spec));
    ASSERT_TRUE(obj);
    ASSERT_TRUE(server_->store().Create(nps, *obj));
  };
  std::string hash = NameHash("deepbox-sandbox-template");
  // Policies that do not isolate these pods' ingress change nothing.
  add_policy("others", R"({"podSelector":{"matchLabels":{"app":"db"}}})");
  add_policy(
      "egress-only",
      fmt::format(
          R"({{"podSelector":{{"matchLabels":{{"agents.x-k8s.io/sandbox-template-ref-hash":"{}"}}}},"policyTypes":["Egress"]}})",
          hash));
  add_policy(
      "not-in",
      fmt::format(
          R"({{"podSelector":{{"matchExpressions":[{{"key":"agents.x-k8s.io/sandbox-template-ref-hash","operator":"NotIn","values":["{}"]}}]}}}})",
          hash));
  w = (*provider)->NetworkPolicyWarning();
  ASSERT_TRUE(w);
  EXPECT_FALSE(w->empty());
  // The controller's managed policy does.
  add_policy(
      "deepbox-sandbox-template-network-policy",
      fmt::format(
          R"({{"podSelector":{{"matchLabels":{{"agents.x-k8s.io/sandbox-template-ref-hash":"{}"}}}},"policyTypes":["Ingress","Egress"],"ingress":[]}})",
          hash));
  w = (*provider)->NetworkPolicyWarning();
  ASSERT_TRUE(w);
  EXPECT_EQ(*w, "");
}

// ------------------------------------------------- suspend / resume

// Upstream v1.0's spec.operatingMode (k8s/operating_mode.h), driven by the
// provider and answered by the fake controller. (One daemon stands in for
// every pod here, so files "survive" whatever backs /workspace; which
// templates would keep them is what the refusal checks.)
class SuspendTest : public ProviderTest {
 protected:
  const ResourceKey kSandboxes{"agents.x-k8s.io", "sandboxes", "default"};
  const ResourceKey kVolumeClaims{"", "persistentvolumeclaims", "default"};

  // A template whose container mounts /workspace from an emptyDir or a
  // volumeClaimTemplates entry, and a pool of one on it.
  void SeedWorkspacePool(const std::string& pool, bool on_volume_claim) {
    json::object t = testing::MakeTemplate(pool + "-template");
    auto& spec = t["spec"].as_object();
    auto& pod = spec["podTemplate"].as_object()["spec"].as_object();
    pod["containers"].as_array()[0].as_object()["volumeMounts"] =
        *ParseJson(R"([{"name":"workspace","mountPath":"/workspace/"}])");
    if (on_volume_claim) {
      spec["volumeClaimTemplates"] = *ParseJson(
          R"([{"metadata":{"name":"workspace","labels":{"app":"deepbox"}},)"
          R"("spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}])");
    } else {
      pod["volumes"] = *ParseJson(R"([{"name":"workspace","emptyDir":{"sizeLimit":"1Gi"}}])");
    }
    ASSERT_TRUE(
        server_->store().Create({"extensions.agents.x-k8s.io", "sandboxtemplates", "default"}, t));
    ASSERT_TRUE(
        server_->store().Create({"extensions.agents.x-k8s.io", "sandboxwarmpools", "default"},
                                testing::MakeWarmPool(pool, pool + "-template", 1)));
    ASSERT_TRUE(WaitUntil(
        [&] { return testing::PoolReadyReplicas(server_->store(), "default", pool) == 1; }));
  }
  json::object Get(const ResourceKey& key, const std::string& name) {
    auto o = server_->store().Get(key, name);
    EXPECT_TRUE(o) << name;
    return o ? *o : json::object();
  }
  std::string SandboxOf(const std::string& id) {
    return FindString(Get(kClaimsKey, id.substr(id.find('/') + 1)), {"status", "sandbox", "name"});
  }
  int Patches() { return server_->CountRequests("PATCH", "/sandboxes/"); }
  std::string Run(SandboxProvider& p, const std::string& id, const std::string& word) {
    auto lease = p.Attach(id);
    if (!lease) return "attach: " + lease.error().ToString();
    ExecRequest req;
    req.argv = {"echo", word};
    auto r = (*lease)->sandbox().Exec(req);
    return r ? r->stdout_data : "exec: " + r.error().ToString();
  }
};

TEST_F(SuspendTest, SuspendAndResumeAsUpstreamDoes) {
  SeedWorkspacePool("pvc-pool", /*on_volume_claim=*/true);
  ASSERT_FALSE(HasFatalFailure());
  auto provider = Provider("pvc-pool");
  ASSERT_TRUE(provider);
  SandboxProvider& p = *provider;
  auto info = p.Create({});
  ASSERT_TRUE(info) << info.error().ToString();
  const std::string sb = SandboxOf(info->id);
  ASSERT_TRUE(sb.starts_with("pvc-pool-")) << sb;  // adopted from the pool
  // The claim of its volumeClaimTemplates, named as upstream names it.
  const std::string pvc_name = "workspace-" + sb;
  json::object pvc = Get(kVolumeClaims, pvc_name);
  EXPECT_EQ(FindString(pvc, {"metadata", "labels", "agents.x-k8s.io/sandbox-name-hash"}),
            NameHash(sb));
  EXPECT_EQ(FindString(pvc, {"metadata", "labels", "app"}), "deepbox");
  EXPECT_EQ(FindString(pvc, {"spec", "resources", "requests", "storage"}), "1Gi");
  const json::value* owners = Find(pvc, {"metadata", "ownerReferences"});
  ASSERT_TRUE(owners != nullptr && owners->is_array() && owners->as_array().size() == 1);
  EXPECT_EQ(FindString(owners->as_array()[0], {"kind"}), "Sandbox");
  EXPECT_EQ(FindString(owners->as_array()[0], {"uid"}),
            FindString(Get(kSandboxes, sb), {"metadata", "uid"}));
  const std::string pvc_uid = FindString(pvc, {"metadata", "uid"});
  json::object running = Get(kSandboxes, sb);
  const std::string old_ips = ToJson(*Find(running, {"status", "podIPs"}));
  EXPECT_TRUE(controller_->HasPod("default", sb));
  auto suspended_cond = FindCondition(running, kConditionSuspended);
  ASSERT_TRUE(suspended_cond);
  EXPECT_EQ(suspended_cond->status, "False");
  EXPECT_EQ(suspended_cond->reason, kReasonNotSuspended);

  // The reasons of its Suspended condition as written (by resourceVersion:
  // listeners run on the writers' threads, in no fixed order).
  auto seen = std::make_shared<std::pair<std::mutex, std::map<int64_t, std::string>>>();
  server_->store().AddListener([seen, sb](const testing::StoreEvent& ev) {
    if (ev.key.plural != "sandboxes" || FindString(ev.object, {"metadata", "name"}) != sb) return;
    auto c = FindCondition(ev.object, kConditionSuspended);
    std::lock_guard lock(seen->first);
    if (c) seen->second[ev.rv] = c->reason;
  });
  auto reasons = [seen] {
    std::lock_guard lock(seen->first);
    std::vector<std::string> out;
    for (const auto& [rv, reason] : seen->second) {
      if (out.empty() || out.back() != reason) out.push_back(reason);
    }
    return out;
  };

  ASSERT_TRUE(p.Suspend(info->id, {})) << "a volume claim keeps the files: no force needed";
  json::object s = Get(kSandboxes, sb);
  EXPECT_EQ(FindString(s, {"spec", "operatingMode"}), kOperatingModeSuspended);
  auto cond = FindCondition(s, kConditionSuspended);
  ASSERT_TRUE(cond);
  EXPECT_EQ(cond->status, "True");
  EXPECT_EQ(cond->reason, kReasonPodTerminated);
  EXPECT_EQ(cond->observed_generation, Find(s, {"metadata", "generation"})->as_int64());
  auto ready = FindCondition(s, kConditionReady);
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, "False");
  EXPECT_EQ(ready->reason, kReasonSandboxSuspended);
  EXPECT_EQ(Find(s, {"status", "podIPs"}), nullptr);
  EXPECT_FALSE(controller_->HasPod("default", sb));
  // The patch itself (the controller has not answered it yet), then the controller's.
  ASSERT_TRUE(WaitUntil([&] { return reasons().size() >= 3; }))
      << fmt::format("{}", fmt::join(reasons(), ", "));
  EXPECT_EQ(reasons(), (std::vector<std::string>{std::string(kReasonNotSuspended),
                                                 std::string(kReasonPodTerminating),
                                                 std::string(kReasonPodTerminated)}));
  // Its volume claim stays; the claim forwards Ready=False SandboxSuspended.
  EXPECT_EQ(FindString(Get(kVolumeClaims, pvc_name), {"metadata", "uid"}), pvc_uid);
  ASSERT_TRUE(WaitUntil([&] { return ReadySaysSuspended(Get(kClaimsKey, info->id.substr(8))); }));
  auto inspected = p.Inspect(info->id);
  ASSERT_TRUE(inspected) << inspected.error().ToString();
  EXPECT_EQ(inspected->state, "Suspended");
  auto listed = p.List("");
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].state, "Suspended");
  // Idempotent: nothing to patch.
  int patches = Patches();
  EXPECT_EQ(patches, 1);
  ASSERT_TRUE(p.Suspend(info->id, {}));
  EXPECT_EQ(Patches(), patches);

  ASSERT_TRUE(p.Resume(info->id));
  s = Get(kSandboxes, sb);
  EXPECT_EQ(FindString(s, {"spec", "operatingMode"}), kOperatingModeRunning);
  ready = FindCondition(s, kConditionReady);
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, "True");
  EXPECT_EQ(ready->reason, kReasonDependenciesReady);
  EXPECT_EQ(FindCondition(s, kConditionSuspended)->reason, kReasonNotSuspended);
  EXPECT_TRUE(controller_->HasPod("default", sb));
  // A new pod, a new address, and the claim already shows it.
  const std::string new_ips = ToJson(*Find(s, {"status", "podIPs"}));
  EXPECT_NE(new_ips, old_ips);
  json::object claim = Get(kClaimsKey, info->id.substr(8));
  EXPECT_EQ(ToJson(*Find(claim, {"status", "sandbox", "podIPs"})), new_ips);
  EXPECT_EQ(p.Inspect(info->id)->state, "Ready");
  EXPECT_EQ(FindString(Get(kVolumeClaims, pvc_name), {"metadata", "uid"}), pvc_uid);
  EXPECT_EQ(Run(p, info->id, "resumed"), "resumed\n");
  // The router was asked for the new pod.
  EXPECT_NE(new_ips.find(router_->requests().back().pod_ip), std::string::npos);
  patches = Patches();
  ASSERT_TRUE(p.Resume(info->id));  // idempotent
  EXPECT_EQ(Patches(), patches);

  // The next use of a suspended sandbox resumes it: Connect (exec, cp).
  ASSERT_TRUE(p.Suspend(info->id, {}));
  EXPECT_FALSE(controller_->HasPod("default", sb));
  auto connected = provider->Connect(info->id);
  ASSERT_TRUE(connected) << connected.error().ToString();
  ExecRequest req;
  req.argv = {"echo", "woken"};
  auto r = connected->client->Exec(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->stdout_data, "woken\n");
  EXPECT_EQ(FindString(Get(kSandboxes, sb), {"spec", "operatingMode"}), kOperatingModeRunning);
  connected->connection->Close();

  // Deleting the claim takes its Sandbox, and with it the volume claim.
  ASSERT_TRUE(p.Delete(info->id));
  EXPECT_TRUE(WaitUntil([&] { return !server_->store().Get(kVolumeClaims, pvc_name); }));
}

// A suspended claim has no daemon to send its files: it is resumed for the
// snapshot and suspended again, as it was.
TEST_F(SuspendTest, ASnapshotOfASuspendedClaimLeavesItSuspended) {
  SeedWorkspacePool("pvc-pool", /*on_volume_claim=*/true);
  ASSERT_FALSE(HasFatalFailure());
  TempDir snapshots;
  K8sProviderOptions o = Options();
  o.warm_pool = "pvc-pool";
  o.connection.mode = ConnectionMode::kDirect;
  o.connection.direct_url = router_->url();
  o.snapshot_dir = snapshots.Path("s");
  auto provider = K8sSandboxProvider::Create(o);
  ASSERT_TRUE(provider) << provider.error().ToString();
  auto info = (*provider)->Create(ClaimOptions{});
  ASSERT_TRUE(info) << info.error().ToString();
  {
    auto lease = (*provider)->Attach(info->id);
    ASSERT_TRUE(lease) << lease.error().ToString();
    ASSERT_TRUE((*lease)->sandbox().Write("kept.txt", "on the volume"));
  }
  ASSERT_TRUE((*provider)->Suspend(info->id, {}));
  auto snap = (*provider)->Snapshot(info->id, SnapshotOptions{"asleep"});
  ASSERT_TRUE(snap) << snap.error().ToString();
  EXPECT_EQ((*provider)->Inspect(info->id)->state, "Suspended");
  EXPECT_EQ(snap->note.find("suspending it again failed"), std::string::npos) << snap->note;
  auto restored = (*provider)->CreateFromSnapshot("asleep", ClaimOptions{});
  ASSERT_TRUE(restored) << restored.error().ToString();
  auto lease = (*provider)->Attach(restored->id);
  ASSERT_TRUE(lease) << lease.error().ToString();
  auto read = (*lease)->sandbox().Read("kept.txt", {});
  ASSERT_TRUE(read) << read.error().ToString();
  EXPECT_EQ(read->content, "on the volume");
  EXPECT_EQ(restored->labels.at("deepbox.dev/snapshot"), "asleep");
  lease->reset();
  EXPECT_TRUE((*provider)->Delete(restored->id));
  EXPECT_TRUE((*provider)->Delete(info->id));
}

TEST_F(SuspendTest, RefusesToLoseFilesUnlessForced) {
  SeedWorkspacePool("tmp-pool", /*on_volume_claim=*/false);
  ASSERT_FALSE(HasFatalFailure());
  auto provider = Provider("tmp-pool");
  ASSERT_TRUE(provider);
  SandboxProvider& p = *provider;
  auto info = p.Create({});
  ASSERT_TRUE(info) << info.error().ToString();
  const std::string sb = SandboxOf(info->id);
  auto refused = p.Suspend(info->id, {});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kConflict);
  EXPECT_EQ(refused.error().message,
            fmt::format("suspending sandbox {} would lose its files: /workspace is an emptyDir, "
                        "not a persistent volume (deploy/k8s/sandbox-template-pvc.yaml keeps "
                        "them on a PersistentVolumeClaim from volumeClaimTemplates); --force "
                        "suspends anyway",
                        info->id));
  EXPECT_EQ(Patches(), 0);  // refused before anything changed
  EXPECT_EQ(OperatingMode(Get(kSandboxes, sb)), kOperatingModeRunning);
  EXPECT_TRUE(controller_->HasPod("default", sb));

  // The default fixture's template mounts nothing at /workspace.
  auto plain = Provider();
  ASSERT_TRUE(plain);
  auto other = plain->Create(ClaimOptions{});
  ASSERT_TRUE(other) << other.error().ToString();
  auto refused_too = plain->Suspend(other->id, {});
  ASSERT_FALSE(refused_too);
  EXPECT_EQ(refused_too.error().code, ErrorCode::kConflict);
  EXPECT_NE(refused_too.error().message.find(
                "/workspace is not a volume (it is in the container's own filesystem)"),
            std::string::npos)
      << refused_too.error().message;

  // --force: suspended all the same.
  ASSERT_TRUE(p.Suspend(info->id, SuspendOptions{.force = true}));
  EXPECT_FALSE(controller_->HasPod("default", sb));
  EXPECT_TRUE(SuspendSettled(Get(kSandboxes, sb)));
  ASSERT_TRUE(WaitUntil([&] { return p.Inspect(info->id)->state == "Suspended"; }));
  // Already suspended: no refusal, nothing to do.
  ASSERT_TRUE(p.Suspend(info->id, {}));

  // Attach wakes it.
  EXPECT_EQ(Run(p, info->id, "awake"), "awake\n");
  EXPECT_EQ(OperatingMode(Get(kSandboxes, sb)), kOperatingModeRunning);
  EXPECT_EQ(p.Inspect(info->id)->state, "Ready");

  // A resume the controller does not finish in time: TIMEOUT, with what it saw.
  ASSERT_TRUE(p.Suspend(info->id, SuspendOptions{.force = true}));
  controller_->SetPodsBecomeReady(false);
  auto hasty = Provider("tmp-pool", 1s);
  ASSERT_TRUE(hasty);
  auto late = hasty->Resume(info->id);
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code, ErrorCode::kTimeout);
  EXPECT_NE(late.error().message.find(fmt::format("Sandbox {} of SandboxClaim {} did not become "
                                                  "Ready again within 1 s: ",
                                                  sb, info->id)),
            std::string::npos)
      << late.error().message;
  EXPECT_NE(late.error().message.find("Ready=False DependenciesNotReady"), std::string::npos)
      << late.error().message;
  // Its pod still on the way: a use waits for it as a resume does (the
  // claim says only SandboxNotReady), and says what it saw when it is late.
  auto attached = hasty->Attach(info->id);
  ASSERT_FALSE(attached);
  EXPECT_EQ(attached.error().code, ErrorCode::kTimeout);
  EXPECT_NE(attached.error().message.find(fmt::format("SandboxClaim {} is starting, and waiting "
                                                      "for it failed: ",
                                                      info->id)),
            std::string::npos)
      << attached.error().message;
  EXPECT_NE(attached.error().message.find("Ready=False DependenciesNotReady"), std::string::npos)
      << attached.error().message;
  std::thread ready_soon([&] {
    std::this_thread::sleep_for(300ms);
    controller_->SetPodsBecomeReady(true);
  });
  EXPECT_EQ(Run(p, info->id, "late"), "late\n");
  ready_soon.join();
  ASSERT_TRUE(p.Resume(info->id));
}

TEST_F(SuspendTest, MissingClaimsOtherNamespacesAndPause) {
  auto provider = Provider();
  ASSERT_TRUE(provider);
  SandboxProvider& p = *provider;
  for (bool suspend : {true, false}) {
    auto st = suspend ? p.Suspend("default/sandbox-claim-00000000", {})
                      : p.Resume("default/sandbox-claim-00000000");
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().code, ErrorCode::kNotFound);
    EXPECT_EQ(st.error().message, "no SandboxClaim sandbox-claim-00000000 in namespace default");
    EXPECT_EQ((suspend ? p.Suspend("a/b/c", {}) : p.Resume("a/b/c")).error().code,
              ErrorCode::kInvalidArgument);
  }
  // A claim with no Sandbox (its pool does not exist): nothing to suspend.
  ASSERT_TRUE(
      testing::AddClaim(server_->store(), "default", "sandbox-claim-unbound", {}, "no-such-pool"));
  ASSERT_TRUE(WaitUntil([&] {
    return FindCondition(Get(kClaimsKey, "sandbox-claim-unbound"), kConditionReady).has_value();
  }));
  auto unbound = p.Suspend("sandbox-claim-unbound", {});
  ASSERT_FALSE(unbound);
  EXPECT_EQ(unbound.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(unbound.error().message.find("has no Sandbox yet"), std::string::npos);

  // Kubernetes cannot freeze a pod.
  auto paused = p.Pause("default/sandbox-claim-unbound");
  ASSERT_FALSE(paused);
  EXPECT_EQ(paused.error().code, ErrorCode::kUnimplemented);
  EXPECT_EQ(paused.error().message,
            "the k8s provider cannot pause sandboxes: Kubernetes has no pause: use suspend (the "
            "pod ends, files on a volume stay)");

  // Confined: another namespace is refused before any request.
  K8sProviderOptions o = Options();
  o.confine_to_namespace = true;
  auto confined = K8sSandboxProvider::Create(o);
  ASSERT_TRUE(confined);
  size_t before = server_->requests().size();
  EXPECT_EQ((*confined)->Suspend("other/sandbox-claim-1", {}).error().code,
            ErrorCode::kPermissionDenied);
  EXPECT_EQ((*confined)->Resume("other/sandbox-claim-1").error().code,
            ErrorCode::kPermissionDenied);
  EXPECT_EQ(server_->requests().size(), before);
}

TEST(SelectorTest, MatchesAsKubernetesDoes) {
  std::map<std::string, std::string> labels{{"a", "1"}, {"b", "2"}};
  auto sel = [](const std::string& text) { return *ParseJson(text); };
  EXPECT_TRUE(SelectorMatches(sel("{}"), labels));
  EXPECT_TRUE(SelectorMatches(sel("null"), labels));
  EXPECT_TRUE(SelectorMatches(sel(R"({"matchLabels":{"a":"1"}})"), labels));
  EXPECT_FALSE(SelectorMatches(sel(R"({"matchLabels":{"a":"2"}})"), labels));
  EXPECT_FALSE(SelectorMatches(sel(R"({"matchLabels":{"c":"1"}})"), labels));
  EXPECT_TRUE(SelectorMatches(
      sel(R"({"matchExpressions":[{"key":"b","operator":"In","values":["1","2"]}]})"), labels));
  EXPECT_FALSE(SelectorMatches(
      sel(R"({"matchExpressions":[{"key":"b","operator":"NotIn","values":["2"]}]})"), labels));
  EXPECT_TRUE(SelectorMatches(
      sel(R"({"matchExpressions":[{"key":"c","operator":"NotIn","values":["2"]}]})"), labels));
  EXPECT_TRUE(
      SelectorMatches(sel(R"({"matchExpressions":[{"key":"a","operator":"Exists"}]})"), labels));
  EXPECT_FALSE(SelectorMatches(
      sel(R"({"matchExpressions":[{"key":"a","operator":"DoesNotExist"}]})"), labels));
  EXPECT_FALSE(SelectorMatches(
      sel(R"({"matchExpressions":[{"key":"a","operator":"Gt","values":["0"]}]})"), labels));
  EXPECT_FALSE(SelectorMatches(
      sel(R"({"matchLabels":{"a":"1"},"matchExpressions":[{"key":"b","operator":"DoesNotExist"}]})"),
      labels));
}

// ------------------------------------------------- per-claim daemon tokens

TEST(ClaimTokenTest, KeyIsPrivateStableAndChecked) {
  TempDir dir;
  std::string path = dir.Path("sub/claim-key");
  auto key = LoadOrCreateClaimKey(path);
  ASSERT_TRUE(key) << key.error().ToString();
  EXPECT_EQ(key->size(), 32u);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(::stat((dir.Path("sub")).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  auto again = LoadOrCreateClaimKey(path);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, *key);
  // Tokens: per key, namespace and name; the verifier is not the token.
  std::string t = DeriveClaimToken(*key, "default", "sandbox-claim-1");
  EXPECT_GE(t.size(), 43u);
  EXPECT_NE(t, DeriveClaimToken(*key, "default", "sandbox-claim-2"));
  EXPECT_NE(t, DeriveClaimToken(*key, "other", "sandbox-claim-1"));
  EXPECT_NE(t, DeriveClaimToken(std::string(32, 'k'), "default", "sandbox-claim-1"));
  EXPECT_EQ(t, DeriveClaimToken(*again, "default", "sandbox-claim-1"));
  EXPECT_EQ(net::TokenVerifier(t).find(t), std::string::npos);
  // Readable by others: refused, not used.
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  auto open = LoadOrCreateClaimKey(path);
  ASSERT_FALSE(open);
  EXPECT_NE(open.error().message.find("mode 0600"), std::string::npos) << open.error().message;
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  // A symlink is not followed.
  std::string link = dir.Path("link");
  ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
  EXPECT_FALSE(LoadOrCreateClaimKey(link));
  // Garbage is refused.
  std::string junk = dir.Path("junk");
  { std::ofstream(junk) << "not a key\n"; }
  ASSERT_EQ(::chmod(junk.c_str(), 0600), 0);
  EXPECT_FALSE(LoadOrCreateClaimKey(junk));
}

// Issue 21 M6: the daemon (configured as deploy/k8s's template does) serves
// only its claim's owner; a peer without the token -- through the router or
// straight to the pod -- gets 401, the health checks stay open, and the
// cluster holds only the token's SHA-256.
class OwnerTokenTest : public ::testing::Test {
 protected:
  void Start(std::chrono::milliseconds verifier_delay) {
    testing::FakeClusterOptions options;
    options.owner_tokens = true;
    options.verifier_delay = verifier_delay;
    auto cluster = testing::FakeCluster::Start(std::move(options));
    ASSERT_TRUE(cluster) << cluster.error().ToString();
    cluster_ = std::move(*cluster);
  }
  K8sProviderOptions Options(const std::string& key_file) {
    K8sProviderOptions o;
    o.rest = cluster_->server().ClientConfig();
    o.ready_timeout = 30s;
    o.claim_key_file = key_file;
    o.connection.mode = ConnectionMode::kDirect;
    o.connection.direct_url = cluster_->router().url();
    o.connection.router_token = "router-secret";
    return o;
  }
  json::object Claim(const std::string& name) {
    auto c = cluster_->server().store().Get(
        {"extensions.agents.x-k8s.io", "sandboxclaims", "default"}, name);
    EXPECT_TRUE(c);
    return c ? *c : json::object();
  }
  // One request as a peer would send it: through the router (its token, the
  // sandbox's coordinates) or straight to the "pod".
  net::Response Peer(bool via_router, const std::string& method, const std::string& target,
                     const std::string& sandbox, const std::string& daemon_token) {
    auto http = net::HttpClient::Create(via_router ? cluster_->router().url()
                                                   : cluster_->daemon().tcp_url());
    EXPECT_TRUE(http);
    net::ClientRequest req;
    req.method = method;
    req.target = target;
    if (method == "POST") req.body = R"({"argv":["echo","pwned"]})";
    if (via_router) {
      req.headers = RouterHeaders({sandbox, "default", 8888, "10.244.0.10", "router-secret"});
    }
    if (!daemon_token.empty()) req.headers.Set("X-Sandboxd-Token", daemon_token);
    auto r = (*http)->Send(req);
    EXPECT_TRUE(r) << r.error().ToString();
    return r ? *r : net::Response{};
  }

  TempDir dir_;
  std::unique_ptr<testing::FakeCluster> cluster_;
};

TEST_F(OwnerTokenTest, OnlyTheClaimsOwnerDrivesItsDaemon) {
  // The verifier reaches the "pod" a while after the claim is Ready: Claim()
  // waits for it (the daemon says "no owner yet" until then).
  Start(300ms);
  ASSERT_FALSE(HasFatalFailure());
  std::string key_a = dir_.Path("key-a");
  auto provider = K8sSandboxProvider::Create(Options(key_a));
  ASSERT_TRUE(provider) << provider.error().ToString();
  auto lease = (*provider)->Claim({});
  ASSERT_TRUE(lease) << lease.error().ToString();
  auto names = ClaimNames(cluster_->server().store(), "default");
  ASSERT_EQ(names.size(), 1u);
  const std::string name = names[0];
  json::object claim = Claim(name);
  std::string sandbox = FindString(claim, {"status", "sandbox", "name"});
  auto key = LoadOrCreateClaimKey(key_a);
  ASSERT_TRUE(key);
  const std::string token = DeriveClaimToken(*key, "default", name);
  // The claim carries the verifier; nothing in the cluster holds the token.
  EXPECT_EQ(
      FindString(claim, {"spec", "additionalPodMetadata", "annotations", kTokenVerifierAnnotation}),
      net::TokenVerifier(token));
  std::string everything;
  for (const char* plural : {"sandboxclaims", "sandboxes"}) {
    std::string group =
        std::string(plural) == "sandboxes" ? "agents.x-k8s.io" : "extensions.agents.x-k8s.io";
    for (const auto& o : cluster_->server().store().List({group, plural, "default"})) {
      everything += ToJson(o);
    }
  }
  EXPECT_NE(everything.find(net::TokenVerifier(token)), std::string::npos);
  EXPECT_EQ(everything.find(token), std::string::npos);

  // The owner's lease works.
  ExecRequest req;
  req.argv = {"echo", "owner"};
  auto r = (*lease)->sandbox().Exec(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->stdout_data, "owner\n");

  // A peer with the router's token but not the claim's: 401 from the daemon.
  for (bool via_router : {true, false}) {
    for (auto [method, target] : {std::pair{"POST", "/deepbox/v1/exec"},
                                  {"POST", "/execute"},
                                  {"GET", "/deepbox/v1/info"},
                                  {"GET", "/v1/files/"}}) {
      auto peer = Peer(via_router, method, target, sandbox, "");
      EXPECT_EQ(peer.status, 401) << via_router << " " << target << ": " << peer.body;
      EXPECT_EQ(Peer(via_router, method, target, sandbox, "guess").status, 401);
      // The verifier itself (readable in the pod and the claim) is no token.
      EXPECT_EQ(Peer(via_router, method, target, sandbox, net::TokenVerifier(token)).status, 401);
    }
    // Probes are not locked out.
    EXPECT_EQ(Peer(via_router, "GET", "/v1/health", sandbox, "").status, 200);
    // With the token it goes through (the router forwards X-Sandboxd-Token).
    auto ok = Peer(via_router, "POST", "/deepbox/v1/exec", sandbox, token);
    EXPECT_EQ(ok.status, 200) << ok.body;
  }

  // Another process of the same user (same key) reconnects; another user
  // (another key) cannot drive it.
  auto again = K8sSandboxProvider::Create(Options(key_a));
  ASSERT_TRUE(again);
  auto connected = (*again)->Connect("default/" + name);
  ASSERT_TRUE(connected) << connected.error().ToString();
  auto r2 = connected->client->Exec(req);
  ASSERT_TRUE(r2) << r2.error().ToString();
  EXPECT_EQ(r2->stdout_data, "owner\n");
  auto other = K8sSandboxProvider::Create(Options(dir_.Path("key-b")));
  ASSERT_TRUE(other);
  auto stranger = (*other)->Connect("default/" + name);
  ASSERT_FALSE(stranger);
  EXPECT_EQ(stranger.error().code, ErrorCode::kUnauthenticated) << stranger.error().ToString();
  ASSERT_TRUE((*lease)->Release());
}

TEST_F(OwnerTokenTest, AnUncheckedClaimsFirstCallWaitsForTheVerifier) {
  Start(400ms);
  ASSERT_FALSE(HasFatalFailure());
  K8sProviderOptions o = Options(dir_.Path("key"));
  o.check_daemon = false;  // Claim() returns at Ready, before the verifier arrives
  auto provider = K8sSandboxProvider::Create(o);
  ASSERT_TRUE(provider);
  auto lease = (*provider)->Claim({});
  ASSERT_TRUE(lease) << lease.error().ToString();
  ExecRequest req;
  req.argv = {"echo", "first"};
  auto r = (*lease)->sandbox().Exec(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->stdout_data, "first\n");
  ASSERT_TRUE((*lease)->Release());
}

TEST_F(OwnerTokenTest, AVerifierThatNeverArrivesIsAClearError) {
  Start(1h);
  ASSERT_FALSE(HasFatalFailure());
  K8sProviderOptions o = Options(dir_.Path("key"));
  o.owner_wait = 300ms;
  auto provider = K8sSandboxProvider::Create(o);
  ASSERT_TRUE(provider);
  auto lease = (*provider)->Claim({});
  ASSERT_FALSE(lease);
  EXPECT_EQ(lease.error().code, ErrorCode::kUnauthenticated);
  EXPECT_NE(lease.error().message.find("did not reach the pod"), std::string::npos)
      << lease.error().message;
  EXPECT_TRUE(ClaimNames(cluster_->server().store(), "default").empty());
}

TEST(LabelValueForTest, KeepsLabelValuesAndMakesOthersOnes) {
  EXPECT_EQ(LabelValueFor("default.sandbox-claim-1a2b3c4d"), "default.sandbox-claim-1a2b3c4d");
  EXPECT_EQ(LabelValueFor("before-fix"), "before-fix");
  const std::string hashed[] = {LabelValueFor("snap-"), LabelValueFor("default/claim"),
                                LabelValueFor("_x"),    LabelValueFor(std::string(70, 'a')),
                                LabelValueFor(""),      LabelValueFor("caf\xc3\xa9")};
  for (const auto& v : hashed) {
    EXPECT_TRUE(ValidateLabels({{"deepbox.dev/snapshot", v}})) << v;
    EXPECT_LE(v.size(), 63u) << v;
  }
  EXPECT_EQ(hashed[0], "snap--" + NameHash("snap-"));
  EXPECT_EQ(hashed[1], "default_claim-" + NameHash("default/claim"));
  EXPECT_EQ(hashed[2], "x-" + NameHash("_x"));
  EXPECT_EQ(hashed[3], std::string(54, 'a') + "-" + NameHash(std::string(70, 'a')));
  EXPECT_NE(LabelValueFor("a/b"), LabelValueFor("a_b-"));  // cleaned alike, told apart
}

// Snapshots from a hostile daemon (every byte it sends is hostile input):
// the archive is only counted and stored, cut off at the quota; an error
// answer keeps nothing; a restore it refuses leaves no claim behind.
class HostileSnapshotTest : public ProviderTest {
 protected:
  void SetUp() override {
    ProviderTest::SetUp();
    ASSERT_FALSE(HasFatalFailure());
    auto d = deepbox::testing::HostileDaemon::Start();
    ASSERT_TRUE(d) << d.error().ToString();
    hostile_ = std::move(*d);
    router_->SetDefaultBackend(hostile_->unix_url());  // every pod is the hostile daemon
  }
  std::unique_ptr<K8sSandboxProvider> Provider() {
    K8sProviderOptions o = Options();
    o.snapshot_dir = snapshots_.Path("snapshots");
    o.snapshot_quota_bytes = 1 << 20;
    auto p = K8sSandboxProvider::Create(o);
    EXPECT_TRUE(p) << p.error().ToString();
    return p ? std::move(*p) : nullptr;
  }
  std::vector<std::string> Kept() {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(snapshots_.Path("snapshots"), ec)) {
      out.push_back(e.path().filename().string());
    }
    return out;
  }
  std::unique_ptr<deepbox::testing::HostileDaemon> hostile_;
  TempDir snapshots_;
};

TEST_F(HostileSnapshotTest, ADaemonThatSendsPastTheQuotaIsCutOffAndNothingIsKept) {
  auto provider = Provider();
  ASSERT_TRUE(provider);
  auto made = provider->Create(ClaimOptions{});
  ASSERT_TRUE(made) << made.error().ToString();
  // 4 MiB for a quota of 1 MiB.
  hostile_->AnswerStream("/deepbox/v1/fs/tar/download",
                         std::vector<std::string>(64, std::string(64 * 1024, 'x')));
  auto snap = provider->Snapshot(made->id, SnapshotOptions{"big"});
  ASSERT_FALSE(snap);
  EXPECT_EQ(snap.error().code, ErrorCode::kResourceExhausted) << snap.error().ToString();
  EXPECT_NE(snap.error().message.find("nothing was kept"), std::string::npos)
      << snap.error().message;
  EXPECT_TRUE(Kept().empty());
  bool asked = false;
  for (const auto& r : hostile_->requests()) {
    asked = asked || r == R"(POST /deepbox/v1/fs/tar/download {"paths":["/workspace"]})";
  }
  EXPECT_TRUE(asked);
  // Within the quota the same bytes are kept as they came (never read).
  hostile_->AnswerStream("/deepbox/v1/fs/tar/download", {"not", " a tar", " at all"});
  auto small = provider->Snapshot(made->id, SnapshotOptions{"small"});
  ASSERT_TRUE(small) << small.error().ToString();
  EXPECT_EQ(small->provider, "k8s");
  EXPECT_EQ(small->source_id, made->id);
  EXPECT_NE(small->note.find("Kubernetes cannot freeze a pod"), std::string::npos);
  std::ifstream tar(snapshots_.Path("snapshots/small/workspace.tar"));
  std::string bytes((std::istreambuf_iterator<char>(tar)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, "not a tar at all");
  EXPECT_TRUE(provider->Delete(made->id));
}

TEST_F(HostileSnapshotTest, AnErrorAnswerKeepsNothing) {
  auto provider = Provider();
  ASSERT_TRUE(provider);
  auto made = provider->Create(ClaimOptions{});
  ASSERT_TRUE(made) << made.error().ToString();
  hostile_->Answer("/deepbox/v1/fs/tar/download",
                   R"({"error":{"code":"PERMISSION_DENIED","message":"no \u001b]52;c;x\u0007"}})",
                   403);
  auto snap = provider->Snapshot(made->id, SnapshotOptions{"refused"});
  ASSERT_FALSE(snap);
  EXPECT_EQ(snap.error().code, ErrorCode::kPermissionDenied) << snap.error().ToString();
  EXPECT_TRUE(Kept().empty());
  auto fork = provider->Fork(made->id, 2, ClaimOptions{});
  ASSERT_FALSE(fork);
  EXPECT_NE(fork.error().message.find("no sandbox was kept"), std::string::npos);
  EXPECT_EQ(ClaimNames(server_->store(), "default").size(), 1u);  // only the source
  EXPECT_TRUE(Kept().empty());
  EXPECT_TRUE(provider->Delete(made->id));
}

TEST_F(HostileSnapshotTest, ARestoreTheDaemonRefusesLeavesNoClaim) {
  auto provider = Provider();
  ASSERT_TRUE(provider);
  auto made = provider->Create(ClaimOptions{});
  ASSERT_TRUE(made) << made.error().ToString();
  hostile_->AnswerStream("/deepbox/v1/fs/tar/download", {"archive ", "bytes"});
  ASSERT_TRUE(provider->Snapshot(made->id, SnapshotOptions{"snap"}));
  hostile_->Answer("/deepbox/v1/fs/tar/upload",
                   R"({"error":{"code":"RESOURCE_EXHAUSTED","message":"disk full"}})", 507);
  auto restored = provider->CreateFromSnapshot("snap", ClaimOptions{});
  ASSERT_FALSE(restored);
  EXPECT_EQ(restored.error().code, ErrorCode::kResourceExhausted) << restored.error().ToString();
  EXPECT_NE(restored.error().message.find("restoring snapshot 'snap' (the new claim default/"),
            std::string::npos)
      << restored.error().message;
  EXPECT_NE(restored.error().message.find("was deleted)"), std::string::npos);
  auto forks = provider->Fork(made->id, 3, ClaimOptions{});
  ASSERT_FALSE(forks);
  EXPECT_NE(forks.error().message.find("no sandbox was kept"), std::string::npos);
  EXPECT_TRUE(WaitUntil([&] { return ClaimNames(server_->store(), "default").size() == 1u; }, 10s));
  // What went to the daemon: the snapshot's bytes as they were kept.
  bool replayed = false;
  for (const auto& r : hostile_->requests()) {
    replayed = replayed || r == "PUT /deepbox/v1/fs/tar/upload archive bytes";
  }
  EXPECT_TRUE(replayed);
  EXPECT_EQ(Kept(), std::vector<std::string>{"snap"});
  EXPECT_TRUE(provider->Delete(made->id));
}

// A Ready claim whose pod no longer answers (the pod went between the
// claim's status and the connection: restarted, evicted, or replaced right
// after a resume while the controller lagged, as a k8s-real run saw).
// Connect looks at the claim again: a new pod is waited for and used; the
// same pod still unreachable is an error once the grace has passed.
class PodRestartTest : public ProviderTest {
 protected:
  void Configure(testing::FakeClusterOptions& options) override {
    options.pod_daemons = 3;  // 10.244.0.10, .11, .12: a daemon each
  }
  // A kept claim on the pool's first pod (10.244.0.10), whose daemon is then
  // killed: the claim stays Ready on a pod that refuses connections.
  std::string ClaimOnADeadPod(K8sSandboxProvider& p) {
    EXPECT_TRUE(cluster_->WaitPoolReady());
    auto info = p.Create(ClaimOptions{});
    EXPECT_TRUE(info) << info.error().ToString();
    if (!info) return "";
    auto claim = server_->store().Get(kClaimsKey, info->id.substr(info->id.find('/') + 1));
    EXPECT_TRUE(claim);
    if (claim) {
      EXPECT_EQ(ToJson(*Find(*claim, {"status", "sandbox", "podIPs"})), R"(["10.244.0.10"])");
    }
    cluster_->pod_daemon(0).Kill();
    return info->id;
  }
};

TEST_F(PodRestartTest, ANewPodIsWaitedForAndUsed) {
  auto provider = Provider("deepagents-warmpool", 30s);
  ASSERT_TRUE(provider);
  std::string id = ClaimOnADeadPod(*provider);
  ASSERT_FALSE(id.empty());
  auto claim = server_->store().Get(kClaimsKey, id.substr(id.find('/') + 1));
  ASSERT_TRUE(claim);
  std::string sandbox = FindString(*claim, {"status", "sandbox", "name"});
  // The controller replaces the pod a moment after the first attempt failed.
  std::thread restart([&] {
    std::this_thread::sleep_for(300ms);
    controller_->RestartPod("default", sandbox);
  });
  auto connected = provider->Connect(id);
  restart.join();
  ASSERT_TRUE(connected) << connected.error().ToString();
  ExecRequest req;
  req.argv = {"echo", "on the new pod"};
  auto r = connected->client->Exec(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->stdout_data, "on the new pod\n");
  // The first attempt went to the dead pod, the last to the new one (the
  // pool's refill took .11).
  auto routed = router_->requests();
  ASSERT_FALSE(routed.empty());
  EXPECT_EQ(routed.front().pod_ip, "10.244.0.10");
  EXPECT_EQ(routed.back().pod_ip, "10.244.0.12");
}

TEST_F(PodRestartTest, TheSamePodStillUnreachableIsAnErrorAfterTheGrace) {
  auto provider = Provider("deepagents-warmpool", 1s);  // the grace: min(10 s, ready_timeout)
  ASSERT_TRUE(provider);
  std::string id = ClaimOnADeadPod(*provider);
  ASSERT_FALSE(id.empty());
  const size_t before = router_->requests().size();
  auto connected = provider->Connect(id);
  ASSERT_FALSE(connected);
  EXPECT_NE(connected.error().message.find("could not reach the sandbox's pod"), std::string::npos)
      << connected.error().message;
  // It tried again (more than one of its requests reached the router), never
  // another pod.
  auto routed = router_->requests();
  ASSERT_GT(routed.size(), before + 1);
  for (const auto& rr : routed) EXPECT_EQ(rr.pod_ip, "10.244.0.10");
}

}  // namespace
}  // namespace deepbox::k8s
