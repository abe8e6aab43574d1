// `deepbox image pull|ls|rm|prune`, the binary itself, against a real
// docker-registry on loopback: JSON events, exit codes, the cache it leaves.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/strings.h"
#include "common/subprocess.h"
#include "common/testing/temp_dir.h"
#include "oci/manifest.h"
#include "oci/testing/layer_builder.h"
#include "oci/testing/test_registry.h"

namespace deepbox::cli {
namespace {

using namespace oci::testing;  // NOLINT: the image vocabulary

struct CommandRun {
  int status = -1;
  std::string out, err;
};

CommandRun Deepbox(const std::string& cache, std::vector<std::string> args) {
  SubprocessOptions o;
  o.argv = {std::string(DEEPBOX_BIN_DIR) + "/deepbox"};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.env = {{"DEEPBOX_IMAGE_DIR", cache}};
  o.unset_env = {"DOCKER_CONFIG", "REGISTRY_AUTH_FILE"};
  o.capture_stdout = true;
  o.capture_stderr = true;
  auto r = RunCommand(o, std::chrono::minutes(2));
  if (!r) return {-1, "", r.error().message};
  return {WIFEXITED(r->wait_status) ? WEXITSTATUS(r->wait_status) : -1, r->out, r->err};
}

TEST(ImageCommandTest, PullLsRmPrune) {
  auto registry = TestRegistry::Start({});
  if (!registry && registry.error().message.find("not installed") != std::string::npos) {
    GTEST_SKIP() << registry.error().message;
  }
  ASSERT_TRUE(registry) << registry.error().message;
  std::string config = ConfigJson("amd64", {}, "/", "");
  std::string layer = BuildLayer({File("hello", "world")});
  ASSERT_TRUE((*registry)->PushBlob("demo", config));
  ASSERT_TRUE((*registry)->PushBlob("demo", layer));
  ASSERT_TRUE(
      (*registry)->PushManifest("demo", "v1", std::string(oci::kOciManifest),
                                ManifestJson(RefOf(std::string(oci::kOciConfig), config),
                                             {RefOf(LayerMediaType(Compression::kGzip), layer)})));
  deepbox::testing::TempDir cache("cli-image");
  const std::string dir = cache.Path("images");
  const std::string ref = (*registry)->host() + "/demo:v1";

  CommandRun pull = Deepbox(dir, {"image", "pull", ref, "--json"});
  ASSERT_EQ(pull.status, 0) << pull.err;
  std::vector<std::string> events;
  for (auto line : SplitLines(pull.out)) {
    auto event = ParseJsonObject(line);
    ASSERT_TRUE(event) << line;
    events.push_back(GetOptString(*event, "event").value_or("?"));
  }
  EXPECT_EQ(Join(events, " "), "resolved layer_start layer_progress layer_progress layer_done done")
      << pull.out;

  CommandRun plain = Deepbox(dir, {"image", "pull", ref});  // not a terminal: one line per layer
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_NE(plain.err.find("layer 1/1 sha256:"), std::string::npos) << plain.err;
  EXPECT_NE(plain.err.find(" cached"), std::string::npos) << plain.err;

  CommandRun ls = Deepbox(dir, {"image", "ls", "--json"});
  ASSERT_EQ(ls.status, 0) << ls.err;
  auto list = ParseJson(ls.out);
  ASSERT_TRUE(list && list->is_array());
  ASSERT_EQ(list->as_array().size(), 1u);
  EXPECT_EQ(FindString(list->as_array()[0], {"name"}), ref);

  EXPECT_EQ(Deepbox(dir, {"image", "pull", "Bad Name"}).status, 2);
  CommandRun missing = Deepbox(dir, {"image", "pull", (*registry)->host() + "/demo:nope"});
  EXPECT_EQ(missing.status, 3);
  EXPECT_NE(missing.err.find("has no manifest"), std::string::npos) << missing.err;

  EXPECT_EQ(Deepbox(dir, {"image", "rm", ref}).status, 0);
  EXPECT_EQ(Deepbox(dir, {"image", "rm", ref}).status, 3);
  CommandRun prune = Deepbox(dir, {"image", "prune"});
  EXPECT_EQ(prune.status, 0) << prune.err;
  EXPECT_NE(prune.out.find("removed 0 blobs"), std::string::npos) << prune.out;
}

}  // namespace
}  // namespace deepbox::cli
