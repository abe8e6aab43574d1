#include "acp/project_copy.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <functional>

#include "acp/gitignore.h"
#include "common/byte_size.h"
#include "common/unique_fd.h"
#include "fs/path_resolver.h"

namespace deepbox::acp {

namespace {

constexpr size_t kMaxGitignoreBytes = 1 << 20;

std::string JoinRel(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : dir + "/" + name;
}

Result<std::string> ReadFd(int fd, uint64_t limit, const std::string& what) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return MakeSyscallError("read", errno, what);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > limit) {
      return MakeError(ErrorCode::kResourceExhausted, what + " grew while being copied");
    }
  }
  return out;
}

// One walk of the project; `on_dir` / `on_file` see what is kept, with the
// parent's descriptor and the entry's name.
class ProjectWalk {
 public:
  using FileVisitor = std::function<Status(const std::string& rel, int dir_fd, const char* name,
                                           const struct stat& st)>;
  using DirVisitor = std::function<Status(const std::string& rel)>;

  ProjectWalk(const ProjectCopyOptions& options, ProjectCopyStats& stats, DirVisitor on_dir,
              FileVisitor on_file)
      : options_(options),
        stats_(stats),
        on_dir_(std::move(on_dir)),
        on_file_(std::move(on_file)) {}

  Status Run(const std::string& project_dir) {
    UniqueFd root(::open(project_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root) return MakeSyscallError("open", errno, project_dir);
    return Walk(root.get(), "");
  }

 private:
  Status Walk(int dir_fd, const std::string& rel_dir) {
    // This directory's .gitignore first: it applies to its own entries.
    UniqueFd gi(::openat(dir_fd, ".gitignore", O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (gi) {
      struct stat st {};
      if (::fstat(gi.get(), &st) == 0 && S_ISREG(st.st_mode)) {
        if (auto text = ReadFd(gi.get(), kMaxGitignoreBytes, JoinRel(rel_dir, ".gitignore"))) {
          rules_.AddFile(rel_dir, *text);
        }
      }
    }
    int dup_fd = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0) return MakeSyscallError("fcntl(F_DUPFD_CLOEXEC)", errno, rel_dir);
    DIR* d = ::fdopendir(dup_fd);
    if (!d) {
      int err = errno;
      ::close(dup_fd);
      return MakeSyscallError("fdopendir", err, rel_dir.empty() ? "." : rel_dir);
    }
    std::vector<std::string> names;
    errno = 0;
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(std::move(name));
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
      const std::string rel = JoinRel(rel_dir, name);
      struct stat st {};
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;  // gone since readdir
        return MakeSyscallError("fstatat", errno, rel);
      }
      if (S_ISLNK(st.st_mode)) {
        stats_.symlinks.push_back(rel);
        continue;
      }
      const bool is_dir = S_ISDIR(st.st_mode);
      if ((is_dir && name == ".git") || rules_.Ignored(rel, is_dir)) {
        stats_.ignored++;
        continue;
      }
      if (is_dir) {
        UniqueFd sub(
            ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!sub) {
          if (errno == ELOOP || errno == ENOTDIR) {  // swapped for a symlink meanwhile
            stats_.symlinks.push_back(rel);
            continue;
          }
          return MakeSyscallError("openat", errno, rel);
        }
        stats_.directories++;
        if (auto st2 = on_dir_(rel); !st2) return st2;
        if (auto st2 = Walk(sub.get(), rel); !st2) return st2;
        continue;
      }
      if (!S_ISREG(st.st_mode)) {
        stats_.special.push_back(rel);
        continue;
      }
      stats_.files++;
      stats_.bytes += static_cast<uint64_t>(st.st_size);
      if (stats_.files > options_.max_files) {
        return MakeError(
            ErrorCode::kResourceExhausted,
            "the project has more than " + std::to_string(options_.max_files) +
                " files to copy into the sandbox (not counting what .gitignore "
                "excludes); exclude some with .gitignore or raise --max-project-files");
      }
      if (stats_.bytes > options_.max_bytes) {
        return MakeError(ErrorCode::kResourceExhausted,
                         "the project is larger than " + FormatBytes(options_.max_bytes) +
                             " (not counting what .gitignore excludes); exclude some with "
                             ".gitignore or raise --max-project-size");
      }
      if (auto st2 = on_file_(rel, dir_fd, name.c_str(), st); !st2) return st2;
    }
    return {};
  }

  const ProjectCopyOptions& options_;
  ProjectCopyStats& stats_;
  DirVisitor on_dir_;
  FileVisitor on_file_;
  IgnoreRules rules_;
};

}  // namespace

Result<ProjectCopyStats> ScanProject(const std::string& project_dir,
                                     const ProjectCopyOptions& options) {
  ProjectCopyStats stats;
  ProjectWalk walk(
      options, stats, [](const std::string&) -> Status { return {}; },
      [](const std::string&, int, const char*, const struct stat&) -> Status { return {}; });
  if (auto st = walk.Run(project_dir); !st) return tl::unexpected(st.error());
  return stats;
}

Result<ProjectCopyStats> CopyProjectToSandbox(const std::string& project_dir, Sandbox& sandbox,
                                              const std::string& sandbox_root,
                                              const ProjectCopyOptions& options) {
  // First the whole tree against the caps, so a refused project costs nothing.
  if (auto scanned = ScanProject(project_dir, options); !scanned) {
    return tl::unexpected(scanned.error());
  }
  ProjectCopyStats stats;
  std::vector<std::string> copied;
  auto on_dir = [&](const std::string& rel) -> Status {
    if (auto st = sandbox.Mkdir(sandbox_root + "/" + rel, true); !st) {
      return MakeError(st.error().code,
                       "creating " + rel + " in the sandbox: " + st.error().message);
    }
    return {};
  };
  auto on_file = [&](const std::string& rel, int dir_fd, const char* name,
                     const struct stat& seen) -> Status {
    UniqueFd fd(::openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd) {
      if (errno == ELOOP) return {};  // swapped for a symlink since the scan: not followed
      return MakeSyscallError("openat", errno, rel);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return MakeSyscallError("fstat", errno, rel);
    if (!S_ISREG(st.st_mode)) return {};  // what was opened is what counts
    auto content = ReadFd(fd.get(), static_cast<uint64_t>(seen.st_size) + options.max_bytes, rel);
    if (!content) return tl::unexpected(content.error());
    if (auto up = sandbox.Upload(sandbox_root + "/" + rel, *content, st.st_mode & 0777); !up) {
      return MakeError(up.error().code,
                       "copying " + rel + " into the sandbox: " + up.error().message);
    }
    copied.push_back(rel);
    return {};
  };
  ProjectWalk walk(options, stats, on_dir, on_file);
  if (auto st = walk.Run(project_dir); !st) return tl::unexpected(st.error());
  stats.copied = std::move(copied);
  return stats;
}

Result<std::string> ReadProjectFile(const std::string& project_dir, const std::string& rel,
                                    uint64_t max_bytes) {
  auto root = deepbox::fs::Root::Open(project_dir);
  if (!root) return tl::unexpected(root.error());
  auto normalized = root->ToRelative(rel);  // "..": PERMISSION_DENIED
  if (!normalized) return tl::unexpected(normalized.error());
  auto fd = root->OpenNoSymlinks(*normalized, O_RDONLY | O_NONBLOCK);
  if (!fd) {
    const int err = fd.error().sys_errno;
    if (err == ENOENT || err == ENOTDIR || err == ELOOP || err == EXDEV) {
      return MakeError(ErrorCode::kNotFound, rel + " is not a file of the project");
    }
    return tl::unexpected(fd.error());
  }
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return MakeSyscallError("fstat", errno, rel);
  if (!S_ISREG(st.st_mode)) {
    return MakeError(ErrorCode::kNotFound, rel + " is not a regular file of the project");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return MakeError(ErrorCode::kResourceExhausted,
                     rel + " is larger than " + FormatBytes(max_bytes));
  }
  return ReadFd(fd->get(), max_bytes, rel);
}

bool IsPlainProjectPath(const std::string& project_dir, const std::string& rel) {
  auto root = deepbox::fs::Root::Open(project_dir);
  if (!root) return false;
  auto normalized = root->ToRelative(rel);
  if (!normalized || normalized->empty()) return false;
  // The longest part of it that exists must open without following a
  // symlink (RESOLVE_NO_SYMLINKS refuses one at the end too).
  std::string part = *normalized;
  for (;;) {
    auto fd = root->OpenNoSymlinks(part, O_PATH);
    if (fd) {
      struct stat st {};
      if (::fstat(fd->get(), &st) != 0) return false;
      return part == *normalized ? S_ISREG(st.st_mode) : S_ISDIR(st.st_mode);
    }
    if (fd.error().sys_errno != ENOENT) return false;  // ELOOP, EXDEV, ENOTDIR, EACCES
    size_t slash = part.rfind('/');
    if (slash == std::string::npos) return true;  // nothing of it exists yet
    part.resize(slash);
  }
}

std::vector<std::string> IgnoredDirectoryNames(const std::string& project_dir) {
  std::vector<std::string> names{".git"};
  auto text = ReadProjectFile(project_dir, ".gitignore", kMaxGitignoreBytes);
  if (!text) return names;
  std::vector<std::string> found;
  size_t at = 0;
  while (at <= text->size()) {
    size_t end = text->find('\n', at);
    if (end == std::string::npos) end = text->size();
    std::string line = text->substr(at, end - at);
    at = end + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.starts_with("!")) return names;  // a re-include: names alone would skip too much
    if (line.ends_with("/")) line.pop_back();
    const bool plain = !line.empty() && line != "." && line != ".." &&
                       std::all_of(line.begin(), line.end(), [](char c) {
                         return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
                       });
    if (plain && std::find(found.begin(), found.end(), line) == found.end()) {
      found.push_back(std::move(line));
    }
  }
  names.insert(names.end(), found.begin(), found.end());
  return names;
}

void ProjectIgnores::Load(const std::string& rel_dir) {
  if (!loaded_.insert(rel_dir).second) return;
  // Read as the copy reads it: a directory that is a symlink (or missing on
  // the host) has no .gitignore of the project's.
  auto text = ReadProjectFile(project_dir_, JoinRel(rel_dir, ".gitignore"), kMaxGitignoreBytes);
  if (text) rules_.AddFile(rel_dir, *text);
}

bool ProjectIgnores::Ignored(std::string_view rel_view) {
  const std::string rel(rel_view);
  Load("");
  // Each directory on the way: ignored (or .git) means not copied, and its
  // own .gitignore applies to what is below it.
  for (size_t slash = rel.find('/'); slash != std::string::npos; slash = rel.find('/', slash + 1)) {
    const std::string dir = rel.substr(0, slash);
    const std::string name =
        dir.substr(dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/') + 1);
    if (name == ".git" || rules_.Ignored(dir, /*is_dir=*/true)) return true;
    Load(dir);
  }
  return rules_.Ignored(rel, /*is_dir=*/false);
}

}  // namespace deepbox::acp
