#include "local/workspace_disk.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/random.h"
#include "common/unique_fd.h"
#include "local/child.h"
#include "local/tree_copy.h"

namespace deepbox::local {
namespace {

constexpr const char* kMkfs = "/usr/sbin/mkfs.ext4";
constexpr const char* kFsck = "/usr/sbin/e2fsck";

// Runs argv (a system tool, quiet) and returns its exit status (-1: killed).
Result<int> RunTool(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  char path_env[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
  char* envp[] = {path_env, nullptr};
  pid_t pid = fork();
  if (pid < 0) return MakeSyscallError("fork", errno);
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
    }
    RestoreDefaultSignals();
    execve(argv[0], argv.data(), envp);
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo.
std::string UnescapeMountField(std::string_view field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      int v = 0;
      bool octal = true;
      for (size_t k = 1; k <= 3; ++k) {
        char c = field[i + k];
        if (c < '0' || c > '7') octal = false;
        v = v * 8 + (c - '0');
      }
      if (octal) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(field[i]);
  }
  return out;
}

// The source device of the topmost mount on `dir` ("" = nothing mounted there).
Result<std::string> MountSourceOn(const std::filesystem::path& dir) {
  std::ifstream in("/proc/self/mountinfo");
  if (!in) return MakeSyscallError("open", errno, "/proc/self/mountinfo");
  std::string line, source;
  while (std::getline(in, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
    std::istringstream fields(line);
    std::string id, parent, devno, root, mountpoint;
    fields >> id >> parent >> devno >> root >> mountpoint;
    if (UnescapeMountField(mountpoint) != dir.string()) continue;
    std::string f;
    while (fields >> f && f != "-") {
    }
    std::string fstype, src;
    fields >> fstype >> src;
    source = UnescapeMountField(src);
  }
  return source;
}

Status RunMkfs(const std::filesystem::path& image, uid_t uid, gid_t gid) {
  std::string owner = fmt::format("root_owner={}:{}", uid, gid);
  auto status =
      RunTool({kMkfs, "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", owner, image.string()});
  if (!status) return tl::unexpected(status.error());
  if (*status != 0) {
    return MakeError(ErrorCode::kInternal,
                     fmt::format("mkfs.ext4 {} failed (exit status {})", image.string(), *status));
  }
  return {};
}

// Attaches `image_fd` to a free loop device with autoclear; returns its path and an open fd.
// The fd must stay open until the mount holds the device: autoclear detaches on last close.
// Creates running at once all get the same free device from
// LOOP_CTL_GET_FREE, and all but one then EBUSY from LOOP_CONFIGURE: with N
// of them the last one may need N attempts (100 concurrent creates failed
// with 16), so the bound is time, not a count.
Result<std::pair<std::string, UniqueFd>> AttachLoop(int image_fd) {
  UniqueFd control(open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!control) return MakeSyscallError("open", errno, "/dev/loop-control");
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int attempt = 0; std::chrono::steady_clock::now() < give_up; ++attempt) {
    if (attempt >= 16) std::this_thread::sleep_for(std::chrono::microseconds(100 + attempt % 900));
    int n = ioctl(control.get(), LOOP_CTL_GET_FREE);
    if (n < 0) return MakeSyscallError("ioctl(LOOP_CTL_GET_FREE)", errno);
    std::string dev = fmt::format("/dev/loop{}", n);
    UniqueFd loop(open(dev.c_str(), O_RDWR | O_CLOEXEC));
    if (!loop) return MakeSyscallError("open", errno, dev);
    struct loop_config config;
    memset(&config, 0, sizeof(config));
    config.fd = static_cast<uint32_t>(image_fd);
    config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
    if (ioctl(loop.get(), LOOP_CONFIGURE, &config) == 0) {
      return std::make_pair(dev, std::move(loop));
    }
    if (errno == EBUSY) continue;  // raced with another user of GET_FREE
    return MakeSyscallError("ioctl(LOOP_CONFIGURE)", errno, dev);
  }
  return MakeError(ErrorCode::kUnavailable, "no free loop device within 30 s");
}

// Mounts the ext4 of loop device `dev` on `dir` (nosuid, nodev, noatime).
// no_prefetch_block_bitmaps: since Linux 5.9 a mount starts reading every
// block group's bitmap in the background (a kernel thread made for it, I/O
// through the loop device), which here made a mount take 20 ms instead of
// 6-10 and its unmount wait; the bitmaps are read when needed instead.
// Kernels that do not know the option get the plain mount.
int MountWorkspaceExt4(const std::string& dev, const std::filesystem::path& dir) {
  constexpr unsigned long kFlags = MS_NOSUID | MS_NODEV | MS_NOATIME;
  if (mount(dev.c_str(), dir.c_str(), "ext4", kFlags, "no_prefetch_block_bitmaps") == 0) return 0;
  if (errno != EINVAL) return -1;
  return mount(dev.c_str(), dir.c_str(), "ext4", kFlags, nullptr);
}

// The template for disks of `bytes` owned by uid:gid in `dir`, open for
// reading: the file checked is the file copied.
Result<UniqueFd> OpenFormattedTemplate(const std::filesystem::path& dir, uint64_t bytes,
                                       uid_t owner_uid, gid_t owner_gid) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return MakeSyscallError("mkdir", errno, dir.string());
  }
  std::filesystem::path path = dir / fmt::format("ext4-{}-{}-{}.img", bytes, owner_uid, owner_gid);
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd) {
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return MakeSyscallError("fstat", errno, path.string());
    if (S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
        static_cast<uint64_t>(st.st_size) == bytes) {
      return fd;
    }
  } else if (errno != ENOENT && errno != ELOOP) {  // ELOOP: a symlink, replaced below
    return MakeSyscallError("open", errno, path.string());
  }
  // Made under a name of its own and renamed over whatever is at `path`: a
  // reader opens either the old file or a whole new one.
  std::filesystem::path tmp =
      dir / fmt::format(".tmp-{}-{}", RandomHex(8), path.filename().string());
  fd.reset(open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd) return MakeSyscallError("open", errno, tmp.string());
  auto fail = [&](tl::unexpected<Error> e) -> Result<UniqueFd> {
    (void)unlink(tmp.c_str());
    return e;
  };
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return fail(MakeSyscallError("ftruncate", errno, tmp.string()));
  }
  if (auto made = RunMkfs(tmp, owner_uid, owner_gid); !made)
    return fail(tl::unexpected(made.error()));
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return fail(MakeSyscallError("rename", errno, tmp.string()));
  }
  return fd;  // the same inode, now at `path`
}

// Spare images of one size and owner: "<prefix><random>.img" in the template dir.
std::string SparePrefix(uint64_t bytes, uid_t owner_uid, gid_t owner_gid) {
  return fmt::format("spare-ext4-{}-{}-{}-", bytes, owner_uid, owner_gid);
}

// Names in `dir` that start with `prefix` and end in ".img" (an unreadable
// or missing dir has none).
std::vector<std::string> SpareNames(const std::filesystem::path& dir, const std::string& prefix) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (struct dirent* e = readdir(d)) {
    std::string_view name = e->d_name;
    if (name.starts_with(prefix) && name.ends_with(".img")) names.emplace_back(name);
  }
  closedir(d);
  return names;
}

// Moves a spare of `bytes` owned by uid:gid to `image` (which must not
// exist). true: `image` is now such a spare; false: none was usable (Create
// then copies the template). A name that turns out to hold anything else is
// deleted.
Result<bool> TakeSpare(const std::filesystem::path& dir, uint64_t bytes, uid_t owner_uid,
                       gid_t owner_gid, const std::filesystem::path& image) {
  for (const auto& name : SpareNames(dir, SparePrefix(bytes, owner_uid, owner_gid))) {
    std::filesystem::path spare = dir / name;
    if (renameat2(AT_FDCWD, spare.c_str(), AT_FDCWD, image.c_str(), RENAME_NOREPLACE) != 0) {
      if (errno == ENOENT) continue;  // another create took it first
      if (errno == EEXIST) return MakeSyscallError("open", EEXIST, image.string());
      return false;  // EXDEV and the like: copy instead
    }
    UniqueFd fd(open(image.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st;
    if (fd && fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
        st.st_nlink == 1 && static_cast<uint64_t>(st.st_size) == bytes) {
      return true;
    }
    if (unlink(image.c_str()) != 0 && errno != ENOENT) {
      return MakeSyscallError("unlink", errno, image.string());
    }
  }
  return false;
}

}  // namespace

bool WorkspaceDiskSupported(std::string* reason) {
  auto fail = [&](const char* why) {
    if (reason) *reason = why;
    return false;
  };
  if (geteuid() != 0) return fail("needs root (mount and loop devices)");
  if (access("/dev/loop-control", R_OK | W_OK) != 0) return fail("/dev/loop-control missing");
  if (access(kMkfs, X_OK) != 0) return fail("mkfs.ext4 missing (install e2fsprogs)");
  if (reason) *reason = "ok";
  return true;
}

Result<WorkspaceDisk> WorkspaceDisk::Create(const std::filesystem::path& image,
                                            const std::filesystem::path& mount_dir, uint64_t bytes,
                                            uid_t owner_uid, gid_t owner_gid,
                                            const std::filesystem::path& template_dir) {
  if (bytes < (4ULL << 20)) {
    return MakeError(ErrorCode::kInvalidArgument, "workspace disk must be at least 4 MiB");
  }
  WorkspaceDisk disk;
  bool spare = false;
  if (!template_dir.empty()) {
    auto taken = TakeSpare(template_dir, bytes, owner_uid, owner_gid, image);
    if (!taken) return tl::unexpected(taken.error());
    spare = *taken;
    if (spare) disk.image_ = image;  // from here on, Release() deletes it
    disk.template_dir_ = template_dir;
    disk.bytes_ = bytes;
    disk.owner_uid_ = owner_uid;
    disk.owner_gid_ = owner_gid;
  }
  UniqueFd formatted;
  if (!template_dir.empty() && !spare) {
    auto opened = OpenFormattedTemplate(template_dir, bytes, owner_uid, owner_gid);
    if (!opened) return tl::unexpected(opened.error());
    formatted = std::move(*opened);
  }
  if (!spare) {
    UniqueFd fd(open(image.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd) return MakeSyscallError("open", errno, image.string());
    disk.image_ = image;  // from here on, Release() deletes it
    if (!formatted) {
      if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
        return MakeSyscallError("ftruncate", errno, image.string());
      }
    } else if (auto copied = CopyFileData(formatted.get(), fd.get(), static_cast<off_t>(bytes),
                                          "the workspace disk template");
               !copied) {
      return tl::unexpected(copied.error());
    }
  }
  if (!formatted && !spare) {
    if (auto st = RunMkfs(image, owner_uid, owner_gid); !st) return tl::unexpected(st.error());
  }
  UniqueFd fd(open(image.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd) return MakeSyscallError("open", errno, image.string());
  auto attached = AttachLoop(fd.get());
  if (!attached) return tl::unexpected(attached.error());
  auto& [dev, loop_fd] = *attached;
  disk.loop_device_ = dev;
  if (MountWorkspaceExt4(dev, mount_dir) != 0) {
    // Closing loop_fd (the last reference) detaches the device (autoclear).
    return MakeSyscallError("mount", errno, mount_dir.string());
  }
  disk.mount_dir_ = mount_dir;
  disk.mounted_ = true;
  // mkfs leaves a root-owned 0700 lost+found in what is the agent's
  // /workspace: every glob and grep there would report an unreadable
  // directory. Only e2fsck uses it (and recreates it), and the disk lives
  // only as long as its sandbox.
  std::filesystem::path lost = mount_dir / "lost+found";
  if (rmdir(lost.c_str()) != 0 && errno != ENOENT) {
    return MakeSyscallError("rmdir", errno, lost.string());
  }
  return disk;
}

Status WorkspaceDisk::MakeSpare(const std::filesystem::path& template_dir, uint64_t bytes,
                                uid_t owner_uid, gid_t owner_gid) {
  const std::string prefix = SparePrefix(bytes, owner_uid, owner_gid);
  if (SpareNames(template_dir, prefix).size() >= kMaxSpares) return {};
  auto formatted = OpenFormattedTemplate(template_dir, bytes, owner_uid, owner_gid);
  if (!formatted) return tl::unexpected(formatted.error());
  std::filesystem::path tmp = template_dir / fmt::format(".tmp-{}{}.img", prefix, RandomHex(8));
  UniqueFd out(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!out) return MakeSyscallError("open", errno, tmp.string());
  auto fail = [&](Status e) {
    (void)unlink(tmp.c_str());
    return e;
  };
  if (auto copied = CopyFileData(formatted->get(), out.get(), static_cast<off_t>(bytes),
                                 "the workspace disk template");
      !copied) {
    return fail(copied);
  }
  // Written back now, so that the loop device's fsync at Create finds nothing to do.
  if (fdatasync(out.get()) != 0) return fail(MakeSyscallError("fdatasync", errno, tmp.string()));
  std::filesystem::path spare = template_dir / fmt::format("{}{}.img", prefix, RandomHex(8));
  if (rename(tmp.c_str(), spare.c_str()) != 0) {
    return fail(MakeSyscallError("rename", errno, tmp.string()));
  }
  // Supervisors finishing at once may each have made one: the count stays bounded.
  if (SpareNames(template_dir, prefix).size() > kMaxSpares) (void)unlink(spare.c_str());
  return {};
}

Status WorkspaceDisk::MakeSpareLikeThis() const {
  if (template_dir_.empty()) return {};
  return MakeSpare(template_dir_, bytes_, owner_uid_, owner_gid_);
}

// Whether `mount_dir` holds a mount of `image` (through a loop device): its
// device, "" when nothing is mounted there, CONFLICT for another mount.
Result<std::string> LoopMountOf(const std::filesystem::path& image, const struct stat& image_st,
                                const std::filesystem::path& mount_dir) {
  auto source = MountSourceOn(mount_dir);
  if (!source || source->empty()) return source;
  UniqueFd loop(open(source->c_str(), O_RDONLY | O_CLOEXEC));
  struct loop_info64 info;
  memset(&info, 0, sizeof(info));
  if (!loop || ioctl(loop.get(), LOOP_GET_STATUS64, &info) != 0 ||
      info.lo_inode != image_st.st_ino || info.lo_device != image_st.st_dev) {
    return MakeError(ErrorCode::kConflict,
                     fmt::format("{} holds a mount of {}, not of the workspace image {}",
                                 mount_dir.string(), *source, image.string()));
  }
  return source;
}

Status WorkspaceDisk::CloneImage(const std::filesystem::path& image,
                                 const std::filesystem::path& mount_dir,
                                 const std::filesystem::path& to) {
  UniqueFd from(open(image.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!from) return MakeSyscallError("open", errno, image.string());
  struct stat st;
  if (fstat(from.get(), &st) != 0) return MakeSyscallError("fstat", errno, image.string());
  auto mounted = LoopMountOf(image, st, mount_dir);
  if (!mounted) return tl::unexpected(mounted.error());
  UniqueFd dir;
  if (!mounted->empty()) {
    dir.reset(open(mount_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir) return MakeSyscallError("open", errno, mount_dir.string());
    if (ioctl(dir.get(), FIFREEZE, 0) != 0) {
      return MakeSyscallError("ioctl(FIFREEZE)", errno, mount_dir.string());
    }
  }
  Status copied;
  {
    UniqueFd out(open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!out) {
      copied = MakeSyscallError("open", errno, to.string());
    } else {
      copied = CopyFileData(from.get(), out.get(), st.st_size, image.string());
      if (!copied) (void)unlink(to.c_str());
    }
  }
  if (dir && ioctl(dir.get(), FITHAW, 0) != 0 && copied) {
    copied = MakeSyscallError("ioctl(FITHAW)", errno, mount_dir.string());
  }
  // Not mounted (its owner died with the host): the image may have been
  // closed uncleanly, so the clone is checked (the source is left as it is).
  if (copied && !dir) {
    auto status = RunTool({kFsck, "-p", to.string()});
    if (!status || (*status != 0 && *status != 1)) {
      (void)unlink(to.c_str());
      return status ? MakeError(ErrorCode::kUnavailable,
                                fmt::format("a copy of the workspace image {} has errors e2fsck "
                                            "-p cannot correct (exit status {})",
                                            image.string(), *status))
                    : tl::unexpected(status.error());
    }
  }
  return copied;
}

Result<WorkspaceDisk> WorkspaceDisk::Adopt(const std::filesystem::path& image,
                                           const std::filesystem::path& mount_dir, bool check) {
  UniqueFd fd(open(image.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return MakeSyscallError("open", errno, image.string());
  struct stat image_st;
  if (fstat(fd.get(), &image_st) != 0) return MakeSyscallError("fstat", errno, image.string());
  if (!S_ISREG(image_st.st_mode)) {
    return MakeError(ErrorCode::kConflict, fmt::format("{} is not a regular file", image.string()));
  }
  // Still mounted: only if it is this image, through a loop device.
  auto source = LoopMountOf(image, image_st, mount_dir);
  if (!source) return tl::unexpected(source.error());
  WorkspaceDisk disk;
  if (!source->empty()) {
    disk.loop_device_ = *source;
  } else {
    // Not mounted (the host restarted): the image was last closed uncleanly
    // and has no journal, so it is checked first. 1 = errors corrected.
    auto status = check ? RunTool({kFsck, "-p", image.string()}) : Result<int>(0);
    if (!status) return tl::unexpected(status.error());
    if (*status != 0 && *status != 1) {
      return MakeError(ErrorCode::kUnavailable,
                       fmt::format("the workspace image {} has errors e2fsck -p cannot correct "
                                   "(exit status {}); it was left as it is: check it by hand "
                                   "with e2fsck {}",
                                   image.string(), *status, image.string()));
    }
    auto attached = AttachLoop(fd.get());
    if (!attached) return tl::unexpected(attached.error());
    auto& [dev, loop_fd] = *attached;
    if (MountWorkspaceExt4(dev, mount_dir) != 0) {
      return MakeSyscallError("mount", errno, mount_dir.string());
    }
    disk.loop_device_ = dev;
    // e2fsck may have made lost+found again: removed unless it holds what
    // it recovered (then the user should see it).
    (void)rmdir((mount_dir / "lost+found").c_str());
  }
  disk.image_ = image;
  disk.mount_dir_ = mount_dir;
  disk.mounted_ = true;
  return disk;
}

WorkspaceDisk& WorkspaceDisk::operator=(WorkspaceDisk&& other) noexcept {
  if (this != &other) {
    (void)Release();
    image_ = std::exchange(other.image_, {});
    mount_dir_ = std::exchange(other.mount_dir_, {});
    loop_device_ = std::exchange(other.loop_device_, {});
    mounted_ = std::exchange(other.mounted_, false);
    template_dir_ = std::exchange(other.template_dir_, {});
    bytes_ = other.bytes_;
    owner_uid_ = other.owner_uid_;
    owner_gid_ = other.owner_gid_;
  }
  return *this;
}

WorkspaceDisk::~WorkspaceDisk() { (void)Release(); }

Status WorkspaceDisk::Release() {
  Status result;
  if (mounted_) {
    if (umount2(mount_dir_.c_str(), 0) != 0) {
      // Still in use (a process holds a file): detach now, freed when the last user goes.
      if (umount2(mount_dir_.c_str(), MNT_DETACH) != 0) {
        result = MakeSyscallError("umount2", errno, mount_dir_.string());
      }
    }
    mounted_ = false;
  }
  if (!image_.empty()) {
    if (unlink(image_.c_str()) != 0 && errno != ENOENT && result) {
      result = MakeSyscallError("unlink", errno, image_.string());
    }
    image_.clear();
  }
  return result;
}

}  // namespace deepbox::local
