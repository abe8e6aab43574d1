#include "fuzz/fuzz_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace deepbox::fuzz {
namespace {

[[noreturn]] void SetupFailure(std::string_view what, const std::string& path) {
  std::fprintf(stderr, "fuzz setup: %.*s %s: %s\n", static_cast<int>(what.size()), what.data(),
               path.c_str(), std::strerror(errno));
  std::abort();
}

// Removes the entries of the directory open as `dfd` (closed here).
void EmptyDirFd(int dfd, const std::string& shown) {
  DIR* d = ::fdopendir(dfd);
  if (d == nullptr) {
    ::close(dfd);
    SetupFailure("fdopendir", shown);
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  for (const auto& n : names) {
    struct stat st {};
    if (::fstatat(::dirfd(d), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      ::fchmodat(::dirfd(d), n.c_str(), 0700, 0);
      int sub = ::openat(::dirfd(d), n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) EmptyDirFd(sub, shown + "/" + n);
      // Failures are left for the setup that follows to report (it cannot
      // create what is still there); at exit they do not matter.
      (void)::unlinkat(::dirfd(d), n.c_str(), AT_REMOVEDIR);
    } else {
      (void)::unlinkat(::dirfd(d), n.c_str(), 0);
    }
  }
  ::closedir(d);
}

void SnapshotInto(int dfd, const std::string& rel, std::string_view skip, Snapshot& out) {
  DIR* d = ::fdopendir(dfd);
  if (d == nullptr) {
    ::close(dfd);
    return;
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  for (const auto& n : names) {
    const std::string path = rel.empty() ? n : rel + "/" + n;
    if (!skip.empty() && path == skip) continue;
    struct stat st {};
    if (::fstatat(::dirfd(d), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    // A directory's size, times and link count follow its entries, which
    // are compared themselves.
    std::string v = S_ISDIR(st.st_mode)
                        ? fmt::format("{:o}", st.st_mode)
                        : fmt::format("{:o} {} {}.{} nlink={}", st.st_mode, st.st_size,
                                      st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_nlink);
    if (S_ISLNK(st.st_mode)) {
      char buf[4096];
      ssize_t len = ::readlinkat(::dirfd(d), n.c_str(), buf, sizeof buf);
      if (len > 0) v += " -> " + std::string(buf, static_cast<size_t>(len));
    }
    out[path] = v;
    if (S_ISDIR(st.st_mode)) {
      int sub = ::openat(::dirfd(d), n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) SnapshotInto(sub, path, skip, out);
    }
  }
  ::closedir(d);
}

// Temporary trees still present at exit: targets keep their fixtures for
// the whole process and never destroy them (a server thread may still use
// one), so the trees are removed by an atexit handler instead.
std::vector<std::string>& LiveTrees() {
  static auto* trees = new std::vector<std::string>();
  return *trees;
}

void RemoveLiveTrees() {
  for (const auto& t : LiveTrees()) RemoveTree(t);
}

}  // namespace

void Fail(std::string_view what) {
  std::fprintf(stderr, "\n==== fuzz property violated: %.*s\n", static_cast<int>(what.size()),
               what.data());
  std::abort();
}

TempTree::TempTree(std::string_view tag) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = fmt::format("{}/deepbox-fuzz-{}-XXXXXX", tmp && *tmp ? tmp : "/tmp", tag);
  if (::mkdtemp(tmpl.data()) == nullptr) SetupFailure("mkdtemp", tmpl);
  // The real path: properties compare it with what the kernel reports.
  char real[PATH_MAX];
  if (::realpath(tmpl.c_str(), real) == nullptr) SetupFailure("realpath", tmpl);
  path_ = real;
  if (LiveTrees().empty()) std::atexit(RemoveLiveTrees);
  LiveTrees().push_back(path_);
}

TempTree::~TempTree() {
  RemoveTree(path_);
  std::erase(LiveTrees(), path_);
}

std::string TempTree::Path(std::string_view rel) const {
  return rel.empty() ? path_ : path_ + "/" + std::string(rel);
}

void WriteFile(const std::string& path, std::string_view content, unsigned mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) SetupFailure("open", path);
  while (!content.empty()) {
    ssize_t n = ::write(fd, content.data(), content.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      SetupFailure("write", path);
    }
    content.remove_prefix(static_cast<size_t>(n));
  }
  ::fchmod(fd, mode);
  ::close(fd);
}

void MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      std::string p = path.substr(0, i);
      if (::mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) SetupFailure("mkdir", p);
    }
  }
}

void Symlink(const std::string& target, const std::string& link) {
  if (::symlink(target.c_str(), link.c_str()) != 0) SetupFailure("symlink", link);
}

void EmptyDir(const std::string& dir) {
  ::chmod(dir.c_str(), 0700);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) SetupFailure("open", dir);
  EmptyDirFd(fd, dir);
}

void RemoveTree(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    EmptyDir(path);
    (void)::rmdir(path.c_str());
  } else {
    (void)::unlink(path.c_str());
  }
}

Snapshot TakeSnapshot(const std::string& root, std::string_view skip) {
  Snapshot out;
  int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) SnapshotInto(fd, "", skip, out);
  return out;
}

std::string DescribeDifference(const Snapshot& before, const Snapshot& after) {
  for (const auto& [path, v] : before) {
    auto it = after.find(path);
    if (it == after.end()) return fmt::format("'{}' ({}) disappeared", path, v);
    if (it->second != v) return fmt::format("'{}' changed: {} -> {}", path, v, it->second);
  }
  for (const auto& [path, v] : after) {
    if (!before.contains(path)) return fmt::format("'{}' ({}) appeared", path, v);
  }
  return "";
}

std::string FdPath(int fd) {
  char buf[PATH_MAX + 1];
  std::string link = fmt::format("/proc/self/fd/{}", fd);
  ssize_t n = ::readlink(link.c_str(), buf, PATH_MAX);
  if (n < 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

bool IsWithin(std::string_view path, std::string_view dir) {
  if (!path.starts_with(dir)) return false;
  return path.size() == dir.size() || path[dir.size()] == '/';
}

std::pair<std::string_view, std::string_view> SplitFirst(std::string_view in, char sep) {
  size_t p = in.find(sep);
  if (p == std::string_view::npos) return {in, std::string_view()};
  return {in.substr(0, p), in.substr(p + 1)};
}

}  // namespace deepbox::fuzz
