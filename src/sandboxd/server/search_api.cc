// glob and grep: /deepbox/v1/fs/glob, /deepbox/v1/fs/grep.
#include "common/json.h"
#include "sandboxd/server/daemon.h"

namespace deepbox::sandboxd {

net::Response Daemon::Glob(const json::object&) {
  return ErrorResponse(Error(ErrorCode::kUnimplemented, "glob: pending"));
}
net::Response Daemon::Grep(const json::object&) {
  return ErrorResponse(Error(ErrorCode::kUnimplemented, "grep: pending"));
}

}  // namespace deepbox::sandboxd
