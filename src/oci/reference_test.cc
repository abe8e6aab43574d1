#include "oci/reference.h"

#include <gtest/gtest.h>

namespace deepbox::oci {
namespace {

std::string Canonical(std::string_view text) {
  auto r = ParseImageReference(text);
  return r ? r->ToString() : "error: " + r.error().message;
}

TEST(ReferenceTest, DockerHubShortNamesGetLibraryAndLatest) {
  EXPECT_EQ(Canonical("python:3.12-slim-bookworm"), "docker.io/library/python:3.12-slim-bookworm");
  EXPECT_EQ(Canonical("python"), "docker.io/library/python:latest");
  EXPECT_EQ(Canonical("org/app"), "docker.io/org/app:latest");
  EXPECT_EQ(Canonical("index.docker.io/library/busybox:1"), "docker.io/library/busybox:1");
  auto r = ParseImageReference("python:3.12");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->ApiHost(), "registry-1.docker.io");
  EXPECT_EQ(r->repository, "library/python");
  EXPECT_EQ(r->ManifestReference(), "3.12");
}

TEST(ReferenceTest, RegistryWithPortAndDigest) {
  const std::string digest = "sha256:" + std::string(64, 'a');
  auto r = ParseImageReference("localhost:5000/team/app:v1@" + digest);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->registry, "localhost:5000");
  EXPECT_EQ(r->repository, "team/app");
  EXPECT_EQ(r->tag, "v1");
  EXPECT_EQ(r->digest, digest);
  EXPECT_EQ(r->ManifestReference(), digest);
  EXPECT_EQ(r->HostName(), "localhost");
  EXPECT_EQ(Canonical("app@" + digest), "docker.io/library/app@" + digest);
  EXPECT_EQ(Canonical("ghcr.io/o/a"), "ghcr.io/o/a:latest");
  EXPECT_EQ(Canonical("127.0.0.1:5000/a:b"), "127.0.0.1:5000/a:b");
  auto v6 = ParseImageReference("[::1]:5000/a");
  ASSERT_TRUE(v6) << v6.error().message;
  EXPECT_EQ(v6->HostName(), "::1");
  EXPECT_TRUE(IsLoopbackHost(v6->HostName()));
}

TEST(ReferenceTest, RefusesMalformedNames) {
  for (std::string bad : {"", "Python", "a//b", "a:", "a:-x", "a@sha256:abc", "/a", "a/", "a:b:c",
                          "-a", "a..b", "localhost:99999/a", "a@md5:00"}) {
    auto r = ParseImageReference(bad);
    EXPECT_FALSE(r) << bad << " -> " << (r ? r->ToString() : "");
    if (!r) {
      EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    }
  }
}

TEST(ReferenceTest, LoopbackHosts) {
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.1.2.3"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_FALSE(IsLoopbackHost("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("localhost.example.com"));
}

}  // namespace
}  // namespace deepbox::oci
