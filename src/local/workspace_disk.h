// Disk-space limit for /workspace: a sparse ext4 image file in the sandbox's
// runtime dir, attached to a loop device and mounted (nosuid, nodev) on the
// host workspace dir, which the launcher then binds at /workspace.
//
// Why this and not the alternatives (decided for this host, ext4 root without
// prjquota): a tmpfs of N bytes would not be backed by a host dir (and counts
// against RAM); project quotas need the host fs mounted with prjquota;
// RLIMIT_FSIZE bounds one file, not the total. The image is real disk space,
// written lazily (sparse), enforced by the filesystem (ENOSPC), and removed
// with the sandbox. Needs root (mount + loop devices), /dev/loop-control and
// mkfs.ext4 (e2fsprogs). Cost measured here: ~7 ms for mkfs of 64 MiB + ~3 ms mount.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "common/error.h"

namespace deepbox::local {

// Whether this process can create workspace images here (root, loop-control, mkfs.ext4).
bool WorkspaceDiskSupported(std::string* reason = nullptr);

class WorkspaceDisk {
 public:
  // Creates `image` (must not exist) of `bytes`, formats it with the root dir
  // owned by owner_uid:owner_gid, and mounts it on `mount_dir` (an existing,
  // empty dir). The loop device is set to autoclear on unmount.
  //
  // `template_dir` (optional; made 0700 if missing, on the file system of
  // `image` for reflinks): where formatted empty images are kept, one per
  // size and owner (FormattedTemplate). With it the image is a copy of that
  // template (its few MiB of metadata; a reflink where the file system shares
  // extents) instead of a run of mkfs.ext4, which writes and fsyncs the same
  // bytes every time (issue 23: most of a cold create's `prepare`). The
  // result is the same file system, limit and ENOSPC behaviour included. A
  // template (`ext4-<bytes>-<uid>-<gid>.img`) is made once -- mkfs.ext4 into
  // a temporary name, then renamed into place, so that concurrent creates
  // each see a whole image -- and used while it is a regular file of this
  // process's uid of exactly that size; anything else at its name (a symlink
  // included) is replaced, never followed.
  //
  // Spares (issue 23): with `template_dir`, Create first takes a spare -- a
  // copy of the template made ahead of time by MakeSpare and already written
  // back to disk -- by renaming it to `image`; only when there is none does
  // it copy the template. Attaching a loop device fsyncs its backing file, so
  // a fresh copy costs its copy and its write-back on the create's critical
  // path, a spare neither. A spare is used under the template's rules
  // (a regular file of this process's uid, exactly `bytes`, one link);
  // anything else taken under its name is deleted.
  static Result<WorkspaceDisk> Create(const std::filesystem::path& image,
                                      const std::filesystem::path& mount_dir, uint64_t bytes,
                                      uid_t owner_uid, gid_t owner_gid,
                                      const std::filesystem::path& template_dir = {});

  // At most this many spares per size and owner are kept in a template dir.
  static constexpr int kMaxSpares = 2;
  // Makes one spare disk image for Create in `template_dir` (the template
  // first, if missing) unless kMaxSpares of that size and owner are there:
  // copied from the template into a temporary name, fdatasync'ed, renamed to
  // `spare-ext4-<bytes>-<uid>-<gid>-<random>.img`. Off any critical path:
  // meant for after a sandbox is up.
  static Status MakeSpare(const std::filesystem::path& template_dir, uint64_t bytes,
                          uid_t owner_uid, gid_t owner_gid);
  // MakeSpare for the size, owner and template dir this disk was created
  // with; nothing for a disk made without a template or adopted.
  Status MakeSpareLikeThis() const;

  // Takes over the disk of a sandbox whose supervisor died while it was
  // suspended: `image` as mounted on `mount_dir` (the mount a dead
  // supervisor left on the host), else the image checked (e2fsck -p: it has
  // no journal) and mounted again (after a reboot). Never formats: the files
  // in it are the point. CONFLICT if mount_dir holds another mount.
  // `check` false: no e2fsck (an image CloneImage made: consistent).
  static Result<WorkspaceDisk> Adopt(const std::filesystem::path& image,
                                     const std::filesystem::path& mount_dir, bool check = true);

  // Copies `image`, the disk mounted on `mount_dir`, to the new file `to`
  // while its file system is frozen (FIFREEZE: flushed, writers held until
  // FITHAW), so that the copy is a consistent file system, ready for Adopt:
  // a reflink where the host file system shares extents, else its data
  // extents (holes stay holes). For forks: the caller pauses the sandbox
  // first (a frozen file system would block its writers meanwhile). An image
  // mounted nowhere (its owner died with the host) is copied as it is and the
  // copy checked with e2fsck -p. On failure `to` does not exist.
  static Status CloneImage(const std::filesystem::path& image,
                           const std::filesystem::path& mount_dir, const std::filesystem::path& to);

  WorkspaceDisk() = default;
  WorkspaceDisk(WorkspaceDisk&& other) noexcept { *this = std::move(other); }
  WorkspaceDisk& operator=(WorkspaceDisk&& other) noexcept;
  ~WorkspaceDisk();
  // Unmounts (lazily if busy) and deletes the image. Idempotent.
  Status Release();
  // From now on Release() (and the destructor) only unmount: the image, and
  // the files in it, stay (an adoption that failed half-way).
  void KeepImage() { image_.clear(); }

  const std::filesystem::path& mount_dir() const { return mount_dir_; }
  const std::string& loop_device() const { return loop_device_; }

 private:
  std::filesystem::path image_;
  std::filesystem::path mount_dir_;
  // What Create was given, for MakeSpareLikeThis (template_dir_ empty: none).
  std::filesystem::path template_dir_;
  uint64_t bytes_ = 0;
  uid_t owner_uid_ = 0;
  gid_t owner_gid_ = 0;
  std::string loop_device_;
  bool mounted_ = false;
};

}  // namespace deepbox::local
