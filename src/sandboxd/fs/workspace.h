// File operations of deepbox-sandboxd, all confined to a Root (see
// fs/path_resolver.h). Paths are API paths (relative to the root, or absolute
// beneath it); paths reported back are absolute and normalized. Content is raw
// bytes: callers that emit JSON must sanitize or base64 it themselves.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"
#include "fs/atomic_file.h"
#include "fs/path_resolver.h"

namespace deepbox::sandboxd::fs {

enum class FileType { kFile, kDirectory, kSymlink, kOther };
// "file", "directory", "symlink", "other": stable wire names.
std::string_view FileTypeName(FileType type);

struct FileInfo {
  std::string path;  // absolute
  std::string name;  // final component
  FileType type = FileType::kOther;
  uint64_t size = 0;
  uint32_t mode = 0;           // permission bits (st_mode & 07777)
  int64_t mtime_epoch = 0;     // seconds since the epoch
  int64_t mtime_nsec = 0;      // sub-second part
  std::string mtime;           // RFC 3339, UTC
  std::string symlink_target;  // symlinks only, verbatim (not resolved)
};

// lstat semantics: a symlink is reported as such, with its target.
Result<FileInfo> Stat(const deepbox::fs::Root& root, std::string_view path);

struct ListOptions {
  // Bounds memory on huge directories; the first entries by name are kept.
  size_t max_entries = 100000;
  // false: names and types only (path, name, type), from the directory's
  // own entries: no fstatat per entry (only where the file system gives no
  // type), no symlink target. What an agent's `ls` needs.
  bool stat = true;
};
struct ListResult {
  std::string path;
  std::vector<FileInfo> entries;  // sorted by name
  bool truncated = false;
  bool stat = true;  // as asked: false = size, mode, mtime and symlink_target not filled
};
// Entries of a directory (a symlink to a directory inside the root is
// followed). NOT_DIRECTORY on anything else.
Result<ListResult> List(const deepbox::fs::Root& root, std::string_view path,
                        const ListOptions& options = {});

struct ReadOptions {
  // Byte range: `length` bytes (default: to the end) from `offset`.
  std::optional<uint64_t> offset;
  std::optional<uint64_t> length;
  // Line window: `line_limit` lines (default: all) from 0-based `line_offset`.
  // Setting either selects line mode; mixing with a byte range is an error.
  std::optional<uint64_t> line_offset;
  std::optional<uint64_t> line_limit;
  // Cap on the bytes returned (content, or the sum of the lines); beyond it the
  // result is cut and `truncated` set, so a huge file never fills memory.
  uint64_t max_bytes = 4 << 20;
};
struct ReadResult {
  std::string path;
  uint64_t size = 0;       // file size (fstat)
  bool binary = false;     // NUL or invalid UTF-8 in the first 8 KiB of the file
  bool truncated = false;  // max_bytes cut the result
  // Whole-file and byte-range modes.
  uint64_t offset = 0;
  std::string content;
  // Line mode: the lines without their terminator ("\n" or "\r\n"), the file's
  // line count (a last line without "\n" counts), and whether lines follow the
  // returned ones. Counting streams the file: memory stays bounded.
  bool line_mode = false;
  uint64_t line_offset = 0;
  std::vector<std::string> lines;
  uint64_t total_lines = 0;
  bool more_lines = false;
};
Result<ReadResult> Read(const deepbox::fs::Root& root, std::string_view path,
                        const ReadOptions& options = {});

// An open regular file for streaming downloads.
struct ReadStream {
  UniqueFd fd;
  uint64_t size = 0;
  std::string path;
};
// IS_DIRECTORY for a directory, INVALID_ARGUMENT for devices, FIFOs, sockets.
Result<ReadStream> OpenForRead(const deepbox::fs::Root& root, std::string_view path);

// Writes `content` atomically (see deepbox::fs::AtomicFileWriter). IS_DIRECTORY when the
// target is a directory.
Result<deepbox::fs::WriteResult> Write(const deepbox::fs::Root& root, std::string_view path,
                                       std::string_view content,
                                       const deepbox::fs::WriteOptions& options = {});

struct EditOptions {
  // Edit holds the file in memory: bigger files give RESOURCE_EXHAUSTED.
  uint64_t max_file_bytes = 64 << 20;
};
struct EditResult {
  std::string path;
  uint64_t replacements = 0;
};
// Replaces the exact string `old_text` by `new_text` in a UTF-8 text file and
// writes it back atomically, keeping its mode. `old_text` must occur once
// unless `replace_all`: NOT_FOUND "String not found in file", CONFLICT
// "String appears N times in file". If `old_text` is not found verbatim and
// the line endings differ (LF in the edit, CRLF in the file, or the reverse),
// both strings are converted to the file's line endings and tried again.
Result<EditResult> Edit(const deepbox::fs::Root& root, std::string_view path,
                        std::string_view old_text, std::string_view new_text, bool replace_all,
                        const EditOptions& options = {});

// mkdir; with `parents`, mkdir -p (an existing directory is then fine).
// Returns the absolute path.
Result<std::string> Mkdir(const deepbox::fs::Root& root, std::string_view path, bool parents,
                          mode_t mode = 0755);

// rename(2) of `src` to `dst` (a symlink moves as itself). Without
// `overwrite`, an existing `dst` is a CONFLICT (RENAME_NOREPLACE: atomic).
// Returns the absolute destination path.
Result<std::string> Move(const deepbox::fs::Root& root, std::string_view src, std::string_view dst,
                         bool overwrite);

// Deletes a file, symlink (never its target) or empty directory; a non-empty
// directory needs `recursive` (else CONFLICT). Recursive deletion works on
// directory fds and never follows a symlink. The root itself is refused.
Status Delete(const deepbox::fs::Root& root, std::string_view path, bool recursive);

}  // namespace deepbox::sandboxd::fs
