#include "k8s/claim.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "k8s/testing/fake_api_server.h"
#include "k8s/testing/fake_controller.h"
#include "k8s/testing/fixtures.h"

namespace deepbox::k8s {
namespace {

using namespace std::chrono_literals;
using testing::ClaimNames;
using testing::FakeApiServer;
using testing::FakeApiServerOptions;
using testing::FakeController;
using testing::FakeControllerOptions;
using testing::PoolReadyReplicas;
using testing::SeedPool;
using testing::WaitUntil;

const testing::ResourceKey kClaimKey{"extensions.agents.x-k8s.io", "sandboxclaims", "default"};
const testing::ResourceKey kSandboxKey{"agents.x-k8s.io", "sandboxes", "default"};

class ClaimTest : public ::testing::Test {
 protected:
  // `wrap`: what the controller sees of the server's store (e.g. SlowAdoptions).
  void Init(
      FakeApiServerOptions server_opts = {}, FakeControllerOptions ctl_opts = {},
      const std::function<std::shared_ptr<testing::StoreApi>(std::shared_ptr<testing::StoreApi>)>&
          wrap = nullptr) {
    auto server = FakeApiServer::Start(server_opts);
    ASSERT_TRUE(server) << server.error().ToString();
    server_ = std::move(*server);
    std::shared_ptr<testing::StoreApi> store = server_->shared_store();
    controller_ = std::make_unique<FakeController>(wrap ? wrap(store) : store, ctl_opts);
    controller_->Start();
    ClientOptions co;
    co.initial_backoff = 5ms;
    co.max_backoff = 50ms;
    auto client = KubeClient::Create(server_->ClientConfig(), co);
    ASSERT_TRUE(client) << client.error().ToString();
    client_ = std::move(*client);
    api_ = std::make_unique<SandboxApi>(*client_);
    claimer_ = std::make_unique<Claimer>(*api_);
  }
  void TearDown() override {
    if (controller_) controller_->Stop();
  }
  ClaimRequest Request(std::chrono::milliseconds timeout = 30s) {
    ClaimRequest r;
    r.warm_pool = "deepagents-warmpool";
    r.labels = {{"deepagents.example/claim", "true"}};
    r.ready_timeout = timeout;
    return r;
  }
  // Runs Claim() on a thread; returns once the claim object exists.
  std::future<Result<ClaimedSandbox>> ClaimAsync(ClaimRequest r, std::string* name) {
    auto f = std::async(std::launch::async, [this, r] { return claimer_->Claim(r); });
    EXPECT_TRUE(WaitUntil([&] { return !ClaimNames(server_->store(), "default").empty(); }));
    auto names = ClaimNames(server_->store(), "default");
    if (!names.empty()) *name = names.front();
    return f;
  }

  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<FakeController> controller_;
  std::unique_ptr<KubeClient> client_;
  std::unique_ptr<SandboxApi> api_;
  std::unique_ptr<Claimer> claimer_;
};

TEST(ClaimObjectTest, MatchesTheSdkShape) {
  ClaimRequest r;
  r.warm_pool = "deepagents-warmpool";
  r.labels = {{"deepagents.example/claim", "true"}};
  r.pod_labels = {{"team", "a"}};
  r.pod_annotations = {{"note", "x"}};
  r.shutdown_after = 3600s;
  auto now = std::chrono::system_clock::from_time_t(1787000000) + 123456us;
  auto obj =
      BuildClaimObject(r, "sandbox-claim-0123abcd", "extensions.agents.x-k8s.io/v1beta1", "", now);
  EXPECT_EQ(ToJson(obj),
            R"({"apiVersion":"extensions.agents.x-k8s.io/v1beta1","kind":"SandboxClaim",)"
            R"("metadata":{"name":"sandbox-claim-0123abcd","namespace":"default",)"
            R"("labels":{"deepagents.example/claim":"true","agents.x-k8s.io/created-by":)"
            R"("deepbox"},"annotations":{"agents.x-k8s.io/client-first-requested-at":)"
            R"("2026-08-17T20:53:20.123456+00:00"}},"spec":{"warmPoolRef":{"name":)"
            R"("deepagents-warmpool"},"lifecycle":{"shutdownTime":"2026-08-17T21:53:21Z",)"
            R"("shutdownPolicy":"Delete"},"additionalPodMetadata":{"labels":{"team":"a"},)"
            R"("annotations":{"note":"x"}}}})");
  // shutdownTime is rounded up to whole seconds (never sooner than the TTL)...
  auto at = [&](SystemTime t) {
    auto o = BuildClaimObject(r, "n", "extensions.agents.x-k8s.io/v1beta1", "", t);
    return FindString(o, {"spec", "lifecycle", "shutdownTime"});
  };
  EXPECT_EQ(at(std::chrono::system_clock::from_time_t(1787000000) + 1us), "2026-08-17T21:53:21Z");
  EXPECT_EQ(at(std::chrono::system_clock::from_time_t(1787000000) + 999999us),
            "2026-08-17T21:53:21Z");
  // ... and kept when it is whole already.
  EXPECT_EQ(at(std::chrono::system_clock::from_time_t(1787000000)), "2026-08-17T21:53:20Z");
  auto old = BuildClaimObject(r, "n", "extensions.agents.x-k8s.io/v1alpha1", "tmpl", now);
  EXPECT_EQ(ToJson(old.at("spec").at("sandboxTemplateRef")), R"({"name":"tmpl"})");
  EXPECT_EQ(old.at("spec").at("warmpool"), json::value("deepagents-warmpool"));
  EXPECT_FALSE(old.at("spec").as_object().contains("warmPoolRef"));
}

TEST_F(ClaimTest, AdoptsAWarmMemberOverOneWatch) {
  Init();
  SeedPool(server_->store(), "default", "deepagents-warmpool", "deepbox-sandbox-template", 1);
  ASSERT_TRUE(WaitUntil(
      [&] { return PoolReadyReplicas(server_->store(), "default", "deepagents-warmpool") == 1; }));
  ClaimRequest r = Request();
  r.shutdown_after = 600s;
  auto c = claimer_->Claim(r);
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_TRUE(c->claim_name.starts_with("sandbox-claim-"));
  EXPECT_EQ(c->claim_name.size(), std::string("sandbox-claim-").size() + 8);
  EXPECT_TRUE(c->sandbox_name.starts_with("deepagents-warmpool-")) << c->sandbox_name;
  EXPECT_EQ(c->pod_ip, "10.244.0.10");
  EXPECT_EQ(c->api_version, "extensions.agents.x-k8s.io/v1beta1");
  EXPECT_EQ(controller_->adoptions(), 1);
  EXPECT_EQ(controller_->cold_starts(), 0);

  auto claim = server_->store().Get(kClaimKey, c->claim_name);
  ASSERT_TRUE(claim);
  EXPECT_EQ(FindString(*claim, {"metadata", "labels", "deepagents.example/claim"}), "true");
  EXPECT_EQ(FindString(*claim, {"metadata", "labels", "agents.x-k8s.io/created-by"}), "deepbox");
  std::string requested =
      FindString(*claim, {"metadata", "annotations", "agents.x-k8s.io/client-first-requested-at"});
  EXPECT_TRUE(ParseRfc3339(requested)) << requested;
  EXPECT_TRUE(requested.ends_with("+00:00"));
  EXPECT_EQ(FindString(*claim, {"spec", "lifecycle", "shutdownPolicy"}), "Delete");
  std::string shutdown = FindString(*claim, {"spec", "lifecycle", "shutdownTime"});
  ASSERT_EQ(shutdown.size(), 20u);
  EXPECT_EQ(shutdown.back(), 'Z');

  // One watch on this claim only, and at most one on the Events about it
  // (its thread may not have asked yet when the claim was already ready),
  // both from the create's resourceVersion.
  int watches = 0;
  int event_watches = 0;
  for (const auto& req : server_->requests()) {
    if (req.Query("watch").empty()) continue;
    EXPECT_FALSE(req.Query("resourceVersion").empty());
    EXPECT_EQ(req.Query("allowWatchBookmarks"), "true");
    if (req.path.starts_with("/api/v1/namespaces/default/events")) {
      ++event_watches;
      EXPECT_EQ(req.Query("fieldSelector"), "involvedObject.name=" + c->claim_name);
      continue;
    }
    ++watches;
    EXPECT_EQ(req.Query("fieldSelector"), "metadata.name=" + c->claim_name);
  }
  EXPECT_EQ(watches, 1);
  EXPECT_LE(event_watches, 1);

  ASSERT_TRUE(claimer_->Release("default", c->claim_name));
  EXPECT_FALSE(server_->store().Get(kClaimKey, c->claim_name));
  ASSERT_TRUE(claimer_->Release("default", c->claim_name));  // 404 counts as deleted
  // The adopted Sandbox is garbage-collected and the pool refills.
  EXPECT_TRUE(WaitUntil([&] { return !server_->store().Get(kSandboxKey, c->sandbox_name); }));
  EXPECT_TRUE(WaitUntil(
      [&] { return PoolReadyReplicas(server_->store(), "default", "deepagents-warmpool") == 1; }));
}

// The controller's store with every Sandbox write held for a while after the
// object was read, as over a real API server: two claim workers that chose
// the same warm member both get to write it unless the controller prevents it.
class SlowAdoptions : public testing::StoreApi {
 public:
  explicit SlowAdoptions(std::shared_ptr<testing::StoreApi> inner) : inner_(std::move(inner)) {}
  Result<json::object> Create(const testing::ResourceKey& key, json::object object) override {
    return inner_->Create(key, std::move(object));
  }
  Result<json::object> Get(const testing::ResourceKey& key,
                           const std::string& name) const override {
    return inner_->Get(key, name);
  }
  std::vector<json::object> List(const testing::ResourceKey& key,
                                 int64_t* rv = nullptr) const override {
    return inner_->List(key, rv);
  }
  Result<json::object> Update(const testing::ResourceKey& key, const std::string& name,
                              const std::function<void(json::object&)>& mutate) override {
    // Only real changes wait (the status passes rewrite nothing).
    if (auto current = inner_->Get(key, name); current && key.plural == "sandboxes") {
      json::object next = *current;
      mutate(next);
      if (next != *current) std::this_thread::sleep_for(20ms);
    }
    return inner_->Update(key, name, mutate);
  }
  Result<json::object> Delete(const testing::ResourceKey& key, const std::string& name) override {
    return inner_->Delete(key, name);
  }
  std::vector<std::string> Namespaces() const override { return inner_->Namespaces(); }
  void AddListener(std::function<void(const testing::StoreEvent&)> listener) override {
    inner_->AddListener(std::move(listener));
  }

 private:
  std::shared_ptr<testing::StoreApi> inner_;
};

std::shared_ptr<testing::StoreApi> Slow(std::shared_ptr<testing::StoreApi> store) {
  return std::make_shared<SlowAdoptions>(std::move(store));
}

// With claim workers (as the k8s-real test agent runs it, like upstream's
// concurrent claim reconciles), claims made together are adopted together,
// and each warm member goes to one claim only.
TEST_F(ClaimTest, ConcurrentClaimsEachAdoptTheirOwnWarmMember) {
  FakeControllerOptions co;
  co.claim_workers = 4;
  Init({}, co, Slow);
  constexpr int kClaims = 12;
  SeedPool(server_->store(), "default", "deepagents-warmpool", "deepbox-sandbox-template", kClaims);
  ASSERT_TRUE(WaitUntil([&] {
    return PoolReadyReplicas(server_->store(), "default", "deepagents-warmpool") == kClaims;
  }));
  std::vector<std::future<Result<ClaimedSandbox>>> claims;
  for (int i = 0; i < kClaims; ++i) {
    claims.push_back(std::async(std::launch::async, [this] { return claimer_->Claim(Request()); }));
  }
  std::set<std::string> sandboxes;
  for (auto& f : claims) {
    auto c = f.get();
    ASSERT_TRUE(c) << c.error().ToString();
    EXPECT_TRUE(c->sandbox_name.starts_with("deepagents-warmpool-")) << c->sandbox_name;
    EXPECT_TRUE(sandboxes.insert(c->sandbox_name).second) << c->sandbox_name << " given twice";
    auto sb = server_->store().Get(kSandboxKey, c->sandbox_name);
    ASSERT_TRUE(sb);
    auto claim = server_->store().Get(kClaimKey, c->claim_name);
    ASSERT_TRUE(claim);
    EXPECT_EQ(FindString(*sb, {"metadata", "labels", "agents.x-k8s.io/claim-uid"}),
              FindString(*claim, {"metadata", "uid"}));
  }
  EXPECT_EQ(controller_->adoptions(), kClaims);
  EXPECT_EQ(controller_->cold_starts(), 0);
}

// More claims at once than Ready members: the members go to one claim each,
// the others start cold (the refill's pods are not Ready yet).
TEST_F(ClaimTest, ConcurrentClaimsBeyondThePoolStartCold) {
  FakeControllerOptions co;
  co.claim_workers = 4;
  co.pod_start_delay = 3s;  // no refilled member is Ready while the claims are reconciled
  Init({}, co, Slow);
  SeedPool(server_->store(), "default", "deepagents-warmpool", "deepbox-sandbox-template", 3);
  ASSERT_TRUE(WaitUntil(
      [&] { return PoolReadyReplicas(server_->store(), "default", "deepagents-warmpool") == 3; }));
  std::vector<std::future<Result<ClaimedSandbox>>> claims;
  for (int i = 0; i < 6; ++i) {
    claims.push_back(std::async(std::launch::async, [this] { return claimer_->Claim(Request()); }));
  }
  std::set<std::string> sandboxes;
  int warm = 0;
  for (auto& f : claims) {
    auto c = f.get();
    ASSERT_TRUE(c) << c.error().ToString();
    EXPECT_TRUE(sandboxes.insert(c->sandbox_name).second) << c->sandbox_name << " given twice";
    if (c->sandbox_name != c->claim_name) ++warm;
  }
  EXPECT_EQ(warm, 3);
  EXPECT_EQ(controller_->adoptions(), 3);
  EXPECT_EQ(controller_->cold_starts(), 3);
}

TEST_F(ClaimTest, ColdStartsWhenThePoolIsEmpty) {
  FakeControllerOptions co;
  co.adoption_delay = 20ms;
  co.pod_start_delay = 30ms;
  co.dual_stack = true;
  Init({}, co);
  SeedPool(server_->store(), "default", "deepagents-warmpool", "deepbox-sandbox-template", 0);
  auto c = claimer_->Claim(Request());
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ(c->sandbox_name, c->claim_name);  // cold: named after the claim
  EXPECT_EQ(c->pod_ips.size(), 2u);
  EXPECT_EQ(c->pod_ip, "10.244.0.10");  // IPv4 preferred over the first (IPv6) entry
  EXPECT_EQ(controller_->cold_starts(), 1);
}

TEST_F(ClaimTest, NeverReadyTimesOutAndDeletesTheClaim) {
  FakeControllerOptions co;
  co.pods_become_ready = false;
  Init({}, co);
  SeedPool(server_->store(), "default", "deepagents-warmpool", "deepbox-sandbox-template", 1);
  auto c = claimer_->Claim(Request(400ms));
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kTimeout);
  EXPECT_NE(c.error().message.find("did not become ready within 0.4 s"), std::string::npos)
      << c.error().message;
  EXPECT_NE(c.error().message.find("Ready=False SandboxNotReady"), std::string::npos)
      << c.error().message;
  EXPECT_TRUE(ClaimNames(server_->store(), "default").empty());
}

struct TerminalCase {
  std::string reason;
  ErrorCode code;
};

class TerminalReasonTest : public ClaimTest, public ::testing::WithParamInterface<TerminalCase> {};

TEST_P(TerminalReasonTest, FailsFastAndDeletesTheClaim) {
  const auto& tc = GetParam();
  FakeControllerOptions co;
  if (tc.reason == "SandboxExpired") co.pods_become_ready = false;
  Init({}, co);
  ClaimRequest r = Request(60s);  // far beyond: the failure must come first
  if (tc.reason == "TemplateNotFound") {
    (void)server_->store().Create({"extensions.agents.x-k8s.io", "sandboxwarmpools", "default"},
                                  testing::MakeWarmPool(r.warm_pool, "missing-template", 1));
  } else if (tc.reason != "WarmPoolNotFound") {
    SeedPool(server_->store(), "default", r.warm_pool, "deepbox-sandbox-template", 0);
  }
  if (tc.reason == "InvalidMetadata") r.pod_labels = {{"agents.x-k8s.io/sneaky", "x"}};
  if (tc.reason == "EnvVarsInjectionRejected" || tc.reason == "VolumeClaimTemplatesError" ||
      tc.reason == "ClaimExpired") {
    controller_->FailClaimsWith(tc.reason, "as the controller reports it");
  }
  Result<ClaimedSandbox> c = MakeError(ErrorCode::kInternal, "unset");
  if (tc.reason == "SandboxExpired") {
    std::string name;
    auto f = ClaimAsync(r, &name);
    ASSERT_TRUE(WaitUntil([&] { return server_->store().Get(kSandboxKey, name).has_value(); }));
    controller_->ExpireSandbox("default", name);
    c = f.get();
  } else {
    c = claimer_->Claim(r);
  }
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, tc.code) << c.error().ToString();
  EXPECT_NE(c.error().message.find(tc.reason), std::string::npos) << c.error().message;
  EXPECT_TRUE(ClaimNames(server_->store(), "default").empty());
}

INSTANTIATE_TEST_SUITE_P(
    Reasons, TerminalReasonTest,
    ::testing::Values(TerminalCase{"TemplateNotFound", ErrorCode::kNotFound},
                      TerminalCase{"WarmPoolNotFound", ErrorCode::kNotFound},
                      TerminalCase{"InvalidMetadata", ErrorCode::kInvalidArgument},
                      TerminalCase{"EnvVarsInjectionRejected", ErrorCode::kInvalidArgument},
                      TerminalCase{"VolumeClaimTemplatesError", ErrorCode::kInvalidArgument},
                      TerminalCase{"ClaimExpired", ErrorCode::kUnavailable},
                      TerminalCase{"SandboxExpired", ErrorCode::kUnavailable}),
    [](const auto& info) { return info.param.reason; });

// agent-sandbox v1.x: a pod the API server refuses for good is Ready=False
// InvalidConfiguration on the Sandbox, which the claim forwards; the wait
// ends at once (60 s is never reached) with the server's message.
TEST_F(ClaimTest, InvalidConfigurationEndsTheWaitAtOnceWithTheServersMessage) {
  Init();
  json::object tmpl = testing::MakeTemplate("deepbox-sandbox-template");
  auto& containers = tmpl["spec"]
                         .as_object()["podTemplate"]
                         .as_object()["spec"]
                         .as_object()["containers"]
                         .as_array();
  containers.front().as_object().erase("image");
  ASSERT_TRUE(
      server_->store().Create({"extensions.agents.x-k8s.io", "sandboxtemplates", "default"}, tmpl));
  ASSERT_TRUE(server_->store().Create(
      {"extensions.agents.x-k8s.io", "sandboxwarmpools", "default"},
      testing::MakeWarmPool("deepagents-warmpool", "deepbox-sandbox-template", 0)));
  auto c = claimer_->Claim(Request(60s));
  ASSERT_FALSE(c);
  // The controller records the failure both ways: the Ready reason and a
  // SandboxPodCreateFailed Event. Whichever the claim sees first ends the
  // wait (not the 60 s ready timeout), with the server's message.
  EXPECT_NE(c.error().code, ErrorCode::kTimeout) << c.error().ToString();
  const std::string& why = c.error().message;
  EXPECT_TRUE(why.find("terminal reason InvalidConfiguration") != std::string::npos ||
              why.find("the controller reported SandboxPodCreateFailed") != std::string::npos)
      << why;
  if (why.find("terminal reason") != std::string::npos) {
    EXPECT_EQ(c.error().code, ErrorCode::kInvalidArgument) << c.error().ToString();
  }
  EXPECT_NE(why.find("spec.containers[0].image: Required value"), std::string::npos) << why;
  EXPECT_TRUE(ClaimNames(server_->store(), "default").empty());
}

// Events the controller records on the Sandbox named after the claim.
std::vector<json::object> EventsAbout(testing::ObjectStore& store, const std::string& name) {
  std::vector<json::object> out;
  for (auto& e : store.List({"", "events", "default"})) {
    if (FindString(e, {"involvedObject", "name"}) == name) out.push_back(std::move(e));
  }
  return out;
}

// A Warning Event SandboxPodCreateFailed (e.g. a ResourceQuota refusing the
// pod: upstream retries, the Ready reason stays non-terminal) ends the wait at
// once with the controller's message, not after the ready timeout.
TEST_F(ClaimTest, AFailureEventEndsTheWaitAtOnce) {
  Init();
  SeedPool(server_->store(), "default", "deepagents-warmpool", "deepbox-sandbox-template", 0);
  const std::string quota =
      "pods \"x\" is forbidden: exceeded quota: compute, requested: pods=1, used: pods=0, "
      "limited: pods=0";
  controller_->FailPodCreationWith(quota);
  std::string name;
  auto f = ClaimAsync(Request(60s), &name);
  auto c = f.get();
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kUnavailable) << c.error().ToString();
  EXPECT_NE(c.error().message.find("SandboxPodCreateFailed " + quota), std::string::npos)
      << c.error().message;
  EXPECT_NE(c.error().message.find("Sandbox default/" + name), std::string::npos)
      << c.error().message;
  EXPECT_TRUE(ClaimNames(server_->store(), "default").empty());
  // What the controller recorded: the Warning, never a SandboxReady.
  bool warned = false;
  for (const auto& e : EventsAbout(server_->store(), name)) {
    EXPECT_NE(FindString(e, {"reason"}), "SandboxReady");
    warned = warned || (FindString(e, {"reason"}) == "SandboxPodCreateFailed" &&
                        FindString(e, {"type"}) == "Warning");
  }
  EXPECT_TRUE(warned);
}

// Events of an earlier claim of the same name, and Normal ones, do not count.
TEST_F(ClaimTest, OnlyThisClaimsFailureEventsEndTheWait) {
  Init();
  SeedPool(server_->store(), "default", "deepagents-warmpool", "deepbox-sandbox-template", 0);
  json::object old;
  old["apiVersion"] = "v1";
  old["kind"] = "Event";
  old["metadata"] = json::object{{"name", "mine.1"}};
  old["involvedObject"] = json::object{
      {"kind", "SandboxClaim"}, {"name", "mine"}, {"namespace", "default"}, {"uid", "an-old-uid"}};
  old["type"] = "Warning";
  old["reason"] = "SandboxPodCreateFailed";
  old["message"] = "from the claim of that name deleted yesterday";
  ASSERT_TRUE(server_->store().Create({"", "events", "default"}, old));
  ClaimRequest r = Request(60s);
  r.name = "mine";
  r.users_name = true;
  auto c = claimer_->Claim(r);
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ(c->sandbox_name, "mine");
  // The cold Sandbox's own Events: created, then Ready.
  std::set<std::string> reasons;
  for (const auto& e : EventsAbout(server_->store(), "mine")) {
    if (FindString(e, {"involvedObject", "kind"}) == "Sandbox") {
      reasons.insert(FindString(e, {"reason"}));
    }
  }
  EXPECT_TRUE(reasons.contains("SandboxPodCreated"));
  EXPECT_TRUE(WaitUntil([&] {
    for (const auto& e : EventsAbout(server_->store(), "mine")) {
      if (FindString(e, {"reason"}) == "SandboxReady") return true;
    }
    return false;
  }));
}

// Without RBAC for Events the claim's own conditions still end the wait.
TEST_F(ClaimTest, WithoutAccessToEventsTheConditionsStillDecide) {
  FakeApiServerOptions so;
  so.events_forbidden = true;
  Init(so);
  json::object tmpl = testing::MakeTemplate("deepbox-sandbox-template");
  tmpl["spec"].as_object()["service"] = true;
  ASSERT_TRUE(
      server_->store().Create({"extensions.agents.x-k8s.io", "sandboxtemplates", "default"}, tmpl));
  ASSERT_TRUE(server_->store().Create(
      {"extensions.agents.x-k8s.io", "sandboxwarmpools", "default"},
      testing::MakeWarmPool("deepagents-warmpool", "deepbox-sandbox-template", 0)));
  // A controller slow to bind the claim, so that its Events watch surely
  // starts (and is refused) while the claim waits.
  controller_->SetAdoptionDelay(std::chrono::milliseconds(500));
  auto ok = claimer_->Claim(Request(60s));
  ASSERT_TRUE(ok) << ok.error().ToString();
  ASSERT_TRUE(claimer_->Release("default", ok->claim_name));
  controller_->SetAdoptionDelay(std::chrono::milliseconds(0));
  EXPECT_GT(server_->CountRequests("GET", "/api/v1/namespaces/default/events"), 0);
  // spec.service with a name over 63 characters (v1.0.6): the Service is
  // refused for good. deepbox's own names fit, so only a name a user chose
  // could do that; the claim name itself is refused before any request then.
  ClaimRequest r = Request(60s);
  r.name = std::string(64, 'a');
  r.users_name = true;
  auto bad = claimer_->Claim(r);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("is not a claim name"), std::string::npos)
      << bad.error().message;
  // A template whose pod is refused still ends the wait by its condition.
  json::object broken = testing::MakeTemplate("broken-template");
  broken["spec"]
      .as_object()["podTemplate"]
      .as_object()["spec"]
      .as_object()["containers"]
      .as_array()
      .front()
      .as_object()
      .erase("image");
  ASSERT_TRUE(server_->store().Create({"extensions.agents.x-k8s.io", "sandboxtemplates", "default"},
                                      broken));
  ASSERT_TRUE(server_->store().Create({"extensions.agents.x-k8s.io", "sandboxwarmpools", "default"},
                                      testing::MakeWarmPool("broken-pool", "broken-template", 0)));
  ClaimRequest b = Request(60s);
  b.warm_pool = "broken-pool";
  auto refused = claimer_->Claim(b);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("InvalidConfiguration"), std::string::npos)
      << refused.error().message;
}

// agent-sandbox v1.0+ serves v1beta1 only: discovery picks it and claims work.
TEST_F(ClaimTest, AServerServingOnlyV1beta1IsSpokenTo) {
  Init();  // the fake server's default, as v1.x
  auto type = api_->ClaimType();
  ASSERT_TRUE(type) << type.error().ToString();
  EXPECT_EQ(type->version, "v1beta1");
  auto sandbox = api_->SandboxType();
  ASSERT_TRUE(sandbox) << sandbox.error().ToString();
  EXPECT_EQ(sandbox->version, "v1beta1");
  SeedPool(server_->store(), "default", "deepagents-warmpool", "deepbox-sandbox-template", 0);
  auto c = claimer_->Claim(Request());
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ(c->api_version, "extensions.agents.x-k8s.io/v1beta1");
  EXPECT_EQ(server_->CountRequests("POST", "/v1alpha1/"), 0);
}

TEST_F(ClaimTest, ClaimDeletedWhileWaiting) {
  FakeControllerOptions co;
  co.pods_become_ready = false;
  Init({}, co);
  SeedPool(server_->store(), "default", "deepagents-warmpool", "deepbox-sandbox-template", 0);
  std::string name;
  auto f = ClaimAsync(Request(), &name);
  ASSERT_TRUE(server_->store().Delete(kClaimKey, name));
  auto c = f.get();
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("was deleted while waiting"), std::string::npos)
      << c.error().message;
}

TEST_F(ClaimTest, TtlExpiryDeletesTheClaimServerSide) {
  auto now = std::make_shared<std::atomic<int64_t>>(1787000000);
  FakeControllerOptions co;
  co.pods_become_ready = false;
  co.clock = [now] { return std::chrono::system_clock::from_time_t(now->load()); };
  Init({}, co);
  claimer_->set_clock(co.clock);
  SeedPool(server_->store(), "default", "deepagents-warmpool", "deepbox-sandbox-template", 0);
  ClaimRequest r = Request();
  r.shutdown_after = 60s;
  std::string name;
  auto f = ClaimAsync(r, &name);
  *now += 61;
  controller_->Kick();
  auto c = f.get();
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("was deleted while waiting"), std::string::npos);
  EXPECT_TRUE(ClaimNames(server_->store(), "default").empty());
}

TEST_F(ClaimTest, SurvivesA410DuringTheWait) {
  FakeControllerOptions co;
  co.pods_become_ready = false;
  Init({}, co);
  SeedPool(server_->store(), "default", "deepagents-warmpool", "deepbox-sandbox-template", 0);
  std::string name;
  auto f = ClaimAsync(Request(), &name);
  ASSERT_TRUE(server_->WaitForWatches(1));
  server_->ExpireWatches();
  ASSERT_TRUE(server_->WaitForWatchesOpened(2));
  controller_->SetPodsBecomeReady(true);
  auto c = f.get();
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ(c->claim_name, name);
  // The re-list was scoped to this claim.
  bool relisted = false;
  for (const auto& req : server_->requests()) {
    if (req.method == "GET" && req.path.ends_with("/sandboxclaims") && req.Query("watch").empty()) {
      relisted = true;
      EXPECT_EQ(req.Query("fieldSelector"), "metadata.name=" + name);
    }
  }
  EXPECT_TRUE(relisted);
}

TEST_F(ClaimTest, SurvivesAnApiserverRestartMidWatch) {
  FakeControllerOptions co;
  co.pods_become_ready = false;
  Init({}, co);
  SeedPool(server_->store(), "default", "deepagents-warmpool", "deepbox-sandbox-template", 0);
  std::string name;
  auto f = ClaimAsync(Request(), &name);
  ASSERT_TRUE(server_->WaitForWatches(1));
  server_->Stop();
  controller_->SetPodsBecomeReady(true);  // it becomes Ready while the apiserver is down
  ASSERT_TRUE(WaitUntil([&] {
    auto cl = server_->store().Get(kClaimKey, name);
    return cl && Find(*cl, {"status", "sandbox", "podIPs"}) != nullptr;
  }));
  ASSERT_TRUE(server_->Resume());
  auto c = f.get();
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ(c->pod_ip, "10.244.0.10");
}

// GET /apis/<group> requests (discovery), not the resources under it.
int DiscoveryRequests(const FakeApiServer& server) {
  int n = 0;
  for (const auto& req : server.requests()) {
    n += req.method == "GET" && req.path == "/apis/extensions.agents.x-k8s.io" ? 1 : 0;
  }
  return n;
}

// The first claim asks nothing before its create (one round trip less for
// every process that claims): v1beta1, and the version is then known.
TEST_F(ClaimTest, CreatesWithoutAskingForTheApiVersion) {
  Init();
  SeedPool(server_->store(), "default", "deepagents-warmpool", "deepbox-sandbox-template", 1);
  ASSERT_TRUE(WaitUntil(
      [&] { return PoolReadyReplicas(server_->store(), "default", "deepagents-warmpool") == 1; }));
  auto c = claimer_->Claim(Request());
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ(c->api_version, "extensions.agents.x-k8s.io/v1beta1");
  EXPECT_EQ(DiscoveryRequests(*server_), 0);
  ASSERT_TRUE(api_->KnownClaimType());
  EXPECT_EQ(api_->KnownClaimType()->version, "v1beta1");
  // The watch and the delete use it without asking either.
  ASSERT_TRUE(claimer_->Release("default", c->claim_name));
  EXPECT_EQ(DiscoveryRequests(*server_), 0);
}

TEST_F(ClaimTest, FallsBackToV1alpha1) {
  FakeApiServerOptions so;
  so.extension_versions = {"v1alpha1"};
  Init(so);
  SeedPool(server_->store(), "default", "deepagents-warmpool", "deepbox-sandbox-template", 1);
  ASSERT_TRUE(WaitUntil(
      [&] { return PoolReadyReplicas(server_->store(), "default", "deepagents-warmpool") == 1; }));
  auto c = claimer_->Claim(Request());
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ(c->api_version, "extensions.agents.x-k8s.io/v1alpha1");
  auto claim = server_->store().Get(kClaimKey, c->claim_name);
  ASSERT_TRUE(claim);
  EXPECT_EQ(FindString(*claim, {"spec", "sandboxTemplateRef", "name"}), "deepbox-sandbox-template");
  EXPECT_EQ(FindString(*claim, {"spec", "warmpool"}), "deepagents-warmpool");
  EXPECT_EQ(controller_->adoptions(), 1);
  // The v1beta1 create's 404 asked the server once; later claims know.
  EXPECT_EQ(server_->CountRequests("POST", "/v1beta1/"), 1);
  EXPECT_EQ(DiscoveryRequests(*server_), 1);
  ASSERT_TRUE(claimer_->Release("default", c->claim_name));
  ASSERT_TRUE(WaitUntil(
      [&] { return PoolReadyReplicas(server_->store(), "default", "deepagents-warmpool") == 1; }));
  auto again = claimer_->Claim(Request());
  ASSERT_TRUE(again) << again.error().ToString();
  EXPECT_EQ(again->api_version, "extensions.agents.x-k8s.io/v1alpha1");
  EXPECT_EQ(server_->CountRequests("POST", "/v1beta1/"), 1);
  EXPECT_EQ(DiscoveryRequests(*server_), 1);
}

// Without discovery up front, a cluster without agent-sandbox's extensions
// still gets the clear error (the create's 404 asks the server why).
TEST_F(ClaimTest, AServerWithoutTheExtensionsSaysSo) {
  FakeApiServerOptions so;
  so.extension_versions = {};
  Init(so);
  auto c = claimer_->Claim(Request());
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kNotFound);
  EXPECT_NE(c.error().message.find("is the agent-sandbox controller installed with its extensions"),
            std::string::npos)
      << c.error().message;
  EXPECT_EQ(DiscoveryRequests(*server_), 1);
}

TEST_F(ClaimTest, FallsBackToV1alpha1WhenDiscoveryIsHiddenAndCreate404s) {
  FakeApiServerOptions so;
  so.extension_versions = {"v1alpha1"};
  so.discovery_forbidden = true;
  Init(so);
  SeedPool(server_->store(), "default", "deepagents-warmpool", "deepbox-sandbox-template", 0);
  auto c = claimer_->Claim(Request());
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ(c->api_version, "extensions.agents.x-k8s.io/v1alpha1");
  EXPECT_EQ(server_->CountRequests("POST", "/v1beta1/"), 1);
  EXPECT_EQ(server_->CountRequests("POST", "/v1alpha1/"), 1);
}

TEST_F(ClaimTest, DeleteBySelectorLeavesOtherClaimsAlone) {
  Init();
  auto make = [&](const std::string& ns, const std::string& name,
                  std::map<std::string, std::string> labels) {
    ASSERT_TRUE(testing::AddClaim(server_->store(), ns, name, labels));
  };
  make("default", "sandbox-claim-aaaaaaaa", {{"deepagents.example/claim", "true"}});
  make("default", "sandbox-claim-bbbbbbbb", {{"deepagents.example/claim", "true"}});
  make("default", "sandbox-claim-cccccccc", {{"deepagents.example/claim", "false"}});
  make("default", "someone-else", {});
  make("other", "sandbox-claim-dddddddd", {{"deepagents.example/claim", "true"}});
  auto deleted = claimer_->DeleteBySelector("default", "deepagents.example/claim=true");
  ASSERT_TRUE(deleted) << deleted.error().ToString();
  EXPECT_EQ(*deleted,
            (std::vector<std::string>{"sandbox-claim-aaaaaaaa", "sandbox-claim-bbbbbbbb"}));
  auto left = ClaimNames(server_->store(), "default");
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"sandbox-claim-cccccccc", "someone-else"}));
  EXPECT_EQ(ClaimNames(server_->store(), "other").size(), 1u);
  EXPECT_FALSE(claimer_->DeleteBySelector("default", ""));
}

TEST_F(ClaimTest, RejectsBadInput) {
  Init();
  ClaimRequest r = Request();
  r.warm_pool.clear();
  EXPECT_EQ(claimer_->Claim(r).error().code, ErrorCode::kInvalidArgument);
  r = Request();
  r.labels = {{"bad key!", "x"}};
  auto c = claimer_->Claim(r);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("bad key!"), std::string::npos);
  EXPECT_EQ(server_->CountRequests("POST", ""), 0);
}

// The claim's watch during a run (issue 12 item 5): a deletion from outside
// is reported at once, exactly once; a stopped watch reports nothing.
TEST_F(ClaimTest, ClaimWatchReportsADeletionFromOutside) {
  Init();
  SeedPool(server_->store(), "default", "deepagents-warmpool", "deepbox-sandbox-template", 1);
  auto c = claimer_->Claim(Request());
  ASSERT_TRUE(c) << c.error().ToString();
  std::mutex mu;
  std::vector<Error> gone;
  auto w = ClaimWatch::Start(*api_, "default", c->claim_name, [&](const Error& e) {
    std::lock_guard lock(mu);
    gone.push_back(e);
  });
  ASSERT_TRUE(w) << w.error().ToString();
  // The watch is open (the server counts it) and nothing was reported.
  ASSERT_TRUE(WaitUntil([&] { return !server_->store().watches().empty(); }));
  {
    std::lock_guard lock(mu);
    EXPECT_TRUE(gone.empty());
  }
  ASSERT_TRUE(server_->store().Delete(kClaimKey, c->claim_name));
  ASSERT_TRUE(WaitUntil([&] {
    std::lock_guard lock(mu);
    return !gone.empty();
  }));
  (*w)->Stop();
  std::lock_guard lock(mu);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].code, ErrorCode::kNotFound);
  EXPECT_NE(gone[0].message.find("SandboxClaim default/" + c->claim_name + " was deleted"),
            std::string::npos)
      << gone[0].message;
  EXPECT_FALSE((*w)->failure());
}

TEST_F(ClaimTest, ClaimWatchStopsQuietlyAndSeesAnAlreadyDeletedClaim) {
  Init();
  SeedPool(server_->store(), "default", "deepagents-warmpool", "deepbox-sandbox-template", 1);
  auto c = claimer_->Claim(Request());
  ASSERT_TRUE(c) << c.error().ToString();
  int calls = 0;
  auto w = ClaimWatch::Start(*api_, "default", c->claim_name, [&](const Error&) { ++calls; });
  ASSERT_TRUE(w) << w.error().ToString();
  ASSERT_TRUE(WaitUntil([&] { return !server_->store().watches().empty(); }));
  (*w)->Stop();  // returns although the server sends nothing
  ASSERT_TRUE(claimer_->Release("default", c->claim_name));
  EXPECT_EQ(calls, 0);
  // Started on a claim that is gone: reported before Start returns.
  std::string why;
  auto late =
      ClaimWatch::Start(*api_, "default", c->claim_name, [&](const Error& e) { why = e.message; });
  ASSERT_TRUE(late) << late.error().ToString();
  EXPECT_NE(why.find("no longer exists"), std::string::npos) << why;
}

}  // namespace
}  // namespace deepbox::k8s
