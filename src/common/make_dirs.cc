#include "common/make_dirs.h"

#include <sys/stat.h>

#include <cerrno>

namespace deepbox {

Status MakeDirs(const std::string& dir, mode_t mode) {
  if (dir.empty()) return MakeError(ErrorCode::kInvalidArgument, "empty directory name");
  std::string cur;
  size_t pos = 0;
  while (pos <= dir.size()) {
    size_t slash = dir.find('/', pos);
    if (slash == std::string::npos) slash = dir.size();
    std::string_view part(dir.data() + pos, slash - pos);
    pos = slash + 1;
    if (part.empty()) {
      if (cur.empty() && slash == 0) cur = "/";
      continue;
    }
    if (!cur.empty() && cur.back() != '/') cur += "/";
    cur.append(part);
    if (::mkdir(cur.c_str(), mode) != 0 && errno != EEXIST) {
      return MakeSyscallError("mkdir", errno, cur);
    }
  }
  return {};
}

}  // namespace deepbox
