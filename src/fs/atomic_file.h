// Atomic replacement of one directory entry: a file's bytes, or a symlink,
// go to a hidden temporary name in the target's directory, which is renamed
// over the target, so readers see the old entry or the new one, never a mix,
// and a symlink at the target is replaced, never written through (unless
// asked). The daemon's writes and archive extraction, and `sandbox cp`'s host
// side, all write with it.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/unique_fd.h"
#include "fs/path_resolver.h"

namespace deepbox::fs {

struct WriteOptions {
  bool create_parents = true;  // mkdir -p the parent directory
  bool overwrite = true;       // false: CONFLICT if the target exists
  bool fsync = false;          // fsync the file and its directory before returning
  // Default: the mode of the file being replaced, else 0644.
  std::optional<uint32_t> mode;
  // A final symlink (inside the root) is written through to its target, as
  // open(2) would; false replaces the symlink itself (archive extraction).
  bool follow_symlinks = true;
};
struct WriteResult {
  std::string path;
  uint64_t bytes = 0;
  bool created = false;  // the target did not exist before
};

// Writes a file atomically: bytes go to a temporary file in the target's
// directory which is renamed over the target on Commit, so readers see the old
// or the new content, never a mix. Abandoning the writer (Abort or the
// destructor) unlinks the temporary file. For large uploads.
class AtomicFileWriter {
 public:
  static Result<AtomicFileWriter> Create(const Root& root, std::string_view path,
                                         const WriteOptions& options = {});
  // For callers that resolved the target themselves (`abs_path` is only for
  // messages and the result). The target is never followed: a symlink there
  // is replaced. A directory there is IS_DIRECTORY.
  static Result<AtomicFileWriter> CreateAt(Root::Location location, std::string abs_path,
                                           const WriteOptions& options);

  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  Status Append(std::string_view bytes);
  // The modification time the file gets on Commit (archive extraction).
  void SetMtime(const struct timespec& mtime) { mtime_ = mtime; }
  // Fails (CONFLICT) if !overwrite and the target appeared meanwhile.
  Result<WriteResult> Commit();
  void Abort();

  const std::string& path() const { return path_; }
  uint64_t bytes_written() const { return bytes_; }

 private:
  AtomicFileWriter() = default;

  UniqueFd dir_;
  UniqueFd file_;
  std::string name_;
  std::string tmp_name_;
  std::string path_;
  WriteOptions options_;
  bool existed_ = false;
  mode_t mode_ = 0644;
  uint64_t bytes_ = 0;
  std::optional<struct timespec> mtime_;
  bool active_ = false;
};

// Makes `location` a symlink to `target` atomically: the link is made under a
// temporary name and renamed over the entry (which is replaced, never
// followed). Without `overwrite` an existing entry is a CONFLICT
// (RENAME_NOREPLACE). `subject` names the entry in errors.
Status CreateSymlinkAt(const Root::Location& location, const std::string& target, bool overwrite,
                       std::string_view subject);

}  // namespace deepbox::fs
