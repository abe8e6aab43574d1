#include "common/io.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>

namespace deepbox {

Status WriteAll(int fd, std::string_view data, std::string_view what) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeSyscallError("write", errno, what);
    if (n == 0) return MakeSyscallError("write", EIO, what);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

Result<size_t> ReadFull(int fd, char* buf, size_t len, std::string_view what) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = ::read(fd, buf + got, len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeSyscallError("read", errno, what);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

Result<std::string> ReadAll(int fd, std::string_view what, size_t limit) {
  std::string out;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeSyscallError("read", errno, what);
    if (n == 0) return out;
    if (static_cast<size_t>(n) > limit - out.size()) {
      return MakeError(ErrorCode::kResourceExhausted,
                       fmt::format("{}: more than {} bytes", what, limit));
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace deepbox
