// Copies a directory tree that a sandbox wrote (hostile content) into a new
// directory on the host, as exactly as the file system allows, never leaving
// the two trees: what snapshots, restores and forks of local sandboxes are
// made of.
//
// Exact: regular files byte for byte (holes stay holes: SEEK_DATA/SEEK_HOLE
// and copy_file_range; a reflink, FICLONE, where the file system shares
// extents), directories (empty ones too), symlinks as symlinks (their target
// text, never followed), hard links as hard links (within the tree), names as
// bytes (not necessarily UTF-8), permission bits (setuid/setgid/sticky
// included), owners where this process may set them, and modification times.
// FIFOs are recreated; sockets and device nodes are skipped (and counted):
// no sandbox can make a device node, and a socket is nothing without its
// process.
//
// Confined: every step works on directory fds opened with O_NOFOLLOW below
// the two roots, so a symlink (or one swapped in during the copy) in the
// source is copied, not followed, and nothing is written outside `to`.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"

namespace deepbox::local {

struct TreeCopyStats {
  uint64_t files = 0;
  uint64_t directories = 0;
  uint64_t symlinks = 0;
  uint64_t hard_links = 0;
  uint64_t fifos = 0;
  uint64_t skipped = 0;        // sockets, device nodes
  uint64_t bytes = 0;          // apparent size of the regular files
  uint64_t bytes_written = 0;  // data actually copied (holes and reflinks excluded)
  uint64_t reflinked = 0;      // files shared with FICLONE
};

struct TreeCopyOptions {
  // Fail (RESOURCE_EXHAUSTED) once the copied data would pass this many
  // bytes; 0 = no limit. Reflinked files count as their size.
  uint64_t max_bytes = 0;
  // Names at the top of both trees that are not copied and may already be in
  // `to` (an ext4 workspace image's lost+found).
  std::vector<std::string> ignore_top_level;
};

// Copies the contents of directory `from` into directory `to`, which must
// exist and be empty (but for options.ignore_top_level). On failure what was copied stays in `to`
// (the caller removes it: it copies into a directory of its own). A full disk (ENOSPC, EDQUOT) is
// RESOURCE_EXHAUSTED.
Result<TreeCopyStats> CopyTree(const std::string& from, const std::string& to,
                               const TreeCopyOptions& options = {});

// Copies the data of regular file `from` (fd, read from offset 0, `size`
// bytes) into `to` (fd of an empty file, set to exactly `size`): a reflink
// (FICLONE) where the file system shares extents, else only the data extents
// (holes stay holes), with copy_file_range where it works. Adds what it
// actually wrote to *bytes_written; `what` names the file in errors.
Status CopyFileData(int from, int to, off_t size, const std::string& what,
                    uint64_t* bytes_written = nullptr, bool* reflinked = nullptr);

// The bytes that the tree below `dir` uses on disk (st_blocks), symlinks not
// followed; 0 for what cannot be read.
uint64_t TreeDiskUsage(const std::string& dir);

}  // namespace deepbox::local
