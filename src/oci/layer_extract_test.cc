#include "oci/layer_extract.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "common/testing/temp_dir.h"
#include "fs/testing/test_util.h"
#include "oci/testing/layer_builder.h"

namespace deepbox::oci {
namespace {

using namespace oci::testing;  // NOLINT: the layer vocabulary
using deepbox::testing::TempDir;
using fs::testing::Exists;
using fs::testing::ReadRaw;

struct Extracted {
  TempDir dir{"oci-layer"};
  std::string dest = dir.Path("layer");
  std::string outside = dir.Path("outside");
  Result<LayerExtractStats> result;
};

std::unique_ptr<Extracted> Extract(const std::string& layer) {
  auto e = std::make_unique<Extracted>();
  fs::testing::MakeDirRaw(e->dest);
  fs::testing::MakeDirRaw(e->outside);
  size_t pos = 0;
  e->result = ExtractLayer(
      [&](char* buf, size_t size) -> Result<size_t> {
        size_t n = std::min(size, layer.size() - pos);
        std::memcpy(buf, layer.data() + pos, n);
        pos += n;
        return n;
      },
      e->dest);
  return e;
}

struct stat Lstat(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st;
}

TEST(LayerExtractTest, FilesDirsLinksAndModes) {
  for (Compression c : {Compression::kNone, Compression::kGzip, Compression::kZstd}) {
    auto e = Extract(BuildLayer({Dir("usr/bin", 0555), File("usr/bin/tool", "#!/bin/sh\n", 04755),
                                 File("etc/passwd", "root:x:0:0\n", 0644),
                                 Symlink("bin", "usr/bin"), Symlink("etc/abs", "/etc/shadow"),
                                 Hardlink("usr/bin/tool2", "usr/bin/tool"), Fifo("run/fifo")},
                                c));
    ASSERT_TRUE(e->result) << e->result.error().message;
    EXPECT_EQ(ReadRaw(e->dest + "/usr/bin/tool"), "#!/bin/sh\n");
    EXPECT_EQ(Lstat(e->dest + "/usr/bin/tool").st_mode & 07777, 0755u);  // setuid dropped
    EXPECT_EQ(Lstat(e->dest + "/usr/bin").st_mode & 0777, 0755u);        // writable by us
    EXPECT_EQ(Lstat(e->dest + "/usr/bin/tool").st_ino, Lstat(e->dest + "/usr/bin/tool2").st_ino);
    char target[64] = {};
    ASSERT_GT(readlink((e->dest + "/etc/abs").c_str(), target, sizeof(target) - 1), 0);
    EXPECT_STREQ(target, "/etc/shadow");  // kept as written, never followed
    EXPECT_TRUE(S_ISFIFO(Lstat(e->dest + "/run/fifo").st_mode));
    EXPECT_GE(e->result->neutralised, 1u);
  }
}

TEST(LayerExtractTest, WhiteoutsBecomeOverlayWhiteoutsAndOpaqueDirsXattrs) {
  auto e = Extract(BuildLayer({File("keep", "k"), File(".wh.gone", ""), Dir("etc"),
                               File("etc/.wh.old.conf", ""), Dir("var/cache"),
                               File("var/cache/.wh..wh..opq", ""), File("var/cache/new", "n")}));
  ASSERT_TRUE(e->result) << e->result.error().message;
  struct stat gone = Lstat(e->dest + "/gone");
  EXPECT_TRUE(S_ISCHR(gone.st_mode));
  EXPECT_EQ(gone.st_rdev, makedev(0, 0));
  EXPECT_TRUE(S_ISCHR(Lstat(e->dest + "/etc/old.conf").st_mode));
  EXPECT_FALSE(Exists(e->dest + "/.wh.gone"));
  EXPECT_FALSE(Exists(e->dest + "/var/cache/.wh..wh..opq"));
  char value[8] = {};
  ASSERT_EQ(getxattr((e->dest + "/var/cache").c_str(), "user.overlay.opaque", value, sizeof(value)),
            1);
  EXPECT_EQ(value[0], 'y');
  EXPECT_EQ(ReadRaw(e->dest + "/var/cache/new"), "n");
  EXPECT_EQ(e->result->whiteouts, 2u);
  EXPECT_EQ(e->result->opaque_dirs, 1u);
}

TEST(LayerExtractTest, DevicesAreLeftOut) {
  auto e = Extract(BuildLayer({CharDevice("dev/null"), File("ok", "1")}));
  ASSERT_TRUE(e->result) << e->result.error().message;
  EXPECT_FALSE(Exists(e->dest + "/dev/null"));
  EXPECT_EQ(e->result->neutralised, 1u);
  ASSERT_EQ(e->result->notes.size(), 1u);
  EXPECT_NE(e->result->notes[0].find("device node"), std::string::npos);
}

// Each hostile layer is refused with a message naming the entry, and nothing
// appears outside the layer's directory.
TEST(LayerExtractTest, HostileLayersAreRefused) {
  struct Case {
    std::string what;
    std::vector<LayerEntry> entries;
    std::string message;
  };
  std::vector<Case> cases = {
      {"dotdot", {File("../outside/evil", "x")}, "'..' component"},
      {"dotdot inside", {Dir("a"), File("a/../../outside/evil", "x")}, "'..' component"},
      {"absolute", {File("/tmp/evil", "x")}, "absolute name"},
      {"hard link to /etc/shadow", {Hardlink("shadow", "/etc/shadow")}, "outside the layer"},
      {"hard link climbing", {Hardlink("shadow", "../../../../etc/shadow")}, "outside the layer"},
      {"hard link to what the layer lacks", {Hardlink("shadow", "etc/shadow")}, "does not hold"},
      {"hard link to a dir", {Dir("d"), Hardlink("l", "d")}, "not a regular file"},
      {"write through a symlink",
       {Symlink("esc", "../outside"), File("esc/evil", "x")},
       "nothing is written through it"},
      {"write through an absolute symlink",
       {Symlink("esc", "/tmp"), File("esc/evil", "x")},
       "nothing is written through it"},
      {"whiteout through a symlink",
       {Symlink("esc", "../outside"), File("esc/.wh.x", "")},
       "nothing is written through it"},
  };
  for (const auto& c : cases) {
    auto e = Extract(BuildLayer(c.entries));
    ASSERT_FALSE(e->result) << c.what;
    EXPECT_NE(e->result.error().message.find(c.message), std::string::npos)
        << c.what << ": " << e->result.error().message;
    EXPECT_FALSE(Exists(e->outside + "/evil")) << c.what;
    EXPECT_FALSE(Exists(e->outside + "/x")) << c.what;
  }
}

TEST(LayerExtractTest, TruncatedOrGarbageLayersAreErrors) {
  std::string layer = BuildLayer({File("big", std::string(100000, 'z'))}, Compression::kNone);
  auto truncated = Extract(layer.substr(0, 5000));
  ASSERT_FALSE(truncated->result);
  EXPECT_EQ(truncated->result.error().code, ErrorCode::kInvalidArgument);
  auto garbage = Extract(std::string(4096, '\x42'));
  ASSERT_FALSE(garbage->result);
}

}  // namespace
}  // namespace deepbox::oci
