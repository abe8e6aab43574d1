// Issue 24: local sandboxes on OCI images (`--image`), end to end through the
// real CLI: images built here from this host's own shell and coreutils,
// pushed to Debian's docker-registry on loopback, pulled on first use, run
// as overlayfs roots inside the sandboxes' user namespaces; pins, warm pools
// per image, and the failures.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cli_fixture.h"
#include "common/json.h"
#include "local/image_root.h"
#include "local/testing/host_userland_layer.h"
#include "oci/manifest.h"
#include "oci/testing/layer_builder.h"
#include "oci/testing/test_registry.h"

namespace deepbox::local::lifecycle::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;
namespace ot = deepbox::oci::testing;

std::string ReadHostFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every path, type, mode, owner and content under `dir`: the image cache
// before and after sandboxes used it.
std::string TreeState(const fs::path& dir) {
  std::map<std::string, std::string> entries;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    lstat(it->path().c_str(), &st);
    std::string v = std::to_string(st.st_mode) + " " + std::to_string(st.st_uid) + " " +
                    std::to_string(st.st_size);
    if (S_ISREG(st.st_mode))
      v += " " + std::to_string(std::hash<std::string>{}(ReadHostFile(it->path())));
    entries[it->path().string()] = v;
  }
  std::string out;
  for (const auto& [k, v] : entries) out += k + " " + v + "\n";
  return out;
}

class ImageCliTest : public LocalCliTest {
 protected:
  void SetUp() override {
    LocalCliTest::SetUp();
    if (IsSkipped()) return;
    ImageRootSupport support = ProbeImageRoots();
    if (!support.works) GTEST_SKIP() << "no image roots on this host: " << support.reason;
    auto registry = ot::TestRegistry::Start({});
    if (!registry && registry.error().message.find("not installed") != std::string::npos) {
      GTEST_SKIP() << registry.error().message;
    }
    ASSERT_TRUE(registry) << registry.error().message;
    registry_ = std::move(*registry);
    image_ = registry_->host() + "/test/box:v1";
    Push("test/box", "v1", BaseLayer(), TopLayer());
  }

  // The host's shell and coreutils, and files the tests look for.
  static std::vector<ot::LayerEntry> BaseLayer() {
    std::set<std::string> dirs;
    std::vector<ot::LayerEntry> entries =
        local::testing::HostUserlandLayer(local::testing::CollectHostUserland(), dirs);
    if (dirs.insert("etc").second) entries.push_back(ot::Dir("etc"));
    entries.push_back(ot::File("etc/os-release", "ID=deepbox-image-test\n"));
    entries.push_back(ot::File("etc/gone", "hidden by a whiteout\n"));
    entries.push_back(ot::Dir("opq"));
    entries.push_back(ot::File("opq/old", "hidden by an opaque dir\n"));
    entries.push_back(ot::Dir("data", 0777));
    entries.push_back(ot::File("data/shared", "w\n", 0666));
    entries.push_back(ot::File("secret", "root only\n", 0600));
    return entries;
  }
  static std::vector<ot::LayerEntry> TopLayer() {
    return {ot::File("etc/.wh.gone", ""), ot::File("opq/.wh..wh..opq", ""),
            ot::File("opq/new", "top\n"), ot::Dir("srv"),
            ot::Dir("srv/app"),           ot::File("srv/app/README", "the working dir\n")};
  }

  void Push(const std::string& repo, const std::string& tag,
            const std::vector<ot::LayerEntry>& base, const std::vector<ot::LayerEntry>& top) {
    std::string config = ot::ConfigJson(
        oci::HostPlatform().architecture,
        {"PATH=/usr/local/bin:/usr/bin:/bin", "IMAGE_VAR=from-the-image", "HOME=/root"}, "/srv/app",
        "nobody");
    ASSERT_TRUE(registry_->PushBlob(repo, config));
    std::vector<ot::BlobRef> refs;
    for (const auto* entries : {&base, &top}) {
      std::string bytes = ot::BuildLayer(*entries, ot::Compression::kGzip);
      auto pushed = registry_->PushBlob(repo, bytes);
      ASSERT_TRUE(pushed) << pushed.error().message;
      refs.push_back(ot::RefOf(ot::LayerMediaType(ot::Compression::kGzip), bytes));
    }
    std::string manifest = ot::ManifestJson(ot::RefOf(std::string(oci::kOciConfig), config), refs);
    auto st = registry_->PushManifest(repo, tag, std::string(oci::kOciManifest), manifest);
    ASSERT_TRUE(st) << st.error().message;
  }

  SandboxMeta CreateOn(const std::string& image, std::vector<std::string> extra = {},
                       CliResult* result = nullptr) {
    std::vector<std::string> args = {"sandbox",   "create", "--ttl",   "900",
                                     "--network", "none",   "--image", image};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = Cli(args);
    if (result != nullptr) *result = r;
    EXPECT_EQ(r.code, 0) << r.err;
    return Meta(CreatedId(r));
  }
  CliResult Exec(const std::string& id, const std::string& script) {
    return Cli({"sandbox", "exec", id, "--", "/bin/sh", "-c", script});
  }
  fs::path ImageDir() const { return state_ / "images"; }
  size_t CountIn(const fs::path& dir) const {
    size_t n = 0;
    std::error_code ec;
    for (auto it = fs::directory_iterator(dir, ec); it != fs::directory_iterator();
         it.increment(ec)) {
      ++n;
    }
    return n;
  }

  std::unique_ptr<ot::TestRegistry> registry_;
  std::string image_;
};

TEST_F(ImageCliTest, ASandboxRunsOnThePulledImage) {
  CliResult created;
  SandboxMeta m = CreateOn(image_, {}, &created);
  ASSERT_FALSE(m.id.empty());
  // Pulled on first use, with `image pull`'s lines.
  EXPECT_THAT(created.err, HasSubstr("layer 2/2"));
  EXPECT_EQ(m.image.name, image_);
  EXPECT_EQ(m.image.layers.size(), 2u);
  const std::string cache_before = TreeState(ImageDir() / "layers");

  CliResult r = Exec(m.id,
                     "cat /etc/os-release; echo var=$IMAGE_VAR; echo pwd=$(pwd); echo home=$HOME; "
                     "echo uid=$(id -u); test -e /etc/gone || echo gone-is-hidden; ls /opq; "
                     "stat -c 'owner=%u' /etc/os-release; echo new > /data/created; "
                     "echo more >> /data/shared; cat /data/shared; "
                     "(echo x > /etc/os-release) 2>/dev/null || echo root-file-refused; "
                     "(cat /secret) 2>/dev/null || echo secret-refused; "
                     "(touch /deepbox/bin/planted) 2>/dev/null || echo daemon-read-only; "
                     "echo ws > /workspace/file && cat /workspace/file");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("ID=deepbox-image-test"));
  EXPECT_THAT(r.out, HasSubstr("var=from-the-image"));  // the config's Env
  EXPECT_THAT(r.out, HasSubstr("pwd=/srv/app"));        // its WorkingDir
  EXPECT_THAT(r.out, HasSubstr("home=/workspace"));     // the sandbox's own HOME
  EXPECT_THAT(r.out, HasSubstr("uid=1000"));            // not its User
  EXPECT_THAT(r.out, HasSubstr("gone-is-hidden"));
  EXPECT_THAT(r.out, HasSubstr("new\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("old")));
  if (geteuid() == 0) {
    EXPECT_THAT(r.out, HasSubstr("owner=0"));
  }
  EXPECT_THAT(r.out, HasSubstr("w\nmore\n"));
  EXPECT_THAT(r.out, HasSubstr("root-file-refused"));
  if (geteuid() == 0) {
    EXPECT_THAT(r.out, HasSubstr("secret-refused"));
  }
  EXPECT_THAT(r.out, HasSubstr("daemon-read-only"));
  EXPECT_THAT(r.out, HasSubstr("ws\n"));

  // The writes are in this sandbox's upper layer (its own tmpfs, nowhere in
  // its state dir or the cache): the cache is as it was.
  EXPECT_EQ(TreeState(ImageDir() / "layers"), cache_before);
  EXPECT_TRUE(fs::exists(ImageDir() / "pins" / (m.id + ".json")));
  CliResult again = Exec(m.id, "cat /data/created");
  EXPECT_EQ(again.out, "new\n") << again.err;

  // Deleting the sandbox removes its pin; the cache stays as it was.
  CliResult rm = Cli({"sandbox", "rm", m.id});
  ASSERT_EQ(rm.code, 0) << rm.err;
  EXPECT_FALSE(fs::exists(state_ / "sandboxes" / m.id));
  EXPECT_FALSE(fs::exists(ImageDir() / "pins" / (m.id + ".json")));
  EXPECT_EQ(TreeState(ImageDir() / "layers"), cache_before);
}

TEST_F(ImageCliTest, PinsKeepAnImageInUseFromRmAndPrune) {
  SandboxMeta m = CreateOn(image_);
  ASSERT_FALSE(m.id.empty());
  CliResult rm = Cli({"image", "rm", image_});
  EXPECT_NE(rm.code, 0);
  EXPECT_THAT(rm.err, HasSubstr(m.id));
  EXPECT_THAT(rm.err, HasSubstr("in use"));
  CliResult prune = Cli({"image", "prune"});
  ASSERT_EQ(prune.code, 0) << prune.err;
  for (const auto& layer : m.image.layers) EXPECT_TRUE(fs::exists(layer)) << layer;
  CliResult r = Exec(m.id, "cat /opq/new");
  EXPECT_EQ(r.out, "top\n") << r.err;

  // A stale pin (its sandbox's state dir gone without a goodbye) keeps nothing.
  fs::path stale = ImageDir() / "pins" / "sb-gone.json";
  {
    std::string pin = ReadFile(ImageDir() / "pins" / (m.id + ".json"));
    auto doc = ParseJsonObject(pin);
    ASSERT_TRUE(doc);
    (*doc)["sandbox"] = "sb-gone";
    (*doc)["sandbox_dir"] = (state_ / "sandboxes" / "sb-gone").string();
    std::ofstream(stale) << ToJson(*doc);
  }
  ASSERT_EQ(Cli({"sandbox", "rm", m.id}).code, 0);
  rm = Cli({"image", "rm", image_});
  EXPECT_EQ(rm.code, 0) << rm.err;
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_EQ(CountIn(ImageDir() / "layers/sha256"), 0u);
  EXPECT_EQ(CountIn(ImageDir() / "pins"), 0u);
}

TEST_F(ImageCliTest, TwoSandboxesShareTheLayersNotTheirWrites) {
  SandboxMeta a = CreateOn(image_);
  SandboxMeta b = CreateOn(image_);
  ASSERT_FALSE(a.id.empty());
  ASSERT_FALSE(b.id.empty());
  EXPECT_EQ(a.image.layers, b.image.layers);
  EXPECT_EQ(CountIn(ImageDir() / "layers/sha256"), 2u);  // stored once
  ASSERT_EQ(Exec(a.id, "echo from-a > /data/mine").code, 0);
  CliResult r = Exec(b.id, "cat /data/mine 2>/dev/null || echo not-shared");
  EXPECT_EQ(r.out, "not-shared\n") << r.err;
}

TEST_F(ImageCliTest, AMissingOrUnreachableImageFailsClearlyAndLeavesNothing) {
  CliResult missing = Cli({"sandbox", "create", "--json", "--network", "none", "--image",
                           registry_->host() + "/test/nothing:v1"});
  EXPECT_NE(missing.code, 0);
  EXPECT_THAT(missing.err, HasSubstr("test/nothing:v1"));
  CliResult unreachable =
      Cli({"sandbox", "create", "--json", "--network", "none", "--image", "127.0.0.1:1/test/x:v1"});
  EXPECT_NE(unreachable.code, 0);
  EXPECT_THAT(unreachable.err, HasSubstr("127.0.0.1:1/test/x:v1"));
  CliResult bad = Cli({"sandbox", "create", "--json", "--image", "UPPER/Case:v1"});
  EXPECT_EQ(bad.code, 2) << bad.err;
  CliResult both = Cli({"sandbox", "create", "--json", "--image", image_, "--rootfs", "/"});
  EXPECT_EQ(both.code, 2) << both.err;
  EXPECT_THAT(both.err, HasSubstr("--rootfs"));
  EXPECT_EQ(Cli({"sandbox", "ls", "-q"}).out, "");
  EXPECT_EQ(CountIn(ImageDir() / "images"), 0u);
  EXPECT_EQ(CountIn(ImageDir() / "pins"), 0u);
}

// `--image` alone is the default image (oci/default_image.h), a Docker Hub
// name: here it comes from a loopback registry named as Docker Hub's mirror
// in registries.conf, the primary rewritten to a closed loopback port, so
// nothing but loopback is ever contacted.
TEST_F(ImageCliTest, TheDefaultImageComesThroughARegistryMirror) {
  Push("library/python", "3.12-slim-bookworm", BaseLayer(), TopLayer());
  fs::path conf = state_ / "registries.conf";
  {
    std::ofstream out(conf);
    out << "[[registry]]\nprefix = \"docker.io\"\nlocation = \"127.0.0.1:1\"\n"
        << "[[registry.mirror]]\nlocation = \"" << registry_->host() << "\"\n";
  }
  ASSERT_EQ(setenv("CONTAINERS_REGISTRIES_CONF", conf.c_str(), 1), 0);
  struct Unset {
    ~Unset() { unsetenv("CONTAINERS_REGISTRIES_CONF"); }
  } unset;
  CliResult pulled = Cli({"image", "pull", "--json", "python:3.12-slim-bookworm"});
  ASSERT_EQ(pulled.code, 0) << pulled.err;
  EXPECT_THAT(pulled.out, HasSubstr("\"mirror\":\"" + registry_->host() +
                                    "/library/python:3.12-slim-bookworm\""));
  CliResult created = Cli({"sandbox", "create", "--ttl", "900", "--network", "none", "--image"});
  ASSERT_EQ(created.code, 0) << created.err;
  std::string id = CreatedId(created);
  CliResult r = Exec(id, "cat /etc/os-release; pwd");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "ID=deepbox-image-test\n/srv/app\n");
  EXPECT_THAT(Cli({"image", "ls"}).out, HasSubstr("docker.io/library/python:3.12-slim-bookworm"));
  ASSERT_EQ(Cli({"sandbox", "rm", id}).code, 0);

  // A blocked Docker Hub: the default image is refused, saying by what.
  {
    std::ofstream out(conf);
    out << "[[registry]]\nprefix = \"docker.io\"\nblocked = true\n";
  }
  CliResult blocked = Cli({"image", "pull", "python:3.13"});
  EXPECT_NE(blocked.code, 0);
  EXPECT_THAT(blocked.err, HasSubstr("blocked by " + conf.string()));
}

// The daemon dlopen()s libarchive for directory copies (libnghttp2 for gRPC,
// OpenSSL for tokens); on an image, whose libraries are the image's, the bundle brings
// them: a tree goes in and comes back out.
TEST_F(ImageCliTest, DirectoriesCopyBothWaysOnAnImage) {
  SandboxMeta m = CreateOn(image_);
  fs::path host = state_ / "tree-host";
  fs::create_directories(host / "tree" / "sub");
  std::ofstream(host / "tree" / "a.txt") << "A";
  std::ofstream(host / "tree" / "sub" / "b.txt") << "B";
  CliResult r = Cli({"sandbox", "cp", (host / "tree").string(), m.id + ":/workspace/"});
  ASSERT_EQ(r.code, 0) << r.err;
  r = Exec(m.id, "cat /workspace/tree/a.txt /workspace/tree/sub/b.txt");
  EXPECT_EQ(r.out, "AB") << r.err;
  r = Cli({"sandbox", "cp", m.id + ":/workspace/tree", (host / "back").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ReadHostFile((host / "back" / "sub" / "b.txt").string()), "B");
  r = Exec(m.id, "ls /deepbox/lib");
  EXPECT_THAT(r.out, HasSubstr("libarchive.so.13"));
  EXPECT_THAT(r.out, HasSubstr("libnghttp2.so.14"));
  EXPECT_THAT(r.out, HasSubstr("libssl.so.3"));  // token checks (net/openssl_loader.h)
  EXPECT_THAT(r.out, HasSubstr("libcrypto.so.3"));
}

TEST_F(ImageCliTest, AWarmPoolServesOnlyClaimsForItsImage) {
  StartPool("img", 1, {"--image", image_});
  ASSERT_TRUE(Eventually([&] { return WarmOf("img").size() == 1; }, 120s)) << PoolLog("img");
  SandboxMeta host_root = Meta(
      CreatedId(Cli({"sandbox", "create", "--ttl", "900", "--network", "none", "--pool", "img"})));
  EXPECT_EQ(host_root.pool, "") << "a claim without --image took the image's warm sandbox";
  SandboxMeta warm = CreateOn(image_, {"--pool", "img"});
  EXPECT_EQ(warm.pool, "img");
  EXPECT_EQ(warm.image.name, image_);
  CliResult r = Exec(warm.id, "cat /etc/os-release");
  EXPECT_THAT(r.out, HasSubstr("ID=deepbox-image-test")) << r.err;
  // The pool pins what its warm sandboxes use.
  EXPECT_NE(Cli({"image", "rm", image_}).code, 0);
}

// The tag moves and is pulled again: the pool replaces its warm sandboxes
// with ones of the digest the name now has, which claims for it ask for.
TEST_F(ImageCliTest, APoolFollowsItsTagWhenItIsPulledAgain) {
  StartPool("tag", 1, {"--image", image_});
  ASSERT_TRUE(Eventually([&] { return WarmOf("tag").size() == 1; }, 120s)) << PoolLog("tag");
  const std::string old_digest = WarmOf("tag").at(0).image.digest;
  Push("test/box", "v1", BaseLayer(), {ot::Dir("etc"), ot::File("etc/os-release", "ID=moved\n")});
  CliResult pulled = Cli({"image", "pull", image_});
  ASSERT_EQ(pulled.code, 0) << pulled.err;
  ASSERT_TRUE(Eventually(
      [&] {
        auto warm = WarmOf("tag");
        return warm.size() == 1 && warm[0].image.digest != old_digest;
      },
      120s))
      << PoolLog("tag");
  EXPECT_THAT(PoolLog("tag"), HasSubstr("now names"));
  SandboxMeta warm = CreateOn(image_, {"--pool", "tag"});
  EXPECT_EQ(warm.pool, "tag");
  CliResult r = Exec(warm.id, "cat /etc/os-release");
  EXPECT_EQ(r.out, "ID=moved\n") << r.err;
}

}  // namespace
}  // namespace deepbox::local::lifecycle::testing
