#include "local/image_root.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "common/remove_tree.h"
#include "common/unique_fd.h"
#include "local/namespaces.h"

namespace deepbox::local {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxLinkHops = 40;

bool IsWhiteout(const struct stat& st) {
  return S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0);
}

bool IsOpaqueDir(const fs::path& dir) {
  char value[4] = {};
  return getxattr(dir.c_str(), "user.overlay.opaque", value, sizeof(value)) == 1 && value[0] == 'y';
}

// Components of a path inside the image, resolved lexically from its root
// ("." dropped, ".." goes up but never above the root).
void AppendParts(std::string_view path, std::vector<std::string>* parts) {
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part == "..") {
      if (!parts->empty()) parts->pop_back();
    } else if (!part.empty() && part != ".") {
      parts->emplace_back(part);
    }
    start = end + 1;
  }
}

}  // namespace

MergedLayers::MergedLayers(std::vector<fs::path> layers_bottom_first)
    : top_first_(layers_bottom_first.rbegin(), layers_bottom_first.rend()) {}

std::optional<fs::path> MergedLayers::FindOnce(const std::vector<std::string>& parts,
                                               std::vector<std::string>* link_target,
                                               size_t* link_at) const {
  if (top_first_.empty()) return std::nullopt;
  if (parts.empty()) return top_first_.front();
  for (const auto& layer : top_first_) {
    fs::path at = layer;
    bool hides_below = false;  // an opaque directory on the way in this layer
    for (size_t i = 0; i < parts.size(); ++i) {
      at /= parts[i];
      struct stat st {};
      if (lstat(at.c_str(), &st) != 0) break;  // not in this layer
      if (IsWhiteout(st)) return std::nullopt;
      if (i + 1 == parts.size()) return at;
      if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t n = readlink(at.c_str(), target, sizeof(target) - 1);
        if (n < 0) return std::nullopt;
        link_target->clear();
        if (target[0] != '/') link_target->assign(parts.begin(), parts.begin() + i);
        AppendParts(std::string_view(target, static_cast<size_t>(n)), link_target);
        *link_at = i;
        return std::nullopt;
      }
      if (!S_ISDIR(st.st_mode)) return std::nullopt;
      if (IsOpaqueDir(at)) hides_below = true;
    }
    if (hides_below) return std::nullopt;
  }
  return std::nullopt;
}

std::optional<fs::path> MergedLayers::Find(std::string_view inside) const {
  std::vector<std::string> parts;
  AppendParts(inside, &parts);
  for (int hop = 0; hop < kMaxLinkHops; ++hop) {
    std::vector<std::string> target;
    size_t link_at = std::string::npos;
    auto found = FindOnce(parts, &target, &link_at);
    if (found || link_at == std::string::npos) return found;
    target.insert(target.end(), parts.begin() + static_cast<std::ptrdiff_t>(link_at) + 1,
                  parts.end());
    parts = std::move(target);
  }
  return std::nullopt;  // a symlink loop
}

Result<std::vector<MergedLayers::Entry>> MergedLayers::TopLevel() const {
  std::map<std::string, Entry> seen;
  std::set<std::string> hidden;  // whited out by an upper layer
  for (const auto& layer : top_first_) {
    DIR* dir = opendir(layer.c_str());
    if (dir == nullptr) return MakeSyscallError("opendir", errno, layer.string());
    while (struct dirent* d = readdir(dir)) {
      std::string name = d->d_name;
      if (name == "." || name == ".." || seen.count(name) != 0 || hidden.count(name) != 0) {
        continue;
      }
      struct stat st {};
      if (fstatat(dirfd(dir), d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (IsWhiteout(st)) {
        hidden.insert(name);
        continue;
      }
      seen[name] = Entry{name, layer / name, static_cast<mode_t>(st.st_mode & S_IFMT)};
    }
    closedir(dir);
    if (IsOpaqueDir(layer)) break;
  }
  std::vector<Entry> out;
  for (auto& [name, entry] : seen) out.push_back(std::move(entry));
  return out;
}

ImageRootSupport ProbeImageRoots() {
  ImageRootSupport support;
  if (!UserNamespacesAvailable()) {
    support.reason = "user namespaces are not available to this user";
    return support;
  }
  char tmpl[] = "/tmp/deepbox-image-probe-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    support.reason = SyscallError("mkdtemp", errno, tmpl).message;
    return support;
  }
  const fs::path base = tmpl;
  struct Cleanup {
    fs::path dir;
    ~Cleanup() { (void)RemoveTree(dir); }
  } cleanup{base};
  // The mounter (the sandbox user) looks the dirs up by path here.
  if (chmod(base.c_str(), 0711) != 0) {
    support.reason = SyscallError("chmod", errno, base.string()).message;
    return support;
  }
  IdMapPlan ids = PlanIdMap(std::nullopt, /*map_image_root=*/true);
  for (const char* sub : {"lower", "upper", "work", "merged"}) {
    if (mkdir((base / sub).c_str(), 0755) != 0) {
      support.reason = SyscallError("mkdir", errno, (base / sub).string()).message;
      return support;
    }
  }
  for (const char* sub : {"upper", "work"}) {
    if (geteuid() == 0 && chown((base / sub).c_str(), ids.host_uid, ids.host_gid) != 0) {
      support.reason = SyscallError("chown", errno, (base / sub).string()).message;
      return support;
    }
  }
  const std::string data =
      fmt::format("userxattr,lowerdir={},upperdir={},workdir={}", (base / "lower").string(),
                  (base / "upper").string(), (base / "work").string());
  const std::string target = (base / "merged").string();
  int sync[2];
  if (pipe2(sync, O_CLOEXEC) != 0) {
    support.reason = SyscallError("pipe2", errno).message;
    return support;
  }
  UniqueFd sync_r(sync[0]), sync_w(sync[1]);
  auto child = CloneWithFlags(CLONE_NEWUSER | CLONE_NEWNS);
  if (!child) {
    support.reason = child.error().message;
    return support;
  }
  if (child->pid == 0) {
    // As a sandbox's child does (mounts.h): the sandbox user, holding its
    // user-namespace capabilities, mounts the overlay. Raw syscalls only.
    char c;
    sync_w.reset();
    if (read(sync_r.get(), &c, 1) != 1) _exit(100);
    if (mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(101);
    if (setresgid(kSandboxId, kSandboxId, kSandboxId) != 0) _exit(102);
    if (setresuid(kSandboxId, kSandboxId, kSandboxId) != 0) _exit(102);
    if (mount("overlay", target.c_str(), "overlay", MS_NOSUID | MS_NODEV, data.c_str()) != 0) {
      _exit(errno & 0x7f);
    }
    _exit(0);
  }
  sync_r.reset();
  Status maps = WriteIdMaps(child->pid, ids);
  (void)!write(sync_w.get(), "x", 1);
  sync_w.reset();
  int status = 0;
  while (waitpid(child->pid, &status, __WALL) < 0 && errno == EINTR) {
  }
  if (!maps) {
    support.reason = maps.error().message;
  } else if (!WIFEXITED(status)) {
    support.reason = "the probe child died";
  } else if (int code = WEXITSTATUS(status); code == 0) {
    support.works = true;
  } else if (code >= 100) {
    support.reason = code == 101   ? "making the probe's mounts private failed"
                     : code == 102 ? "switching to the sandbox user failed"
                                   : "the probe child got no go";
  } else {
    support.reason = fmt::format(
        "mount(overlay, userxattr) in a user namespace: {} ({}); overlayfs in a user namespace "
        "needs Linux 5.11+",
        std::strerror(code), code);
  }
  return support;
}

}  // namespace deepbox::local
