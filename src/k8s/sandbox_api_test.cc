#include "k8s/sandbox_api.h"

#include <gtest/gtest.h>

#include "k8s/testing/client_fixtures.h"
#include "k8s/testing/fake_api_server.h"

namespace deepbox::k8s {
namespace {

using testing::FakeApiServer;
using testing::FakeApiServerOptions;
using testing::MakeClient;

// What Suspend/Resume send: a merge patch of spec.operatingMode. The fake
// server applies it as the real one does a CRD with a status subresource:
// the rest of spec and all of status stay, a spec change is a new
// generation, the CRD's enum holds.
TEST(SandboxApiTest, PatchSandboxMergesIntoSpecOnly) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server) << server.error().ToString();
  auto sb = ParseJsonObject(R"({"metadata":{"name":"sb-1","labels":{"a":"1"}},
    "spec":{"podTemplate":{"spec":{"containers":[{"name":"c"}]}}},
    "status":{"conditions":[{"type":"Ready","status":"True"}]}})");
  ASSERT_TRUE(sb);
  ASSERT_TRUE((*server)->store().Create({"agents.x-k8s.io", "sandboxes", "default"}, *sb));
  auto client = MakeClient(**server);
  SandboxApi api(*client);
  auto patch = [](std::string_view text) { return *ParseJsonObject(text); };
  auto patched =
      api.PatchSandbox("default", "sb-1",
                       patch(R"({"spec":{"operatingMode":"Suspended"},"status":{"conditions":[]},)"
                             R"("metadata":{"uid":"forged","labels":{"b":"2"}}})"));
  ASSERT_TRUE(patched) << patched.error().ToString();
  EXPECT_EQ(FindString(*patched, {"spec", "operatingMode"}), "Suspended");
  EXPECT_NE(Find(*patched, {"spec", "podTemplate", "spec", "containers"}), nullptr);
  EXPECT_EQ(ToJson(*Find(*patched, {"status", "conditions"})),
            R"([{"type":"Ready","status":"True"}])");
  EXPECT_EQ(FindString(*patched, {"metadata", "labels", "a"}), "1");
  EXPECT_EQ(FindString(*patched, {"metadata", "labels", "b"}), "2");
  EXPECT_NE(FindString(*patched, {"metadata", "uid"}), "forged");
  EXPECT_EQ(*Find(*patched, {"metadata", "generation"}), json::value(2));
  // The same patch again: nothing changes, not even the generation.
  patched = api.PatchSandbox("default", "sb-1", patch(R"({"spec":{"operatingMode":"Suspended"}})"));
  ASSERT_TRUE(patched);
  EXPECT_EQ(*Find(*patched, {"metadata", "generation"}), json::value(2));
  // The enum, and a missing object.
  auto bad = api.PatchSandbox("default", "sb-1", patch(R"({"spec":{"operatingMode":"Paused"}})"));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("Unsupported value"), std::string::npos)
      << bad.error().message;
  auto missing = api.PatchSandbox("default", "sb-2", patch(R"({"spec":{}})"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_EQ((*server)->CountRequests("PATCH", "/sandboxes/sb-1"), 3);
}

TEST(SandboxApiTest, DiscoveryPicksV1beta1OrFallsBackToV1alpha1) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server);
  auto client = MakeClient(**server);
  SandboxApi api(*client);
  auto t = api.ClaimType();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->ApiVersion(), "extensions.agents.x-k8s.io/v1beta1");

  FakeApiServerOptions old;
  old.extension_versions = {"v1alpha1"};
  old.sandbox_versions = {"v1alpha1"};
  auto old_server = FakeApiServer::Start(old);
  ASSERT_TRUE(old_server);
  auto old_client = MakeClient(**old_server);
  SandboxApi old_api(*old_client);
  t = old_api.ClaimType();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->version, "v1alpha1");
  EXPECT_EQ(old_api.SandboxType()->version, "v1alpha1");

  FakeApiServerOptions none;
  none.extension_versions = {};
  auto bare = FakeApiServer::Start(none);
  ASSERT_TRUE(bare);
  auto bare_client = MakeClient(**bare);
  SandboxApi bare_api(*bare_client);
  auto missing = bare_api.ClaimType();
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("with its extensions"), std::string::npos);

  FakeApiServerOptions forbidden;
  forbidden.discovery_forbidden = true;
  auto locked = FakeApiServer::Start(forbidden);
  ASSERT_TRUE(locked);
  auto locked_client = MakeClient(**locked);
  SandboxApi locked_api(*locked_client);
  EXPECT_EQ(locked_api.ClaimType()->version, "v1beta1");  // assumed
  locked_api.FallBackToV1alpha1();
  EXPECT_EQ(locked_api.ClaimType()->version, "v1alpha1");
}
}  // namespace
}  // namespace deepbox::k8s
