// Pulls against a real registry (Debian's docker-registry) on loopback: TLS
// with a CA made here and htpasswd logins, and a plain-HTTP one. The images
// are made here from files the tests write, pushed with the registry API.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "common/testing/temp_dir.h"
#include "fs/dir_entries.h"
#include "fs/testing/test_util.h"
#include "oci/digest.h"
#include "oci/image_pull.h"
#include "oci/testing/layer_builder.h"
#include "oci/testing/test_registry.h"

namespace deepbox::oci {
namespace {

using namespace oci::testing;  // NOLINT: the image vocabulary
using deepbox::testing::TempDir;

constexpr const char* kUser = "deepbox";
constexpr const char* kPassword = "s3cret-pw";
constexpr const char* kChildEnv = "DEEPBOX_OCI_TEST_PULL_CHILD";

struct Layer {
  std::string bytes;
  Compression compression;
};

// Pushes config + layers + manifest; returns the manifest's descriptor.
BlobRef PushImage(TestRegistry& registry, const std::string& repo, const std::string& tag,
                  const std::vector<Layer>& layers, const std::string& arch = "amd64") {
  std::string config =
      ConfigJson(arch, {"PATH=/usr/local/bin:/usr/bin", "LANG=C.UTF-8"}, "/srv/app", "nobody");
  EXPECT_TRUE(registry.PushBlob(repo, config));
  std::vector<BlobRef> refs;
  for (const auto& l : layers) {
    auto pushed = registry.PushBlob(repo, l.bytes);
    EXPECT_TRUE(pushed) << (pushed ? "" : pushed.error().message);
    refs.push_back(RefOf(LayerMediaType(l.compression), l.bytes));
  }
  std::string manifest = ManifestJson(RefOf(std::string(kOciConfig), config), refs);
  auto s = registry.PushManifest(repo, tag, std::string(kOciManifest), manifest);
  EXPECT_TRUE(s) << (s ? "" : s.error().message);
  return RefOf(std::string(kOciManifest), manifest);
}

// What a container sees of `layers` stacked (bottom first), as overlayfs
// composes them: a 0/0 character device hides what is below, an opaque
// directory hides everything below it. path -> content ("<dir>", "-> target").
std::map<std::string, std::string> MergedView(const std::vector<std::string>& layers) {
  std::map<std::string, std::string> view;
  auto erase_under = [&](const std::string& path, bool self) {
    for (auto it = view.begin(); it != view.end();) {
      bool under = it->first.size() > path.size() && it->first.starts_with(path + "/");
      if (under || (self && it->first == path)) {
        it = view.erase(it);
      } else {
        ++it;
      }
    }
  };
  std::function<void(const std::string&, const std::string&)> walk = [&](const std::string& root,
                                                                         const std::string& rel) {
    std::string dir = rel.empty() ? root : root + "/" + rel;
    char opaque[4] = {};
    if (!rel.empty() && getxattr(dir.c_str(), "user.overlay.opaque", opaque, sizeof(opaque)) == 1 &&
        opaque[0] == 'y') {
      erase_under(rel, false);
    }
    UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    auto entries = fs::ReadDir(fd.get(), dir);
    ASSERT_TRUE(entries);
    for (const auto& e : *entries) {
      std::string path = rel.empty() ? e.name : rel + "/" + e.name;
      std::string full = root + "/" + path;
      struct stat st {};
      ASSERT_EQ(lstat(full.c_str(), &st), 0);
      if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
        erase_under(path, true);
      } else if (S_ISDIR(st.st_mode)) {
        if (view.count(path) != 0 && view[path] != "<dir>") erase_under(path, true);
        view[path] = "<dir>";
        walk(root, path);
      } else if (S_ISLNK(st.st_mode)) {
        erase_under(path, true);
        char target[4096] = {};
        ssize_t n = readlink(full.c_str(), target, sizeof(target) - 1);
        view[path] = "-> " + std::string(target, n > 0 ? n : 0);
      } else {
        erase_under(path, true);
        view[path] = fs::testing::ReadRaw(full);
      }
    }
  };
  for (const auto& layer : layers) walk(layer, "");
  return view;
}

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto secure = TestRegistry::Start({true, kUser, kPassword});
    if (!secure && secure.error().code == ErrorCode::kUnavailable &&
        secure.error().message.find("not installed") != std::string::npos) {
      GTEST_SKIP() << secure.error().message;
    }
    ASSERT_TRUE(secure) << secure.error().message;
    secure_ = std::move(*secure);
    auto plain = TestRegistry::Start({});
    ASSERT_TRUE(plain) << plain.error().message;
    plain_ = std::move(*plain);
    auto store = ImageStore::Open(cache_.Path("images"));
    ASSERT_TRUE(store) << store.error().message;
    store_ = std::move(*store);
  }

  PullOptions SecureOptions(std::string password = kPassword) const {
    PullOptions o;
    o.registry.ca_file = secure_->ca_file();
    o.registry.credentials = RegistryCredentials{kUser, std::move(password)};
    o.registry.lookup_credentials = false;
    o.registries = RegistriesConf{};  // not this machine's registries.conf
    return o;
  }
  static PullOptions PlainOptions() {
    PullOptions o;
    o.registry.lookup_credentials = false;
    o.registries = RegistriesConf{};
    return o;
  }
  ImageReference Ref(const TestRegistry& r, const std::string& rest) const {
    auto ref = ParseImageReference(r.host() + "/" + rest);
    EXPECT_TRUE(ref);
    return *ref;
  }
  // The cache holds nothing half-made: no partial download, no extraction
  // directory, and every record's content present.
  void ExpectCacheConsistent() {
    UniqueFd fd(open(cache_.Path("images/tmp").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    auto tmp = fs::ReadDir(fd.get(), "tmp");
    ASSERT_TRUE(tmp);
    for (const auto& e : *tmp) {
      EXPECT_TRUE(e.name.ends_with(".lock")) << "left in tmp: " << e.name;
    }
    auto images = store_->ListImages();
    ASSERT_TRUE(images);
    for (const auto& r : *images) {
      auto ref = ParseImageReference(r.name);
      ASSERT_TRUE(ref);
      EXPECT_TRUE(OpenLocalImage(*store_, *ref)) << r.name;
    }
  }

  TempDir cache_{"oci-cache"};
  std::unique_ptr<TestRegistry> secure_;
  std::unique_ptr<TestRegistry> plain_;
  std::unique_ptr<ImageStore> store_;
};

TEST_F(RegistryTest, MultiLayerImageWithWhiteoutsOpaqueDirsAndZstdOverTlsWithLogin) {
  std::vector<Layer> layers = {
      {BuildLayer(
           {Dir("etc"), File("etc/keep", "kept"), File("etc/gone", "x"), Dir("var/cache", 0755),
            File("var/cache/old", "o"), File("var/cache/sub/deep", "d"),
            File("usr/bin/tool", "#!/bin/sh\necho hi\n", 0755), Symlink("bin", "usr/bin"),
            Dir("gonedir"), File("gonedir/f", "f")},
           Compression::kGzip),
       Compression::kGzip},
      {BuildLayer(
           {File("etc/.wh.gone", ""), File(".wh.gonedir", ""), File("var/cache/.wh..wh..opq", ""),
            File("var/cache/new", "n"), File("usr/bin/tool2", "second")},
           Compression::kZstd),
       Compression::kZstd},
      {BuildLayer({File("etc/keep", "overridden"), File("top", "t")}, Compression::kNone),
       Compression::kNone},
  };
  BlobRef manifest = PushImage(*secure_, "team/app", "v1", layers);
  std::vector<PullEvent> events;
  auto pulled = PullImage(*store_, Ref(*secure_, "team/app:v1"), SecureOptions(),
                          [&](const PullEvent& e) { events.push_back(e); });
  ASSERT_TRUE(pulled) << pulled.error().message;
  EXPECT_EQ(pulled->record.manifest_digest, manifest.digest);
  EXPECT_EQ(pulled->config.working_dir, "/srv/app");
  EXPECT_EQ(pulled->config.user, "nobody");
  ASSERT_EQ(pulled->config.env.size(), 2u);
  ASSERT_EQ(pulled->layer_dirs.size(), 3u);
  std::map<std::string, std::string> expected = {
      {"bin", "-> usr/bin"},
      {"etc", "<dir>"},
      {"etc/keep", "overridden"},
      {"top", "t"},
      {"usr", "<dir>"},
      {"usr/bin", "<dir>"},
      {"usr/bin/tool", "#!/bin/sh\necho hi\n"},
      {"usr/bin/tool2", "second"},
      {"var", "<dir>"},
      {"var/cache", "<dir>"},
      {"var/cache/new", "n"},
  };
  EXPECT_EQ(MergedView(pulled->layer_dirs), expected);
  size_t done = 0;
  for (const auto& e : events) done += e.kind == PullEvent::Kind::kLayerDone ? 1 : 0;
  EXPECT_EQ(done, 3u);
  EXPECT_EQ(events.back().kind, PullEvent::Kind::kImageDone);

  // Again: everything is cached, nothing downloaded; by digest it is the same image.
  events.clear();
  auto again = PullImage(*store_, Ref(*secure_, "team/app@" + manifest.digest), SecureOptions(),
                         [&](const PullEvent& e) { events.push_back(e); });
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->layer_dirs, pulled->layer_dirs);
  for (const auto& e : events) {
    if (e.kind == PullEvent::Kind::kLayerDone) {
      EXPECT_TRUE(e.cached);
    }
  }
  auto list = store_->ListImages();
  ASSERT_TRUE(list);
  EXPECT_EQ(list->size(), 2u);
  // What a sandbox asks for: cached, no request (the registry's being down
  // would not matter).
  auto ensured = EnsureImage(*store_, Ref(*secure_, "team/app:v1"), PlainOptions());
  ASSERT_TRUE(ensured) << ensured.error().message;
  EXPECT_EQ(ensured->layer_dirs, pulled->layer_dirs);
  EXPECT_EQ(ensured->config.working_dir, "/srv/app");
  ExpectCacheConsistent();

  // rm of one name keeps what the other still uses; of both, nothing is left.
  ASSERT_TRUE(store_->RemoveImage(pulled->record.name));
  EXPECT_TRUE(OpenLocalImage(*store_, Ref(*secure_, "team/app@" + manifest.digest)));
  ASSERT_TRUE(store_->RemoveImage(again->record.name));
  for (const auto& d : pulled->layer_dirs) EXPECT_FALSE(fs::testing::Exists(d));
}

// The layer directories are what overlayfs takes: mounted inside a user
// namespace (as a sandbox will, with userxattr), the whiteouts hide and the
// opaque directory masks what lies below.
TEST_F(RegistryTest, TheLayersMountAsOverlayInAUserNamespace) {
  std::vector<Layer> layers = {
      {BuildLayer({File("etc/keep", "kept"), File("etc/gone", "x"), File("var/cache/old", "o"),
                   Dir("gonedir"), File("gonedir/f", "f")}),
       Compression::kGzip},
      {BuildLayer({File("etc/.wh.gone", ""), File(".wh.gonedir", ""),
                   File("var/cache/.wh..wh..opq", ""), File("var/cache/new", "n")},
                  Compression::kZstd),
       Compression::kZstd},
  };
  PushImage(*plain_, "overlay", "v1", layers);
  auto pulled = PullImage(*store_, Ref(*plain_, "overlay:v1"), PlainOptions());
  ASSERT_TRUE(pulled) << pulled.error().message;
  std::string lower;
  for (auto it = pulled->layer_dirs.rbegin(); it != pulled->layer_dirs.rend(); ++it) {
    lower += (lower.empty() ? "" : ":") + *it;
  }
  TempDir mnt("oci-overlay");
  SubprocessOptions run;
  run.argv = {"unshare",
              "-Urm",
              "sh",
              "-c",
              "mount -t overlay overlay -o userxattr,lowerdir=\"$1\" \"$2\" || exit 77; cd \"$2\" "
              "&& find . -mindepth 1 | sort | tr '\\n' ' '",
              "sh",
              lower,
              mnt.path().string()};
  run.capture_stdout = true;
  run.capture_stderr = true;
  auto out = RunCommand(run, std::chrono::seconds(60));
  ASSERT_TRUE(out) << out.error().message;
  if (WIFEXITED(out->wait_status) && WEXITSTATUS(out->wait_status) == 77) {
    GTEST_SKIP() << "this kernel cannot mount overlay in a user namespace: " << out->err;
  }
  ASSERT_TRUE(out->exited_ok()) << out->err;
  EXPECT_EQ(out->out, "./etc ./etc/keep ./var ./var/cache ./var/cache/new ");
}

TEST_F(RegistryTest, AnIndexGivesThisHostsPlatform) {
  std::vector<IndexEntry> entries;
  for (std::string arch : {"amd64", "arm64"}) {
    BlobRef m = PushImage(*plain_, "multi", "only-" + arch,
                          {{BuildLayer({File("arch", arch)}), Compression::kGzip}}, arch);
    entries.push_back({m, arch});
  }
  std::string index = IndexJson(entries);
  ASSERT_TRUE(plain_->PushManifest("multi", "latest", std::string(kOciIndex), index));
  auto pulled = PullImage(*store_, Ref(*plain_, "multi"), PlainOptions());
  ASSERT_TRUE(pulled) << pulled.error().message;
  EXPECT_EQ(pulled->record.index_digest, Sha256Digest(index));
  const std::string host_arch = HostPlatform().architecture;
  EXPECT_EQ(fs::testing::ReadRaw(pulled->layer_dirs.at(0) + "/arch"), host_arch);
  PullOptions other = PlainOptions();
  other.platform.architecture = host_arch == "arm64" ? "amd64" : "arm64";
  auto foreign = PullImage(*store_, Ref(*plain_, "multi"), other);
  ASSERT_TRUE(foreign) << foreign.error().message;
  EXPECT_EQ(fs::testing::ReadRaw(foreign->layer_dirs.at(0) + "/arch"), other.platform.architecture);
  other.platform.architecture = "riscv64";
  auto none = PullImage(*store_, Ref(*plain_, "multi"), other);
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("no linux/riscv64 variant"), std::string::npos)
      << none.error().message;
}

TEST_F(RegistryTest, ABlobWithTheWrongDigestIsRefusedAndNothingIsKept) {
  std::string layer = BuildLayer({File("data", std::string(5000, 'a'))}, Compression::kNone);
  PushImage(*plain_, "tampered", "v1", {{layer, Compression::kNone}});
  std::string evil = BuildLayer({File("data", std::string(5000, 'b'))}, Compression::kNone);
  ASSERT_EQ(evil.size(), layer.size());
  ASSERT_TRUE(plain_->CorruptBlob(Sha256Digest(layer), evil));
  auto pulled = PullImage(*store_, Ref(*plain_, "tampered:v1"), PlainOptions());
  ASSERT_FALSE(pulled);
  EXPECT_EQ(pulled.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(pulled.error().message.find("digest is " + Sha256Digest(evil)), std::string::npos)
      << pulled.error().message;
  EXPECT_FALSE(store_->HasBlob(Sha256Digest(layer)));
  EXPECT_FALSE(store_->HasBlob(Sha256Digest(evil)));
  auto record = store_->FindImage(Ref(*plain_, "tampered:v1").ToString());
  ASSERT_TRUE(record);
  EXPECT_FALSE(*record);
  ExpectCacheConsistent();
}

TEST_F(RegistryTest, BadOrMissingCredentialsAreClearErrors) {
  PushImage(*secure_, "private", "v1", {{BuildLayer({File("a", "1")}), Compression::kGzip}});
  auto wrong = PullImage(*store_, Ref(*secure_, "private:v1"), SecureOptions("wrong"));
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, ErrorCode::kUnauthenticated) << wrong.error().message;
  PullOptions anonymous = SecureOptions();
  anonymous.registry.credentials.reset();
  auto none = PullImage(*store_, Ref(*secure_, "private:v1"), anonymous);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::kUnauthenticated);
  EXPECT_NE(none.error().message.find("requires a login"), std::string::npos)
      << none.error().message;
  // Without our CA the certificate is refused, and plain HTTP is not tried
  // in its place.
  PullOptions untrusted = SecureOptions();
  untrusted.registry.ca_file.clear();
  auto refused = PullImage(*store_, Ref(*secure_, "private:v1"), untrusted);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().reason, kReasonTlsCertificate) << refused.error().message;
  // The credentials from a Docker config file.
  TempDir docker("oci-docker-config");
  fs::testing::WriteRaw(docker.Path("config.json"),
                        R"({"auths":{")" + secure_->host() + R"(":{"username":")" + kUser +
                            R"(","password":")" + kPassword + R"("}}})");
  setenv("DOCKER_CONFIG", docker.path().c_str(), 1);
  PullOptions from_file;
  from_file.registry.ca_file = secure_->ca_file();
  auto ok = PullImage(*store_, Ref(*secure_, "private:v1"), from_file);
  unsetenv("DOCKER_CONFIG");
  ASSERT_TRUE(ok) << ok.error().message;
  ExpectCacheConsistent();
}

// The bearer-token flow: the registry's 401 names a token service (realm,
// service, scope); the client gets a token there with its login, then
// retries with it.
TEST_F(RegistryTest, BearerTokenFlowFromWwwAuthenticate) {
  auto tokened = TestRegistry::Start({true, kUser, kPassword, true});
  ASSERT_TRUE(tokened) << tokened.error().message;
  TestRegistry& registry = **tokened;
  std::string layer = BuildLayer({File("hello", "token")});
  PushImage(registry, "team/tokened", "v1", {{layer, Compression::kGzip}});
  PullOptions options = SecureOptions();
  options.registry.ca_file = registry.ca_file();
  auto pulled = PullImage(*store_, Ref(registry, "team/tokened:v1"), options);
  ASSERT_TRUE(pulled) << pulled.error().message;
  EXPECT_EQ(fs::testing::ReadRaw(pulled->layer_dirs[0] + "/hello"), "token");
  EXPECT_GE(registry.tokens_issued(), 1);
  options.registry.credentials = RegistryCredentials{kUser, "wrong"};
  auto refused = PullImage(*store_, Ref(registry, "team/tokened:v1"), options);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kUnauthenticated);
  EXPECT_NE(refused.error().message.find("the token service refused the credentials of user"),
            std::string::npos)
      << refused.error().message;
}

// A credential helper named by the Docker config (credHelpers) that holds an
// identity token: the client exchanges it at the token service in the
// OAuth2 form (POST grant_type=refresh_token), never sending a login.
TEST_F(RegistryTest, ACredentialHelpersIdentityTokenIsExchangedForAnAccessToken) {
  TestRegistryOptions o{true, kUser, kPassword, true};
  o.identity_token = "refresh-token-from-helper";
  auto tokened = TestRegistry::Start(o);
  ASSERT_TRUE(tokened) << tokened.error().message;
  TestRegistry& registry = **tokened;
  PushImage(registry, "team/helped", "v1",
            {{BuildLayer({File("hello", "helped")}), Compression::kGzip}});
  TempDir docker("oci-docker-helper");
  fs::testing::WriteRaw(docker.Path("bin/docker-credential-deepboxtest"),
                        "#!/bin/sh\n[ \"$(cat)\" = \"" + registry.host() +
                            "\" ] || { echo 'credentials not found'; exit 1; }\n"
                            "echo '{\"Username\":\"<token>\",\"Secret\":\"" +
                            o.identity_token + "\"}'\n");
  ASSERT_EQ(::chmod(docker.Path("bin/docker-credential-deepboxtest").c_str(), 0755), 0);
  fs::testing::WriteRaw(docker.Path("config.json"),
                        R"({"credHelpers":{")" + registry.host() + R"(":"deepboxtest"}})");
  const std::string old_path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  setenv("DOCKER_CONFIG", docker.path().c_str(), 1);
  setenv("PATH", (docker.Path("bin") + ":" + old_path).c_str(), 1);
  PullOptions options;
  options.registry.ca_file = registry.ca_file();
  auto pulled = PullImage(*store_, Ref(registry, "team/helped:v1"), options);
  // A helper whose token the service does not take: a clear refusal.
  fs::testing::WriteRaw(docker.Path("bin/docker-credential-deepboxtest"),
                        "#!/bin/sh\ncat >/dev/null\n"
                        "echo '{\"Username\":\"<token>\",\"Secret\":\"revoked\"}'\n");
  auto refused = PullImage(*store_, Ref(registry, "team/helped:v2"), options);
  setenv("PATH", old_path.c_str(), 1);
  unsetenv("DOCKER_CONFIG");
  ASSERT_TRUE(pulled) << pulled.error().message;
  EXPECT_EQ(fs::testing::ReadRaw(pulled->layer_dirs[0] + "/hello"), "helped");
  EXPECT_GE(registry.tokens_issued(), 1);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kUnauthenticated) << refused.error().message;
  EXPECT_NE(refused.error().message.find("identity token"), std::string::npos)
      << refused.error().message;
  ExpectCacheConsistent();
}

TEST_F(RegistryTest, AnUnreachableRegistryIsAClearError) {
  std::string host = plain_->host();
  plain_->Stop();
  auto ref = ParseImageReference(host + "/gone:v1");
  ASSERT_TRUE(ref);
  auto pulled = PullImage(*store_, *ref, PlainOptions());
  ASSERT_FALSE(pulled);
  EXPECT_EQ(pulled.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(pulled.error().message.find(host), std::string::npos) << pulled.error().message;
  ExpectCacheConsistent();
}

// registries.conf: a Docker Hub name pulled from a loopback mirror (the
// primary, rewritten to a closed loopback port, is never needed), and a dead
// mirror passed over for the primary. Only loopback is ever contacted.
TEST_F(RegistryTest, MirrorsFromRegistriesConfServeDockerHubNamesAndADeadOneIsPassedOver) {
  PushImage(*plain_, "library/python", "3.12-slim-bookworm",
            {{BuildLayer({File("from", "mirror")}), Compression::kGzip}});
  PullOptions options = PlainOptions();
  RegistriesConf conf;
  ASSERT_TRUE(ParseRegistriesConf(fmt::format("[[registry]]\nprefix = \"docker.io\"\n"
                                              "location = \"127.0.0.1:1\"\n"
                                              "[[registry.mirror]]\nlocation = \"{}\"\n",
                                              plain_->host()),
                                  "mirror.conf", conf));
  options.registries = conf;
  std::vector<PullEvent> events;
  auto pulled = PullImage(*store_, *ParseImageReference("python:3.12-slim-bookworm"), options,
                          [&](const PullEvent& e) { events.push_back(e); });
  ASSERT_TRUE(pulled) << pulled.error().message;
  EXPECT_EQ(pulled->record.name, "docker.io/library/python:3.12-slim-bookworm");
  EXPECT_EQ(fs::testing::ReadRaw(pulled->layer_dirs.at(0) + "/from"), "mirror");
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().source, plain_->host() + "/library/python:3.12-slim-bookworm");
  // Recorded under its own name: found again without any registry.
  auto again = OpenLocalImage(*store_, *ParseImageReference("python:3.12-slim-bookworm"));
  ASSERT_TRUE(again) << again.error().message;

  // A mirror that refuses connections, then the primary (a rewritten location).
  PushImage(*plain_, "team/app", "v1",
            {{BuildLayer({File("from", "primary")}), Compression::kGzip}});
  RegistriesConf fallback;
  ASSERT_TRUE(ParseRegistriesConf(fmt::format("[[registry]]\nprefix = \"example.com/team\"\n"
                                              "location = \"{}/team\"\n"
                                              "[[registry.mirror]]\nlocation = \"127.0.0.1:1\"\n",
                                              plain_->host()),
                                  "fallback.conf", fallback));
  options.registries = fallback;
  events.clear();
  pulled = PullImage(*store_, *ParseImageReference("example.com/team/app:v1"), options,
                     [&](const PullEvent& e) { events.push_back(e); });
  ASSERT_TRUE(pulled) << pulled.error().message;
  EXPECT_EQ(pulled->record.name, "example.com/team/app:v1");
  EXPECT_EQ(fs::testing::ReadRaw(pulled->layer_dirs.at(0) + "/from"), "primary");
  EXPECT_EQ(events.front().source, "");

  // Both gone: one error naming every place tried, the cache consistent.
  std::string host = plain_->host();
  plain_->Stop();
  auto none = PullImage(*store_, *ParseImageReference("example.com/team/other:v2"), options);
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find(host), std::string::npos) << none.error().message;
  EXPECT_NE(none.error().message.find("mirror 127.0.0.1:1/other:v2"), std::string::npos)
      << none.error().message;
  EXPECT_NE(none.error().message.find("for example.com/team/other:v2"), std::string::npos)
      << none.error().message;
  ExpectCacheConsistent();
}

TEST_F(RegistryTest, HostileLayersAreRefusedAndLeaveNothing) {
  struct Case {
    std::string tag;
    std::vector<LayerEntry> entries;
    std::string message;
  };
  std::vector<Case> cases = {
      {"shadow",
       {File("ok", "1"), Hardlink("etc/shadow-copy", "/etc/shadow")},
       "outside the layer"},
      {"dotdot", {File("../../../../tmp/deepbox-oci-escape", "x")}, "'..' component"},
      {"through-link",
       {Symlink("etc", "/etc"), File("etc/evil", "x")},
       "nothing is written through it"},
  };
  for (const auto& c : cases) {
    std::string layer = BuildLayer(c.entries);
    PushImage(*plain_, "hostile", c.tag, {{layer, Compression::kGzip}});
    auto pulled = PullImage(*store_, Ref(*plain_, "hostile:" + c.tag), PlainOptions());
    ASSERT_FALSE(pulled) << c.tag;
    EXPECT_EQ(pulled.error().code, ErrorCode::kPermissionDenied) << pulled.error().message;
    EXPECT_NE(pulled.error().message.find(c.message), std::string::npos) << pulled.error().message;
    EXPECT_FALSE(store_->HasLayer(Sha256Digest(layer)));
  }
  EXPECT_FALSE(fs::testing::Exists("/tmp/deepbox-oci-escape"));
  EXPECT_FALSE(fs::testing::Exists("/etc/evil"));
  ExpectCacheConsistent();
}

TEST_F(RegistryTest, ConcurrentPullsDownloadEachLayerOnce) {
  std::mt19937 rng(7);
  std::string big(8u << 20, '\0');
  for (auto& c : big) c = static_cast<char>(rng());
  PushImage(*plain_, "shared", "v1",
            {{BuildLayer({File("big", big)}, Compression::kNone), Compression::kNone},
             {BuildLayer({File("small", "s")}), Compression::kGzip}});
  std::atomic<int> downloaded{0};
  std::vector<std::thread> pullers;
  for (int i = 0; i < 3; ++i) {
    pullers.emplace_back([&] {
      auto store = ImageStore::Open(cache_.Path("images"));  // its own, as another process
      ASSERT_TRUE(store);
      auto pulled =
          PullImage(**store, Ref(*plain_, "shared:v1"), PlainOptions(), [&](const PullEvent& e) {
            if (e.kind == PullEvent::Kind::kLayerDone && e.downloaded) ++downloaded;
          });
      ASSERT_TRUE(pulled) << pulled.error().message;
      EXPECT_EQ(fs::testing::ReadRaw(pulled->layer_dirs[0] + "/big").size(), big.size());
    });
  }
  for (auto& t : pullers) t.join();
  EXPECT_EQ(downloaded, 2);
  ExpectCacheConsistent();
}

// The child of KillDashNineMidPullThenRerunResumes: pulls slowly (its progress
// callback sleeps) until the parent kills it.
[[maybe_unused]] const bool kPullChild = [] {
  const char* spec = std::getenv(kChildEnv);
  if (spec == nullptr) return false;
  std::string s(spec);  // "<cache dir>|<reference>"
  size_t bar = s.find('|');
  auto store = ImageStore::Open(s.substr(0, bar));
  auto ref = ParseImageReference(s.substr(bar + 1));
  if (!store || !ref) _exit(2);
  PullOptions o;
  o.registry.lookup_credentials = false;
  auto pulled = PullImage(**store, *ref, o, [](const PullEvent& e) {
    if (e.kind == PullEvent::Kind::kLayerProgress) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  _exit(pulled ? 0 : 1);
}();

TEST_F(RegistryTest, KillDashNineMidPullThenRerunResumes) {
  std::mt19937 rng(11);
  std::string big(32u << 20, '\0');
  for (auto& c : big) c = static_cast<char>(rng());
  std::string layer = BuildLayer({File("big", big)}, Compression::kNone);
  PushImage(*plain_, "large", "v1", {{layer, Compression::kNone}});
  const std::string reference = Ref(*plain_, "large:v1").ToString();
  SubprocessOptions child;
  child.argv = {"/proc/self/exe"};
  child.env = {{kChildEnv, cache_.Path("images") + "|" + reference}};
  child.parent_death_signal = SIGKILL;
  auto process = Subprocess::Spawn(child);
  ASSERT_TRUE(process) << process.error().message;
  const std::string partial =
      cache_.Path("images/tmp/") + std::string(DigestHex(Sha256Digest(layer))) + ".partial";
  uint64_t seen = 0;
  for (int i = 0; i < 6000 && seen < (4u << 20) && !process->HasExited(); ++i) {
    struct stat st {};
    if (stat(partial.c_str(), &st) == 0) seen = static_cast<uint64_t>(st.st_size);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  process->Signal(SIGKILL);
  int status = process->Wait();
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child finished before it was killed";
  struct stat st {};
  ASSERT_EQ(stat(partial.c_str(), &st), 0);
  ASSERT_GT(st.st_size, 0);
  ASSERT_LT(static_cast<size_t>(st.st_size), layer.size());

  uint64_t resumed = 0;
  auto pulled =
      PullImage(*store_, Ref(*plain_, "large:v1"), PlainOptions(), [&](const PullEvent& e) {
        if (e.kind == PullEvent::Kind::kLayerDone) resumed = e.resumed_from;
      });
  ASSERT_TRUE(pulled) << pulled.error().message;
  EXPECT_GT(resumed, 0u);
  EXPECT_EQ(Sha256Digest(fs::testing::ReadRaw(pulled->layer_dirs[0] + "/big")), Sha256Digest(big));
  ExpectCacheConsistent();
}

}  // namespace
}  // namespace deepbox::oci
