#include "local/image_root.h"

#include <fcntl.h>
#include <ftw.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "local/namespaces.h"
#include "local/testing/host_userland.h"
#include "local/testing/sandbox_fixture.h"

namespace deepbox::local {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

void WriteFile(const fs::path& path, const std::string& content, mode_t mode = 0644) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << content;
  ASSERT_EQ(chmod(path.c_str(), mode), 0);
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Whiteout(const fs::path& path) {
  fs::create_directories(path.parent_path());
  ASSERT_EQ(mknod(path.c_str(), S_IFCHR | 0000, makedev(0, 0)), 0) << strerror(errno);
}

void Opaque(const fs::path& dir) {
  fs::create_directories(dir);
  ASSERT_EQ(setxattr(dir.c_str(), "user.overlay.opaque", "y", 1, 0), 0) << strerror(errno);
}

// As root's image cache has them (oci/image_store.h: kRootCacheLayerOwner).
int ChownEntry(const char* path, const struct stat*, int, struct FTW*) {
  return lchown(path, kImageRootHostId, kImageRootHostId) == 0 ? 0 : errno;
}
void OwnLikeTheCache(const fs::path& layer) {
  if (geteuid() == 0) {
    ASSERT_EQ(nftw(layer.c_str(), ChownEntry, 32, FTW_PHYS), 0);
  }
}

// A tree hash of a layer (paths, types, modes, owners, contents).
std::string TreeState(const fs::path& dir) {
  std::string out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st {};
    lstat(e.path().c_str(), &st);
    out += e.path().string() + " " + std::to_string(st.st_mode) + " " + std::to_string(st.st_uid) +
           " " + std::to_string(st.st_size);
    if (S_ISREG(st.st_mode)) out += " " + ReadFile(e.path());
    out += "\n";
  }
  return out;
}

TEST(MergedLayersTest, WhiteoutsOpaqueDirsAndSymlinksFollowOverlayRules) {
  testing::TempDir tmp;
  fs::path lower = tmp.path() / "l0", upper = tmp.path() / "l1";
  WriteFile(lower / "etc/keep", "k");
  WriteFile(lower / "etc/gone", "g");
  WriteFile(lower / "opq/old", "o");
  WriteFile(lower / "usr/bin/tool", "t");
  WriteFile(lower / "top-file", "x");
  fs::create_directory_symlink("usr/bin", lower / "bin");
  Whiteout(upper / "etc/gone");
  Whiteout(upper / "top-file");
  Opaque(upper / "opq");
  WriteFile(upper / "opq/new", "n");
  MergedLayers merged({lower, upper});

  EXPECT_EQ(merged.Find("/etc/keep"), lower / "etc/keep");
  EXPECT_FALSE(merged.Find("/etc/gone"));
  EXPECT_FALSE(merged.Find("/opq/old"));
  EXPECT_EQ(merged.Find("/opq/new"), upper / "opq/new");
  EXPECT_EQ(merged.Find("/bin/tool"), lower / "usr/bin/tool");  // through the image's symlink
  EXPECT_EQ(merged.Find("/bin"), lower / "bin");                // the last one is not followed
  EXPECT_EQ(merged.Find("/../etc/./keep"), lower / "etc/keep");
  EXPECT_FALSE(merged.Find("/nothing"));

  auto top = merged.TopLevel();
  ASSERT_TRUE(top) << top.error().message;
  std::vector<std::string> names;
  for (const auto& e : *top) names.push_back(e.name + (e.type == S_IFLNK ? "@" : ""));
  EXPECT_THAT(names, ::testing::ElementsAre("bin@", "etc", "opq", "usr"));
}

class ImageRootTest : public testing::SandboxFixture {
 protected:
  void SetUp() override {
    SandboxFixture::SetUp();
    if (IsSkipped()) return;
    ImageRootSupport support = ProbeImageRoots();
    if (!support.works) GTEST_SKIP() << "no image roots on this host: " << support.reason;
    // Layer 0: a userland from the host, files to hide, a world-writable dir.
    base_ = tmp_.path() / "layers/0";
    top_ = tmp_.path() / "layers/1";
    testing::HostUserland land = testing::CollectHostUserland();
    for (const auto& file : land.files) {
      fs::path to = base_ / fs::path(file).relative_path();
      fs::create_directories(to.parent_path());
      fs::copy_file(file, to);
    }
    for (const auto& [link, target] : land.symlinks) {
      fs::path at = base_ / fs::path(link).relative_path();
      fs::create_directories(at.parent_path());
      if (!fs::exists(at)) fs::create_symlink(target, at);
    }
    WriteFile(base_ / "etc/os-release", "ID=deepbox-test\n");
    WriteFile(base_ / "etc/gone", "hidden by a whiteout\n");
    WriteFile(base_ / "opq/old", "hidden by an opaque dir\n");
    WriteFile(base_ / "secret", "root only\n", 0600);
    fs::create_directories(base_ / "data");
    ASSERT_EQ(chmod((base_ / "data").c_str(), 0777), 0);
    WriteFile(base_ / "data/shared", "w\n", 0666);
    // Layer 1: a whiteout and an opaque dir.
    Whiteout(top_ / "etc/gone");
    Opaque(top_ / "opq");
    WriteFile(top_ / "opq/new", "from the top layer\n");
    OwnLikeTheCache(base_);
    OwnLikeTheCache(top_);
    before_ = TreeState(base_) + TreeState(top_);
    spec_.image_layers = {base_, top_};
  }

  fs::path base_, top_;
  std::string before_;
};

TEST_F(ImageRootTest, TheImageIsTheRootAndWritesGoToTheUpperLayer) {
  auto r =
      Run("cat /etc/os-release; test -e /etc/gone && echo GONE-VISIBLE; ls /opq; id -u; "
          "stat -c 'owner=%u' /etc/os-release; echo more >> /data/shared && echo appended; "
          "echo new > /data/created && echo created; cat /data/shared; "
          "(echo x > /etc/os-release) 2>/dev/null && echo WROTE-A-ROOT-FILE; "
          "(cat /secret) 2>/dev/null && echo READ-THE-SECRET; "
          "(mkdir /etc/mine) 2>/dev/null && echo MKDIR-IN-ETC; "
          "ls -A /.deepbox/image; grep -c /layers/ /proc/self/mountinfo; true");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->status.success()) << r->output;
  EXPECT_THAT(r->output, HasSubstr("ID=deepbox-test"));
  EXPECT_THAT(r->output, Not(HasSubstr("GONE-VISIBLE")));
  EXPECT_THAT(r->output, HasSubstr("new\n1000\n"));  // opq holds only the top layer's file
  if (geteuid() == 0) {
    EXPECT_THAT(r->output, HasSubstr("owner=0"));  // root's, as in the image
  }
  EXPECT_THAT(r->output, HasSubstr("appended\ncreated\nw\nmore\n"));
  EXPECT_THAT(r->output, Not(HasSubstr("WROTE-A-ROOT-FILE")));
  if (geteuid() == 0) {
    EXPECT_THAT(r->output, Not(HasSubstr("READ-THE-SECRET")));
    EXPECT_THAT(r->output, Not(HasSubstr("MKDIR-IN-ETC")));
  }
  EXPECT_THAT(r->output, HasSubstr("\n0\n"));  // no layer path in the mount table
  // The writes were in the sandbox's own upper layer (a tmpfs): the layers
  // are untouched, and the next sandbox of the same layers starts clean.
  EXPECT_EQ(TreeState(base_) + TreeState(top_), before_);
  auto other = Run("test -e /data/created && echo LEAKED; cat /data/shared");
  ASSERT_TRUE(other) << other.error().message;
  EXPECT_EQ(other->output, "w\n");
}

TEST_F(ImageRootTest, TheWritableLayerIsBoundedLikeTmp) {
  spec_.limits.tmp_bytes = 1 << 20;
  auto r =
      Run("head -c 4000000 /dev/zero > /data/big 2>/dev/null || echo full; "
          "stat -c %s /data/big");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_THAT(r->output, HasSubstr("full"));
  EXPECT_EQ(TreeState(base_) + TreeState(top_), before_);
}

TEST_F(ImageRootTest, TheLowerLayersCannotBeReachedOrWritten) {
  // The layers are no path inside: no mount of them, no /proc/1/fd to them,
  // and the overlay's and its upper tmpfs' mount points are empty.
  auto r =
      Run("for f in /proc/1/fd/*; do readlink $f; done | grep -c layers; "
          "ls -A /.deepbox/image /.deepbox/image-rw; "
          "(touch /usr/bin/planted) 2>/dev/null && echo PLANTED; true");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_THAT(r->output, HasSubstr("0\n"));
  EXPECT_FALSE(fs::exists(base_ / "usr/bin/planted"));
  EXPECT_EQ(TreeState(base_) + TreeState(top_), before_);
}

TEST_F(ImageRootTest, ImageAndRootfsTogetherAreRefused) {
  spec_.rootfs = tmp_.path();
  auto r = Run("true");
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("image or a rootfs"));
}

}  // namespace
}  // namespace deepbox::local
