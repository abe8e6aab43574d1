// Test-only: two directory trees compared entry by entry -- type, bytes,
// symlink target, permission bits, size, modification time (ns), hard-link
// groups, and that holes stayed holes -- for the tree copy's property test
// and the snapshot/restore/fork tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>

namespace deepbox::local::testing {

struct TreeEntry {
  std::string type;     // dir, file, symlink, fifo, other
  std::string content;  // file: its bytes; symlink: its target
  mode_t mode = 0;      // permission bits
  off_t size = 0;
  int64_t mtime_ns = 0;
  blkcnt_t blocks = 0;
  std::string link_group;  // a hard link's smallest path in the tree ("" = none)
};

// The entries below `root` by path relative to it (symlinks not followed);
// `skip` names at the top are left out (an ext4 image's lost+found).
inline std::map<std::string, TreeEntry> ReadTree(const std::filesystem::path& root,
                                                 const std::set<std::string>& skip = {
                                                     "lost+found"}) {
  namespace fs = std::filesystem;
  std::map<std::string, TreeEntry> out;
  std::map<std::pair<dev_t, ino_t>, std::string> smallest;
  std::map<std::string, std::pair<dev_t, ino_t>> linked;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    // lexically: fs::relative would resolve a symlink to its target's path.
    std::string rel = it->path().lexically_relative(root).string();
    if (it.depth() == 0 && skip.count(rel)) {
      it.disable_recursion_pending();
      continue;
    }
    struct stat st;
    if (lstat(it->path().c_str(), &st) != 0) continue;
    TreeEntry e;
    e.mode = st.st_mode & 07777;
    e.mtime_ns = st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec;
    if (S_ISDIR(st.st_mode)) {
      e.type = "dir";
    } else if (S_ISLNK(st.st_mode)) {
      e.type = "symlink";
      e.content = fs::read_symlink(it->path(), ec).string();
    } else if (S_ISFIFO(st.st_mode)) {
      e.type = "fifo";
    } else if (S_ISREG(st.st_mode)) {
      e.type = "file";
      e.size = st.st_size;
      e.blocks = st.st_blocks;
      // One read of the whole file: a character iterator over the sparse
      // files' megabytes of holes took most of a test's minute.
      std::ifstream in(it->path(), std::ios::binary);
      e.content.resize(static_cast<size_t>(st.st_size));
      in.read(e.content.data(), st.st_size);
      e.content.resize(static_cast<size_t>(in.gcount()));
      if (st.st_nlink > 1) {
        // Named by its smallest path: readdir orders differ between trees.
        auto key = std::make_pair(st.st_dev, st.st_ino);
        auto [s, fresh] = smallest.emplace(key, rel);
        if (!fresh && rel < s->second) s->second = rel;
        linked[rel] = key;
      }
    } else {
      e.type = "other";
    }
    out[rel] = std::move(e);
  }
  for (const auto& [rel, key] : linked) out[rel].link_group = smallest[key];
  return out;
}

// The same entries on both sides; `b`'s files may use at most `slack_blocks`
// more 512-byte blocks than `a`'s (holes stay holes).
inline ::testing::AssertionResult SameTree(const std::filesystem::path& a,
                                           const std::filesystem::path& b,
                                           blkcnt_t slack_blocks = 64) {
  auto ta = ReadTree(a), tb = ReadTree(b);
  for (const auto& [rel, x] : ta) {
    auto it = tb.find(rel);
    if (it == tb.end()) return ::testing::AssertionFailure() << "missing in " << b << ": " << rel;
    const TreeEntry& y = it->second;
    if (x.type != y.type || x.content != y.content || x.mode != y.mode || x.size != y.size ||
        x.mtime_ns != y.mtime_ns || x.link_group != y.link_group) {
      return ::testing::AssertionFailure()
             << rel << " differs: " << x.type << "/" << y.type << ", mode " << std::oct << x.mode
             << "/" << y.mode << std::dec << ", size " << x.size << "/" << y.size << ", mtime "
             << x.mtime_ns << "/" << y.mtime_ns << ", link group '" << x.link_group << "'/'"
             << y.link_group << "'" << (x.content != y.content ? ", other bytes" : "");
    }
    if (y.blocks > x.blocks + slack_blocks) {
      return ::testing::AssertionFailure()
             << rel << ": holes filled (" << x.blocks << " -> " << y.blocks << " blocks)";
    }
  }
  for (const auto& [rel, y] : tb) {
    if (!ta.count(rel)) return ::testing::AssertionFailure() << "extra in " << b << ": " << rel;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace deepbox::local::testing
