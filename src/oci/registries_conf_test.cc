#include "oci/registries_conf.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "common/testing/temp_dir.h"
#include "fs/testing/test_util.h"

namespace deepbox::oci {
namespace {

using deepbox::testing::TempDir;

ImageReference Ref(const std::string& text) {
  auto ref = ParseImageReference(text);
  EXPECT_TRUE(ref) << text;
  return *ref;
}

RegistriesConf Parse(const std::string& text) {
  RegistriesConf conf;
  auto s = ParseRegistriesConf(text, "test.conf", conf);
  EXPECT_TRUE(s) << s.error().message;
  return conf;
}

std::string ParseError(const std::string& text) {
  RegistriesConf conf;
  auto s = ParseRegistriesConf(text, "bad.conf", conf);
  EXPECT_FALSE(s) << text;
  return s ? std::string() : s.error().message;
}

// name (and [insecure], (mirror)) of each place, in order.
std::vector<std::string> Sources(const RegistriesConf& conf, const std::string& image) {
  auto sources = ResolvePullSources(conf, Ref(image));
  EXPECT_TRUE(sources) << sources.error().message;
  std::vector<std::string> out;
  for (const auto& s : *sources) {
    out.push_back(s.ref.ToString() + (s.insecure ? " [insecure]" : "") +
                  (s.mirror ? " (mirror)" : ""));
  }
  return out;
}

TEST(RegistriesConfTest, MirrorsComeFirstThenThePrimaryWithTheNameRewritten) {
  auto conf = Parse(R"(
unqualified-search-registries = ["docker.io", "quay.io"]
[aliases]
"fedora" = "registry.fedoraproject.org/fedora"

[[registry]]
prefix = "docker.io"
location = "127.0.0.1:1"
[[registry.mirror]]
location = "mirror.example.com:5000/hub"
[[registry.mirror]]
location = "localhost:5001"
insecure = true
)");
  ASSERT_EQ(conf.registries.size(), 1u);
  EXPECT_EQ(Sources(conf, "python:3.12-slim-bookworm"),
            (std::vector<std::string>{
                "mirror.example.com:5000/hub/library/python:3.12-slim-bookworm (mirror)",
                "localhost:5001/library/python:3.12-slim-bookworm [insecure] (mirror)",
                "127.0.0.1:1/library/python:3.12-slim-bookworm"}));
  // Not under the prefix: the name as it is.
  EXPECT_EQ(Sources(conf, "ghcr.io/org/app:v1"), std::vector<std::string>{"ghcr.io/org/app:v1"});
  // A host prefix does not match another port of the same host.
  auto host = Parse("[[registry]]\nlocation = \"example.com\"\ninsecure = true\n");
  EXPECT_EQ(Sources(host, "example.com:5000/app:v1"),
            std::vector<std::string>{"example.com:5000/app:v1"});
  EXPECT_EQ(Sources(host, "example.com/app:v1"),
            std::vector<std::string>{"example.com/app:v1 [insecure]"});
}

TEST(RegistriesConfTest, TheLongestPrefixWinsAtComponentBoundaries) {
  auto conf = Parse(R"(
[[registry]]
prefix = "example.com"
location = "primary.example.net"
[[registry]]
prefix = "example.com/team"
location = "team.example.net/mirror-of-team"
[[registry]]
prefix = "example.com/team/app:pinned"
location = "pins.example.net/app:v7"
)");
  EXPECT_EQ(Sources(conf, "example.com/team/app:v1"),
            std::vector<std::string>{"team.example.net/mirror-of-team/app:v1"});
  EXPECT_EQ(Sources(conf, "example.com/teamwork/app:v1"),
            std::vector<std::string>{"primary.example.net/teamwork/app:v1"});
  EXPECT_EQ(Sources(conf, "example.com/team/app:pinned"),
            std::vector<std::string>{"pins.example.net/app:v7"});
}

TEST(RegistriesConfTest, PullFromMirrorFiltersByTagOrDigest) {
  const std::string digest = "sha256:" + std::string(64, 'a');
  auto conf = Parse(R"(
[[registry]]
location = "example.com"
[[registry.mirror]]
location = "digests.example.net"
pull-from-mirror = "digest-only"
[[registry.mirror]]
location = "tags.example.net"
pull-from-mirror = "tag-only"
[[registry.mirror]]
location = "all.example.net"
)");
  EXPECT_EQ(Sources(conf, "example.com/app:v1"),
            (std::vector<std::string>{"tags.example.net/app:v1 (mirror)",
                                      "all.example.net/app:v1 (mirror)", "example.com/app:v1"}));
  EXPECT_EQ(Sources(conf, "example.com/app@" + digest),
            (std::vector<std::string>{"digests.example.net/app@" + digest + " (mirror)",
                                      "all.example.net/app@" + digest + " (mirror)",
                                      "example.com/app@" + digest}));
  auto by_digest = Parse(R"(
[[registry]]
location = "example.com"
mirror-by-digest-only = true
[[registry.mirror]]
location = "m.example.net"
)");
  EXPECT_EQ(Sources(by_digest, "example.com/app:v1"),
            std::vector<std::string>{"example.com/app:v1"});
  EXPECT_EQ(Sources(by_digest, "example.com/app@" + digest).size(), 2u);
}

TEST(RegistriesConfTest, WildcardsMatchSubdomainsAndBlockedRefuses) {
  auto conf = Parse(R"(
[[registry]]
prefix = "*.internal.example"
insecure = true
[[registry.mirror]]
location = "cache.example.net:5000"
[[registry]]
location = "evil.example.org"
blocked = true
)");
  EXPECT_EQ(Sources(conf, "reg.internal.example/app:v1"),
            (std::vector<std::string>{"cache.example.net:5000/app:v1 (mirror)",
                                      "reg.internal.example/app:v1 [insecure]"}));
  EXPECT_EQ(Sources(conf, "internal.example/app:v1"),
            std::vector<std::string>{"internal.example/app:v1"});
  auto blocked = ResolvePullSources(conf, Ref("evil.example.org/x:1"));
  ASSERT_FALSE(blocked);
  EXPECT_EQ(blocked.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(blocked.error().message.find("blocked by test.conf"), std::string::npos)
      << blocked.error().message;
}

TEST(RegistriesConfTest, BadFilesAreClearErrorsNamingTheFileAndLine) {
  EXPECT_NE(ParseError("[[registry]\nprefix = 1").find("bad.conf:1: not valid TOML"),
            std::string::npos);
  EXPECT_NE(
      ParseError("[registries.search]\nregistries = [\"docker.io\"]\n").find("version 1 format"),
      std::string::npos);
  EXPECT_NE(ParseError("[[registry]]\nprefix = \"docker.io\"\ninsecure = \"yes\"\n")
                .find("bad.conf:3: 'insecure' must be true or false"),
            std::string::npos);
  EXPECT_NE(ParseError("[[registry]]\nprefix = \"*.example.com\"\nlocation = \"x.example\"\n")
                .find("wildcard"),
            std::string::npos);
  EXPECT_NE(ParseError("[[registry]]\nprefix = \"docker.io\"\nlocation = \"https://x.example\"\n")
                .find("is not host[:port]"),
            std::string::npos);
  // A location without a host would become a Docker Hub namespace.
  EXPECT_NE(ParseError("[[registry]]\nprefix = \"docker.io\"\nlocation = \"mirror/hub\"\n")
                .find("location 'mirror/hub'"),
            std::string::npos);
  EXPECT_NE(ParseError("[[registry]]\nlocation = \"docker.io\"\n[[registry.mirror]]\n"
                       "location = \"m.example\"\npull-from-mirror = \"sometimes\"\n")
                .find("pull-from-mirror is 'sometimes'"),
            std::string::npos);
  EXPECT_NE(ParseError("[[registry]]\ninsecure = true\n").find("needs a prefix or a location"),
            std::string::npos);
  EXPECT_NE(ParseError("registry = 3\n").find("array of [[registry]] tables"), std::string::npos);
}

TEST(RegistriesConfTest, FilesAreReadAsPodmanDoesAndDropInsReplaceByPrefix) {
  TempDir dir("registries-conf");
  std::string home = dir.Path("home");
  std::string main_file = dir.Path("main.conf");
  fs::testing::WriteRaw(main_file,
                        "[[registry]]\nprefix = \"docker.io\"\nlocation = \"one.example\"\n"
                        "[[registry]]\nlocation = \"quay.io\"\ninsecure = true\n");
  std::filesystem::create_directories(home + "/.config/containers/registries.conf.d");
  fs::testing::WriteRaw(home + "/.config/containers/registries.conf.d/10-hub.conf",
                        "[[registry]]\nprefix = \"docker.io\"\nlocation = \"two.example\"\n");
  fs::testing::WriteRaw(home + "/.config/containers/registries.conf.d/README", "not toml [");
  std::map<std::string, std::string> vars{{"HOME", home},
                                          {"CONTAINERS_REGISTRIES_CONF", main_file}};
  auto env = [&vars](const char* name) {
    auto it = vars.find(name);
    return it == vars.end() ? std::string() : it->second;
  };
  auto conf = LoadRegistriesConf(env);
  ASSERT_TRUE(conf) << conf.error().message;
  EXPECT_EQ(Sources(*conf, "python:3"), std::vector<std::string>{"two.example/library/python:3"});
  EXPECT_EQ(Sources(*conf, "quay.io/a/b:1"), std::vector<std::string>{"quay.io/a/b:1 [insecure]"});

  // The user's own main file, instead of /etc's.
  vars.erase("CONTAINERS_REGISTRIES_CONF");
  fs::testing::WriteRaw(home + "/.config/containers/registries.conf",
                        "[[registry]]\nprefix = \"ghcr.io\"\nblocked = true\n");
  conf = LoadRegistriesConf(env);
  ASSERT_TRUE(conf) << conf.error().message;
  EXPECT_EQ(conf->files.front(), home + "/.config/containers/registries.conf");
  EXPECT_FALSE(ResolvePullSources(*conf, Ref("ghcr.io/x/y:1")));

  // A named file that does not exist, or a bad drop-in, is an error naming it.
  vars["CONTAINERS_REGISTRIES_CONF"] = dir.Path("missing.conf");
  conf = LoadRegistriesConf(env);
  ASSERT_FALSE(conf);
  EXPECT_NE(conf.error().message.find("CONTAINERS_REGISTRIES_CONF"), std::string::npos);
  vars["CONTAINERS_REGISTRIES_CONF"] = main_file;
  fs::testing::WriteRaw(home + "/.config/containers/registries.conf.d/20-bad.conf", "[[x");
  conf = LoadRegistriesConf(env);
  ASSERT_FALSE(conf);
  EXPECT_NE(conf.error().message.find("20-bad.conf:1"), std::string::npos) << conf.error().message;
}

}  // namespace
}  // namespace deepbox::oci
