#include "fs/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "common/io.h"
#include "common/random.h"

namespace deepbox::fs {

Result<AtomicFileWriter> AtomicFileWriter::Create(const Root& root, std::string_view path,
                                                  const WriteOptions& options) {
  auto rel = root.ToRelative(path);
  if (!rel) return tl::unexpected(rel.error());
  std::string abs = root.ToAbsolute(*rel);
  if (rel->empty()) return MakeSyscallError("open", EISDIR, abs);
  if (options.create_parents) {
    auto dir = root.MakeDirs(SplitRelative(*rel).first);
    if (!dir) return tl::unexpected(dir.error());
  }
  auto loc = options.follow_symlinks ? root.OpenParentFollow(*rel) : root.OpenParent(*rel);
  if (!loc) return tl::unexpected(loc.error());
  return CreateAt(std::move(*loc), std::move(abs), options);
}

Result<AtomicFileWriter> AtomicFileWriter::CreateAt(Root::Location location, std::string abs_path,
                                                    const WriteOptions& options) {
  AtomicFileWriter w;
  w.dir_ = std::move(location.dir);
  w.name_ = std::move(location.name);
  w.path_ = std::move(abs_path);
  w.options_ = options;
  struct stat st;
  if (::fstatat(w.dir_.get(), w.name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISDIR(st.st_mode)) return MakeSyscallError("open", EISDIR, w.path_);
    if (!options.overwrite) return MakeSyscallError("open", EEXIST, w.path_);
    w.existed_ = true;
    if (S_ISREG(st.st_mode)) w.mode_ = st.st_mode & 07777;
  } else if (errno != ENOENT) {
    return MakeSyscallError("fstatat", errno, w.path_);
  }
  if (options.mode) w.mode_ = *options.mode & 07777;
  // Hidden temporary name in the same directory (rename needs one filesystem).
  std::string stem = w.name_.substr(0, 200);
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::string tmp = fmt::format(".{}.deepbox-tmp-{}", stem, RandomHex(12));
    int fd = ::openat(w.dir_.get(), tmp.c_str(),
                      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
      w.file_.reset(fd);
      w.tmp_name_ = std::move(tmp);
      w.active_ = true;
      return w;
    }
    if (errno != EEXIST) return MakeSyscallError("openat", errno, w.path_);
  }
  return MakeSyscallError("openat", EEXIST, w.path_);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : dir_(std::move(other.dir_)),
      file_(std::move(other.file_)),
      name_(std::move(other.name_)),
      tmp_name_(std::move(other.tmp_name_)),
      path_(std::move(other.path_)),
      options_(std::move(other.options_)),
      existed_(other.existed_),
      mode_(other.mode_),
      bytes_(other.bytes_),
      mtime_(other.mtime_),
      active_(std::exchange(other.active_, false)) {}

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    Abort();
    dir_ = std::move(other.dir_);
    file_ = std::move(other.file_);
    name_ = std::move(other.name_);
    tmp_name_ = std::move(other.tmp_name_);
    path_ = std::move(other.path_);
    options_ = std::move(other.options_);
    existed_ = other.existed_;
    mode_ = other.mode_;
    bytes_ = other.bytes_;
    mtime_ = other.mtime_;
    active_ = std::exchange(other.active_, false);
  }
  return *this;
}

AtomicFileWriter::~AtomicFileWriter() { Abort(); }

void AtomicFileWriter::Abort() {
  if (!active_) return;
  active_ = false;
  file_.reset();
  ::unlinkat(dir_.get(), tmp_name_.c_str(), 0);
}

Status AtomicFileWriter::Append(std::string_view bytes) {
  if (!active_) return MakeError(ErrorCode::kInternal, "AtomicFileWriter is not active");
  if (auto st = WriteAll(file_.get(), bytes, path_); !st) {
    Abort();
    return st;
  }
  bytes_ += bytes.size();
  return {};
}

Result<WriteResult> AtomicFileWriter::Commit() {
  if (!active_) return MakeError(ErrorCode::kInternal, "AtomicFileWriter is not active");
  auto fail = [this](std::string_view call, int err) {
    Abort();
    return MakeSyscallError(call, err, path_);
  };
  if (::fchmod(file_.get(), mode_) != 0) return fail("fchmod", errno);
  if (mtime_) {
    struct timespec times[2] = {{0, UTIME_OMIT}, *mtime_};
    if (::futimens(file_.get(), times) != 0) return fail("futimens", errno);
  }
  if (options_.fsync && ::fsync(file_.get()) != 0) return fail("fsync", errno);
  if (::close(file_.release()) != 0) return fail("close", errno);
  const char* tmp = tmp_name_.c_str();
  const char* name = name_.c_str();
  if (options_.overwrite) {
    if (::renameat(dir_.get(), tmp, dir_.get(), name) != 0) return fail("renameat", errno);
  } else if (::renameat2(dir_.get(), tmp, dir_.get(), name, RENAME_NOREPLACE) != 0) {
    if (errno != EINVAL) return fail("renameat2", errno);
    // Filesystem without RENAME_NOREPLACE: link(2) also refuses to replace.
    if (::linkat(dir_.get(), tmp, dir_.get(), name, 0) != 0) return fail("linkat", errno);
    ::unlinkat(dir_.get(), tmp, 0);
  }
  active_ = false;
  if (options_.fsync) {
    int dfd = ::openat(dir_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      UniqueFd d(dfd);
      if (::fsync(dfd) != 0) return MakeSyscallError("fsync", errno, path_);
    }
  }
  return WriteResult{path_, bytes_, !existed_};
}

// ---------------------------------------------------------------------------
// Symlinks

Status CreateSymlinkAt(const Root::Location& location, const std::string& target, bool overwrite,
                       std::string_view subject) {
  const int dir = location.dir.get();
  const char* name = location.name.c_str();
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::string tmp =
        fmt::format(".{}.deepbox-tmp-{}", location.name.substr(0, 200), RandomHex(12));
    if (::symlinkat(target.c_str(), dir, tmp.c_str()) != 0) {
      if (errno == EEXIST) continue;
      return MakeSyscallError("symlinkat", errno, subject);
    }
    int rc = overwrite ? ::renameat(dir, tmp.c_str(), dir, name)
                       : ::renameat2(dir, tmp.c_str(), dir, name, RENAME_NOREPLACE);
    if (rc != 0) {
      int err = errno;
      ::unlinkat(dir, tmp.c_str(), 0);
      return MakeSyscallError(overwrite ? "renameat" : "renameat2", err, subject);
    }
    return {};
  }
  return MakeSyscallError("symlinkat", EEXIST, subject);
}

}  // namespace deepbox::fs
