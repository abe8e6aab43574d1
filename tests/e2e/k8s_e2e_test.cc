// `deepbox run --sandbox k8s` and `deepbox-fib-example --sandbox k8s` end to
// end without a cluster: the binaries' real Kubernetes client against the fake
// API server (HTTPS, token auth, a kubeconfig file), the fake agent-sandbox
// controller adopting warm pool members, the test sandbox router (bearer
// token, X-Sandbox-* headers), and a real deepbox-sandboxd standing in for the
// pod.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "cli/run_exit_codes.h"
#include "e2e_util.h"
#include "k8s/settings.h"
#include "k8s/testing/fake_api_server.h"
#include "k8s/testing/fake_cluster.h"
#include "k8s/testing/fake_controller.h"
#include "k8s/testing/fixtures.h"
#include "k8s/testing/test_router.h"
#include "k8s/util.h"
#include "mcp/client.h"
#include "sandbox/testing/scoped_sandboxd.h"

namespace deepbox::e2e {
namespace {

using k8s::testing::ClaimNames;
using k8s::testing::FakeApiServer;
using k8s::testing::FakeCluster;
using k8s::testing::FakeController;
using k8s::testing::TestRouter;
using k8s::testing::WaitUntil;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class K8sTest : public E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // A named options object: with the default argument's temporary, GCC 12
    // at -O3 reports its std::function member as maybe-uninitialized (a
    // false positive).
    k8s::testing::FakeClusterOptions options;
    Configure(options);
    auto cluster = FakeCluster::Start(std::move(options));
    ASSERT_TRUE(cluster) << cluster.error().ToString();
    cluster_ = std::move(*cluster);
    server_ = &cluster_->server();
    controller_ = &cluster_->controller();
    daemon_ = &cluster_->daemon();
    router_ = &cluster_->router();
    kubeconfig_ = (dir_ / "kubeconfig").string();
    ASSERT_TRUE(server_->WriteKubeconfig(kubeconfig_, "default"));
  }
  void TearDown() override {
    cluster_.reset();
    E2eTest::TearDown();
  }
  virtual void Configure(k8s::testing::FakeClusterOptions&) {}
  // The fake "pod" is a daemon whose root is a temporary directory, not
  // /workspace: this conversation uses paths relative to the root.
  std::string RelativeFibReplay() {
    std::string file = (dir_ / "fib-relative.jsonl").string();
    WriteFile(
        file,
        R"({"deepbox_replay": 1, "scripted": true, "model": "anthropic:claude-sonnet-4-6"})"
        "\n"
        R"({"response": {"tool_calls": [{"id": "t1", "name": "write_file", "input": {"file_path": "fib.py", "content": "a, b = 0, 1\nfor _ in range(10):\n    print(a)\n    a, b = b, a + b\n"}}]}})"
        "\n"
        R"({"request": {"tool_results": ["t1"]}, "response": {"tool_calls": [{"id": "t2", "name": "execute", "input": {"command": "python3 fib.py"}}]}})"
        "\n"
        R"({"request": {"tool_results": ["t2"]}, "response": {"text": "It prints 0, 1, 1, 2, 3, 5, 8, 13, 21, 34."}})"
        "\n");
    return file;
  }
  std::map<std::string, std::string> K8sEnv() {
    return {{"KUBECONFIG", kubeconfig_},
            {"AGENT_SANDBOX_ROUTER_URL", fmt::format("http://127.0.0.1:{}", router_->port())},
            {"AGENT_SANDBOX_ROUTER_TOKEN", "router-secret"}};
  }

  // A claim put straight into the API server's store (as another client would).
  void AddClaim(const std::string& ns, const std::string& name,
                std::map<std::string, std::string> labels) {
    ASSERT_TRUE(k8s::testing::AddClaim(server_->store(), ns, name, labels));
  }
  std::vector<std::string> SortedClaims(const std::string& ns) {
    auto names = ClaimNames(server_->store(), ns);
    std::sort(names.begin(), names.end());
    return names;
  }

  std::unique_ptr<FakeCluster> cluster_;
  FakeApiServer* server_ = nullptr;
  FakeController* controller_ = nullptr;
  deepbox::testing::ScopedSandboxd* daemon_ = nullptr;
  TestRouter* router_ = nullptr;
  std::string kubeconfig_;
};

TEST_F(K8sTest, RunClaimsFromTheWarmPoolAndDeletesTheClaim) {
  auto r = Run({kDeepbox, "run", "--sandbox", "k8s", "--label", "team=ml", "--json", "--model",
                "replay:" + RelativeFibReplay(), kFibTask},
               K8sEnv());
  EXPECT_EQ(r.code, 0) << r.err;
  auto events = JsonLines(r.out);
  ASSERT_FALSE(events.empty());
  const json::object& result = events.back();
  EXPECT_EQ(result.at("provider").as_string(), "k8s");
  EXPECT_THAT(std::string(result.at("sandbox_id").as_string()), HasSubstr("default/"));
  EXPECT_THAT(std::string(result.at("final_text").as_string()),
              HasSubstr("0, 1, 1, 2, 3, 5, 8, 13, 21, 34"));
  // The tools ran in the "pod", through the router with the claim's coordinates.
  EXPECT_TRUE(fs::exists(daemon_->root() + "/fib.py"));
  ASSERT_FALSE(router_->requests().empty());
  EXPECT_EQ(router_->requests()[0].namespace_name, "default");
  EXPECT_THAT(ClaimNames(server_->store(), "default"), IsEmpty());
}

TEST_F(K8sTest, ContinuesInAKeptClaimWithSandboxId) {
  auto r = Run({kDeepbox, "run", "--sandbox", "k8s", "--keep-sandbox", "--json", "--thread",
                "th-k8s", "--model", "replay:" + RelativeFibReplay(), kFibTask},
               K8sEnv());
  ASSERT_EQ(r.code, 0) << r.err;
  auto events = JsonLines(r.out);
  ASSERT_FALSE(events.empty());
  std::string id(events.back().at("sandbox_id").as_string());  // NAMESPACE/CLAIM
  ASSERT_THAT(ClaimNames(server_->store(), "default"), ::testing::SizeIs(1));
  // The same thread in the same claim: fib.py is there, the model is told
  // nothing about a new sandbox, and the claim is left as it was.
  std::string rerun = (dir_ / "rerun.jsonl").string();
  WriteFile(
      rerun,
      R"({"deepbox_replay": 1, "scripted": true, "model": "anthropic:claude-sonnet-4-6"})"
      "\n"
      R"({"response": {"tool_calls": [{"id": "r1", "name": "execute", "input": {"command": "python3 fib.py | tail -1"}}]}})"
      "\n"
      R"({"request": {"tool_results": ["r1"]}, "response": {"text": "still 34"}})"
      "\n");
  r = Run({kDeepbox, "run", "--sandbox", "k8s", "--sandbox-id", id, "--thread", "th-k8s", "--model",
           "replay:" + rerun, "run it again"},
          K8sEnv());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("in the same sandbox"));
  EXPECT_THAT(r.err, HasSubstr("⎿ 34"));
  EXPECT_THAT(r.err, HasSubstr("kubectl delete sandboxclaim -n default"));
  EXPECT_THAT(ClaimNames(server_->store(), "default"), ::testing::SizeIs(1));
  // Not NAMESPACE/CLAIM, or no such claim: said before anything runs.
  r = Run({kDeepbox, "run", "--sandbox", "k8s", "--sandbox-id", "default/no-such-claim", "--model",
           "replay:" + rerun, "x"},
          K8sEnv());
  EXPECT_EQ(r.code, run::kRunExitSandbox) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--sandbox-id default/no-such-claim"));
}

TEST_F(K8sTest, DefaultConnectionIsAKubectlPortForward) {
  // `kubectl` on PATH is the fake one: a real TCP proxy to the test router.
  fs::create_directories(dir_ / "bin");
  fs::create_symlink(kBinDir + "/deepbox-fake-kubectl", dir_ / "bin" / "kubectl");
  std::string log = (dir_ / "kubectl.log").string();
  const char* path = std::getenv("PATH");
  auto r = Run({kDeepbox, "run", "--sandbox", "k8s", "--kubeconfig", kubeconfig_, "--model",
                "replay:" + RelativeFibReplay(), kFibTask},
               {{"PATH", (dir_ / "bin").string() + ":" + (path ? path : "/usr/bin:/bin")},
                {"DEEPBOX_FAKE_KUBECTL_TARGET", fmt::format("127.0.0.1:{}", router_->port())},
                {"DEEPBOX_FAKE_KUBECTL_LOG", log},
                {"AGENT_SANDBOX_ROUTER_TOKEN", "router-secret"}});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("0, 1, 1, 2, 3, 5, 8, 13, 21, 34"));
  std::string args = ReadFile(log);
  EXPECT_THAT(args, HasSubstr("--kubeconfig=" + kubeconfig_));
  EXPECT_THAT(args, HasSubstr("port-forward"));
  EXPECT_THAT(args, HasSubstr("svc/sandbox-router-svc"));
  EXPECT_THAT(ClaimNames(server_->store(), "default"), IsEmpty());
}

TEST_F(K8sTest, InterruptDeletesTheClaim) {
  WriteFile(
      dir_ / "chatty.jsonl",
      R"({"deepbox_replay": 1, "scripted": true, "model": "anthropic:claude-sonnet-4-6"})"
      "\n"
      R"({"response": {"tool_calls": [{"id": "t1", "name": "execute", "input": {"command": "while true; do echo tick; sleep 0.2; done"}}]}})"
      "\n");
  Process p({kDeepbox, "run", "--sandbox", "k8s", "--json", "--model",
             "replay:" + (dir_ / "chatty.jsonl").string(), kFibTask},
            Env(K8sEnv()), dir_);
  ASSERT_TRUE(Eventually([&] {
    return p.out().find(R"("type":"tool_output")") != std::string::npos;
  })) << p.out()
      << p.err();
  EXPECT_EQ(ClaimNames(server_->store(), "default").size(), 1u);
  kill(p.pid(), SIGINT);
  EXPECT_EQ(p.Wait(), run::kRunExitInterrupted) << p.err();
  EXPECT_THAT(ClaimNames(server_->store(), "default"), IsEmpty());
}

TEST_F(K8sTest, ExampleOnKubernetes) {
  auto r =
      Run({kExample, "--sandbox", "k8s", "--model", "replay:" + RelativeFibReplay()}, K8sEnv());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(kVerified));
  EXPECT_THAT(ClaimNames(server_->store(), "default"), IsEmpty());
}

TEST_F(K8sTest, MissingWarmPoolIsASandboxError) {
  auto env = K8sEnv();
  env["AGENT_SANDBOX_WARMPOOL"] = "no-such-pool";
  auto r =
      Run({kDeepbox, "run", "--sandbox", "k8s", "--model", "replay:" + kFibReplay, kFibTask}, env);
  EXPECT_EQ(r.code, run::kRunExitSandbox) << r.err;
  EXPECT_THAT(r.err, HasSubstr("cannot claim a sandbox"));
  EXPECT_THAT(r.err, HasSubstr("no-such-pool"));
}

TEST_F(K8sTest, ReadyTimeoutDeletesTheClaimAndFails) {
  controller_->SetPodsBecomeReady(false);  // every pod stays Pending
  auto r = Run({kDeepbox, "run", "--sandbox", "k8s", "--ready-timeout", "1", "--model",
                "replay:" + RelativeFibReplay(), kFibTask},
               K8sEnv());
  EXPECT_EQ(r.code, run::kRunExitSandbox) << r.err;
  EXPECT_THAT(r.err, HasSubstr("did not become ready within 1 s"));
  EXPECT_THAT(ClaimNames(server_->store(), "default"), IsEmpty());
}

TEST_F(K8sTest, SandboxRmBySelectorRemovesOnlyMatchingClaimsOfTheNamespace) {
  AddClaim("default", "sandbox-claim-aaaaaaaa", {{"deepagents.example/claim", "true"}});
  AddClaim("default", "sandbox-claim-bbbbbbbb", {{"deepagents.example/claim", "true"}});
  AddClaim("default", "sandbox-claim-cccccccc", {{"deepagents.example/claim", "false"}});
  AddClaim("default", "someone-else", {});
  AddClaim("other", "sandbox-claim-dddddddd", {{"deepagents.example/claim", "true"}});
  auto r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", "--selector",
                "deepagents.example/claim=true"},
               {{"KUBECONFIG", kubeconfig_}});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "default/sandbox-claim-aaaaaaaa\ndefault/sandbox-claim-bbbbbbbb\n");
  EXPECT_EQ(SortedClaims("default"),
            (std::vector<std::string>{"sandbox-claim-cccccccc", "someone-else"}));
  EXPECT_EQ(SortedClaims("other"), (std::vector<std::string>{"sandbox-claim-dddddddd"}));

  // --namespace (and the same variable `deepbox run` reads) pick the namespace.
  r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", "--kubeconfig", kubeconfig_, "-s",
           "deepagents.example/claim"},
          {{"AGENT_SANDBOX_NAMESPACE", "other"}});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "other/sandbox-claim-dddddddd\n");
  EXPECT_THAT(ClaimNames(server_->store(), "other"), IsEmpty());
  EXPECT_EQ(SortedClaims("default").size(), 2u);

  // Nothing matches: success, and it says so.
  r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", "-n", "default", "--selector",
           "deepagents.example/claim=true"},
          {{"KUBECONFIG", kubeconfig_}});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("no SandboxClaim in namespace default matches"));
}

TEST_F(K8sTest, SandboxRmByNameAndItsErrors) {
  AddClaim("default", "sandbox-claim-aaaaaaaa", {});
  AddClaim("other", "sandbox-claim-bbbbbbbb", {});
  auto r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", "sandbox-claim-aaaaaaaa",
                "other/sandbox-claim-bbbbbbbb"},
               {{"KUBECONFIG", kubeconfig_}});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "default/sandbox-claim-aaaaaaaa\nother/sandbox-claim-bbbbbbbb\n");
  EXPECT_THAT(ClaimNames(server_->store(), "default"), IsEmpty());
  EXPECT_THAT(ClaimNames(server_->store(), "other"), IsEmpty());

  r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", "sandbox-claim-aaaaaaaa"},
          {{"KUBECONFIG", kubeconfig_}});
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("no SandboxClaim sandbox-claim-aaaaaaaa in namespace default"));

  // Neither names nor a selector: refused before anything is deleted.
  r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s"}, {{"KUBECONFIG", kubeconfig_}});
  EXPECT_EQ(r.code, 2) << r.err;

  // A broken kubeconfig names the file.
  std::string bad = (dir_ / "bad-kubeconfig").string();
  WriteFile(bad, "apiVersion: v1\nkind: Config\nclusters: 7\n");
  r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", "--kubeconfig", bad, "-s", "a=b"}, {});
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("bad-kubeconfig"));
}

TEST_F(K8sTest, SandboxLsListsTheClaimsOfTheNamespace) {
  AddClaim("default", "sandbox-claim-aaaaaaaa", {{"deepagents.example/claim", "true"}});
  AddClaim("default", "sandbox-claim-cccccccc", {{"team", "ml"}});
  AddClaim("other", "sandbox-claim-dddddddd", {{"deepagents.example/claim", "true"}});
  // The fake controller adopts the warm pool's one ready sandbox for one of them.
  ASSERT_TRUE(WaitUntil([&] {
    auto r = Run({kDeepbox, "sandbox", "ls", "--provider", "k8s"}, {{"KUBECONFIG", kubeconfig_}});
    return r.out.find(" Ready ") != std::string::npos;
  }));
  auto r = Run({kDeepbox, "sandbox", "ls", "--provider", "k8s"}, {{"KUBECONFIG", kubeconfig_}});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("NAME"));
  EXPECT_THAT(r.out, HasSubstr("sandbox-claim-aaaaaaaa"));
  EXPECT_THAT(r.out, HasSubstr("deepagents.example/claim=true"));
  EXPECT_THAT(r.out, HasSubstr("sandbox-claim-cccccccc"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("dddddddd")));

  r = Run(
      {kDeepbox, "sandbox", "ls", "--provider", "k8s", "-q", "-s", "deepagents.example/claim=true"},
      {{"KUBECONFIG", kubeconfig_}});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "default/sandbox-claim-aaaaaaaa\n");

  r = Run({kDeepbox, "sandbox", "ls", "--provider", "k8s", "--json", "-n", "other"},
          {{"KUBECONFIG", kubeconfig_}});
  EXPECT_EQ(r.code, 0) << r.err;
  auto parsed = json::parse(r.out);
  ASSERT_TRUE(parsed.is_array());
  ASSERT_EQ(parsed.as_array().size(), 1u);
  EXPECT_EQ(FindString(parsed.as_array()[0], {"metadata", "name"}), "sandbox-claim-dddddddd");
}

TEST_F(K8sTest, SandboxLsSizesColumnsToTheirContentAndStripsControlSequences) {
  // A warm-pool Sandbox name ("deepagents-warmpool-xxxxx", 25 characters) is
  // wider than the old fixed 24-character column; a label value carries an
  // OSC (window title) and a CSI sequence.
  AddClaim("default", "sandbox-claim-aaaaaaaa", {{"deepagents.example/claim", "true"}});
  AddClaim("default", "sandbox-claim-bbbbbbbb",
           {{"note", "x\x1b]0;owned\x07y\x1b[2J"}, {"deepagents.example/claim", "false"}});
  Outcome r;
  ASSERT_TRUE(WaitUntil([&] {
    r = Run({kDeepbox, "sandbox", "ls", "--provider", "k8s"}, {{"KUBECONFIG", kubeconfig_}});
    return r.out.find(" Ready ") != std::string::npos;
  }));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\x07'), std::string::npos) << r.out;
  std::vector<std::string> lines;
  for (size_t start = 0; start < r.out.size();) {
    size_t nl = r.out.find('\n', start);
    lines.push_back(r.out.substr(start, nl - start));
    start = nl == std::string::npos ? r.out.size() : nl + 1;
  }
  ASSERT_EQ(lines.size(), 3u) << r.out;
  // Every cell starts where its header does, after at least one space.
  std::vector<size_t> starts;
  for (const char* h : {"STATE", "SANDBOX", "AGE", "EXPIRES", "LABELS"}) {
    starts.push_back(lines[0].find(h));
    ASSERT_NE(starts.back(), std::string::npos) << lines[0];
  }
  for (const auto& line : lines) {
    for (size_t s : starts) {
      ASSERT_GT(line.size(), s) << line;
      EXPECT_EQ(line[s - 1], ' ') << line;
      EXPECT_NE(line[s], ' ') << line;
    }
  }
  // The full Sandbox name of the Ready claim, in the SANDBOX column.
  const std::string& ready = lines[1].find(" Ready ") != std::string::npos ? lines[1] : lines[2];
  std::string sandbox = ready.substr(starts[1], ready.find(' ', starts[1]) - starts[1]);
  EXPECT_TRUE(sandbox.starts_with("deepagents-warmpool-")) << ready;
  EXPECT_GE(sandbox.size(), 25u) << ready;
  EXPECT_THAT(r.out, HasSubstr("xy"));  // the label with its sequences removed
}

// `sandbox create --provider k8s`, then exec and cp on its NAMESPACE/CLAIM
// id, with the local commands' flags, output and exit codes, and rm.
TEST_F(K8sTest, SandboxCreateExecCpAndRmOnKubernetes) {
  auto env = K8sEnv();
  auto r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--label", "team=ml", "--ttl",
                "600", "--json"},
               env);
  ASSERT_EQ(r.code, 0) << r.err;
  auto rec = ParseJsonObject(r.out);
  ASSERT_TRUE(rec) << r.out;
  std::string id = FindString(*rec, {"id"});
  std::string claim = FindString(*rec, {"claim"});
  EXPECT_EQ(id, "default/" + claim);
  EXPECT_EQ(SortedClaims("default"), std::vector<std::string>{claim});  // kept
  // What python/deepbox's Sandbox.claim needs: the router and its headers
  // (never the router token).
  EXPECT_EQ(FindString(*rec, {"url"}), fmt::format("http://127.0.0.1:{}", router_->port()));
  std::string sandbox = FindString(*rec, {"sandbox"});
  EXPECT_TRUE(sandbox.starts_with("deepagents-warmpool-")) << sandbox;
  EXPECT_EQ(FindString(*rec, {"headers", "X-Sandbox-ID"}), sandbox);
  EXPECT_EQ(FindString(*rec, {"headers", "X-Sandbox-Namespace"}), "default");
  EXPECT_EQ(FindString(*rec, {"headers", "X-Sandbox-Port"}), "8888");
  EXPECT_FALSE(FindString(*rec, {"headers", "X-Sandbox-Pod-IP"}).empty());
  EXPECT_EQ(r.out.find("router-secret"), std::string::npos) << r.out;
  EXPECT_EQ(FindString(server_->store()
                           .Get({"extensions.agents.x-k8s.io", "sandboxclaims", "default"}, claim)
                           .value_or(json::object()),
                       {"metadata", "labels", "team"}),
            "ml");

  r = Run({kDeepbox, "sandbox", "exec", id, "--", "sh", "-c", "echo hi; echo err >&2; exit 7"},
          env);
  EXPECT_EQ(r.code, 7) << r.err;
  EXPECT_EQ(r.out, "hi\n");
  EXPECT_EQ(r.err, "err\n");
  r = Run({kDeepbox, "sandbox", "exec", id, "--", "no-such-command-xyz"}, env);
  EXPECT_EQ(r.code, 127) << r.err;
  WriteFile(dir_ / "in.txt", "payload\n");
  r = Run({kDeepbox, "sandbox", "cp", (dir_ / "in.txt").string(), id + ":copied.txt"}, env);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ReadFile(daemon_->root() + "/copied.txt"), "payload\n");
  r = Run({kDeepbox, "sandbox", "cp", id + ":copied.txt", (dir_ / "out.txt").string()}, env);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ReadFile(dir_ / "out.txt"), "payload\n");

  r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", id}, env);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(ClaimNames(server_->store(), "default"), IsEmpty());
  // A claim that does not exist: 3, as for a local sandbox.
  r = Run({kDeepbox, "sandbox", "exec", id, "--", "true"}, env);
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("no SandboxClaim " + claim));
  r = Run({kDeepbox, "sandbox", "cp", id + ":copied.txt", (dir_ / "x").string()}, env);
  EXPECT_EQ(r.code, 3) << r.err;
  // Local-only flags are usage errors with --provider k8s.
  r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--memory", "1G"}, env);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(ClaimNames(server_->store(), "default"), IsEmpty());
}

// Issue 28: `sandbox inspect` shows any claim of the namespace; --json is the
// record `sandbox create --json` printed (url, headers), so that another
// process reattaches; the daemon token only for the claim's owner.
TEST_F(K8sTest, SandboxInspectShowsAClaimAndHowToReachIt) {
  auto env = K8sEnv();
  auto r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--label", "team=ml", "--ttl",
                "600", "--json"},
               env);
  ASSERT_EQ(r.code, 0) << r.err;
  auto created = ParseJsonObject(r.out);
  ASSERT_TRUE(created) << r.out;
  std::string id = FindString(*created, {"id"});
  std::string claim = FindString(*created, {"claim"});

  // The id's form (NAMESPACE/CLAIM) picks the provider: no --provider needed.
  r = Run({kDeepbox, "sandbox", "inspect", "--json", id}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  auto rec = ParseJsonObject(r.out);
  ASSERT_TRUE(rec) << r.out;
  EXPECT_EQ(FindString(*rec, {"id"}), id);
  EXPECT_EQ(FindString(*rec, {"provider"}), "k8s");
  EXPECT_EQ(FindString(*rec, {"state"}), "Ready");
  EXPECT_EQ(FindString(*rec, {"namespace"}), "default");
  EXPECT_EQ(FindString(*rec, {"claim"}), claim);
  EXPECT_EQ(FindString(*rec, {"sandbox"}), FindString(*created, {"sandbox"}));
  EXPECT_EQ(FindString(*rec, {"warm_pool"}), "deepagents-warmpool");
  EXPECT_EQ(FindString(*rec, {"template"}), "deepbox-sandbox-template");
  EXPECT_EQ(FindString(*rec, {"image"}), "python:3.12-slim");
  EXPECT_EQ(FindString(*rec, {"labels", "team"}), "ml");
  EXPECT_FALSE(FindString(*rec, {"created_at"}).empty());
  EXPECT_FALSE(FindString(*rec, {"expires_at"}).empty());
  const json::value* ttl = Find(*rec, {"ttl_remaining_seconds"});
  ASSERT_TRUE(ttl != nullptr && ttl->is_int64()) << r.out;
  EXPECT_GT(ttl->as_int64(), 500);
  EXPECT_LE(ttl->as_int64(), 600);
  // What a client needs: the same url and headers as the claim's record.
  EXPECT_EQ(FindString(*rec, {"url"}), FindString(*created, {"url"}));
  for (const char* h : {"X-Sandbox-ID", "X-Sandbox-Namespace", "X-Sandbox-Port", "X-Sandbox-Pod-IP",
                        "X-Sandboxd-Token"}) {
    EXPECT_EQ(FindString(*rec, {"headers", h}), FindString(*created, {"headers", h})) << h;
  }
  const json::value* owner = Find(*rec, {"owner"});
  ASSERT_TRUE(owner != nullptr && owner->is_bool());
  EXPECT_TRUE(owner->as_bool());
  EXPECT_TRUE(Find(*rec, {"token_verifier"})->as_bool());
  EXPECT_EQ(FindString(*rec, {"token"}), FindString(*created, {"headers", "X-Sandboxd-Token"}));
  EXPECT_GE(FindString(*rec, {"token"}).size(), 43u);
  EXPECT_EQ(r.out.find("router-secret"), std::string::npos) << r.out;

  // Human-readable: the same facts, never a token.
  r = Run({kDeepbox, "sandbox", "inspect", id}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Template:  deepbox-sandbox-template"));
  EXPECT_THAT(r.out, HasSubstr("Image:     python:3.12-slim"));
  EXPECT_THAT(r.out, HasSubstr("team=ml"));
  EXPECT_THAT(r.out, HasSubstr("Owner:     you"));
  EXPECT_EQ(r.out.find(FindString(*created, {"headers", "X-Sandboxd-Token"})), std::string::npos);
  // A bare claim name with --provider k8s: a claim of the namespace.
  r = Run({kDeepbox, "sandbox", "inspect", "--provider", "k8s", "--json", claim}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(FindString(*ParseJsonObject(r.out), {"id"}), id);

  // Another user (another key) sees the claim, not its token.
  auto other = env;
  other["DEEPBOX_K8S_CLAIM_KEY_FILE"] = (dir_ / "other-key").string();
  r = Run({kDeepbox, "sandbox", "inspect", "--json", id}, other);
  ASSERT_EQ(r.code, 0) << r.err;
  rec = ParseJsonObject(r.out);
  ASSERT_TRUE(rec) << r.out;
  EXPECT_FALSE(Find(*rec, {"owner"})->as_bool());
  EXPECT_TRUE(Find(*rec, {"token"})->is_null());
  EXPECT_EQ(Find(*rec, {"headers", "X-Sandboxd-Token"}), nullptr) << r.out;
  EXPECT_EQ(r.out.find(FindString(*created, {"headers", "X-Sandboxd-Token"})), std::string::npos);
  r = Run({kDeepbox, "sandbox", "inspect", id}, other);
  EXPECT_THAT(r.out, HasSubstr("Owner:     another key"));

  // Errors: no such claim (3), a local id with --provider k8s (2), a bad id (2).
  r = Run({kDeepbox, "sandbox", "inspect", "default/no-such-claim"}, env);
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("no SandboxClaim no-such-claim in namespace default"));
  r = Run({kDeepbox, "sandbox", "inspect", "--json", "--provider", "k8s", "no-such-claim"}, env);
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_EQ(r.out, "");
  r = Run({kDeepbox, "sandbox", "inspect", "--provider", "k8s", "sb-0123456789ab"}, env);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("local sandbox's id"));
  r = Run({kDeepbox, "sandbox", "inspect", "--provider", "k8s", "Bad_Name"}, env);
  EXPECT_EQ(r.code, 2) << r.err;
  // A claim name without --provider k8s is looked up among local sandboxes,
  // and the message says how to ask Kubernetes.
  r = Run({kDeepbox, "sandbox", "inspect", claim}, env);
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("deepbox sandbox inspect --provider k8s " + claim));
  // Through a port-forward there is no lasting URL: url null, the router named.
  auto forwarded = env;
  forwarded.erase("AGENT_SANDBOX_ROUTER_URL");
  r = Run({kDeepbox, "sandbox", "inspect", "--json", id}, forwarded);
  ASSERT_EQ(r.code, 0) << r.err;
  rec = ParseJsonObject(r.out);
  ASSERT_TRUE(rec) << r.out;
  EXPECT_TRUE(Find(*rec, {"url"})->is_null()) << r.out;
  EXPECT_EQ(FindString(*rec, {"router", "service"}), "svc/sandbox-router-svc");
  EXPECT_EQ(FindString(*rec, {"headers", "X-Sandbox-ID"}), FindString(*created, {"sandbox"}));

  r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", id}, env);
  EXPECT_EQ(r.code, 0) << r.err;
  r = Run({kDeepbox, "sandbox", "inspect", id}, env);
  EXPECT_EQ(r.code, 3) << r.err;
}

// A claim whose object the API server fills oddly (another client's, or a
// hostile server's): inspect shows what it can and does not crash.
TEST_F(K8sTest, SandboxInspectOfAnOddClaim) {
  auto odd = ParseJsonObject(
      R"({"apiVersion":"extensions.agents.x-k8s.io/v1beta1","kind":"SandboxClaim",
          "metadata":{"name":"odd","labels":{"a":"b\u001b[31m","n":7}},
          "spec":{"warmPoolRef":{"name":["x"]},"lifecycle":{"shutdownTime":"not-a-time"},
                  "additionalPodMetadata":{"annotations":{"deepbox.dev/sandboxd-token-sha256":5}}},
          "status":{"conditions":"Ready","sandbox":{"name":"../x","podIPs":[1,"10.0.0.9",null]}}})");
  ASSERT_TRUE(odd);
  ASSERT_TRUE(
      server_->store().Create({"extensions.agents.x-k8s.io", "sandboxclaims", "default"}, *odd));
  auto env = K8sEnv();
  auto r = Run({kDeepbox, "sandbox", "inspect", "--json", "default/odd"}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  auto rec = ParseJsonObject(r.out);
  ASSERT_TRUE(rec) << r.out;
  EXPECT_EQ(FindString(*rec, {"state"}), "NotReady");
  EXPECT_EQ(FindString(*rec, {"sandbox"}), "");  // not an object name: not used
  EXPECT_TRUE(Find(*rec, {"url"})->is_null() ||
              FindString(*rec, {"headers", "X-Sandbox-ID"}) == "");
  EXPECT_FALSE(Find(*rec, {"owner"})->as_bool());
  EXPECT_FALSE(Find(*rec, {"token_verifier"})->as_bool());  // 5 is no verifier
  r = Run({kDeepbox, "sandbox", "inspect", "default/odd"}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_THAT(r.out, HasSubstr("no sandbox yet"));
}

// Issue 24 item 4: --image on Kubernetes selects the SandboxTemplate whose
// first container runs it, and claims from a warm pool of that template; no
// template for the image is a failed create that names the templates there.
TEST_F(K8sTest, ImageSelectsTheTemplateThatRunsIt) {
  json::object tmpl = k8s::testing::MakeTemplate("node-tmpl");
  json::object* container = nullptr;
  {
    auto& containers = tmpl.at("spec")
                           .as_object()
                           .at("podTemplate")
                           .as_object()
                           .at("spec")
                           .as_object()
                           .at("containers");
    container = &containers.as_array().at(0).as_object();
  }
  (*container)["image"] = "docker.io/library/node:22";
  ASSERT_TRUE(
      server_->store().Create({"extensions.agents.x-k8s.io", "sandboxtemplates", "default"}, tmpl));
  ASSERT_TRUE(server_->store().Create({"extensions.agents.x-k8s.io", "sandboxwarmpools", "default"},
                                      k8s::testing::MakeWarmPool("node-pool", "node-tmpl", 1)));
  // Templates of odd shapes (another client's, a hostile server's) are listed
  // as running no image, and do not stop the choice.
  for (const char* odd :
       {R"({"apiVersion":"extensions.agents.x-k8s.io/v1beta1","kind":"SandboxTemplate",
            "metadata":{"name":"odd-a"},"spec":{"podTemplate":{"spec":{"containers":{"image":1}}}}})",
        R"({"apiVersion":"extensions.agents.x-k8s.io/v1beta1","kind":"SandboxTemplate",
            "metadata":{"name":"odd-b"},"spec":[null,"\u001b[2J"]})"}) {
    auto o = ParseJsonObject(odd);
    ASSERT_TRUE(o) << odd;
    ASSERT_TRUE(
        server_->store().Create({"extensions.agents.x-k8s.io", "sandboxtemplates", "default"}, *o));
  }
  auto env = K8sEnv();
  auto r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--image", "node:22", "--json"},
               env);
  ASSERT_EQ(r.code, 0) << r.err;
  auto rec = ParseJsonObject(r.out);
  ASSERT_TRUE(rec) << r.out;
  std::string claim = FindString(*rec, {"claim"});
  EXPECT_EQ(FindString(*rec, {"warm_pool"}), "node-pool");
  auto stored =
      server_->store().Get({"extensions.agents.x-k8s.io", "sandboxclaims", "default"}, claim);
  ASSERT_TRUE(stored);
  EXPECT_EQ(FindString(*stored, {"spec", "warmPoolRef", "name"}), "node-pool");
  r = Run({kDeepbox, "sandbox", "inspect", "--json", FindString(*rec, {"id"})}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(FindString(*ParseJsonObject(r.out), {"template"}), "node-tmpl");
  EXPECT_EQ(FindString(*ParseJsonObject(r.out), {"image"}), "docker.io/library/node:22");
  // The default template's image, written differently, finds the default pool.
  r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--image",
           "docker.io/library/python:3.12-slim", "--json"},
          env);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(FindString(*ParseJsonObject(r.out), {"warm_pool"}), "deepagents-warmpool");
  // --template picks the pool too.
  r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--template", "node-tmpl", "--json"},
          env);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(FindString(*ParseJsonObject(r.out), {"warm_pool"}), "node-pool");
  auto before = SortedClaims("default");
  ASSERT_EQ(before.size(), 3u);

  // No template runs it: 1, naming the templates and their images; no claim.
  r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--image", "golang:1.23"}, env);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("no SandboxTemplate in namespace default runs it"));
  EXPECT_THAT(r.err, HasSubstr("deepbox-sandbox-template (python:3.12-slim)"));
  EXPECT_THAT(r.err, HasSubstr("node-tmpl (docker.io/library/node:22)"));
  EXPECT_THAT(r.err, HasSubstr("odd-a (no image), odd-b (no image)"));
  // A template that does not run the image asked for: a usage error.
  r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--template",
           "deepbox-sandbox-template", "--image", "node:22"},
          env);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("SandboxTemplate deepbox-sandbox-template runs python:3.12-slim"));
  r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--image", "Not An Image"}, env);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(SortedClaims("default"), before);

  // `deepbox run --sandbox k8s --image` claims from the same pool.
  ASSERT_TRUE(cluster_->WaitPoolReady());
  r = Run({kDeepbox, "run", "--sandbox", "k8s", "--image", "node:22", "--keep-sandbox", "--json",
           "--model", "replay:" + RelativeFibReplay(), kFibTask},
          env);
  ASSERT_EQ(r.code, 0) << r.err;
  auto events = JsonLines(r.out);
  ASSERT_FALSE(events.empty());
  std::string run_id(events.back().at("sandbox_id").as_string());
  r = Run({kDeepbox, "sandbox", "inspect", "--json", run_id}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(FindString(*ParseJsonObject(r.out), {"warm_pool"}), "node-pool");
  r = Run({kDeepbox, "run", "--sandbox", "k8s", "--image", "golang:1.23", "--model",
           "replay:" + RelativeFibReplay(), kFibTask},
          env);
  EXPECT_EQ(r.code, run::kRunExitSandbox) << r.err;
  EXPECT_THAT(r.err, HasSubstr("node-tmpl (docker.io/library/node:22)"));
}

// Each pod its own daemon (and files), so that a restore or fork that
// copied nothing, or shares its source's files, shows.
class K8sSnapshotTest : public K8sTest {
 protected:
  void Configure(k8s::testing::FakeClusterOptions& options) override { options.pod_daemons = 10; }
};

// `deepbox sandbox snapshot | create --from-snapshot | fork` on NAMESPACE/
// CLAIM ids: the files go through the snapshot directory (beside the state
// dir here), listed with their provider; a restore without --provider k8s
// says how.
TEST_F(K8sSnapshotTest, SnapshotRestoreAndForkFromTheShell) {
  auto env = K8sEnv();
  auto r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--ttl", "600"}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string id = r.out.substr(0, r.out.find('\n'));
  ASSERT_TRUE(k8s::IsK8sSandboxId(id)) << r.out;
  r = Run({kDeepbox, "sandbox", "exec", id, "--", "sh", "-c", "mkdir d && echo kept > d/f.txt"},
          env);
  ASSERT_EQ(r.code, 0) << r.err;

  r = Run({kDeepbox, "sandbox", "snapshot", id, "--name", "k-snap", "--json"}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("Kubernetes cannot freeze a pod"));
  auto rec = ParseJsonObject(r.out);
  ASSERT_TRUE(rec) << r.out;
  EXPECT_EQ(FindString(*rec, {"provider"}), "k8s");
  EXPECT_EQ(FindString(*rec, {"source_id"}), id);
  EXPECT_TRUE(std::filesystem::exists(dir_ / "state" / "snapshots" / "k-snap" / "workspace.tar"));
  r = Run({kDeepbox, "sandbox", "snapshot", "ls"}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("PROVIDER"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("k-snap +k8s +" + id));
  EXPECT_THAT(r.out, HasSubstr("1 snapshot(s)"));

  r = Run({kDeepbox, "sandbox", "create", "--from-snapshot", "k-snap"}, env);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("restore it with --provider k8s"));
  r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--from-snapshot", "k-snap", "--ttl",
           "600", "--json"},
          env);
  ASSERT_EQ(r.code, 0) << r.err;
  rec = ParseJsonObject(r.out);
  ASSERT_TRUE(rec) << r.out;
  const std::string restored = FindString(*rec, {"id"});
  EXPECT_NE(restored, id);
  EXPECT_EQ(FindString(*rec, {"labels", "deepbox.dev/snapshot"}), "k-snap");
  r = Run({kDeepbox, "sandbox", "exec", restored, "--", "cat", "d/f.txt"}, env);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "kept\n");
  r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--from-snapshot", "no-such"}, env);
  EXPECT_EQ(r.code, 3) << r.err;  // as locally: no such snapshot

  r = Run({kDeepbox, "sandbox", "fork", id, "-n", "2", "--json", "--label", "fork=yes"}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  auto ids = ParseJson(r.out);
  ASSERT_TRUE(ids && ids->is_array() && ids->as_array().size() == 2u) << r.out;
  for (const auto& f : ids->as_array()) {
    r = Run({kDeepbox, "sandbox", "exec", std::string(f.as_string()), "--", "cat", "d/f.txt"}, env);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, "kept\n");
  }
  r = Run({kDeepbox, "sandbox", "fork", id, "-n", "0"}, env);
  EXPECT_EQ(r.code, 2) << r.err;
  r = Run({kDeepbox, "sandbox", "snapshot", "--provider", "k8s", "sb-0123456789ab"}, env);
  EXPECT_EQ(r.code, 2) << r.err;

  r = Run({kDeepbox, "sandbox", "snapshot", "rm", "k-snap"}, env);
  EXPECT_EQ(r.code, 0) << r.err;
  r = Run({kDeepbox, "sandbox", "snapshot", "ls", "--json"}, env);
  EXPECT_EQ(r.out, "[]\n");
  EXPECT_EQ(SortedClaims("default").size(), 4u);  // source, restore, two forks
  r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", "--selector",
           "agents.x-k8s.io/created-by=deepbox"},
          env);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(ClaimNames(server_->store(), "default"), IsEmpty());
}

// `deepbox mcp --provider k8s`, driven by the production MCP client over
// stdio as Claude Code would: a claim created elsewhere (`sandbox create
// --provider k8s`, kept) is invisible to MCP clients until the operator
// attaches it by label; then it is used by its NAMESPACE/CLAIM id, which goes
// through K8sSandboxProvider::Connect (Ready check, router headers), and it
// cannot be deleted; a claim that does not exist is a tool error naming it.
TEST_F(K8sTest, McpToolsReachAKeptClaimByItsId) {
  auto env = K8sEnv();
  auto r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--ttl", "600", "--json", "-l",
                "who=cli"},
               env);
  ASSERT_EQ(r.code, 0) << r.err;
  auto rec = ParseJsonObject(r.out);
  ASSERT_TRUE(rec) << r.out;
  const std::string id = FindString(*rec, {"id"});
  const std::string claim = FindString(*rec, {"claim"});
  ASSERT_EQ(id, "default/" + claim);

  env["DEEPBOX_STATE_DIR"] = (dir_ / "state").string();
  env["XDG_STATE_HOME"] = (dir_ / "xdg").string();
  {
    // Not attached: invisible.
    auto channel = mcp::SpawnProcessChannel({kDeepbox, "mcp", "--provider", "k8s"}, env, dir_);
    ASSERT_TRUE(channel) << channel.error().ToString();
    auto client = mcp::McpClient::ConnectStdio(std::move(*channel));
    ASSERT_TRUE(client) << client.error().ToString();
    auto ran = (*client)->CallTool("execute", {{"command", "true"}, {"sandbox_id", id}});
    ASSERT_TRUE(ran) << ran.error().ToString();
    EXPECT_TRUE(ran->is_error) << ran->text;
    EXPECT_THAT(ran->text, HasSubstr("that this client can use"));
  }
  {
    auto channel = mcp::SpawnProcessChannel(
        {kDeepbox, "mcp", "--provider", "k8s", "--attach-selector", "who=cli"}, env, dir_);
    ASSERT_TRUE(channel) << channel.error().ToString();
    auto client = mcp::McpClient::ConnectStdio(std::move(*channel));
    ASSERT_TRUE(client) << client.error().ToString();
    auto ran = (*client)->CallTool(
        "execute", {{"command", "echo via-mcp > mcp.txt && cat mcp.txt"}, {"sandbox_id", id}});
    ASSERT_TRUE(ran) << ran.error().ToString();
    EXPECT_FALSE(ran->is_error) << ran->text;
    EXPECT_THAT(ran->text, HasSubstr("via-mcp"));
    EXPECT_EQ(ReadFile(daemon_->root() + "/mcp.txt"), "via-mcp\n");
    auto read = (*client)->CallTool("read_file", {{"file_path", "mcp.txt"}, {"sandbox_id", id}});
    ASSERT_TRUE(read) << read.error().ToString();
    EXPECT_THAT(read->text, HasSubstr("via-mcp"));

    auto missing = (*client)->CallTool(
        "execute", {{"command", "true"}, {"sandbox_id", "default/no-such-claim"}});
    ASSERT_TRUE(missing) << missing.error().ToString();
    EXPECT_TRUE(missing->is_error) << missing->text;
    EXPECT_THAT(missing->text, HasSubstr("no-such-claim"));
    auto del = (*client)->CallTool("sandbox_delete", {{"sandbox_id", id}});
    ASSERT_TRUE(del) << del.error().ToString();
    EXPECT_TRUE(del->is_error) << del->text;
    EXPECT_THAT(del->text, HasSubstr("cannot be deleted here"));
  }  // the client closes the server's stdin: it exits
  // The kept claim is still there: the server only deletes what it created.
  EXPECT_EQ(SortedClaims("default"), std::vector<std::string>{claim});
  r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", id}, env);
  EXPECT_EQ(r.code, 0) << r.err;
}

// Issue 12 item 5: the run keeps the claim's watch open and stops at once
// (exit 3) when the claim is deleted from outside, not when the daemon stops
// answering (the fake "pod" here never stops answering).
TEST_F(K8sTest, AClaimDeletedFromOutsideEndsTheRunAtOnce) {
  WriteFile(
      dir_ / "chatty.jsonl",
      R"({"deepbox_replay": 1, "scripted": true, "model": "anthropic:claude-sonnet-4-6"})"
      "\n"
      R"({"response": {"tool_calls": [{"id": "t1", "name": "execute", "input": {"command": "while true; do echo tick; sleep 0.2; done"}}]}})"
      "\n");
  Process p({kDeepbox, "run", "--sandbox", "k8s", "--json", "--model",
             "replay:" + (dir_ / "chatty.jsonl").string(), kFibTask},
            Env(K8sEnv()), dir_);
  ASSERT_TRUE(Eventually([&] {
    return p.out().find(R"("type":"tool_output")") != std::string::npos;
  })) << p.out()
      << p.err();
  auto claims = ClaimNames(server_->store(), "default");
  ASSERT_EQ(claims.size(), 1u);
  ASSERT_TRUE(server_->store().Delete({"extensions.agents.x-k8s.io", "sandboxclaims", "default"},
                                      claims[0]));
  auto code = p.WaitAtMost(120s);
  ASSERT_TRUE(code.has_value()) << p.err();
  EXPECT_EQ(*code, run::kRunExitSandbox) << p.err();
  EXPECT_THAT(p.err(), HasSubstr("SandboxClaim default/" + claims[0] + " was deleted"));
  EXPECT_THAT(p.err(), HasSubstr("the sandbox went away during the run"));
}

// Issue 12 items 3 and 4: a claim that worked but whose router refuses us is
// not "cannot claim a sandbox", and the 401 is the router's, with what to check.
TEST_F(K8sTest, RouterErrorsAfterAGoodClaimSaySo) {
  auto env = K8sEnv();
  env["AGENT_SANDBOX_ROUTER_TOKEN"] = "wrong-token";
  auto r = Run(
      {kDeepbox, "run", "--sandbox", "k8s", "--model", "replay:" + RelativeFibReplay(), kFibTask},
      env);
  EXPECT_EQ(r.code, run::kRunExitSandbox) << r.err;
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("cannot claim a sandbox")));
  EXPECT_THAT(r.err, HasSubstr("claimed sandbox default/sandbox-claim-"));
  EXPECT_THAT(r.err, HasSubstr(fmt::format("the sandbox router at http://127.0.0.1:{} answered "
                                           "HTTP 401: Invalid token.",
                                           router_->port())));
  EXPECT_THAT(r.err, HasSubstr("AGENT_SANDBOX_ROUTER_TOKEN"));
  EXPECT_THAT(ClaimNames(server_->store(), "default"), IsEmpty());
  // The example says the same.
  r = Run({kExample, "--sandbox", "k8s", "--model", "replay:" + RelativeFibReplay()}, env);
  EXPECT_EQ(r.code, run::kRunExitSandbox) << r.err;
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("cannot claim a sandbox")));
  EXPECT_THAT(r.err, HasSubstr("answered HTTP 401"));
}

// Issue 12 item 6: SIGTERM during a tool call ends the example without an
// empty "[tool] execute failed: " line.
TEST_F(K8sTest, ExampleOnSigtermSaysTheToolWasInterrupted) {
  WriteFile(
      dir_ / "slow.jsonl",
      R"({"deepbox_replay": 1, "scripted": true, "model": "anthropic:claude-sonnet-4-6"})"
      "\n"
      R"({"response": {"tool_calls": [{"id": "t1", "name": "execute", "input": {"command": "echo started; sleep 600"}}]}})"
      "\n");
  Process p({kExample, "--sandbox", "k8s", "--model", "replay:" + (dir_ / "slow.jsonl").string()},
            Env(K8sEnv()), dir_);
  ASSERT_TRUE(Eventually([&] { return p.err().find("[tool] execute") != std::string::npos; }))
      << p.err();
  kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.Wait(), run::kRunExitInterrupted) << p.err();
  EXPECT_THAT(p.err(), ::testing::Not(HasSubstr("failed: \n")));
  EXPECT_THAT(p.err(), HasSubstr("[tool] execute stopped: interrupted"));
  EXPECT_THAT(ClaimNames(server_->store(), "default"), IsEmpty());
}

// Issue 21 M6: `deepbox doctor --provider k8s` says whether a NetworkPolicy
// isolates the sandbox pods; `sandbox create` warns when none does.
TEST_F(K8sTest, DoctorAndCreateWarnWithoutANetworkPolicy) {
  auto env = K8sEnv();
  auto flag = [](const json::object& report, const char* key) {
    const json::value* v = Find(report, {"k8s_network_policy", key});
    return v != nullptr && v->is_bool() && v->as_bool();
  };
  auto r = Run({kDeepbox, "doctor", "--provider", "k8s", "--json"}, env);
  auto report = ParseJsonObject(r.out);
  ASSERT_TRUE(report) << r.out << r.err;
  EXPECT_TRUE(flag(*report, "checked")) << r.out;
  EXPECT_FALSE(flag(*report, "isolated")) << r.out;
  EXPECT_THAT(FindString(*report, {"k8s_network_policy", "detail"}),
              HasSubstr("no NetworkPolicy in namespace default selects the sandbox pods"));
  r = Run({kDeepbox, "doctor", "--provider", "k8s"}, env);
  EXPECT_THAT(r.out, HasSubstr("k8s NetworkPolicy: WARNING - no NetworkPolicy"));
  r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--ttl", "600"}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("deepbox: warning: no NetworkPolicy in namespace default"));
  ASSERT_TRUE(cluster_->WaitPoolReady());
  // The controller's managed policy (as upstream names and selects it).
  auto np = ParseJsonObject(fmt::format(
      R"({{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{{"name":"deepbox-sandbox-template-network-policy"}},"spec":{{"podSelector":{{"matchLabels":{{"agents.x-k8s.io/sandbox-template-ref-hash":"{}"}}}},"policyTypes":["Ingress","Egress"]}}}})",
      k8s::NameHash("deepbox-sandbox-template")));
  ASSERT_TRUE(np);
  ASSERT_TRUE(server_->store().Create({"networking.k8s.io", "networkpolicies", "default"}, *np));
  r = Run({kDeepbox, "doctor", "--provider", "k8s", "--json"}, env);
  report = ParseJsonObject(r.out);
  ASSERT_TRUE(report) << r.out;
  EXPECT_TRUE(flag(*report, "isolated")) << r.out;
  r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--ttl", "600"}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("NetworkPolicy")));
}

// Issue 21 M6 with the daemon configured as deploy/k8s's template does: a
// claim's daemon takes only its owner's token, which every deepbox process
// of the user derives (create, then exec and run in other processes), and
// which no one else has.
class K8sOwnerTest : public K8sTest {
 protected:
  void Configure(k8s::testing::FakeClusterOptions& o) override {
    o.owner_tokens = true;
    o.verifier_delay = std::chrono::milliseconds(200);
  }
};

TEST_F(K8sOwnerTest, OnlyTheOwnerDrivesAClaimedSandbox) {
  auto env = K8sEnv();
  auto r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--ttl", "600", "--json"}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  auto rec = ParseJsonObject(r.out);
  ASSERT_TRUE(rec) << r.out;
  std::string id = FindString(*rec, {"id"});
  // What python/deepbox's Sandbox.claim sends: the claim's token among the headers.
  std::string token = FindString(*rec, {"headers", "X-Sandboxd-Token"});
  EXPECT_GE(token.size(), 43u) << r.out;
  auto key = fs::path(dir_ / "xdg" / "deepbox" / "k8s-claim-key");
  ASSERT_TRUE(fs::exists(key));
  EXPECT_EQ(fs::status(key).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);

  r = Run({kDeepbox, "sandbox", "exec", id, "--", "echo", "owner"}, env);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "owner\n");
  // Another user (another key): refused by the daemon, nothing runs.
  auto other = env;
  other["DEEPBOX_K8S_CLAIM_KEY_FILE"] = (dir_ / "other-key").string();
  r = Run({kDeepbox, "sandbox", "exec", id, "--", "touch", "pwned"}, other);
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("token"));
  EXPECT_FALSE(fs::exists(daemon_->root() + "/pwned"));
  r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", id}, env);
  EXPECT_EQ(r.code, 0) << r.err;

  // deepbox run claims, waits for the verifier, and drives its sandbox.
  ASSERT_TRUE(cluster_->WaitPoolReady());
  r = Run({kDeepbox, "run", "--sandbox", "k8s", "--json", "--model",
           "replay:" + RelativeFibReplay(), kFibTask},
          env);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("0, 1, 1, 2, 3, 5, 8, 13, 21, 34"));
}

}  // namespace
}  // namespace deepbox::e2e
