// Confinement of file operations to one root directory: every file operation
// of deepbox-sandboxd, and what `deepbox sandbox cp` writes on the host
// beneath the destination the user named (Root::Adopt, MakeDirsNoSymlinks).
//
// Callers name files with "API paths": a relative path is relative to the root
// (or to RootOptions::relative_base), an absolute path is a real path in the
// daemon's filesystem that must be the root itself or lie beneath it. A root
// may be "/" (a daemon serving its whole sandbox, whose mount namespace is the
// boundary): resolution still never leaves it, and pseudo filesystems can be
// refused (RootOptions::refuse_pseudo_fs). Root turns an API path into a normalized
// root-relative path (lexically: "." and ".." applied, "//" collapsed) and then
// resolves it in the kernel *beneath* an O_PATH fd of the root, so that neither
// ".." nor a symlink (absolute or relative, even one swapped concurrently) can
// reach outside. Operations then act on the returned fds with *at syscalls, so
// nothing is resolved twice from a string (no TOCTOU).
//
// Resolution uses openat2(RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS). Where the
// kernel lacks openat2 (ENOSYS), or when a symlink is absolute (openat2 rejects
// all absolute symlinks, we accept those pointing inside the root), a
// component-by-component walk with O_NOFOLLOW does the same job in user space.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"

namespace deepbox::fs {

// Longest API path accepted (bytes), as the kernel's PATH_MAX.
inline constexpr size_t kMaxPathBytes = 4096;

// Rejects malformed API paths (empty, NUL byte, longer than kMaxPathBytes) with
// INVALID_ARGUMENT, before anything touches the filesystem.
Status ValidatePath(std::string_view path);

// Lexically normalizes a relative path: drops "" and "." components, applies
// "..". Returns "" for the start directory itself. A ".." that climbs above the
// start is an escape: PERMISSION_DENIED.
Result<std::string> NormalizeRelative(std::string_view rel);

// Lexically normalizes an absolute path ("/.." stays "/").
std::string NormalizeAbsolute(std::string_view abs);

// Joins two normalized relative paths ("" is the identity).
std::string JoinRelative(std::string_view a, std::string_view b);

// Splits a normalized non-empty relative path into (dirname, basename);
// dirname is "" for a top-level name.
std::pair<std::string_view, std::string_view> SplitRelative(std::string_view rel);

struct RootOptions {
  // Never use openat2, always the user-space walk. Only tests need this: it is
  // what runs on kernels without openat2.
  bool force_fallback = false;
  // Relative API paths resolve against this directory (absolute, normalized,
  // the root or beneath it) instead of the root: a daemon that serves the
  // whole sandbox ("/") still takes "a.txt" as "/workspace/a.txt". Empty: the
  // root. Sub() roots drop it (their relative paths are theirs).
  std::string relative_base;
  // Refuse every file on a kernel pseudo filesystem (procfs, sysfs, debugfs,
  // cgroupfs, ...): PERMISSION_DENIED. A root at "/" needs this: through
  // /proc/self the daemon would hand out its own memory, fds and environment,
  // and as the ancestor of every process (Yama) theirs, which no process of
  // the sandbox may read. Tree walks skip such directories.
  bool refuse_pseudo_fs = false;
};

class Root {
 public:
  // Opens `dir` (which must exist and be a directory) as the confinement root.
  static Result<Root> Open(std::string_view dir, RootOptions options = {});
  // A root over a directory the caller opened itself (`dir`, any fd of a
  // directory), named `shown` in messages and results (ToAbsolute). `shown`
  // need not be absolute or canonical (the destination of `sandbox cp` as the
  // user typed it), so no absolute path lies beneath this root: absolute API
  // paths, and absolute symlinks on walks that follow symlinks, are outside.
  static Result<Root> Adopt(UniqueFd dir, std::string shown, RootOptions options = {});

  Root(Root&&) noexcept = default;
  Root& operator=(Root&&) noexcept = default;

  // A Root for a directory beneath this one; confinement narrows to it (used to
  // extract archives strictly beneath their destination).
  Result<Root> Sub(std::string_view rel) const;

  // Normalized absolute path of the root as callers see it.
  const std::string& path() const { return path_; }
  // Where relative API paths resolve ("" = the root itself).
  const std::string& relative_base() const { return options_.relative_base; }
  // The directory fd of the root (O_PATH, unless Adopt was given another).
  int fd() const { return fd_.get(); }
  bool uses_fallback() const { return options_.force_fallback; }

  // API path -> normalized root-relative path ("" is the root itself).
  // Absolute paths outside the root and escaping ".." give PERMISSION_DENIED.
  Result<std::string> ToRelative(std::string_view api_path) const;
  // Root-relative path -> the absolute path reported to callers.
  std::string ToAbsolute(std::string_view rel) const;

  // Opens a normalized relative path with open(2) `flags` (O_CLOEXEC is
  // implied; `mode` only matters with O_CREAT). Symlinks are followed as long
  // as they stay beneath the root; escaping ones give PERMISSION_DENIED.
  Result<UniqueFd> Open(std::string_view rel, int flags, mode_t mode = 0) const;
  // As Open, but any symlink anywhere in the path fails (ELOOP). Tree walks use
  // this: they never follow a symlink, even one that stays inside.
  Result<UniqueFd> OpenNoSymlinks(std::string_view rel, int flags, mode_t mode = 0) const;
  // Opens `rel` (normalized: no "..") beneath `dirfd`, a directory inside the
  // root, following no symlink at all. Tree walks open each directory with it
  // from their base directory, holding one fd at a time however deep.
  Result<UniqueFd> OpenBeneathNoSymlinks(int dirfd, std::string_view rel, int flags) const;

  // The pseudo-filesystem verdicts of the devices (st_dev) a walk has met: a
  // device is one mounted filesystem, so its type is asked (fstatfs) once.
  class FsVerdicts {
   private:
    friend class Root;
    std::vector<std::pair<dev_t, bool>> served_;  // few: one per mount met
  };
  // As OpenBeneathNoSymlinks, and fstat()s the result into `st`; the
  // pseudo-filesystem check costs an fstatfs per new device in `verdicts`,
  // not one per file (grep opens every file of a tree).
  Result<UniqueFd> OpenBeneathNoSymlinksStat(int dirfd, std::string_view rel, int flags,
                                             struct stat* st, FsVerdicts* verdicts) const;

  // A directory entry named by its parent directory fd and its name: what
  // operations that must not follow the final component (lstat, unlink,
  // rename, symlink creation) act on.
  struct Location {
    UniqueFd dir;      // O_PATH fd of the parent directory
    std::string name;  // final component (never "", "." or "..")
    std::string rel;   // the normalized relative path that was asked for
  };
  // Resolves the parent of `rel` (non-empty) beneath the root; the final
  // component is not followed.
  Result<Location> OpenParent(std::string_view rel) const;
  // As OpenParent, but when the final component is a symlink it is followed
  // (beneath the root) to the entry it designates, which need not exist: for
  // writing "through" a symlink to its target.
  Result<Location> OpenParentFollow(std::string_view rel) const;

  // Creates `rel` and its missing ancestors as directories (mkdir -p); returns
  // an O_PATH fd of the directory. Existing directories are fine.
  Result<UniqueFd> MakeDirs(std::string_view rel, mode_t mode = 0755) const;
  // As MakeDirs, but no symlink is followed anywhere on the way (openat2
  // RESOLVE_NO_SYMLINKS, or the walk with O_NOFOLLOW): a symlink or a
  // non-directory in the way is a CONFLICT naming it, and nothing is created
  // through it. `rel` is normalized. Each directory made (with `mode`) is
  // reported to `made`, in order, as its relative path: for a caller that
  // removes what it created when it fails (`sandbox cp` on the host).
  using MadeDir = std::function<void(const std::string& rel)>;
  Result<UniqueFd> MakeDirsNoSymlinks(std::string_view rel, mode_t mode,
                                      const MadeDir& made = nullptr) const;

  // The canonical relative path of `rel` (every symlink resolved, beneath the
  // root; the final component need not exist).
  Result<std::string> Canonicalize(std::string_view rel) const;

 private:
  Root(UniqueFd fd, std::string path, std::vector<std::string> aliases, RootOptions options);

  // Which resolution a walk performs.
  enum class WalkMode { kOpen, kParent, kParentFollow };
  struct WalkOut {
    UniqueFd fd;  // kOpen: the opened file; otherwise the parent directory
    std::string name;
    std::vector<std::string> components;  // canonical path of the parent
  };
  // The user-space resolver (also the fallback of openat2).
  Result<WalkOut> Walk(std::string_view rel, WalkMode mode, int flags, mode_t mode_bits,
                       bool allow_symlinks) const;
  Result<UniqueFd> OpenImpl(std::string_view rel, int flags, mode_t mode,
                            bool allow_symlinks) const;
  Result<UniqueFd> ResolveImpl(std::string_view rel, int flags, mode_t mode,
                               bool allow_symlinks) const;
  Result<UniqueFd> OpenBeneathImpl(int dirfd, std::string_view rel, int flags) const;
  // PERMISSION_DENIED for an fd on a pseudo filesystem (refuse_pseudo_fs).
  Status CheckServed(int fd, std::string_view rel) const;
  // Error for an escape, naming the call and the path as the caller sees it.
  Error EscapeError(std::string_view call, std::string_view rel) const;

  UniqueFd fd_;
  std::string path_;
  // Absolute spellings of the root (normalized given path, real path) that
  // absolute API paths and absolute symlink targets may start with.
  std::vector<std::string> aliases_;
  RootOptions options_;
};

}  // namespace deepbox::fs
