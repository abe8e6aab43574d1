#include "oci/manifest.h"

#include <gtest/gtest.h>

#include "oci/testing/layer_builder.h"

namespace deepbox::oci {
namespace {

using testing::BlobRef;

TEST(ManifestTest, ParsesManifestAndConfig) {
  std::string config = testing::ConfigJson("amd64", {"PATH=/usr/bin", "A=b"}, "/work", "app");
  BlobRef layer = testing::RefOf(std::string(kOciLayerGzip), "layer");
  std::string body =
      testing::ManifestJson(testing::RefOf(std::string(kOciConfig), config), {layer});
  EXPECT_EQ(ManifestMediaType(body, ""), kOciManifest);
  auto m = ParseImageManifest(body);
  ASSERT_TRUE(m) << m.error().message;
  ASSERT_EQ(m->layers.size(), 1u);
  EXPECT_EQ(m->layers[0].digest, layer.digest);
  auto c = ParseImageConfig(config);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->env.size(), 2u);
  EXPECT_EQ(c->working_dir, "/work");
  EXPECT_EQ(c->user, "app");
  EXPECT_EQ(c->platform.architecture, "amd64");
}

TEST(ManifestTest, RefusesBadDigestsAndUnknownLayers) {
  BlobRef config = testing::RefOf(std::string(kOciConfig), "{}");
  BlobRef bad = config;
  bad.digest = "sha256:../../x";
  EXPECT_FALSE(ParseImageManifest(testing::ManifestJson(bad, {})));
  BlobRef foreign{"application/vnd.example.weird", config.digest, 2};
  auto m = ParseImageManifest(testing::ManifestJson(config, {foreign}));
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code, ErrorCode::kUnimplemented);
  EXPECT_FALSE(ParseImageManifest(std::string(kMaxManifestBytes + 1, ' ')));
}

TEST(ManifestTest, SelectsThePlatform) {
  BlobRef a = testing::RefOf(std::string(kOciManifest), "a");
  BlobRef b = testing::RefOf(std::string(kOciManifest), "b");
  auto index = ParseImageIndex(testing::IndexJson({{a, "amd64"}, {b, "arm64"}}));
  ASSERT_TRUE(index);
  auto arm = SelectPlatform(*index, {"linux", "arm64", ""});
  ASSERT_TRUE(arm);
  EXPECT_EQ(arm->digest, b.digest);
  auto none = SelectPlatform(*index, {"linux", "riscv64", ""});
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("linux/amd64, linux/arm64"), std::string::npos);
  Platform host = HostPlatform();
  EXPECT_EQ(host.os, "linux");
  EXPECT_FALSE(host.architecture.empty());
}

}  // namespace
}  // namespace deepbox::oci
