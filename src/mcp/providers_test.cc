// The k8s backend of `deepbox mcp` against the fake API server: claim ids
// outside the configured namespace are refused before any API request (the
// server's kubeconfig may reach other namespaces; its clients may not).
#include "mcp/providers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "k8s/testing/fake_api_server.h"

namespace deepbox::mcp {
namespace {

using ::testing::HasSubstr;

TEST(K8sBackendTest, ClaimsOutsideTheConfiguredNamespaceAreRefused) {
  auto server = k8s::testing::FakeApiServer::Start();
  ASSERT_TRUE(server) << server.error().message;
  char tmpl[] = "/tmp/mcp-k8s-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  std::string kubeconfig = dir + "/kubeconfig";
  ASSERT_TRUE((*server)->WriteKubeconfig(kubeconfig, "team-a"));
  K8sBackendOptions o;
  o.kubeconfig = kubeconfig;
  o.namespace_name = "team-a";
  o.router_url = "http://127.0.0.1:9";  // never reached: nothing connects here
  auto backend = MakeK8sBackend(o);
  ASSERT_TRUE(backend) << backend.error().message;
  SandboxBackend& b = **backend;
  EXPECT_TRUE(b.Owns("team-b/claim-1"));  // an id, but not ours
  EXPECT_FALSE(b.has_network());
  int before = static_cast<int>((*server)->requests().size());
  auto c = b.Connect("team-b/claim-1");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kPermissionDenied);
  EXPECT_THAT(c.error().message, HasSubstr("outside namespace 'team-a'"));
  auto d = b.Delete("team-b/claim-1");
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, ErrorCode::kPermissionDenied);
  auto prefix = b.Delete("team-a-other/claim-1");  // a namespace that merely starts alike
  ASSERT_FALSE(prefix);
  EXPECT_EQ(prefix.error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(static_cast<int>((*server)->requests().size()), before);  // the API was not asked
  EXPECT_EQ((*server)->CountRequests("DELETE", "team-b"), 0);
  // In its own namespace the API is asked (and there is no such claim).
  auto own = b.Delete("team-a/claim-1");
  ASSERT_FALSE(own);
  EXPECT_EQ(own.error().code, ErrorCode::kNotFound) << own.error().message;
  EXPECT_EQ((*server)->CountRequests("DELETE", "/namespaces/team-a/"), 1);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace deepbox::mcp
