// deepbox against a REAL Kubernetes API server (label k8s-real; see
// README.md here): kube-apiserver, etcd and kube-controller-manager v1.36
// started by scripts/k8s-real-cluster.sh, our test controller as a real API
// client, pods run as deepbox local sandboxes on loopback addresses. Every
// test works in a namespace of its own with the manifests of deploy/k8s/.
// Without DEEPBOX_K8S_REAL_DIR (the cluster's directory) every test skips.
#include <fmt/format.h>
#include <glob.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run_exit_codes.h"
#include "common/random.h"
#include "e2e_util.h"
#include "k8s/operating_mode.h"
#include "k8s/util.h"
#include "local/testing/test_pki.h"
#include "local/testing/test_world.h"
#include "local/testing/tls_echo_server.h"
#include "net/http_client.h"
#include "net/token_digest.h"

namespace deepbox::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kTask = "Write fib.py that prints the first 10 Fibonacci numbers and run it";

std::map<std::string, std::string> ReadEnvFile(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

class RealClusterTest : public E2eTest {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("DEEPBOX_K8S_REAL_DIR");
    if (dir == nullptr || *dir == '\0') {
      GTEST_SKIP() << "no real API server: run scripts/k8s-real-test.sh (DEEPBOX_K8S_REAL_DIR "
                      "unset)";
    }
    E2eTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    cluster_ = ReadEnvFile(std::string(dir) + "/env");
    ASSERT_FALSE(cluster_["KUBECONFIG"].empty()) << dir;
    kubectl_ = cluster_["DEEPBOX_K8S_REAL_BIN"] + "/kubectl";
    // A namespace of our own, with the deployable manifests in it.
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ns_ = "t-" + k8s::NameHash(test + std::to_string(::getpid()));
    auto r = Kubectl({"create", "namespace", ns_});
    ASSERT_EQ(r.code, 0) << r.err;
    ApplyManifests(ns_);
  }
  void TearDown() override {
    if (!ns_.empty()) (void)Kubectl({"delete", "namespace", ns_, "--wait=false"});
    E2eTest::TearDown();
  }

  // deploy/k8s/*.yaml with their namespace replaced.
  std::string Manifests(const std::string& ns) {
    std::string text = ReadFile(kSourceDir + "/deploy/k8s/sandbox-template.yaml") + "\n---\n" +
                       ReadFile(kSourceDir + "/deploy/k8s/warmpool.yaml");
    for (size_t at; (at = text.find("namespace: default")) != std::string::npos;) {
      text.replace(at, 18, "namespace: " + ns);
    }
    return text;
  }
  void ApplyManifests(const std::string& ns) {
    auto r = Kubectl({"apply", "-f", "-"}, Manifests(ns));
    ASSERT_EQ(r.code, 0) << r.err;
    ASSERT_TRUE(Eventually([&] { return PoolReady(ns) >= 1; })) << ClusterState(ns);
  }

  Outcome Kubectl(std::vector<std::string> args, const std::string& stdin_data = "",
                  const std::string& kubeconfig = "") {
    args.insert(args.begin(), {kubectl_, "--kubeconfig",
                               kubeconfig.empty() ? cluster_["KUBECONFIG"] : kubeconfig});
    return Run(args, {}, stdin_data);
  }
  json::object KubectlJson(std::vector<std::string> args) {
    args.insert(args.end(), {"-o", "json"});
    auto r = Kubectl(args);
    EXPECT_EQ(r.code, 0) << r.err;
    auto o = ParseJsonObject(r.out);
    return o ? *o : json::object();
  }
  int64_t PoolReady(const std::string& ns) {
    auto r = Kubectl({"get", "sandboxwarmpool", "deepagents-warmpool", "-n", ns, "-o",
                      "jsonpath={.status.readyReplicas}"});
    return r.code == 0 && !r.out.empty() ? std::atoll(r.out.c_str()) : 0;
  }
  std::vector<std::string> Names(const std::string& kind, const std::string& ns,
                                 const std::string& selector = "") {
    std::vector<std::string> args{"get", kind, "-n", ns, "-o", "name"};
    if (!selector.empty()) args.insert(args.end(), {"-l", selector});
    auto r = Kubectl(args);
    std::vector<std::string> out;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) out.push_back(line.substr(line.find('/') + 1));
    }
    return out;
  }
  std::string ClusterState(const std::string& ns) {
    return Kubectl({"get", "sandboxwarmpools,sandboxclaims,sandboxes,pods", "-n", ns, "-o", "wide"})
               .out +
           ReadFile(std::string(std::getenv("DEEPBOX_K8S_REAL_DIR")) + "/agent.log");
  }
  // The environment deepbox runs with against this cluster.
  std::map<std::string, std::string> DeepboxEnv(const std::string& ns) {
    return {{"KUBECONFIG", cluster_["KUBECONFIG"]},
            {"AGENT_SANDBOX_ROUTER_URL", cluster_["AGENT_SANDBOX_ROUTER_URL"]},
            {"AGENT_SANDBOX_NAMESPACE", ns}};
  }
  std::string ChattyReplay() {
    std::string file = (dir_ / "chatty.jsonl").string();
    WriteFile(
        file,
        R"({"deepbox_replay": 1, "scripted": true, "model": "anthropic:claude-sonnet-4-6"})"
        "\n"
        R"({"response": {"tool_calls": [{"id": "t1", "name": "execute", "input": {"command": "while true; do echo tick; sleep 0.2; done"}}]}})"
        "\n");
    return file;
  }

  std::map<std::string, std::string> cluster_;
  std::string kubectl_;
  std::string ns_;
};

TEST_F(RealClusterTest, ManifestsPassStrictServerValidationAndAreStoredAsWritten) {
  std::string other = ns_ + "-m";
  ASSERT_EQ(Kubectl({"create", "namespace", other}).code, 0);
  auto dry =
      Kubectl({"apply", "--dry-run=server", "--validate=strict", "-f", "-"}, Manifests(other));
  EXPECT_EQ(dry.code, 0) << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("(server dry run)"));
  EXPECT_TRUE(Names("sandboxtemplates", other).empty());
  // A misspelt field is refused by the real schema.
  std::string typo = Manifests(other);
  typo.replace(typo.find("replicas:"), 9, "replicsa:");
  auto bad = Kubectl({"apply", "--dry-run=server", "--validate=strict", "-f", "-"}, typo);
  EXPECT_NE(bad.code, 0);
  EXPECT_THAT(bad.err, HasSubstr("replicsa"));
  // For real (SetUp applied them in ns_): the pool's fields as written.
  auto pool = KubectlJson({"get", "sandboxwarmpool", "deepagents-warmpool", "-n", ns_});
  EXPECT_EQ(FindString(pool, {"spec", "sandboxTemplateRef", "name"}), "deepbox-sandbox-template");
  EXPECT_EQ(FindString(pool, {"spec", "updateStrategy", "type"}), "Recreate");
  (void)Kubectl({"delete", "namespace", other, "--wait=false"});
}

TEST_F(RealClusterTest, CreateExecCpRmAdoptsFromTheWarmPoolAndGarbageCollects) {
  auto env = DeepboxEnv(ns_);
  auto r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--label", "team=ml", "--ttl",
                "600", "--json"},
               env);
  ASSERT_EQ(r.code, 0) << r.err << ClusterState(ns_);
  auto rec = ParseJsonObject(r.out);
  ASSERT_TRUE(rec) << r.out;
  std::string id = FindString(*rec, {"id"});
  std::string claim = FindString(*rec, {"claim"});
  std::string sandbox = FindString(*rec, {"sandbox"});
  EXPECT_EQ(id, ns_ + "/" + claim);
  EXPECT_TRUE(sandbox.starts_with("deepagents-warmpool-")) << sandbox;  // adopted
  EXPECT_EQ(FindString(*rec, {"url"}), cluster_["AGENT_SANDBOX_ROUTER_URL"]);
  EXPECT_EQ(FindString(*rec, {"headers", "X-Sandbox-ID"}), sandbox);
  EXPECT_TRUE(FindString(*rec, {"headers", "X-Sandbox-Pod-IP"}).starts_with("127.0.0."));

  // The claim as the API server stored it.
  auto stored = KubectlJson({"get", "sandboxclaim", claim, "-n", ns_});
  EXPECT_EQ(FindString(stored, {"apiVersion"}), "extensions.agents.x-k8s.io/v1beta1");
  EXPECT_EQ(FindString(stored, {"metadata", "labels", "team"}), "ml");
  EXPECT_EQ(FindString(stored, {"metadata", "labels", "agents.x-k8s.io/created-by"}), "deepbox");
  EXPECT_FALSE(
      FindString(stored, {"metadata", "annotations", "agents.x-k8s.io/client-first-requested-at"})
          .empty());
  EXPECT_EQ(FindString(stored, {"spec", "warmPoolRef", "name"}), "deepagents-warmpool");
  EXPECT_EQ(FindString(stored, {"spec", "lifecycle", "shutdownPolicy"}), "Delete");
  EXPECT_EQ(FindString(stored, {"status", "sandbox", "name"}), sandbox);
  // The pool refills: a new warm member, Ready.
  EXPECT_TRUE(Eventually([&] {
    auto sbs = Names("sandboxes", ns_);
    return sbs.size() == 2 && PoolReady(ns_) == 1;
  })) << ClusterState(ns_);

  // exec and cp on NAMESPACE/CLAIM, as on a local sandbox.
  r = Run({kDeepbox, "sandbox", "exec", id, "--", "sh", "-c", "echo hi; exit 7"}, env);
  EXPECT_EQ(r.code, 7) << r.err;
  EXPECT_EQ(r.out, "hi\n");
  WriteFile(dir_ / "in.txt", "payload\n");
  r = Run({kDeepbox, "sandbox", "cp", (dir_ / "in.txt").string(), id + ":copied.txt"}, env);
  EXPECT_EQ(r.code, 0) << r.err;
  r = Run({kDeepbox, "sandbox", "cp", id + ":copied.txt", (dir_ / "out.txt").string()}, env);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ReadFile(dir_ / "out.txt"), "payload\n");
  r = Run({kDeepbox, "sandbox", "exec", ns_ + "/sandbox-claim-00000000", "--", "true"}, env);
  EXPECT_EQ(r.code, 3) << r.err;

  // rm: the claim goes, and the garbage collector takes its Sandbox and pod.
  r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", id}, env);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Eventually([&] {
    auto sbs = Names("sandboxes", ns_);
    auto pods = Names("pods", ns_);
    return std::find(sbs.begin(), sbs.end(), sandbox) == sbs.end() &&
           std::find(pods.begin(), pods.end(), sandbox) == pods.end();
  })) << ClusterState(ns_);
}

// Issue 21 M6 on the real API server: the claim's token verifier goes
// through its validation and storage, the controller puts it on the adopted
// (already running) warm pod, the node agent's downward API file shows it to
// the pod's daemon, started with the template's own arguments. A peer -- the
// router without the claim's token, or a connection straight to the pod IP
// -- gets 401 on everything but the health checks; the owner's token works;
// an unclaimed warm pod takes no token at all.
TEST_F(RealClusterTest, OnlyTheClaimsOwnerDrivesItsPod) {
  auto env = DeepboxEnv(ns_);
  auto r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--ttl", "600", "--json"}, env);
  ASSERT_EQ(r.code, 0) << r.err << ClusterState(ns_);
  auto rec = ParseJsonObject(r.out);
  ASSERT_TRUE(rec) << r.out;
  std::string id = FindString(*rec, {"id"});
  std::string claim = FindString(*rec, {"claim"});
  std::string sandbox = FindString(*rec, {"sandbox"});
  std::string pod_ip = FindString(*rec, {"headers", "X-Sandbox-Pod-IP"});
  std::string token = FindString(*rec, {"headers", "X-Sandboxd-Token"});
  ASSERT_GE(token.size(), 43u) << r.out;
  EXPECT_TRUE(sandbox.starts_with("deepagents-warmpool-")) << sandbox;  // adopted, not restarted
  const std::string verifier = net::TokenVerifier(token);
  const std::string annotation = "deepbox.dev/sandboxd-token-sha256";
  // Stored as written, copied onto the pod; the token itself nowhere.
  auto stored = KubectlJson({"get", "sandboxclaim", claim, "-n", ns_});
  EXPECT_EQ(FindString(stored, {"spec", "additionalPodMetadata", "annotations", annotation}),
            verifier);
  EXPECT_TRUE(Eventually([&] {
    return FindString(KubectlJson({"get", "pod", sandbox, "-n", ns_}),
                      {"metadata", "annotations", annotation}) == verifier;
  })) << ClusterState(ns_);
  auto all = Kubectl({"get", "sandboxclaims,sandboxes,pods", "-n", ns_, "-o", "json"});
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_NE(all.out.find(verifier), std::string::npos);
  EXPECT_EQ(all.out.find(token), std::string::npos);

  auto ask = [&](const std::string& base, const std::string& method, const std::string& target,
                 const std::string& daemon_token, bool router_headers) {
    auto http = net::HttpClient::Create(base);
    EXPECT_TRUE(http) << base;
    net::ClientRequest req;
    req.method = method;
    req.target = target;
    if (method == "POST")
      req.body = R"({"argv":["sh","-c","id; echo pwned > /workspace/planted"]})";
    if (router_headers) {
      req.headers.Set("X-Sandbox-ID", sandbox);
      req.headers.Set("X-Sandbox-Namespace", ns_);
      req.headers.Set("X-Sandbox-Port", "8888");
      req.headers.Set("X-Sandbox-Pod-IP", pod_ip);
    }
    if (!daemon_token.empty()) req.headers.Set("X-Sandboxd-Token", daemon_token);
    auto out = (*http)->Send(req);
    EXPECT_TRUE(out) << base << target << ": " << out.error().ToString();
    return out ? *out : net::Response{};
  };
  const std::string pod = fmt::format("http://{}:8888", pod_ip);
  const std::string router = cluster_["AGENT_SANDBOX_ROUTER_URL"];
  for (const auto& [base, via_router] : {std::pair{pod, false}, {router, true}}) {
    for (const char* target : {"/deepbox/v1/exec", "/execute", "/deepbox/v1/processes"}) {
      for (const std::string& guess : {std::string(), std::string("guess"), verifier}) {
        auto peer = ask(base, "POST", target, guess, via_router);
        EXPECT_EQ(peer.status, 401) << base << target << " token '" << guess << "': " << peer.body;
      }
    }
    EXPECT_EQ(ask(base, "GET", "/deepbox/v1/info", "", via_router).status, 401);
    EXPECT_EQ(ask(base, "GET", "/v1/files/", "", via_router).status, 401);
    // The probes' path stays open.
    EXPECT_EQ(ask(base, "GET", "/v1/health", "", via_router).status, 200) << base;
  }
  // Nothing the peers sent ran.
  r = Run(
      {kDeepbox, "sandbox", "exec", id, "--", "sh", "-c", "test ! -e /workspace/planted && id -u"},
      env);
  EXPECT_EQ(r.code, 0) << r.err << ClusterState(ns_);
  // The owner's token, straight to the pod and through the router.
  auto owner = ask(pod, "POST", "/deepbox/v1/exec", token, false);
  EXPECT_EQ(owner.status, 200) << owner.body;
  EXPECT_EQ(ask(router, "POST", "/deepbox/v1/exec", token, true).status, 200);
  // Another user's deepbox (another claim key) cannot drive it.
  auto other = env;
  other["DEEPBOX_K8S_CLAIM_KEY_FILE"] = (dir_ / "other-key").string();
  r = Run({kDeepbox, "sandbox", "exec", id, "--", "true"}, other);
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("token"));

  // The pool's refill is an unclaimed warm pod: it takes no token at all.
  std::string warm;
  ASSERT_TRUE(Eventually([&] {
    for (const auto& p : Names("pods", ns_)) {
      if (p != sandbox && p.starts_with("deepagents-warmpool-")) warm = p;
    }
    return !warm.empty() && PoolReady(ns_) >= 1;
  })) << ClusterState(ns_);
  auto warm_pod = KubectlJson({"get", "pod", warm, "-n", ns_});
  std::string warm_ip = FindString(warm_pod, {"status", "podIP"});
  ASSERT_FALSE(warm_ip.empty()) << ClusterState(ns_);
  auto unclaimed =
      ask(fmt::format("http://{}:8888", warm_ip), "POST", "/deepbox/v1/exec", token, false);
  EXPECT_EQ(unclaimed.status, 401) << unclaimed.body;
  EXPECT_THAT(unclaimed.body, HasSubstr("no owner yet"));
  EXPECT_EQ(ask(fmt::format("http://{}:8888", warm_ip), "GET", "/v1/health", "", false).status,
            200);
  r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", id}, env);
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(RealClusterTest, RunAndTheExampleEndToEnd) {
  auto env = DeepboxEnv(ns_);
  auto r = Run({kDeepbox, "run", "--sandbox", "k8s", "--label", "deepagents.example/claim=true",
                "--json", "--model", "replay:" + kFibReplay, kTask},
               env);
  EXPECT_EQ(r.code, 0) << r.err << ClusterState(ns_);
  auto events = JsonLines(r.out);
  ASSERT_FALSE(events.empty());
  EXPECT_THAT(std::string(events.back().at("final_text").as_string()),
              HasSubstr("0, 1, 1, 2, 3, 5, 8, 13, 21, 34"));
  EXPECT_TRUE(Eventually([&] { return Names("sandboxclaims", ns_).empty(); }));
  ASSERT_TRUE(Eventually([&] { return PoolReady(ns_) == 1; })) << ClusterState(ns_);
  r = Run({kExample, "--sandbox", "k8s", "--model", "replay:" + kFibReplay}, env);
  EXPECT_EQ(r.code, 0) << r.out << r.err << ClusterState(ns_);
  EXPECT_THAT(r.out, HasSubstr(kVerified));
  EXPECT_TRUE(Eventually([&] { return Names("sandboxclaims", ns_).empty(); }));
}

TEST_F(RealClusterTest, AClaimDeletedFromOutsideEndsTheRunAtOnce) {
  auto env = DeepboxEnv(ns_);
  Process p(
      {kDeepbox, "run", "--sandbox", "k8s", "--json", "--model", "replay:" + ChattyReplay(), kTask},
      Env(env), dir_);
  ASSERT_TRUE(Eventually([&] {
    return p.out().find(R"("type":"tool_output")") != std::string::npos;
  })) << p.out()
      << p.err() << ClusterState(ns_);
  auto claims = Names("sandboxclaims", ns_);
  ASSERT_EQ(claims.size(), 1u);
  ASSERT_EQ(Kubectl({"delete", "sandboxclaim", claims[0], "-n", ns_, "--wait=false"}).code, 0);
  auto code = p.WaitAtMost(120s);
  ASSERT_TRUE(code.has_value()) << p.err();
  EXPECT_EQ(*code, run::kRunExitSandbox) << p.err();
  EXPECT_THAT(p.err(), HasSubstr("was deleted"));
}

TEST_F(RealClusterTest, TtlExpiryDeletesTheClaim) {
  auto env = DeepboxEnv(ns_);
  auto r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--ttl", "3"}, env);
  ASSERT_EQ(r.code, 0) << r.err << ClusterState(ns_);
  std::string claim = r.out.substr(r.out.find('/') + 1);
  while (!claim.empty() && claim.back() == '\n') claim.pop_back();
  auto stored = KubectlJson({"get", "sandboxclaim", claim, "-n", ns_});
  auto shutdown = ParseRfc3339(FindString(stored, {"spec", "lifecycle", "shutdownTime"}));
  ASSERT_TRUE(shutdown);
  auto created = ParseRfc3339(FindString(stored, {"metadata", "creationTimestamp"}));
  ASSERT_TRUE(created);
  EXPECT_GE(*shutdown - *created, std::chrono::seconds(2));  // rounded up, never early
  EXPECT_TRUE(Eventually([&] { return Names("sandboxclaims", ns_).empty(); })) << ClusterState(ns_);
}

// agent-sandbox v1.x: a pod the real API server refuses for good (422: a
// container without an image) makes the controller report Ready=False
// InvalidConfiguration and a Warning Event SandboxPodCreateFailed with the
// server's message; the claim's wait ends on it at once (not after the ready
// timeout) and the claim is deleted.
TEST_F(RealClusterTest, ARefusedPodEndsTheClaimAtOnceWithTheServersMessage) {
  std::string text = fmt::format(R"(apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata: {{name: no-image, namespace: {0}}}
spec:
  podTemplate:
    spec:
      containers:
      - name: sandbox
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {{name: no-image-pool, namespace: {0}}}
spec:
  replicas: 0
  sandboxTemplateRef: {{name: no-image}}
)",
                                 ns_);
  auto applied = Kubectl({"apply", "--validate=strict", "-f", "-"}, text);
  ASSERT_EQ(applied.code, 0) << applied.err;
  auto env = DeepboxEnv(ns_);
  auto r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--warm-pool", "no-image-pool",
                "--ready-timeout", "600", "--ttl", "600"},
               env);
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_THAT(r.err, HasSubstr("image: Required value")) << ClusterState(ns_);
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("did not become ready within")));
  EXPECT_TRUE(Eventually([&] {
    for (const auto& claim : Names("sandboxclaims", ns_)) {
      if (claim.starts_with("sandbox-claim-")) {
        auto c = KubectlJson({"get", "sandboxclaim", claim, "-n", ns_});
        if (FindString(c, {"spec", "warmPoolRef", "name"}) == "no-image-pool") return false;
      }
    }
    return true;
  })) << ClusterState(ns_);
  auto events = Kubectl({"get", "events", "-n", ns_, "--field-selector",
                         "reason=SandboxPodCreateFailed", "-o", "jsonpath={.items[*].type}"});
  ASSERT_EQ(events.code, 0) << events.err;
  EXPECT_THAT(events.out, HasSubstr("Warning"));
}

// Issue 24 item 4 and issue 28 on the real API server: a second template
// (deploy/k8s's, renamed, on another image) with a warm pool of its own;
// `--image` finds it by its first container's image, `sandbox inspect`
// reads the claim, its pool and template back, the daemon token for the
// owner only.
TEST_F(RealClusterTest, ImageSelectsTheTemplateAndInspectShowsTheClaim) {
  std::string text = Manifests(ns_);
  auto replace_all = [&](const std::string& from, const std::string& to) {
    for (size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size()) {
      text.replace(at, from.size(), to);
    }
  };
  replace_all("name: deepbox-sandbox-template", "name: node-tmpl");
  replace_all("name: deepagents-warmpool", "name: node-pool");
  replace_all("image: python:3.12-slim-bookworm", "image: docker.io/library/node:22");
  auto applied = Kubectl({"apply", "--validate=strict", "-f", "-"}, text);
  ASSERT_EQ(applied.code, 0) << applied.err;
  auto env = DeepboxEnv(ns_);
  auto r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--image", "node:22", "--ttl",
                "600", "--json"},
               env);
  ASSERT_EQ(r.code, 0) << r.err << ClusterState(ns_);
  auto rec = ParseJsonObject(r.out);
  ASSERT_TRUE(rec) << r.out;
  std::string id = FindString(*rec, {"id"});
  EXPECT_EQ(FindString(*rec, {"warm_pool"}), "node-pool");
  auto claim = KubectlJson({"get", "sandboxclaim", FindString(*rec, {"claim"}), "-n", ns_});
  EXPECT_EQ(FindString(claim, {"spec", "warmPoolRef", "name"}), "node-pool");
  r = Run({kDeepbox, "sandbox", "exec", id, "--", "echo", "on node"}, env);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "on node\n");

  r = Run({kDeepbox, "sandbox", "inspect", "--json", id}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  auto seen = ParseJsonObject(r.out);
  ASSERT_TRUE(seen) << r.out;
  EXPECT_EQ(FindString(*seen, {"state"}), "Ready");
  EXPECT_EQ(FindString(*seen, {"warm_pool"}), "node-pool");
  EXPECT_EQ(FindString(*seen, {"template"}), "node-tmpl");
  EXPECT_EQ(FindString(*seen, {"image"}), "docker.io/library/node:22");
  EXPECT_EQ(FindString(*seen, {"url"}), FindString(*rec, {"url"}));
  EXPECT_EQ(FindString(*seen, {"token"}), FindString(*rec, {"headers", "X-Sandboxd-Token"}));
  EXPECT_FALSE(FindString(*seen, {"token"}).empty());
  auto other = env;
  other["DEEPBOX_K8S_CLAIM_KEY_FILE"] = (dir_ / "other-key").string();
  r = Run({kDeepbox, "sandbox", "inspect", "--json", id}, other);
  ASSERT_EQ(r.code, 0) << r.err;
  seen = ParseJsonObject(r.out);
  ASSERT_TRUE(seen) << r.out;
  EXPECT_FALSE(Find(*seen, {"owner"})->as_bool());
  EXPECT_TRUE(Find(*seen, {"token"})->is_null());
  r = Run({kDeepbox, "sandbox", "inspect", ns_ + "/sandbox-claim-00000000"}, env);
  EXPECT_EQ(r.code, 3) << r.err;

  r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--image", "golang:1.23"}, env);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("deepbox-sandbox-template (python:3.12-slim-bookworm)"));
  EXPECT_THAT(r.err, HasSubstr("node-tmpl (docker.io/library/node:22)"));
  r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--template",
           "deepbox-sandbox-template", "--image", "node:22"},
          env);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(Names("sandboxclaims", ns_).size(), 1u) << ClusterState(ns_);
  r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", id}, env);
  EXPECT_EQ(r.code, 0) << r.err;
}

// Suspend and resume on the real API server: the merge patch of
// spec.operatingMode goes through the CRD's schema (enum, default) and
// bumps the generation; the test controller answers as upstream v1.0's
// (pod deleted gracefully -- the node agent stops its sandbox and finishes
// the deletion --, Suspended=True PodTerminated, Ready=False SandboxSuspended
// forwarded to the claim); the next exec wakes it with a new pod. (The node
// agent gives each pod a sandbox of its own and deletes it with the pod,
// with no volumes: files do not survive here, so the default template's
// emptyDir is suspended with --force.)
TEST_F(RealClusterTest, SuspendEndsThePodAndTheNextExecResumesIt) {
  auto env = DeepboxEnv(ns_);
  auto r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--ttl", "600", "--json"}, env);
  ASSERT_EQ(r.code, 0) << r.err << ClusterState(ns_);
  auto rec = ParseJsonObject(r.out);
  ASSERT_TRUE(rec) << r.out;
  std::string id = FindString(*rec, {"id"});
  std::string sandbox = FindString(*rec, {"sandbox"});
  auto has_pod = [&] {
    auto pods = Names("pods", ns_);
    return std::find(pods.begin(), pods.end(), sandbox) != pods.end();
  };
  ASSERT_TRUE(has_pod()) << ClusterState(ns_);
  std::string old_ip = FindString(*rec, {"headers", "X-Sandbox-Pod-IP"});

  r = Run({kDeepbox, "sandbox", "suspend", id}, env);
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("would lose its files: /workspace is an emptyDir"));
  EXPECT_TRUE(has_pod());
  r = Run({kDeepbox, "sandbox", "suspend", "--force", id}, env);
  ASSERT_EQ(r.code, 0) << r.err << ClusterState(ns_);
  auto sb = KubectlJson({"get", "sandbox", sandbox, "-n", ns_});
  EXPECT_EQ(FindString(sb, {"spec", "operatingMode"}), k8s::kOperatingModeSuspended);
  EXPECT_TRUE(k8s::SuspendSettled(sb)) << ToJson(sb);
  EXPECT_TRUE(k8s::ReadySaysSuspended(sb)) << ToJson(sb);
  EXPECT_FALSE(has_pod()) << ClusterState(ns_);
  EXPECT_TRUE(Eventually([&] {
    return Run({kDeepbox, "sandbox", "ls", "--provider", "k8s"}, env)
               .out.find(k8s::kReasonSandboxSuspended) != std::string::npos;
  })) << ClusterState(ns_);

  r = Run({kDeepbox, "sandbox", "exec", id, "--", "echo", "back"}, env);
  EXPECT_EQ(r.code, 0) << r.err << ClusterState(ns_);
  EXPECT_EQ(r.out, "back\n");
  sb = KubectlJson({"get", "sandbox", sandbox, "-n", ns_});
  EXPECT_TRUE(k8s::RunningAndReady(sb)) << ToJson(sb);
  EXPECT_TRUE(has_pod());
  auto claim = KubectlJson({"get", "sandboxclaim", id.substr(id.find('/') + 1), "-n", ns_});
  EXPECT_NE(ToJson(*Find(claim, {"status", "sandbox", "podIPs"})), "[\"" + old_ip + "\"]")
      << "a new pod, a new address";
  r = Run({kDeepbox, "sandbox", "resume", id}, env);  // already running
  EXPECT_EQ(r.code, 0) << r.err;
  r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", id}, env);
  EXPECT_EQ(r.code, 0) << r.err;
}

// deploy/k8s/sandbox-template-pvc.yaml on the real API server: the
// controller's PersistentVolumeClaim (named as upstream names it) and the
// pod volume that mounts it pass the real validation; the claim is kept
// across a suspend, which needs no --force. (Nothing provisions volumes
// here: the claim stays Pending and the node agent mounts nothing.)
TEST_F(RealClusterTest, TheVolumeClaimTemplateVariantSuspendsWithoutForce) {
  std::string ns = ns_ + "-p";
  ASSERT_EQ(Kubectl({"create", "namespace", ns}).code, 0);
  std::string text = ReadFile(kSourceDir + "/deploy/k8s/sandbox-template-pvc.yaml") + "\n---\n" +
                     ReadFile(kSourceDir + "/deploy/k8s/warmpool.yaml");
  for (size_t at; (at = text.find("namespace: default")) != std::string::npos;) {
    text.replace(at, 18, "namespace: " + ns);
  }
  auto applied = Kubectl({"apply", "--validate=strict", "-f", "-"}, text);
  ASSERT_EQ(applied.code, 0) << applied.err;
  ASSERT_TRUE(Eventually([&] { return PoolReady(ns) >= 1; })) << ClusterState(ns);
  auto env = DeepboxEnv(ns);
  auto r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--ttl", "600", "--json"}, env);
  ASSERT_EQ(r.code, 0) << r.err << ClusterState(ns);
  auto rec = ParseJsonObject(r.out);
  ASSERT_TRUE(rec) << r.out;
  std::string id = FindString(*rec, {"id"});
  std::string sandbox = FindString(*rec, {"sandbox"});
  std::string pvc = k8s::VolumeClaimName("workspace", sandbox);
  auto claim_uid = [&] {
    auto r = Kubectl({"get", "pvc", pvc, "-n", ns, "-o", "jsonpath={.metadata.uid}"});
    return r.code == 0 ? r.out : "";
  };
  std::string uid = claim_uid();
  ASSERT_FALSE(uid.empty()) << ClusterState(ns);
  auto pod = KubectlJson({"get", "pod", sandbox, "-n", ns});
  EXPECT_THAT(ToJson(pod), HasSubstr(R"("persistentVolumeClaim":{"claimName":")" + pvc + "\"}"));

  r = Run({kDeepbox, "sandbox", "suspend", id}, env);
  ASSERT_EQ(r.code, 0) << r.err << ClusterState(ns);
  EXPECT_TRUE(k8s::SuspendSettled(KubectlJson({"get", "sandbox", sandbox, "-n", ns})));
  EXPECT_EQ(claim_uid(), uid);
  r = Run({kDeepbox, "sandbox", "resume", id}, env);
  ASSERT_EQ(r.code, 0) << r.err << ClusterState(ns);
  EXPECT_EQ(claim_uid(), uid);
  r = Run({kDeepbox, "sandbox", "exec", id, "--", "echo", "kept"}, env);
  EXPECT_EQ(r.code, 0) << r.err << ClusterState(ns)
                       << Kubectl({"get", "sandboxclaims,sandboxes", "-n", ns, "-o", "json"}).out;
  EXPECT_EQ(r.out, "kept\n");
  (void)Kubectl({"delete", "namespace", ns, "--wait=false"});
}

// Replaces the one occurrence of `from` in `text` (a test patching a
// deployable manifest fails loudly when the manifest changed).
void ReplaceOnce(std::string* text, const std::string& from, const std::string& to) {
  size_t at = text->find(from);
  ASSERT_NE(at, std::string::npos) << "not in the manifest: " << from;
  ASSERT_EQ(text->find(from, at + 1), std::string::npos) << "twice in the manifest: " << from;
  text->replace(at, from.size(), to);
}

// deploy/k8s/sandbox-template-secrets.yaml (issue 26) on the real API server,
// both containers run by the stand-in node: the egress-proxy sidecar as uid
// 1337 in the pod network (a test world: the upstream is the tests' HTTPS
// echo server with its own CA, names from the world's DNS server), holding
// the Kubernetes Secret's value; the sandbox container as a local sandbox
// that reaches the sidecar on the pod's 127.0.0.1:3128 and holds only the
// placeholder. The template is patched only where the test world differs
// from the internet: the secret's host, the upstream CA and nameserver, the
// world's address exception, the pod network.
TEST_F(RealClusterTest, TheSecretsSidecarPutsTheValueInOnlyItsHostsRequests) {
  if (geteuid() != 0) GTEST_SKIP() << "the pod network (a test world) needs root";
  for (const char* bin : {"/usr/sbin/ip", "/usr/bin/curl", "/usr/bin/nsenter"}) {
    if (access(bin, X_OK) != 0) GTEST_SKIP() << bin << " missing";
  }
  local::testing::TestWorld world;
  ASSERT_EQ(world.Build("k8ssidecar" + std::to_string(getpid())), "");
  auto pki = local::testing::MakeTestPki("allowed.test,other.test");
  local::testing::TlsEchoConfig echo{pki.chain_pem, pki.key_pem, true};
  local::testing::WorldServer server(
      world.hosts().fd(), [] { return local::testing::BindAny(SOCK_STREAM, 8443); },
      [echo](int s) { local::testing::ServeTlsEcho(s, echo); });
  ASSERT_TRUE(server.ready());
  // The sidecar (uid 1337) reads the upstream CA.
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  const std::string upstream_ca = (dir_ / "upstream-ca.pem").string();
  WriteFile(upstream_ca, pki.ca_pem);
  ASSERT_EQ(chmod(upstream_ca.c_str(), 0644), 0);
  const std::string value = "s3cr3t-" + RandomHex(40);

  std::string ns = ns_ + "-s";
  ASSERT_EQ(Kubectl({"create", "namespace", ns}).code, 0);
  auto secret = Kubectl({"create", "secret", "generic", "deepbox-sandbox-secrets", "-n", ns,
                         "--from-literal=GH_TOKEN=" + value});
  ASSERT_EQ(secret.code, 0) << secret.err;
  // A pool of none: one pod, the claim's (pods given one test pod network
  // share its ports, so a warm pod or a refill could not start beside it).
  std::string text = ReadFile(kSourceDir + "/deploy/k8s/sandbox-template-secrets.yaml") +
                     "\n---\n" + ReadFile(kSourceDir + "/deploy/k8s/warmpool.yaml");
  ReplaceOnce(&text, "  replicas: 1\n", "  replicas: 0\n");
  for (size_t at; (at = text.find("namespace: default")) != std::string::npos;) {
    text.replace(at, 18, "namespace: " + ns);
  }
  ReplaceOnce(&text, "--secret=GH_TOKEN=env:GH_TOKEN@api.github.com,github.com",
              "--secret=GH_TOKEN=env:GH_TOKEN@allowed.test");
  ReplaceOnce(&text, "            - --share-dir=/run/deepbox-egress\n",
              "            - --share-dir=/run/deepbox-egress\n"
              "            - --upstream-ca=" +
                  upstream_ca +
                  "\n"
                  "            - --nameserver=" +
                  local::testing::TestWorld::kDns4 + "\n");
  ReplaceOnce(&text, "                  key: GH_TOKEN\n",
              "                  key: GH_TOKEN\n"
              "            - name: DEEPBOX_NETWORK_ALLOW_CIDRS\n"
              "              value: 203.0.113.0/25,2001:db8:1::/48\n");
  ReplaceOnce(&text, "  podTemplate:\n    metadata:\n",
              "  podTemplate:\n    metadata:\n      annotations:\n"
              "        deepbox.dev/test-pod-netns: " +
                  world.ns().path() + "\n");
  if (HasFatalFailure()) return;
  auto applied = Kubectl({"apply", "--validate=strict", "-f", "-"}, text);
  ASSERT_EQ(applied.code, 0) << applied.err;

  auto env = DeepboxEnv(ns);
  auto r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--ttl", "600", "--json"}, env);
  ASSERT_EQ(r.code, 0) << r.err << ClusterState(ns);
  auto rec = ParseJsonObject(r.out);
  ASSERT_TRUE(rec) << r.out;
  std::string id = FindString(*rec, {"id"});
  std::string pod = FindString(*rec, {"sandbox"});

  // The secret's host gets the value; another host, tunnelled unread, the
  // placeholder (its TLS is the server's own, so curl trusts the test CA).
  std::string script =
      "echo placeholder=$GH_TOKEN; "
      "curl -sS -H \"Authorization: Bearer $GH_TOKEN\" https://allowed.test:8443/a; "
      "echo curl_secret=$?; "
      "cat > /tmp/test-ca.pem <<'EOF'\n" +
      pki.ca_pem +
      "EOF\n"
      "curl -sS --cacert /tmp/test-ca.pem -H \"Authorization: Bearer $GH_TOKEN\" "
      "https://other.test:8443/o; echo curl_other=$?";
  r = Run({kDeepbox, "sandbox", "exec", id, "--", "sh", "-c", script}, env);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("placeholder=deepbox-secret-")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("curl_secret=0")) << r.out << ClusterState(ns);
  EXPECT_THAT(r.out, HasSubstr("header authorization: Bearer " + value)) << r.out;
  EXPECT_THAT(r.out, HasSubstr("curl_other=0")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("header authorization: Bearer deepbox-secret-")) << r.out;

  // Nothing the sandbox container can see holds the value or runs the
  // proxy: every process's environment and command line, and its files
  // (the pattern goes to grep on stdin, from a shell builtin, so no command
  // line of the scan holds it; the control finds the placeholder's file).
  std::string half = value.substr(0, value.size() / 2), rest = value.substr(value.size() / 2);
  std::string scan =
      "cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'; "
      "printf '%s%s\\n' '" +
      half + "' '" + rest +
      "' | grep -rlsF -f - /tmp /workspace /run /etc /home | sed 's/^/value''-in: /'; "
      "printf '%s%s\\n' 'deepbox-sec' 'ret-' | grep -rlsF -f - /tmp | sed 's/^/control''-in: /'";
  r = Run({kDeepbox, "sandbox", "exec", id, "--", "sh", "-c", scan}, env);
  EXPECT_THAT(r.out, HasSubstr("GH_TOKEN=deepbox-secret-")) << "the scan's control";
  EXPECT_THAT(r.out, Not(HasSubstr(value)));
  EXPECT_THAT(r.out, Not(HasSubstr("egress-proxy")));
  // (The markers are quoted apart in the script, which is a command line.)
  EXPECT_THAT(r.out, Not(HasSubstr("value-in: "))) << r.out;
  EXPECT_THAT(r.out, HasSubstr("control-in: /tmp/.deepbox-pod-volumes/egress-share/secrets.env"))
      << r.out;

  // The sidecar's log (kubectl logs -c egress-proxy) names the secret, never
  // the value.
  std::string uid = Kubectl({"get", "pod", pod, "-n", ns, "-o", "jsonpath={.metadata.uid}"}).out;
  glob_t g{};
  ASSERT_EQ(
      glob(("/tmp/deepbox-node-agent-*/" + uid + "/egress-proxy.log").c_str(), 0, nullptr, &g), 0);
  std::string log = ReadFile(g.gl_pathv[0]);
  globfree(&g);
  EXPECT_THAT(log, HasSubstr("\"secrets\":[\"GH_TOKEN\"]")) << log;
  EXPECT_THAT(log, HasSubstr("\"host\":\"other.test\"")) << log;
  EXPECT_THAT(log, Not(HasSubstr(value)));

  r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", id}, env);
  EXPECT_EQ(r.code, 0) << r.err;
  (void)Kubectl({"delete", "namespace", ns, "--wait=false"});
}

TEST_F(RealClusterTest, SelectorCleanupLeavesOtherClaimsAndNamespacesAlone) {
  std::string other = ns_ + "-o";
  ASSERT_EQ(Kubectl({"create", "namespace", other}).code, 0);
  ApplyManifests(other);
  auto env = DeepboxEnv(ns_);
  for (const char* label : {"sel=a", "sel=a", "sel=b"}) {
    auto r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--label", label}, env);
    ASSERT_EQ(r.code, 0) << r.err << ClusterState(ns_);
  }
  auto r = Run(
      {kDeepbox, "sandbox", "create", "--provider", "k8s", "-n", other, "--label", "sel=a"}, env);
  ASSERT_EQ(r.code, 0) << r.err << ClusterState(other);
  r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", "-s", "sel=a"}, env);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Names("sandboxclaims", ns_, "sel=a").size(), 0u);
  EXPECT_EQ(Names("sandboxclaims", ns_, "sel=b").size(), 1u);
  EXPECT_EQ(Names("sandboxclaims", other, "sel=a").size(), 1u);
  (void)Kubectl({"delete", "namespace", other, "--wait=false"});
}

TEST_F(RealClusterTest, ThreeConcurrentRunsOnAPoolOfOne) {
  auto env = DeepboxEnv(ns_);
  std::vector<std::unique_ptr<Process>> runs;
  for (int i = 0; i < 3; ++i) {
    fs::create_directories(dir_ / std::to_string(i));
    runs.push_back(std::make_unique<Process>(
        std::vector<std::string>{kDeepbox, "run", "--sandbox", "k8s", "--model",
                                 "replay:" + kFibReplay, kTask},
        Env(env), dir_ / std::to_string(i)));
  }
  for (auto& p : runs) {
    auto code = p->WaitAtMost(300s);
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, 0) << p->err() << ClusterState(ns_);
    EXPECT_THAT(p->out(), HasSubstr("0, 1, 1, 2, 3, 5, 8, 13, 21, 34"));
  }
  EXPECT_TRUE(Eventually([&] { return Names("sandboxclaims", ns_).empty(); }));
}

// A service account with only the minimal Role of deploy/k8s/README.md can
// claim, use and delete; without the binding the API server answers 403.
TEST_F(RealClusterTest, MinimalRoleIsEnoughAndItsAbsenceIs403) {
  std::string role = fmt::format(R"(apiVersion: v1
kind: ServiceAccount
metadata: {{name: deepbox, namespace: {0}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: deepbox-claims, namespace: {0}}}
rules:
- apiGroups: [extensions.agents.x-k8s.io]
  resources: [sandboxclaims]
  verbs: [create, get, list, watch, delete]
)",
                                 ns_);
  ASSERT_EQ(Kubectl({"apply", "-f", "-"}, role).code, 0);
  auto token = Kubectl({"create", "token", "deepbox", "-n", ns_});
  ASSERT_EQ(token.code, 0) << token.err;
  while (!token.out.empty() && token.out.back() == '\n') token.out.pop_back();
  auto admin = ReadFile(cluster_["KUBECONFIG"]);
  std::string server = admin.substr(admin.find("server: ") + 8);
  server = server.substr(0, server.find('\n'));
  std::string ca = admin.substr(admin.find("certificate-authority: ") + 23);
  ca = ca.substr(0, ca.find('\n'));
  auto kubeconfig = [&](const std::string& user) {
    return fmt::format(R"(apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{}", certificate-authority: "{}"}}}}]
users: [{{name: u, user: {}}}]
contexts: [{{name: x, context: {{cluster: c, user: u, namespace: {}}}}}]
current-context: x
)",
                       server, ca, user, ns_);
  };
  std::string sa_config = (dir_ / "sa.kubeconfig").string();
  WriteFile(sa_config, kubeconfig(fmt::format("{{token: \"{}\"}}", token.out)));
  auto env = DeepboxEnv(ns_);
  env["KUBECONFIG"] = sa_config;

  // No binding yet: 403, named as such.
  auto r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s"}, env);
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("403"));
  EXPECT_THAT(r.err, HasSubstr("forbidden"));

  ASSERT_EQ(Kubectl({"create", "rolebinding", "deepbox-claims", "--role", "deepbox-claims",
                     "--serviceaccount", ns_ + ":deepbox", "-n", ns_})
                .code,
            0);
  EXPECT_TRUE(Eventually([&] {
    r = Run({kDeepbox, "run", "--sandbox", "k8s", "--model", "replay:" + kFibReplay, kTask}, env);
    return r.code == 0;
  })) << r.err;
  EXPECT_THAT(r.out, HasSubstr("0, 1, 1, 2, 3, 5, 8, 13, 21, 34"));

  // `sandbox inspect` with the minimal Role: the claim and its token; the
  // template and image (unreadable here) left out; --image needs list on
  // templates, and says so with the server's 403.
  r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--ttl", "600", "--json"}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  auto created = ParseJsonObject(r.out);
  ASSERT_TRUE(created) << r.out;
  r = Run({kDeepbox, "sandbox", "inspect", "--json", FindString(*created, {"id"})}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  auto seen = ParseJsonObject(r.out);
  ASSERT_TRUE(seen) << r.out;
  EXPECT_EQ(FindString(*seen, {"warm_pool"}), "deepagents-warmpool");
  EXPECT_EQ(FindString(*seen, {"template"}), "");
  EXPECT_EQ(FindString(*seen, {"image"}), "");
  EXPECT_EQ(FindString(*seen, {"token"}), FindString(*created, {"headers", "X-Sandboxd-Token"}));
  r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--image", "node:22"}, env);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("listing the SandboxTemplates"));
  EXPECT_THAT(r.err, HasSubstr("403"));
  r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", FindString(*created, {"id"})}, env);
  EXPECT_EQ(r.code, 0) << r.err;

  // The same token through an exec credential plugin.
  std::string plugin = (dir_ / "token-plugin.sh").string();
  WriteFile(plugin,
            fmt::format("#!/bin/sh\necho '{{\"apiVersion\":\"client.authentication.k8s.io/"
                        "v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"{}\"}}}}'\n",
                        token.out));
  fs::permissions(plugin, fs::perms::owner_all);
  std::string exec_config = (dir_ / "exec.kubeconfig").string();
  WriteFile(exec_config,
            kubeconfig(fmt::format("{{exec: {{apiVersion: client.authentication.k8s.io/v1, "
                                   "command: \"{}\", interactiveMode: Never}}}}",
                                   plugin)));
  env["KUBECONFIG"] = exec_config;
  r = Run({kDeepbox, "sandbox", "create", "--provider", "k8s", "--label", "via=exec"}, env);
  EXPECT_EQ(r.code, 0) << r.err;
  r = Run({kDeepbox, "sandbox", "rm", "--provider", "k8s", "-s", "via=exec"}, env);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Names("sandboxclaims", ns_, "via=exec").empty());
}

// The claim's watch (kept open during a run) resumes after an API server
// restart, also when etcd was compacted past its resourceVersion meanwhile
// (410 Gone -> re-list): a deletion afterwards still ends the run at once.
TEST_F(RealClusterTest, WatchResumesAfterAnApiServerRestartAndACompaction) {
  auto env = DeepboxEnv(ns_);
  Process p(
      {kDeepbox, "run", "--sandbox", "k8s", "--json", "--model", "replay:" + ChattyReplay(), kTask},
      Env(env), dir_);
  ASSERT_TRUE(Eventually([&] {
    return p.out().find(R"("type":"tool_output")") != std::string::npos;
  })) << p.err()
      << ClusterState(ns_);
  // Writes the watch does not see (another namespace's objects), then a
  // compaction at the newest revision while the API server is down.
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(Kubectl({"create", "configmap", fmt::format("bump-{}", i), "-n", ns_}).code, 0);
  }
  auto claims_before = Names("sandboxclaims", ns_);
  ASSERT_EQ(claims_before.size(), 1u);
  auto claim_object = KubectlJson({"get", "sandboxclaim", claims_before[0], "-n", ns_});
  std::string claim_version = FindString(claim_object, {"metadata", "resourceVersion"});
  ASSERT_FALSE(claim_version.empty());
  std::string script = kSourceDir + "/scripts/k8s-real-cluster.sh";
  std::string dir = std::getenv("DEEPBOX_K8S_REAL_DIR");
  auto stop = Run({script, "stop-apiserver", dir});
  ASSERT_EQ(stop.code, 0) << stop.err;
  auto compact = Run({script, "compact", dir});
  EXPECT_EQ(compact.code, 0) << compact.err;
  auto start = Run({script, "start-apiserver", dir});
  ASSERT_EQ(start.code, 0) << start.err;
  // The compaction is real: a watch from the claim's version (where the run's
  // watch resumes) is answered 410 Gone.
  auto stale = Kubectl({"get", "--raw",
                        fmt::format("/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{}/"
                                    "sandboxclaims?watch=1&resourceVersion={}&timeoutSeconds=1",
                                    ns_, claim_version)});
  EXPECT_THAT(stale.out + stale.err, HasSubstr("\"code\":410")) << stale.out << stale.err;
  auto claims = Names("sandboxclaims", ns_);
  ASSERT_EQ(claims.size(), 1u);
  ASSERT_EQ(Kubectl({"delete", "sandboxclaim", claims[0], "-n", ns_, "--wait=false"}).code, 0);
  auto code = p.WaitAtMost(120s);
  ASSERT_TRUE(code.has_value()) << p.err();
  EXPECT_EQ(*code, run::kRunExitSandbox) << p.err();
  EXPECT_THAT(p.err(), HasSubstr("was deleted"));
}

}  // namespace
}  // namespace deepbox::e2e
