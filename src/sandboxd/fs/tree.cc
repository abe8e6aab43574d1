#include "sandboxd/fs/tree.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include "fs/dir_entries.h"

namespace deepbox::sandboxd::fs {

using deepbox::fs::DirEntry;
using deepbox::fs::JoinRelative;
using deepbox::fs::ReadDir;
using deepbox::fs::Root;

Result<TreeResult> Tree(const Root& root, const TreeOptions& options) {
  auto rel = root.ToRelative(options.path.empty() ? std::string_view(".") : options.path);
  if (!rel) return tl::unexpected(rel.error());
  auto base = root.Open(*rel, O_RDONLY | O_DIRECTORY);
  if (!base) return tl::unexpected(base.error());
  auto base_canon = root.Canonicalize(*rel);
  if (!base_canon) return tl::unexpected(base_canon.error());
  const bool at_slash = root.ToAbsolute(*base_canon) == "/";
  const auto deadline = std::chrono::steady_clock::now() + options.time_budget;

  TreeResult out;
  std::vector<std::string> stack{std::string()};
  size_t ticks = 0;
  while (!stack.empty() && !out.truncated) {
    std::string dir = std::move(stack.back());
    stack.pop_back();
    auto fd = root.OpenBeneathNoSymlinks(base->get(), dir, O_RDONLY | O_DIRECTORY);
    if (!fd) {  // vanished, replaced by a symlink, unreadable: skip (and say so)
      if (fd.error().sys_errno == EACCES) out.unreadable = true;
      continue;
    }
    auto entries = ReadDir(fd->get(), dir);
    if (!entries) {
      out.unreadable = true;
      continue;
    }
    for (const DirEntry& e : *entries) {
      if ((++ticks & 63) == 0 && std::chrono::steady_clock::now() >= deadline) {
        out.truncated = true;
        break;
      }
      struct stat st;
      if (::fstatat(fd->get(), e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (S_ISDIR(st.st_mode)) {
        if (at_slash && dir.empty() && (e.name == "proc" || e.name == "sys" || e.name == "dev")) {
          continue;
        }
        if (std::find(options.skip_dirs.begin(), options.skip_dirs.end(), e.name) !=
            options.skip_dirs.end()) {
          continue;
        }
        stack.push_back(JoinRelative(dir, e.name));
        continue;
      }
      if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) continue;
      if (out.entries.size() >= options.max_entries) {
        out.truncated = true;
        break;
      }
      TreeEntry t;
      t.path = JoinRelative(dir, e.name);
      t.symlink = S_ISLNK(st.st_mode);
      t.size = static_cast<uint64_t>(st.st_size);
      t.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
      t.mode = st.st_mode & 07777;
      out.entries.push_back(std::move(t));
    }
  }
  std::sort(out.entries.begin(), out.entries.end(),
            [](const TreeEntry& a, const TreeEntry& b) { return a.path < b.path; });
  return out;
}

}  // namespace deepbox::sandboxd::fs
