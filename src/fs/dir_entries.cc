#include "fs/dir_entries.h"

#include <dirent.h>
#include <limits.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace deepbox::fs {

std::optional<std::string> ReadLinkAt(int dirfd, const char* name, int* err) {
  std::string buf(PATH_MAX, '\0');
  ssize_t n = ::readlinkat(dirfd, name, buf.data(), buf.size());
  if (n < 0) {
    *err = errno;
    return std::nullopt;
  }
  if (static_cast<size_t>(n) >= buf.size()) {
    *err = ENAMETOOLONG;
    return std::nullopt;
  }
  buf.resize(static_cast<size_t>(n));
  return buf;
}

namespace {
struct LinuxDirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};
}  // namespace

Result<std::vector<DirEntry>> ReadDir(int dirfd, std::string_view subject) {
  std::vector<DirEntry> out;
  alignas(8) char buf[32768];
  for (;;) {
    long n = ::syscall(SYS_getdents64, dirfd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return MakeSyscallError("getdents64", errno, subject);
    }
    if (n == 0) break;
    for (long off = 0; off < n;) {
      auto* d = reinterpret_cast<LinuxDirent64*>(buf + off);
      off += d->d_reclen;
      const char* name = d->d_name;
      if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) continue;
      out.push_back(DirEntry{std::string(name), d->d_type});
    }
  }
  return out;
}

}  // namespace deepbox::fs
