#include "local/tree_copy.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "common/unique_fd.h"

namespace deepbox::local {
namespace {

// Deeper trees are refused rather than copied: two fds and a stack frame per
// level (a sandbox can nest directories far beyond PATH_MAX).
constexpr int kMaxDepth = 256;

std::string ChildPath(const std::string& rel, const char* name) {
  return rel.empty() ? std::string(name) : rel + "/" + name;
}

// Names in `dir` (an fd this function does not consume), sorted.
Result<std::vector<std::string>> Names(int dir, const std::string& rel) {
  int dup = fcntl(dir, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return MakeSyscallError("fcntl(F_DUPFD_CLOEXEC)", errno, rel);
  DIR* d = fdopendir(dup);
  if (d == nullptr) {
    int err = errno;
    close(dup);
    return MakeSyscallError("fdopendir", err, rel);
  }
  rewinddir(d);
  std::vector<std::string> names;
  errno = 0;
  while (dirent* e = readdir(d)) {
    if (std::string_view(e->d_name) == "." || std::string_view(e->d_name) == "..") continue;
    names.emplace_back(e->d_name);
  }
  int err = errno;
  closedir(d);
  if (err != 0) return MakeSyscallError("readdir", err, rel);
  std::sort(names.begin(), names.end());
  return names;
}

// The data extents of `from` (holes stay holes), then its exact size.
Status CopyRange(int from, int to, off_t start, off_t length, const std::string& rel,
                 uint64_t& written);
Status CopyRangeByHand(int from, int to, off_t offset, off_t length, const std::string& rel,
                       uint64_t& written);

Status CopyData(int from, int to, off_t size, const std::string& rel, uint64_t& written) {
  off_t offset = 0;
  while (offset < size) {
    off_t data = lseek(from, offset, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;  // only a hole is left
      if (errno != EINVAL) return MakeSyscallError("lseek(SEEK_DATA)", errno, rel);
      data = offset;  // no SEEK_DATA here: all data
    }
    off_t hole = lseek(from, data, SEEK_HOLE);
    if (hole < 0) hole = size;
    hole = std::min(hole, size);
    if (auto s = CopyRange(from, to, data, hole - data, rel, written); !s) return s;
    offset = hole;
  }
  if (ftruncate(to, size) != 0) return MakeSyscallError("ftruncate", errno, rel);
  return {};
}

Status CopyRange(int from, int to, off_t start, off_t length, const std::string& rel,
                 uint64_t& written) {
  off_t in = start, out = start;
  while (length > 0) {
    ssize_t n = copy_file_range(from, &in, to, &out, static_cast<size_t>(length), 0);
    if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
      return CopyRangeByHand(from, to, in, length, rel, written);
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeSyscallError("copy_file_range", errno, rel);
    if (n == 0) break;  // the file shrank meanwhile
    length -= n;
    written += static_cast<uint64_t>(n);
  }
  return {};
}

Status CopyRangeByHand(int from, int to, off_t offset, off_t length, const std::string& rel,
                       uint64_t& written) {
  std::vector<char> buf(1 << 20);
  while (length > 0) {
    ssize_t n = pread(from, buf.data(), std::min<size_t>(buf.size(), length), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeSyscallError("pread", errno, rel);
    if (n == 0) break;
    for (ssize_t done = 0; done < n;) {
      ssize_t w = pwrite(to, buf.data() + done, static_cast<size_t>(n - done), offset + done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return MakeSyscallError("pwrite", errno, rel);
      done += w;
    }
    offset += n;
    length -= n;
    written += static_cast<uint64_t>(n);
  }
  return {};
}

class Copier {
 public:
  Copier(const TreeCopyOptions& options, int dst_root) : options_(options), dst_root_(dst_root) {}

  Status CopyDir(int src, int dst, const std::string& rel, int depth) {
    if (depth > kMaxDepth) {
      return MakeError(ErrorCode::kResourceExhausted,
                       fmt::format("{}: directories nested deeper than {} levels", rel, kMaxDepth));
    }
    auto names = Names(src, rel);
    if (!names) return tl::unexpected(names.error());
    for (const auto& name : *names) {
      if (depth == 0 && Ignored(name)) continue;
      if (auto st = CopyEntry(src, dst, name.c_str(), ChildPath(rel, name.c_str()), depth); !st) {
        return st;
      }
    }
    return {};
  }

  // The attributes a copy carries over (owner first: chown clears setuid).
  static Status Attributes(int fd, const struct stat& st, const std::string& rel) {
    if (fchown(fd, st.st_uid, st.st_gid) != 0 && errno != EPERM) {
      return MakeSyscallError("fchown", errno, rel);
    }
    if (fchmod(fd, st.st_mode & 07777) != 0) return MakeSyscallError("fchmod", errno, rel);
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    if (futimens(fd, times) != 0) return MakeSyscallError("futimens", errno, rel);
    return {};
  }

  const TreeCopyStats& stats() const { return stats_; }
  bool Ignored(const std::string& name) const {
    return std::find(options_.ignore_top_level.begin(), options_.ignore_top_level.end(), name) !=
           options_.ignore_top_level.end();
  }

 private:
  Status CopyEntry(int src, int dst, const char* name, const std::string& rel, int depth) {
    struct stat st;
    if (fstatat(src, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return {};  // removed meanwhile: not part of the copy
      return MakeSyscallError("fstatat", errno, rel);
    }
    if (S_ISDIR(st.st_mode)) return CopySubdir(src, dst, name, rel, depth);
    if (S_ISREG(st.st_mode)) return CopyFile(src, dst, name, rel);
    if (S_ISLNK(st.st_mode)) {
      std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
      ssize_t n = readlinkat(src, name, target.data(), target.size());
      if (n < 0) return MakeSyscallError("readlinkat", errno, rel);
      target.resize(static_cast<size_t>(n));
      if (symlinkat(target.c_str(), dst, name) != 0)
        return MakeSyscallError("symlinkat", errno, rel);
      if (fchownat(dst, name, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) != 0 && errno != EPERM) {
        return MakeSyscallError("fchownat", errno, rel);
      }
      struct timespec times[2] = {st.st_atim, st.st_mtim};
      (void)utimensat(dst, name, times, AT_SYMLINK_NOFOLLOW);
      ++stats_.symlinks;
      return {};
    }
    if (S_ISFIFO(st.st_mode)) {
      if (mkfifoat(dst, name, 0600) != 0) return MakeSyscallError("mkfifoat", errno, rel);
      // O_PATH: opening a FIFO for reading or writing would block.
      UniqueFd fd(openat(dst, name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
      if (!fd) return MakeSyscallError("openat", errno, rel);
      std::string proc = fmt::format("/proc/self/fd/{}", fd.get());
      if (chown(proc.c_str(), st.st_uid, st.st_gid) != 0 && errno != EPERM) {
        return MakeSyscallError("chown", errno, rel);
      }
      if (chmod(proc.c_str(), st.st_mode & 07777) != 0)
        return MakeSyscallError("chmod", errno, rel);
      struct timespec times[2] = {st.st_atim, st.st_mtim};
      if (utimensat(AT_FDCWD, proc.c_str(), times, 0) != 0) {
        return MakeSyscallError("utimensat", errno, rel);
      }
      ++stats_.fifos;
      return {};
    }
    ++stats_.skipped;  // socket, device node
    return {};
  }

  Status CopySubdir(int src, int dst, const char* name, const std::string& rel, int depth) {
    UniqueFd from(openat(src, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!from) {
      if (errno == ENOENT) return {};
      return MakeSyscallError("openat", errno, rel);
    }
    struct stat st;
    if (fstat(from.get(), &st) != 0) return MakeSyscallError("fstat", errno, rel);
    if (mkdirat(dst, name, 0700) != 0) return MakeSyscallError("mkdirat", errno, rel);
    UniqueFd to(openat(dst, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!to) return MakeSyscallError("openat", errno, rel);
    ++stats_.directories;
    if (auto s = CopyDir(from.get(), to.get(), rel, depth + 1); !s) return s;
    return Attributes(to.get(), st, rel);  // after the contents, which change its mtime
  }

  // The file's own fstat decides (it may have been swapped since the walk's).
  Status CopyFile(int src, int dst, const char* name, const std::string& rel) {
    UniqueFd from(openat(src, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC));
    if (!from) {
      if (errno == ENOENT) return {};
      if (errno == ELOOP) return CopyEntry(src, dst, name, rel, 0);  // now a symlink
      return MakeSyscallError("openat", errno, rel);
    }
    struct stat st;
    if (fstat(from.get(), &st) != 0) return MakeSyscallError("fstat", errno, rel);
    if (!S_ISREG(st.st_mode)) return {};  // swapped for something else meanwhile: skipped
    if (st.st_nlink > 1) {
      auto it = links_.find({st.st_dev, st.st_ino});
      if (it != links_.end()) {
        if (linkat(dst_root_, it->second.c_str(), dst, name, 0) != 0) {
          return MakeSyscallError("linkat", errno, rel);
        }
        ++stats_.hard_links;
        return {};
      }
    }
    if (options_.max_bytes > 0 &&
        stats_.bytes + static_cast<uint64_t>(st.st_size) > options_.max_bytes) {
      return MakeError(ErrorCode::kResourceExhausted,
                       fmt::format("the files are larger than the limit of {} bytes (at {})",
                                   options_.max_bytes, rel));
    }
    UniqueFd to(openat(dst, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!to) return MakeSyscallError("openat", errno, rel);
    bool reflinked = false;
    if (auto s =
            CopyFileData(from.get(), to.get(), st.st_size, rel, &stats_.bytes_written, &reflinked);
        !s) {
      return s;
    }
    if (reflinked) ++stats_.reflinked;
    stats_.bytes += static_cast<uint64_t>(st.st_size);
    ++stats_.files;
    if (auto s = Attributes(to.get(), st, rel); !s) return s;
    if (st.st_nlink > 1) links_[{st.st_dev, st.st_ino}] = rel;
    return {};
  }

  TreeCopyOptions options_;
  int dst_root_;
  TreeCopyStats stats_;
  std::map<std::pair<dev_t, ino_t>, std::string> links_;  // first copy's path below `to`
};

uint64_t UsageAt(int dir, int depth, std::set<std::pair<dev_t, ino_t>>& seen) {
  if (depth > kMaxDepth) return 0;
  auto names = Names(dir, "");
  if (!names) return 0;
  uint64_t total = 0;
  for (const auto& name : *names) {
    struct stat st;
    if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (st.st_nlink > 1 && !S_ISDIR(st.st_mode) && !seen.insert({st.st_dev, st.st_ino}).second) {
      continue;
    }
    total += static_cast<uint64_t>(st.st_blocks) * 512;
    if (S_ISDIR(st.st_mode)) {
      UniqueFd sub(openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (sub) total += UsageAt(sub.get(), depth + 1, seen);
    }
  }
  return total;
}

}  // namespace

Result<TreeCopyStats> CopyTree(const std::string& from, const std::string& to,
                               const TreeCopyOptions& options) {
  UniqueFd src(open(from.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!src) return MakeSyscallError("open", errno, from);
  UniqueFd dst(open(to.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dst) return MakeSyscallError("open", errno, to);
  auto existing = Names(dst.get(), to);
  if (!existing) return tl::unexpected(existing.error());
  Copier copier(options, dst.get());
  for (const auto& name : *existing) {
    if (!copier.Ignored(name)) {
      return MakeError(ErrorCode::kConflict, fmt::format("{} is not empty ({})", to, name));
    }
  }
  struct stat root;
  if (fstat(src.get(), &root) != 0) return MakeSyscallError("fstat", errno, from);
  Status st = copier.CopyDir(src.get(), dst.get(), "", 0);
  if (st) st = Copier::Attributes(dst.get(), root, to);
  if (!st) {
    Error e = st.error();
    // ENOSPC and EDQUOT are RESOURCE_EXHAUSTED (ErrorCodeFromErrno), the
    // message names the errno; it also says where the copy went.
    e.message = fmt::format("copying {} into {}: {}", from, to, e.message);
    return tl::unexpected(e);
  }
  return copier.stats();
}

uint64_t TreeDiskUsage(const std::string& dir) {
  UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return 0;
  std::set<std::pair<dev_t, ino_t>> seen;
  return UsageAt(fd.get(), 0, seen);
}

Status CopyFileData(int from, int to, off_t size, const std::string& what, uint64_t* bytes_written,
                    bool* reflinked) {
  if (ioctl(to, FICLONE, from) == 0) {
    if (reflinked) *reflinked = true;
    return {};
  }
  uint64_t written = 0;
  Status st = CopyData(from, to, size, what, written);
  if (bytes_written) *bytes_written += written;
  return st;
}

}  // namespace deepbox::local
