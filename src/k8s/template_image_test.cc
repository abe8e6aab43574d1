#include "k8s/template_image.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace deepbox::k8s {
namespace {

using ::testing::HasSubstr;

json::object Template(const std::string& name, const std::string& image_json) {
  auto o = ParseJsonObject(
      R"({"kind":"SandboxTemplate","metadata":{"name":")" + name +
      R"("},"spec":{"podTemplate":{"spec":{"containers":[{"name":"sandbox","image":)" + image_json +
      R"(},{"name":"sidecar","image":"busybox:1"}]}}}})");
  return *o;
}

json::object Pool(const std::string& name, const std::string& tmpl) {
  auto o = ParseJsonObject(R"({"kind":"SandboxWarmPool","metadata":{"name":")" + name +
                           R"("},"spec":{"sandboxTemplateRef":{"name":")" + tmpl + R"("}}})");
  return *o;
}

TEST(ImageMatchesTest, NormalisesDockerHubNamesAndDefaultTag) {
  for (const char* same : {"python:3.12", "docker.io/library/python:3.12",
                           "index.docker.io/library/python:3.12", "library/python:3.12"}) {
    auto m = ImageMatches("python:3.12", same);
    ASSERT_TRUE(m) << m.error().message;
    EXPECT_TRUE(*m) << same;
  }
  EXPECT_TRUE(*ImageMatches("python", "docker.io/library/python:latest"));
  EXPECT_FALSE(*ImageMatches("python", "python:3.12"));
  EXPECT_FALSE(*ImageMatches("python:3.12", "python:3.13"));
  EXPECT_FALSE(*ImageMatches("python:3.12", "ghcr.io/library/python:3.12"));
  EXPECT_FALSE(*ImageMatches("team/python:3.12", "python:3.12"));
}

TEST(ImageMatchesTest, ADigestDecidesAndATagMatchesItsPinnedForm) {
  const std::string d1 = "sha256:" + std::string(64, 'a');
  const std::string d2 = "sha256:" + std::string(64, 'b');
  EXPECT_TRUE(*ImageMatches("python@" + d1, "python:3.12@" + d1));
  EXPECT_TRUE(*ImageMatches("python:3.11@" + d1, "python:3.12@" + d1));  // the digest runs
  EXPECT_FALSE(*ImageMatches("python@" + d1, "python@" + d2));
  EXPECT_FALSE(*ImageMatches("python@" + d1, "python:3.12"));  // a tag may move
  EXPECT_TRUE(*ImageMatches("python:3.12", "python:3.12@" + d1));
  EXPECT_FALSE(*ImageMatches("python:3.12", "python@" + d1));  // which tag is unknown
}

TEST(ImageMatchesTest, BadReferences) {
  auto bad = ImageMatches("Not An Image", "python:3.12");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(*ImageMatches("python:3.12", ""));
  EXPECT_FALSE(*ImageMatches("python:3.12", "UPPER/Case:1"));
}

TEST(TemplateMainImageTest, FirstContainerAndHostileShapes) {
  EXPECT_EQ(TemplateMainImage(Template("t", R"("python:3.12")")), "python:3.12");
  EXPECT_EQ(TemplateMainImage(Template("t", "42")), "");
  EXPECT_EQ(TemplateMainImage(Template("t", "null")), "");
  for (const char* odd :
       {R"({})", R"({"spec":1})", R"({"spec":{"podTemplate":[]}})",
        R"({"spec":{"podTemplate":{"spec":{"containers":{}}}}})",
        R"({"spec":{"podTemplate":{"spec":{"containers":[]}}}})",
        R"({"spec":{"podTemplate":{"spec":{"containers":["python:3.12"]}}}})",
        R"({"spec":{"podTemplate":{"spec":{"containers":[{"image":["python"]}]}}}})"}) {
    auto o = ParseJsonObject(odd);
    ASSERT_TRUE(o) << odd;
    EXPECT_EQ(TemplateMainImage(*o), "") << odd;
  }
}

TEST(ChooseTemplateTest, ImageSelectsTheTemplateAndAPoolOfIt) {
  std::vector<json::object> templates = {Template("py", R"("python:3.12-slim-bookworm")"),
                                         Template("node", R"("docker.io/library/node:22")")};
  std::vector<json::object> pools = {Pool("default-pool", "py"), Pool("node-b", "node"),
                                     Pool("node-a", "node")};
  auto c = ChooseTemplate({"node:22", "", "default-pool", "ns"}, templates, pools);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->template_name, "node");
  EXPECT_EQ(c->image, "docker.io/library/node:22");
  EXPECT_EQ(c->warm_pool, "node-a");  // the first by name
  c = ChooseTemplate({"node:22", "", "node-b", "ns"}, templates, pools);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->warm_pool, "node-b");  // the configured one when it fits
  c = ChooseTemplate({"python:3.12-slim-bookworm", "", "default-pool", "ns"}, templates, pools);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->warm_pool, "default-pool");
}

TEST(ChooseTemplateTest, NoMatchNamesTheTemplatesAndTheirImages) {
  std::vector<json::object> templates = {Template("py", R"("python:3.12")"), Template("odd", "7")};
  auto c = ChooseTemplate({"golang:1.23", "", "p", "team"}, templates, {Pool("p", "py")});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(c.error().message, HasSubstr("golang:1.23"));
  EXPECT_THAT(c.error().message, HasSubstr("namespace team"));
  EXPECT_THAT(c.error().message, HasSubstr("py (python:3.12)"));
  EXPECT_THAT(c.error().message, HasSubstr("odd (no image)"));
  c = ChooseTemplate({"golang:1.23", "", "p", "team"}, {}, {});
  ASSERT_FALSE(c);
  EXPECT_THAT(c.error().message, HasSubstr("none"));
}

TEST(ChooseTemplateTest, TemplateFlagMustAgreeWithImageAndHaveAPool) {
  std::vector<json::object> templates = {Template("py", R"("python:3.12")"),
                                         Template("lonely", R"("node:22")")};
  std::vector<json::object> pools = {Pool("p", "py")};
  auto c = ChooseTemplate({"", "py", "other", "ns"}, templates, pools);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->warm_pool, "p");
  c = ChooseTemplate({"node:22", "py", "p", "ns"}, templates, pools);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(c.error().message, HasSubstr("SandboxTemplate py runs python:3.12"));
  c = ChooseTemplate({"", "missing", "p", "ns"}, templates, pools);
  ASSERT_FALSE(c);
  EXPECT_THAT(c.error().message, HasSubstr("no SandboxTemplate 'missing'"));
  c = ChooseTemplate({"node:22", "", "p", "ns"}, templates, pools);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(c.error().message, HasSubstr("no SandboxWarmPool in namespace ns uses it"));
}

TEST(ChooseTemplateTest, HostileObjectsAreSkippedNotFatal) {
  std::vector<json::object> templates = {
      *ParseJsonObject(R"({"metadata":{"name":5}})"), *ParseJsonObject(R"({"metadata":[]})"),
      *ParseJsonObject(R"({})"), Template("py", R"("python:3.12")")};
  std::vector<json::object> pools = {*ParseJsonObject(R"({"spec":{"sandboxTemplateRef":"py"}})"),
                                     *ParseJsonObject(R"({"metadata":{"name":"Bad Name"},
                                       "spec":{"sandboxTemplateRef":{"name":"py"}}})"),
                                     Pool("p", "py")};
  auto c = ChooseTemplate({"python:3.12", "", "", "ns"}, templates, pools);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->warm_pool, "p");
}

}  // namespace
}  // namespace deepbox::k8s
