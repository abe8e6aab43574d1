// WorkspaceDisk on real loop devices and ext4 (root only): Create, and Adopt
// of a disk a dead supervisor left mounted or (after a reboot) unmounted.
#include "local/workspace_disk.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/temp_dir.h"

namespace deepbox::local {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class WorkspaceDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!WorkspaceDiskSupported(&why)) GTEST_SKIP() << why;
    tmp_.emplace("dbx-wsdisk");
    dir_ = tmp_->path();
    mount_dir_ = dir_ / "ws";
    image_ = dir_ / "workspace.img";
    fs::create_directory(mount_dir_);
  }
  void TearDown() override {
    if (dir_.empty()) return;
    while (umount2(mount_dir_.c_str(), MNT_DETACH) == 0) {
    }
    tmp_.reset();
  }
  bool Mounted() const {
    return ReadAll("/proc/self/mountinfo").find(" " + mount_dir_.string() + " ") !=
           std::string::npos;
  }
  std::optional<deepbox::testing::TempDir> tmp_;  // made once the test is not skipped
  fs::path dir_, mount_dir_, image_;
};

TEST_F(WorkspaceDiskTest, AdoptTakesOverTheMountADeadOwnerLeft) {
  // The owner dies without running a destructor (as a SIGKILLed supervisor):
  // its mount stays.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    auto disk = WorkspaceDisk::Create(image_, mount_dir_, 16ULL << 20, 1000, 1000);
    if (!disk) _exit(1);
    std::ofstream(mount_dir_ / "f") << "kept";
    std::string dev = disk->loop_device();
    (void)!write(fds[1], dev.data(), dev.size());
    _exit(0);
  }
  close(fds[1]);
  char buf[64] = {};
  ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_GT(n, 0);
  const std::string loop(buf, static_cast<size_t>(n));
  ASSERT_TRUE(Mounted());
  auto adopted = WorkspaceDisk::Adopt(image_, mount_dir_);
  ASSERT_TRUE(adopted) << adopted.error().ToString();
  EXPECT_EQ(adopted->loop_device(), loop);
  EXPECT_EQ(ReadAll(mount_dir_ / "f"), "kept");
  // It owns the disk now: releasing unmounts it and deletes the image.
  ASSERT_TRUE(adopted->Release());
  EXPECT_FALSE(Mounted());
  EXPECT_FALSE(fs::exists(image_));
}

TEST_F(WorkspaceDiskTest, AdoptAfterARebootChecksAndMountsTheImageAgain) {
  {
    auto disk = WorkspaceDisk::Create(image_, mount_dir_, 16ULL << 20, 1000, 1000);
    ASSERT_TRUE(disk) << disk.error().ToString();
    fs::create_directories(mount_dir_ / "a" / "b");
    std::ofstream(mount_dir_ / "a" / "b" / "f") << "kept";
    disk->KeepImage();  // the destructor only unmounts: the image stays
  }
  ASSERT_FALSE(Mounted());
  ASSERT_TRUE(fs::exists(image_));
  auto adopted = WorkspaceDisk::Adopt(image_, mount_dir_);
  ASSERT_TRUE(adopted) << adopted.error().ToString();
  EXPECT_TRUE(Mounted());
  EXPECT_EQ(ReadAll(mount_dir_ / "a" / "b" / "f"), "kept");
  EXPECT_FALSE(fs::exists(mount_dir_ / "lost+found"));  // e2fsck's, empty: removed
  struct stat st;
  ASSERT_EQ(stat(mount_dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);  // the sandbox's own root dir, as created
}

TEST_F(WorkspaceDiskTest, AdoptRefusesAMountOfSomethingElse) {
  auto disk = WorkspaceDisk::Create(image_, mount_dir_, 16ULL << 20, 1000, 1000);
  ASSERT_TRUE(disk) << disk.error().ToString();
  ASSERT_TRUE(disk->Release());
  // An image exists, but what is mounted on the dir is a tmpfs.
  { std::ofstream(image_) << "not an ext4 image"; }
  ASSERT_EQ(mount("tmpfs", mount_dir_.c_str(), "tmpfs", 0, "size=1m"), 0) << strerror(errno);
  auto adopted = WorkspaceDisk::Adopt(image_, mount_dir_);
  ASSERT_FALSE(adopted);
  EXPECT_EQ(adopted.error().code, ErrorCode::kConflict);
  EXPECT_THAT(adopted.error().message, HasSubstr("not of the workspace image"));
}

TEST_F(WorkspaceDiskTest, AdoptOfAMissingOrBrokenImageSaysSoAndChangesNothing) {
  auto missing = WorkspaceDisk::Adopt(image_, mount_dir_);
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.error().message, HasSubstr("open"));
  EXPECT_THAT(missing.error().message, HasSubstr(image_.string()));
  // Garbage that no e2fsck can repair: refused, the file left as it is.
  {
    std::ofstream out(image_);
    out << std::string(1 << 20, 'x');
  }
  auto broken = WorkspaceDisk::Adopt(image_, mount_dir_);
  ASSERT_FALSE(broken);
  EXPECT_EQ(broken.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(broken.error().message, HasSubstr("e2fsck"));
  EXPECT_FALSE(Mounted());
  EXPECT_EQ(fs::file_size(image_), 1u << 20);
}

TEST_F(WorkspaceDiskTest, CloneImageCopiesAMountedDiskConsistently) {
  auto disk = WorkspaceDisk::Create(image_, mount_dir_, 16ULL << 20, 1000, 1000);
  ASSERT_TRUE(disk) << disk.error().ToString();
  fs::create_directories(mount_dir_ / "d");
  std::ofstream(mount_dir_ / "d" / "f") << "cloned";  // dirty in the page cache
  fs::path clone = dir_ / "clone.img";
  ASSERT_TRUE(WorkspaceDisk::CloneImage(image_, mount_dir_, clone));
  // The source is thawed: it takes writes again.
  std::ofstream(mount_dir_ / "after") << "x";
  EXPECT_TRUE(fs::exists(mount_dir_ / "after"));
  // The clone is sparse (not 16 MiB of data) and mounts as it was.
  struct stat st;
  ASSERT_EQ(stat(clone.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 16 << 20);
  EXPECT_LT(st.st_blocks * 512, 16 << 20);
  fs::path other = dir_ / "other";
  fs::create_directory(other);
  auto copy = WorkspaceDisk::Adopt(clone, other, /*check=*/false);
  ASSERT_TRUE(copy) << copy.error().ToString();
  EXPECT_EQ(ReadAll(other / "d" / "f"), "cloned");
  EXPECT_FALSE(fs::exists(other / "after"));
  ASSERT_TRUE(copy->Release());
  // A clone never replaces a file, and leaves the one there as it was.
  std::ofstream(dir_ / "taken") << "mine";
  EXPECT_FALSE(WorkspaceDisk::CloneImage(image_, mount_dir_, dir_ / "taken"));
  EXPECT_EQ(ReadAll(dir_ / "taken"), "mine");
  std::ofstream(mount_dir_ / "still") << "writable";  // not left frozen by the failure
  EXPECT_TRUE(fs::exists(mount_dir_ / "still"));
}

TEST_F(WorkspaceDiskTest, CloneImageOfAnUnmountedImageChecksTheCopy) {
  {
    auto disk = WorkspaceDisk::Create(image_, mount_dir_, 16ULL << 20, 1000, 1000);
    ASSERT_TRUE(disk) << disk.error().ToString();
    std::ofstream(mount_dir_ / "f") << "kept";
    disk->KeepImage();
  }
  fs::path clone = dir_ / "clone.img";
  ASSERT_TRUE(WorkspaceDisk::CloneImage(image_, mount_dir_, clone));
  auto copy = WorkspaceDisk::Adopt(clone, mount_dir_, /*check=*/false);
  ASSERT_TRUE(copy) << copy.error().ToString();
  EXPECT_EQ(ReadAll(mount_dir_ / "f"), "kept");
  ASSERT_TRUE(copy->Release());
  // Garbage is no file system: refused, and no copy is left.
  {
    std::ofstream out(image_, std::ios::trunc);
    out << std::string(1 << 20, 'x');
  }
  auto broken = WorkspaceDisk::CloneImage(image_, mount_dir_, clone);
  ASSERT_FALSE(broken);
  EXPECT_THAT(broken.error().message, HasSubstr("e2fsck"));
  EXPECT_FALSE(fs::exists(clone));
}

// A disk copied from a formatted template is the file system mkfs makes: the
// same size and free space, its root owned by the sandbox's user, empty, and a
// disk of its own (nothing written in one shows in another); the template is
// made once and then only read.
TEST_F(WorkspaceDiskTest, CreateFromATemplateGivesTheSameFileSystemAndFormatsOnce) {
  constexpr uint64_t kBytes = 16ULL << 20;
  fs::path templates = dir_ / "templates";
  struct statvfs formatted;
  {
    auto plain = WorkspaceDisk::Create(image_, mount_dir_, kBytes, 1000, 1000);
    ASSERT_TRUE(plain) << plain.error().ToString();
    ASSERT_EQ(statvfs(mount_dir_.c_str(), &formatted), 0);
  }
  auto first = WorkspaceDisk::Create(image_, mount_dir_, kBytes, 1000, 1000, templates);
  ASSERT_TRUE(first) << first.error().ToString();
  fs::path tmpl = templates / fmt::format("ext4-{}-1000-1000.img", kBytes);
  struct stat tmpl_st;
  ASSERT_EQ(lstat(tmpl.c_str(), &tmpl_st), 0);
  EXPECT_TRUE(S_ISREG(tmpl_st.st_mode));
  EXPECT_EQ(tmpl_st.st_mode & 0777, 0600u);
  EXPECT_EQ(static_cast<uint64_t>(tmpl_st.st_size), kBytes);
  struct stat dir_st;
  ASSERT_EQ(stat(templates.c_str(), &dir_st), 0);
  EXPECT_EQ(dir_st.st_mode & 0777, 0700u);
  std::ofstream(mount_dir_ / "only-in-first") << "x";

  fs::path other_mount = dir_ / "ws2";
  fs::create_directory(other_mount);
  auto second =
      WorkspaceDisk::Create(dir_ / "second.img", other_mount, kBytes, 1000, 1000, templates);
  ASSERT_TRUE(second) << second.error().ToString();
  struct stat again;
  ASSERT_EQ(lstat(tmpl.c_str(), &again), 0);
  EXPECT_EQ(again.st_ino, tmpl_st.st_ino);  // reused, not made again
  EXPECT_EQ(again.st_mtim.tv_sec, tmpl_st.st_mtim.tv_sec);
  EXPECT_EQ(again.st_mtim.tv_nsec, tmpl_st.st_mtim.tv_nsec);
  EXPECT_TRUE(fs::is_empty(other_mount));  // no lost+found, nothing of the first disk
  struct stat root_st;
  ASSERT_EQ(stat(other_mount.c_str(), &root_st), 0);
  EXPECT_EQ(root_st.st_uid, 1000u);
  EXPECT_EQ(root_st.st_gid, 1000u);
  struct statvfs copied;
  ASSERT_EQ(statvfs(other_mount.c_str(), &copied), 0);
  EXPECT_EQ(copied.f_blocks, formatted.f_blocks);
  EXPECT_EQ(copied.f_bfree, formatted.f_bfree);
  EXPECT_EQ(copied.f_files, formatted.f_files);
  // The limit holds as on a formatted disk: ENOSPC past it, the other disk unaffected.
  {
    std::ofstream big(other_mount / "big", std::ios::binary);
    std::string chunk(1 << 20, 'z');
    for (int i = 0; i < 32 && big; ++i) big << chunk << std::flush;
    EXPECT_FALSE(big.good());
  }
  EXPECT_LT(fs::file_size(other_mount / "big"), kBytes);
  EXPECT_EQ(ReadAll(mount_dir_ / "only-in-first"), "x");
  EXPECT_FALSE(fs::exists(other_mount / "only-in-first"));
  // Another owner gets a template of its own.
  fs::path third_mount = dir_ / "ws3";
  fs::create_directory(third_mount);
  auto third =
      WorkspaceDisk::Create(dir_ / "third.img", third_mount, kBytes, 1234, 1234, templates);
  ASSERT_TRUE(third) << third.error().ToString();
  EXPECT_TRUE(fs::exists(templates / fmt::format("ext4-{}-1234-1234.img", kBytes)));
  ASSERT_EQ(stat(third_mount.c_str(), &root_st), 0);
  EXPECT_EQ(root_st.st_uid, 1234u);
  ASSERT_TRUE(third->Release());
  ASSERT_TRUE(second->Release());
  ASSERT_TRUE(first->Release());
  EXPECT_FALSE(fs::exists(dir_ / "second.img"));
  EXPECT_TRUE(fs::exists(tmpl));  // templates outlive the disks
}

// Whatever else is at a template's name -- a file of another size, garbage
// left by hand, a symlink -- is replaced by a real template, never followed.
TEST_F(WorkspaceDiskTest, ATemplateNameHoldingSomethingElseIsReplaced) {
  constexpr uint64_t kBytes = 8ULL << 20;
  fs::path templates = dir_ / "templates";
  fs::create_directory(templates);
  fs::path tmpl = templates / fmt::format("ext4-{}-1000-1000.img", kBytes);
  std::ofstream(tmpl) << "not a file system";
  auto disk = WorkspaceDisk::Create(image_, mount_dir_, kBytes, 1000, 1000, templates);
  ASSERT_TRUE(disk) << disk.error().ToString();
  EXPECT_EQ(fs::file_size(tmpl), kBytes);
  ASSERT_TRUE(disk->Release());

  fs::path victim = dir_ / "victim";
  std::ofstream(victim) << "keep me";
  fs::remove(tmpl);
  fs::create_symlink(victim, tmpl);
  disk = WorkspaceDisk::Create(image_, mount_dir_, kBytes, 1000, 1000, templates);
  ASSERT_TRUE(disk) << disk.error().ToString();
  EXPECT_FALSE(fs::is_symlink(tmpl));
  EXPECT_EQ(ReadAll(victim), "keep me");
  ASSERT_TRUE(disk->Release());
  for (const auto& e : fs::directory_iterator(templates)) {
    EXPECT_EQ(e.path(), tmpl) << "left over: " << e.path();
  }
}

// Sandboxes created at the same moment with no template yet all get a disk;
// one template remains and no temporary file.
TEST_F(WorkspaceDiskTest, ConcurrentCreatesShareOneTemplate) {
  constexpr int kDisks = 4;
  fs::path templates = dir_ / "templates";
  std::vector<Result<WorkspaceDisk>> disks(kDisks);
  std::vector<std::thread> threads;
  for (int i = 0; i < kDisks; ++i) {
    fs::path mount = dir_ / fmt::format("m{}", i);
    fs::create_directory(mount);
    threads.emplace_back([&, i, mount] {
      disks[i] = WorkspaceDisk::Create(dir_ / fmt::format("d{}.img", i), mount, 8ULL << 20, 1000,
                                       1000, templates);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kDisks; ++i) {
    ASSERT_TRUE(disks[i]) << i << ": " << disks[i].error().ToString();
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(templates)) names.push_back(e.path().filename());
  EXPECT_THAT(names, ::testing::ElementsAre(fmt::format("ext4-{}-1000-1000.img", 8ULL << 20)));
  for (auto& d : disks) ASSERT_TRUE(d->Release());
}

// Spares: MakeSpare keeps at most kMaxSpares copies of the template, written
// back; Create takes one (renamed into place: no copy) and gives the same
// file system as a copy of the template, limit and ENOSPC included.
TEST_F(WorkspaceDiskTest, CreateTakesASpareMadeAheadAndSparesStayBounded) {
  constexpr uint64_t kBytes = 16ULL << 20;
  fs::path templates = dir_ / "templates";
  auto spares = [&] {
    std::vector<std::string> names;
    if (!fs::exists(templates)) return names;
    for (const auto& e : fs::directory_iterator(templates)) {
      std::string name = e.path().filename();
      if (name.rfind(fmt::format("spare-ext4-{}-1000-1000-", kBytes), 0) == 0) {
        names.push_back(name);
      }
    }
    return names;
  };
  struct statvfs formatted;
  {
    auto plain = WorkspaceDisk::Create(image_, mount_dir_, kBytes, 1000, 1000, templates);
    ASSERT_TRUE(plain) << plain.error().ToString();
    ASSERT_EQ(statvfs(mount_dir_.c_str(), &formatted), 0);
    ASSERT_TRUE(plain->MakeSpareLikeThis());
  }
  ASSERT_EQ(spares().size(), 1u);
  for (int i = 0; i < WorkspaceDisk::kMaxSpares + 2; ++i) {
    ASSERT_TRUE(WorkspaceDisk::MakeSpare(templates, kBytes, 1000, 1000));
  }
  EXPECT_EQ(spares().size(), static_cast<size_t>(WorkspaceDisk::kMaxSpares));
  fs::path spare = templates / spares().front();
  struct stat spare_st;
  ASSERT_EQ(lstat(spare.c_str(), &spare_st), 0);
  EXPECT_EQ(spare_st.st_mode & 0777, 0600u);

  auto disk = WorkspaceDisk::Create(image_, mount_dir_, kBytes, 1000, 1000, templates);
  ASSERT_TRUE(disk) << disk.error().ToString();
  EXPECT_EQ(spares().size(), static_cast<size_t>(WorkspaceDisk::kMaxSpares) - 1);
  struct stat image_st;
  ASSERT_EQ(stat(image_.c_str(), &image_st), 0);
  EXPECT_EQ(image_st.st_ino, spare_st.st_ino);  // the spare itself, renamed
  EXPECT_TRUE(fs::is_empty(mount_dir_));
  struct stat root_st;
  ASSERT_EQ(stat(mount_dir_.c_str(), &root_st), 0);
  EXPECT_EQ(root_st.st_uid, 1000u);
  struct statvfs taken;
  ASSERT_EQ(statvfs(mount_dir_.c_str(), &taken), 0);
  EXPECT_EQ(taken.f_blocks, formatted.f_blocks);
  EXPECT_EQ(taken.f_bfree, formatted.f_bfree);
  EXPECT_EQ(taken.f_files, formatted.f_files);
  {
    std::ofstream big(mount_dir_ / "big", std::ios::binary);
    std::string chunk(1 << 20, 'z');
    for (int i = 0; i < 32 && big; ++i) big << chunk << std::flush;
    EXPECT_FALSE(big.good());  // ENOSPC at the limit
  }
  EXPECT_LT(fs::file_size(mount_dir_ / "big"), kBytes);
  ASSERT_TRUE(disk->Release());
  EXPECT_FALSE(fs::exists(image_));
  // Another size or owner never takes these.
  fs::path other_mount = dir_ / "ws2";
  fs::create_directory(other_mount);
  auto other =
      WorkspaceDisk::Create(dir_ / "other.img", other_mount, kBytes, 1234, 1234, templates);
  ASSERT_TRUE(other) << other.error().ToString();
  EXPECT_EQ(spares().size(), static_cast<size_t>(WorkspaceDisk::kMaxSpares) - 1);
  ASSERT_TRUE(other->Release());
  // A disk made without a template makes no spare.
  auto plain = WorkspaceDisk::Create(image_, mount_dir_, 8ULL << 20, 1000, 1000);
  ASSERT_TRUE(plain) << plain.error().ToString();
  ASSERT_TRUE(plain->MakeSpareLikeThis());
  ASSERT_TRUE(plain->Release());
  for (const auto& e : fs::directory_iterator(templates)) {
    EXPECT_EQ(std::string(e.path().filename()).find("8388608"), std::string::npos) << e.path();
  }
}

// Whatever else is at a spare's name -- a file of another size, a symlink --
// is deleted, never used nor followed; the disk is then copied from the template.
TEST_F(WorkspaceDiskTest, ASpareNameHoldingSomethingElseIsDeletedNotUsed) {
  constexpr uint64_t kBytes = 8ULL << 20;
  fs::path templates = dir_ / "templates";
  fs::create_directory(templates);
  fs::path wrong_size = templates / fmt::format("spare-ext4-{}-1000-1000-a.img", kBytes);
  std::ofstream(wrong_size) << "not a file system";
  fs::path victim = dir_ / "victim";
  {
    std::ofstream v(victim, std::ios::binary);
    v << std::string(kBytes, 'v');
  }
  fs::path link = templates / fmt::format("spare-ext4-{}-1000-1000-b.img", kBytes);
  fs::create_symlink(victim, link);
  auto disk = WorkspaceDisk::Create(image_, mount_dir_, kBytes, 1000, 1000, templates);
  ASSERT_TRUE(disk) << disk.error().ToString();
  EXPECT_FALSE(fs::exists(fs::symlink_status(wrong_size)));
  EXPECT_FALSE(fs::exists(fs::symlink_status(link)));
  EXPECT_FALSE(fs::is_symlink(image_));
  EXPECT_TRUE(fs::is_empty(mount_dir_));
  EXPECT_EQ(fs::file_size(victim), kBytes);
  EXPECT_EQ(ReadAll(victim).substr(0, 4), "vvvv");
  ASSERT_TRUE(disk->Release());
}

}  // namespace
}  // namespace deepbox::local
