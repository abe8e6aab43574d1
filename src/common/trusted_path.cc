#include "common/trusted_path.h"

#include <fmt/format.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace deepbox {

std::string FormatMode(mode_t mode) { return fmt::format("{:04o}", mode & 07777); }

Status CheckOwnedByUs(int fd, const std::filesystem::path& path, const TrustedPath& t,
                      bool want_dir) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return MakeSyscallError("fstat", errno, path.string());
  if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("{} {} is not a {}", t.what, path.string(),
                                 want_dir ? "directory" : "regular file"));
  }
  const uid_t me = geteuid();
  if (st.st_uid == me && (st.st_mode & 022) == 0) return {};
  std::string todo = st.st_uid == me
                         ? fmt::format("If you made it so, `chmod go-w {}`", path.string())
                         : fmt::format(
                               "Someone else made it: do not use it; remove it or point "
                               "{} at a new directory (deepbox creates it 0700)",
                               t.env);
  return MakeError(
      ErrorCode::kPermissionDenied,
      fmt::format("refusing to use {} {}: it is owned by uid {} with mode {}, and "
                  "deepbox trusts it only if it is owned by uid {} and not writable "
                  "by group or others (whoever can write it {}). {}",
                  t.what, path.string(), st.st_uid, FormatMode(st.st_mode), me, t.stakes, todo));
}

Status CheckAncestorsCannotSwap(const std::filesystem::path& parent,
                                const std::filesystem::path& target, const TrustedPath& t) {
  char buf[PATH_MAX];
  if (realpath(parent.c_str(), buf) == nullptr) {
    return MakeSyscallError("realpath", errno, parent.string());
  }
  std::filesystem::path cur;
  for (const auto& part : std::filesystem::path(buf)) {
    cur /= part;
    struct stat st {};
    if (stat(cur.c_str(), &st) != 0) return MakeSyscallError("stat", errno, cur.string());
    bool owner_ok = st.st_uid == 0 || st.st_uid == geteuid();
    bool others_write = (st.st_mode & 022) != 0 && (st.st_mode & S_ISVTX) == 0;
    if (!owner_ok || others_write) {
      return MakeError(
          ErrorCode::kPermissionDenied,
          fmt::format("refusing to use {} {}: it is inside {} (owned by uid {}, mode {}), which "
                      "{} could change, replacing it with their own. Point {} at a directory "
                      "whose parents only you or root can change",
                      t.what, target.string(), cur.string(), st.st_uid, FormatMode(st.st_mode),
                      !owner_ok ? fmt::format("uid {}", st.st_uid) : "other users", t.env));
    }
  }
  return {};
}

}  // namespace deepbox
