#include "common/error.h"

#include <cerrno>
#include <cstring>
#include <string>

namespace deepbox {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kNotFound:
      return "NOT_FOUND";
    case ErrorCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case ErrorCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case ErrorCode::kConflict:
      return "CONFLICT";
    case ErrorCode::kIsDirectory:
      return "IS_DIRECTORY";
    case ErrorCode::kNotDirectory:
      return "NOT_DIRECTORY";
    case ErrorCode::kTimeout:
      return "TIMEOUT";
    case ErrorCode::kUnavailable:
      return "UNAVAILABLE";
    case ErrorCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case ErrorCode::kUnauthenticated:
      return "UNAUTHENTICATED";
    case ErrorCode::kCancelled:
      return "CANCELLED";
    case ErrorCode::kUnimplemented:
      return "UNIMPLEMENTED";
    case ErrorCode::kInternal:
      return "INTERNAL";
  }
  return "INTERNAL";
}

ErrorCode ErrorCodeFromName(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(ErrorCode::kInternal); ++i) {
    auto code = static_cast<ErrorCode>(i);
    if (ErrorCodeName(code) == name) return code;
  }
  return ErrorCode::kInternal;
}

int ErrorCodeHttpStatus(ErrorCode code) {
  switch (code) {
    case ErrorCode::kNotFound:
      return 404;
    case ErrorCode::kPermissionDenied:
      return 403;
    case ErrorCode::kInvalidArgument:
      return 400;
    case ErrorCode::kConflict:
      return 409;
    case ErrorCode::kIsDirectory:
      return 400;
    case ErrorCode::kNotDirectory:
      return 400;
    case ErrorCode::kTimeout:
      return 504;
    case ErrorCode::kUnavailable:
      return 503;
    case ErrorCode::kResourceExhausted:
      return 413;
    case ErrorCode::kUnauthenticated:
      return 401;
    case ErrorCode::kCancelled:
      return 499;
    case ErrorCode::kUnimplemented:
      return 501;
    case ErrorCode::kInternal:
      return 500;
  }
  return 500;
}

std::string Error::ToString() const {
  std::string out(ErrorCodeName(code));
  out += ": ";
  out += message;
  return out;
}

ErrorCode ErrorCodeFromErrno(int err) {
  switch (err) {
    case ENOENT:
      return ErrorCode::kNotFound;
    case EACCES:
    case EPERM:
    case EXDEV:
    case EROFS:
      return ErrorCode::kPermissionDenied;
    case EEXIST:
    case ENOTEMPTY:
    case EBUSY:
      return ErrorCode::kConflict;
    case EISDIR:
      return ErrorCode::kIsDirectory;
    case ENOTDIR:
      return ErrorCode::kNotDirectory;
    case EINVAL:
    case ENAMETOOLONG:
    case ELOOP:
      return ErrorCode::kInvalidArgument;
    case ETIMEDOUT:
      return ErrorCode::kTimeout;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
    case EMFILE:
    case ENFILE:
    case ENOMEM:
      return ErrorCode::kResourceExhausted;
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
    case EAGAIN:
      return ErrorCode::kUnavailable;
    default:
      return ErrorCode::kInternal;
  }
}

bool ValidErrorReason(std::string_view reason) {
  if (reason.empty() || reason.size() > 64) return false;
  for (char c : reason) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

Error SyscallError(std::string_view call, int err, std::string_view subject) {
  std::string msg(call);
  if (!subject.empty()) {
    msg += "(";
    msg += subject;
    msg += ")";
  }
  msg += ": ";
  msg += std::strerror(err);
  const char* name = strerrorname_np(err);
  if (name != nullptr) {
    msg += " (";
    msg += name;
    msg += ")";
  }
  Error e(ErrorCodeFromErrno(err), std::move(msg));
  e.sys_errno = err;
  return e;
}

tl::unexpected<Error> MakeSyscallError(std::string_view call, int err, std::string_view subject) {
  return tl::unexpected<Error>(SyscallError(call, err, subject));
}

}  // namespace deepbox
