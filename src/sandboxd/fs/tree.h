// Every file beneath a directory with its size and modification time, in one
// walk: what a client compares to see what a command changed (deepbox acp
// proposes the project files a command changed to the editor).
//  * Regular files and symlinks are listed (a symlink as itself: never
//    followed, its size the length of its target); directories are entered
//    unless named in `skip_dirs`; FIFOs, sockets and devices are left out.
//  * Symlinked directories are not entered, and a directory swapped for a
//    symlink during the walk is skipped (each one is opened beneath its
//    parent without following symlinks).
//  * Searched from "/", the kernel's proc, sys and dev trees are skipped.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "fs/path_resolver.h"

namespace deepbox::sandboxd::fs {

struct TreeOptions {
  std::string path;  // the base (an API path, a directory); "" = the root
  size_t max_entries = 100000;
  // Wall-clock budget of the walk; when spent, the entries so far are
  // returned with `truncated` set.
  std::chrono::milliseconds time_budget{5000};
  // Directory names not entered at any depth (".git", "node_modules").
  std::vector<std::string> skip_dirs;
};

struct TreeEntry {
  std::string path;  // relative to the base, '/'-separated
  bool symlink = false;
  uint64_t size = 0;
  int64_t mtime_ns = 0;  // st_mtim, nanoseconds since the epoch
  uint32_t mode = 0;     // permission bits
};

struct TreeResult {
  std::vector<TreeEntry> entries;  // sorted by path
  bool truncated = false;          // max_entries or time_budget cut the walk
  bool unreadable = false;         // a directory could not be read: incomplete
};

Result<TreeResult> Tree(const deepbox::fs::Root& root, const TreeOptions& options = {});

}  // namespace deepbox::sandboxd::fs
