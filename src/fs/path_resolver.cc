#include "fs/path_resolver.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <optional>

#include "fs/dir_entries.h"

namespace deepbox::fs {
namespace {

// Set once openat2 turned out to be missing (ENOSYS): the walk does it all.
std::atomic<bool> g_no_openat2{false};

constexpr int kMaxSymlinks = 40;  // as the kernel's MAXSYMLINKS
constexpr int kOpenat2Retries = 16;

// Splits on '/', dropping "" and "." components.
std::vector<std::string_view> Components(std::string_view path) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view c = path.substr(i, j - i);
    if (!c.empty() && c != ".") out.push_back(c);
    i = j + 1;
  }
  return out;
}

std::string Join(const std::vector<std::string_view>& parts) {
  std::string out;
  for (auto p : parts) {
    if (!out.empty()) out += '/';
    out += p;
  }
  return out;
}

long RawOpenat2(int dirfd, const char* path, uint64_t flags, uint64_t mode, uint64_t resolve) {
  struct open_how how = {};
  how.flags = flags;
  how.mode = mode;
  how.resolve = resolve;
  return syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

bool NeedsMode(int flags) { return (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE; }

// Kernel interfaces rather than files (see RootOptions::refuse_pseudo_fs).
const char* PseudoFsName(int64_t type) {
  switch (type) {
    case PROC_SUPER_MAGIC:
      return "procfs";
    case SYSFS_MAGIC:
      return "sysfs";
    case DEBUGFS_MAGIC:
      return "debugfs";
    case TRACEFS_MAGIC:
      return "tracefs";
    case SECURITYFS_MAGIC:
      return "securityfs";
    case CGROUP_SUPER_MAGIC:
    case CGROUP2_SUPER_MAGIC:
      return "cgroupfs";
    case BPF_FS_MAGIC:
      return "bpffs";
    case EFIVARFS_MAGIC:
      return "efivarfs";
    case 0x62656570:  // CONFIGFS_MAGIC (not in every linux/magic.h)
      return "configfs";
    default:
      return nullptr;
  }
}

}  // namespace

Status ValidatePath(std::string_view path) {
  if (path.empty()) return MakeError(ErrorCode::kInvalidArgument, "empty path");
  if (path.find('\0') != std::string_view::npos) {
    return MakeError(ErrorCode::kInvalidArgument, "path contains a NUL byte");
  }
  if (path.size() > kMaxPathBytes) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        fmt::format("path too long ({} bytes, at most {})", path.size(), kMaxPathBytes));
  }
  return {};
}

Result<std::string> NormalizeRelative(std::string_view rel) {
  std::vector<std::string_view> out;
  for (auto c : Components(rel)) {
    if (c == "..") {
      if (out.empty()) {
        return MakeError(ErrorCode::kPermissionDenied,
                         fmt::format("path '{}' escapes the root directory", rel));
      }
      out.pop_back();
    } else {
      out.push_back(c);
    }
  }
  return Join(out);
}

std::string NormalizeAbsolute(std::string_view abs) {
  std::vector<std::string_view> out;
  for (auto c : Components(abs)) {
    if (c == "..") {
      if (!out.empty()) out.pop_back();
    } else {
      out.push_back(c);
    }
  }
  std::string result = "/";
  result += Join(out);
  return result;
}

std::string JoinRelative(std::string_view a, std::string_view b) {
  if (a.empty()) return std::string(b);
  if (b.empty()) return std::string(a);
  std::string out(a);
  out += '/';
  out += b;
  return out;
}

std::pair<std::string_view, std::string_view> SplitRelative(std::string_view rel) {
  size_t slash = rel.rfind('/');
  if (slash == std::string_view::npos) return {std::string_view(), rel};
  return {rel.substr(0, slash), rel.substr(slash + 1)};
}

Root::Root(UniqueFd fd, std::string path, std::vector<std::string> aliases, RootOptions options)
    : fd_(std::move(fd)), path_(std::move(path)), aliases_(std::move(aliases)), options_(options) {}

Result<Root> Root::Open(std::string_view dir, RootOptions options) {
  if (auto st = ValidatePath(dir); !st) return tl::unexpected(st.error());
  std::string given(dir);
  char* real = ::realpath(given.c_str(), nullptr);
  if (real == nullptr) return MakeSyscallError("realpath", errno, given);
  std::string real_path(real);
  ::free(real);
  int fd = ::open(real_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return MakeSyscallError("open", errno, real_path);
  std::vector<std::string> aliases{real_path};
  if (given[0] == '/') {
    std::string norm = NormalizeAbsolute(given);
    if (norm != real_path) aliases.push_back(norm);
  }
  Root root(UniqueFd(fd), real_path, std::move(aliases), options);
  if (!options.relative_base.empty()) {
    // Must name a directory inside the root (checked as an API path).
    const std::string base = options.relative_base;
    root.options_.relative_base.clear();
    if (base[0] != '/') {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("relative base '{}' must be an absolute path", base));
    }
    auto rel = root.ToRelative(base);
    if (!rel) return tl::unexpected(rel.error());
    auto dir = root.Open(*rel, O_PATH | O_DIRECTORY);
    if (!dir) return tl::unexpected(dir.error());
    root.options_.relative_base = root.ToAbsolute(*rel);
  }
  return root;
}

Result<Root> Root::Adopt(UniqueFd dir, std::string shown, RootOptions options) {
  struct stat st;
  if (::fstat(dir.get(), &st) != 0) return MakeSyscallError("fstat", errno, shown);
  if (!S_ISDIR(st.st_mode)) return MakeSyscallError("fstat", ENOTDIR, shown);
  if (!options.relative_base.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "an adopted root takes no relative base: it has no absolute path");
  }
  // No aliases: nothing absolute is beneath it.
  return Root(std::move(dir), std::move(shown), {}, options);
}

Result<Root> Root::Sub(std::string_view rel) const {
  auto fd = Open(rel, O_PATH | O_DIRECTORY);
  if (!fd) return tl::unexpected(fd.error());
  auto canon = Canonicalize(rel);
  if (!canon) return tl::unexpected(canon.error());
  std::string path = ToAbsolute(rel);
  std::vector<std::string> aliases;
  if (!aliases_.empty()) aliases.push_back(path);  // an adopted root has none
  for (const auto& alias : aliases_) {
    std::string a = alias;
    if (!canon->empty()) {
      if (a != "/") a += '/';
      a += *canon;
    }
    if (a != path) aliases.push_back(a);
  }
  RootOptions options = options_;
  options.relative_base.clear();  // the sub root's relative paths are its own
  return Root(std::move(*fd), std::move(path), std::move(aliases), options);
}

Result<std::string> Root::ToRelative(std::string_view api_path) const {
  if (auto st = ValidatePath(api_path); !st) return tl::unexpected(st.error());
  std::string norm;
  if (api_path[0] != '/') {
    if (options_.relative_base.empty()) return NormalizeRelative(api_path);
    // Lexically beneath the base; ".." may climb out of it but, checked as an
    // absolute path below, never out of the root.
    norm = NormalizeAbsolute(options_.relative_base + "/" + std::string(api_path));
  } else {
    norm = NormalizeAbsolute(api_path);
  }
  for (const auto& alias : aliases_) {
    if (norm == alias) return std::string();
    if (alias == "/") return norm.substr(1);
    if (norm.size() > alias.size() && norm.compare(0, alias.size(), alias) == 0 &&
        norm[alias.size()] == '/') {
      return norm.substr(alias.size() + 1);
    }
  }
  return MakeError(ErrorCode::kPermissionDenied,
                   fmt::format("path '{}' is outside the root directory {}", api_path, path_));
}

std::string Root::ToAbsolute(std::string_view rel) const {
  if (rel.empty()) return path_;
  if (path_.ends_with('/')) return std::string(path_).append(rel);  // "/", or as Adopt was given
  std::string out = path_;
  out += '/';
  out += rel;
  return out;
}

Error Root::EscapeError(std::string_view call, std::string_view rel) const {
  Error e = SyscallError(call, EXDEV, ToAbsolute(rel));
  e.code = ErrorCode::kPermissionDenied;
  e.message = fmt::format("path escapes the root directory {}: {}", path_, e.message);
  return e;
}

Status Root::CheckServed(int fd, std::string_view rel) const {
  if (!options_.refuse_pseudo_fs) return {};
  struct statfs sfs;
  if (::fstatfs(fd, &sfs) != 0) return MakeSyscallError("fstatfs", errno, ToAbsolute(rel));
  if (const char* name = PseudoFsName(static_cast<int64_t>(sfs.f_type)); name != nullptr) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("'{}' is on {}: kernel interfaces are not served by the file API "
                                 "(use a command instead)",
                                 ToAbsolute(rel), name));
  }
  return {};
}

Result<UniqueFd> Root::Open(std::string_view rel, int flags, mode_t mode) const {
  return OpenImpl(rel, flags, mode, /*allow_symlinks=*/true);
}

Result<UniqueFd> Root::OpenNoSymlinks(std::string_view rel, int flags, mode_t mode) const {
  return OpenImpl(rel, flags, mode, /*allow_symlinks=*/false);
}

Result<UniqueFd> Root::OpenBeneathNoSymlinks(int dirfd, std::string_view rel, int flags) const {
  auto fd = OpenBeneathImpl(dirfd, rel, flags);
  if (fd && options_.refuse_pseudo_fs) {
    // `rel` is relative to dirfd, not the root: name what we can.
    if (auto st = CheckServed(fd->get(), rel); !st) return tl::unexpected(st.error());
  }
  return fd;
}

Result<UniqueFd> Root::OpenBeneathNoSymlinksStat(int dirfd, std::string_view rel, int flags,
                                                 struct stat* st, FsVerdicts* verdicts) const {
  auto fd = OpenBeneathImpl(dirfd, rel, flags);
  if (!fd) return fd;
  if (::fstat(fd->get(), st) != 0) return MakeSyscallError("fstat", errno, rel);
  if (!options_.refuse_pseudo_fs) return fd;
  for (const auto& [dev, served] : verdicts->served_) {
    if (dev != st->st_dev) continue;
    if (served) return fd;
    break;  // a refused device: CheckServed builds the error
  }
  auto checked = CheckServed(fd->get(), rel);
  verdicts->served_.emplace_back(st->st_dev, checked.has_value());
  if (!checked) return tl::unexpected(checked.error());
  return fd;
}

Result<UniqueFd> Root::OpenBeneathImpl(int dirfd, std::string_view rel, int flags) const {
  flags |= O_CLOEXEC;
  std::string path = rel.empty() ? std::string(".") : std::string(rel);
  if (!options_.force_fallback && !g_no_openat2.load(std::memory_order_relaxed)) {
    const uint64_t resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS;
    int err = 0;
    for (int attempt = 0; attempt < kOpenat2Retries; ++attempt) {
      long fd = RawOpenat2(dirfd, path.c_str(), static_cast<uint64_t>(flags), 0, resolve);
      if (fd >= 0) return UniqueFd(static_cast<int>(fd));
      err = errno;
      if (err != EAGAIN && err != EINTR) break;
    }
    if (err == ENOSYS) {
      g_no_openat2.store(true, std::memory_order_relaxed);
    } else if (err == EXDEV) {
      return tl::unexpected(EscapeError("openat2", rel));
    } else if (err != EAGAIN) {
      return MakeSyscallError("openat2", err, path);
    }
  }
  // One component at a time, none of them followed.
  auto comps = Components(rel);
  UniqueFd cur;
  int at = dirfd;
  for (size_t i = 0; i < comps.size(); ++i) {
    std::string c(comps[i]);
    if (c == "..") return tl::unexpected(EscapeError("openat", rel));
    const bool last = i + 1 == comps.size();
    int fd = ::openat(at, c.c_str(),
                      last ? flags | O_NOFOLLOW : O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return MakeSyscallError("openat", errno, path);
    cur.reset(fd);
    at = fd;
  }
  if (comps.empty()) {
    int fd = ::openat(dirfd, ".", flags);
    if (fd < 0) return MakeSyscallError("openat", errno, path);
    cur.reset(fd);
  }
  return cur;
}

Result<UniqueFd> Root::OpenImpl(std::string_view rel, int flags, mode_t mode,
                                bool allow_symlinks) const {
  auto fd = ResolveImpl(rel, flags, mode, allow_symlinks);
  if (fd) {
    if (auto st = CheckServed(fd->get(), rel); !st) return tl::unexpected(st.error());
  }
  return fd;
}

Result<UniqueFd> Root::ResolveImpl(std::string_view rel, int flags, mode_t mode,
                                   bool allow_symlinks) const {
  flags |= O_CLOEXEC;
  if (!options_.force_fallback && !g_no_openat2.load(std::memory_order_relaxed)) {
    uint64_t resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    if (!allow_symlinks) resolve |= RESOLVE_NO_SYMLINKS;
    std::string path = rel.empty() ? std::string(".") : std::string(rel);
    int err = 0;
    for (int attempt = 0; attempt < kOpenat2Retries; ++attempt) {
      long fd = RawOpenat2(fd_.get(), path.c_str(), static_cast<uint64_t>(flags),
                           NeedsMode(flags) ? mode : 0, resolve);
      if (fd >= 0) return UniqueFd(static_cast<int>(fd));
      err = errno;
      if (err != EAGAIN && err != EINTR) break;
    }
    if (err == ENOSYS) {
      g_no_openat2.store(true, std::memory_order_relaxed);
    } else if (err == EXDEV) {
      // openat2 refuses every absolute symlink; the walk accepts those that
      // point inside the root and refuses the rest.
      if (!allow_symlinks) return tl::unexpected(EscapeError("openat2", rel));
    } else if (err != EAGAIN) {
      return MakeSyscallError("openat2", err, ToAbsolute(rel));
    }
  }
  auto out = Walk(rel, WalkMode::kOpen, flags, mode, allow_symlinks);
  if (!out) return tl::unexpected(out.error());
  return std::move(out->fd);
}

Result<Root::WalkOut> Root::Walk(std::string_view rel, WalkMode mode, int flags, mode_t mode_bits,
                                 bool allow_symlinks) const {
  const std::string subject = ToAbsolute(rel);
  std::vector<UniqueFd> stack;  // directories entered below the root
  std::vector<std::string> names;
  std::vector<std::string> todo;  // components still to resolve, next at the back
  auto push_front = [&todo](std::string_view path) {
    auto comps = Components(path);
    for (auto it = comps.rbegin(); it != comps.rend(); ++it) todo.emplace_back(*it);
  };
  push_front(rel);
  auto cur = [&]() { return stack.empty() ? fd_.get() : stack.back().get(); };
  auto dup_cur = [&]() -> Result<UniqueFd> {
    int fd = ::fcntl(cur(), F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return MakeSyscallError("fcntl", errno, subject);
    return UniqueFd(fd);
  };
  int links = 0;
  // Continues the walk inside a symlink's target.
  auto expand = [&](const std::string& target) -> Status {
    if (!allow_symlinks || ++links > kMaxSymlinks) {
      return MakeSyscallError("openat", ELOOP, subject);
    }
    if (target.empty()) return MakeSyscallError("readlinkat", ENOENT, subject);
    if (target[0] != '/') {
      push_front(target);
      return {};
    }
    std::string norm = NormalizeAbsolute(target);
    for (const auto& alias : aliases_) {
      std::string_view inside;
      if (norm == alias) {
        inside = "";
      } else if (alias == "/") {
        inside = std::string_view(norm).substr(1);
      } else if (norm.size() > alias.size() && norm.compare(0, alias.size(), alias) == 0 &&
                 norm[alias.size()] == '/') {
        inside = std::string_view(norm).substr(alias.size() + 1);
      } else {
        continue;
      }
      stack.clear();
      names.clear();
      push_front(inside);
      return {};
    }
    return tl::unexpected(EscapeError("openat", rel));
  };

  while (!todo.empty()) {
    std::string c = std::move(todo.back());
    todo.pop_back();
    if (c == "..") {
      if (stack.empty()) return tl::unexpected(EscapeError("openat", rel));
      stack.pop_back();
      names.pop_back();
      continue;
    }
    const bool last = todo.empty();
    if (last && mode == WalkMode::kParent) {
      auto dir = dup_cur();
      if (!dir) return tl::unexpected(dir.error());
      return WalkOut{std::move(*dir), std::move(c), std::move(names)};
    }
    if (last && mode == WalkMode::kParentFollow) {
      int err = 0;
      auto target = ReadLinkAt(cur(), c.c_str(), &err);
      if (target) {
        if (auto st = expand(*target); !st) return tl::unexpected(st.error());
        continue;
      }
      if (err != EINVAL && err != ENOENT) return MakeSyscallError("readlinkat", err, subject);
      auto dir = dup_cur();
      if (!dir) return tl::unexpected(dir.error());
      return WalkOut{std::move(*dir), std::move(c), std::move(names)};
    }
    if (last) {  // kOpen: open the final component itself
      int fd = ::openat(cur(), c.c_str(), flags | O_NOFOLLOW | O_CLOEXEC,
                        NeedsMode(flags) ? mode_bits : 0);
      if (fd >= 0) {
        UniqueFd file(fd);
        if ((flags & O_PATH) != 0) {
          struct stat st;
          if (::fstat(fd, &st) != 0) return MakeSyscallError("fstat", errno, subject);
          if (S_ISLNK(st.st_mode)) {
            int err = 0;
            auto target = ReadLinkAt(fd, "", &err);
            if (!target) return MakeSyscallError("readlinkat", err, subject);
            if (auto s = expand(*target); !s) return tl::unexpected(s.error());
            continue;
          }
        }
        return WalkOut{std::move(file), std::move(c), std::move(names)};
      }
      int err = errno;
      if (err == ELOOP || err == ENOTDIR) {
        // O_NOFOLLOW met a symlink (ENOTDIR when O_DIRECTORY was asked too).
        int lerr = 0;
        auto target = ReadLinkAt(cur(), c.c_str(), &lerr);
        if (target) {
          if (auto s = expand(*target); !s) return tl::unexpected(s.error());
          continue;
        }
      }
      return MakeSyscallError("openat", err, subject);
    }
    // An intermediate component: must be a directory or a symlink to one.
    int fd = ::openat(cur(), c.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return MakeSyscallError("openat", errno, subject);
    UniqueFd entry(fd);
    struct stat st;
    if (::fstat(fd, &st) != 0) return MakeSyscallError("fstat", errno, subject);
    if (S_ISDIR(st.st_mode)) {
      stack.push_back(std::move(entry));
      names.push_back(std::move(c));
    } else if (S_ISLNK(st.st_mode)) {
      int err = 0;
      auto target = ReadLinkAt(fd, "", &err);
      if (!target) return MakeSyscallError("readlinkat", err, subject);
      if (auto s = expand(*target); !s) return tl::unexpected(s.error());
    } else {
      return MakeSyscallError("openat", ENOTDIR, subject);
    }
  }
  // Every component consumed: the path designates the directory we are in.
  if (mode == WalkMode::kOpen) {
    int fd = ::openat(cur(), ".", flags | O_CLOEXEC, NeedsMode(flags) ? mode_bits : 0);
    if (fd < 0) return MakeSyscallError("openat", errno, subject);
    return WalkOut{UniqueFd(fd), std::string(), std::move(names)};
  }
  auto dir = dup_cur();
  if (!dir) return tl::unexpected(dir.error());
  return WalkOut{std::move(*dir), std::string(), std::move(names)};
}

Result<Root::Location> Root::OpenParent(std::string_view rel) const {
  if (rel.empty()) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("operation not permitted on the root directory {}", path_));
  }
  auto [dir, base] = SplitRelative(rel);
  auto fd = Open(dir, O_PATH | O_DIRECTORY);
  if (!fd) return tl::unexpected(fd.error());
  return Location{std::move(*fd), std::string(base), std::string(rel)};
}

Result<Root::Location> Root::OpenParentFollow(std::string_view rel) const {
  auto loc = OpenParent(rel);
  if (!loc) return loc;
  int err = 0;
  if (!ReadLinkAt(loc->dir.get(), loc->name.c_str(), &err)) {
    if (err == EINVAL || err == ENOENT) return loc;  // not a symlink
    return MakeSyscallError("readlinkat", err, ToAbsolute(rel));
  }
  auto out = Walk(rel, WalkMode::kParentFollow, 0, 0, /*allow_symlinks=*/true);
  if (!out) return tl::unexpected(out.error());
  if (out->name.empty()) return MakeSyscallError("openat", EISDIR, ToAbsolute(rel));
  if (auto st = CheckServed(out->fd.get(), rel); !st) return tl::unexpected(st.error());
  return Location{std::move(out->fd), std::move(out->name), std::string(rel)};
}

Result<UniqueFd> Root::MakeDirs(std::string_view rel, mode_t mode) const {
  auto existing = Open(rel, O_PATH | O_DIRECTORY);
  if (existing || existing.error().code != ErrorCode::kNotFound) return existing;
  auto cur = Open("", O_PATH | O_DIRECTORY);
  if (!cur) return cur;
  std::string prefix;
  for (auto c : Components(rel)) {
    prefix = JoinRelative(prefix, c);
    auto next = Open(prefix, O_PATH | O_DIRECTORY);
    if (!next) {
      if (next.error().code != ErrorCode::kNotFound) return next;
      std::string name(c);
      if (::mkdirat(cur->get(), name.c_str(), mode) != 0 && errno != EEXIST) {
        return MakeSyscallError("mkdirat", errno, ToAbsolute(prefix));
      }
      next = Open(prefix, O_PATH | O_DIRECTORY);
      if (!next) return next;
    }
    cur = std::move(next);
  }
  return cur;
}

Result<UniqueFd> Root::MakeDirsNoSymlinks(std::string_view rel, mode_t mode,
                                          const MadeDir& made) const {
  // A symlink (ELOOP; ENOTDIR from the walk's O_NOFOLLOW|O_DIRECTORY) or a
  // file where a directory must be.
  auto in_the_way = [this](Error e, std::string_view at) -> Result<UniqueFd> {
    if (e.sys_errno == ELOOP || e.sys_errno == ENOTDIR) {
      return MakeError(ErrorCode::kConflict,
                       fmt::format("{} is not a directory (a symlink or file is in the way; "
                                   "nothing is written through it)",
                                   ToAbsolute(at)));
    }
    return tl::unexpected(std::move(e));
  };
  // Usually everything exists: one resolution. Otherwise one component at a
  // time from the root, so that an error names the component at fault.
  auto existing = OpenNoSymlinks(rel, O_PATH | O_DIRECTORY);
  if (existing) return existing;
  auto cur = OpenNoSymlinks("", O_PATH | O_DIRECTORY);
  if (!cur) return cur;
  std::string prefix;
  for (auto c : Components(rel)) {
    prefix = JoinRelative(prefix, c);
    auto next = OpenNoSymlinks(prefix, O_PATH | O_DIRECTORY);
    if (!next && next.error().code == ErrorCode::kNotFound) {
      std::string name(c);
      if (::mkdirat(cur->get(), name.c_str(), mode) == 0) {
        if (made) made(prefix);
      } else if (errno != EEXIST) {
        return MakeSyscallError("mkdirat", errno, ToAbsolute(prefix));
      }
      next = OpenNoSymlinks(prefix, O_PATH | O_DIRECTORY);
    }
    if (!next) return in_the_way(std::move(next.error()), prefix);
    cur = std::move(next);
  }
  return cur;
}

Result<std::string> Root::Canonicalize(std::string_view rel) const {
  if (rel.empty()) return std::string();
  auto out = Walk(rel, WalkMode::kParentFollow, 0, 0, /*allow_symlinks=*/true);
  if (!out) return tl::unexpected(out.error());
  std::string canon;
  for (const auto& n : out->components) canon = JoinRelative(canon, n);
  return JoinRelative(canon, out->name);
}

}  // namespace deepbox::fs
