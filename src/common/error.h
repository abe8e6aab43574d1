// The one error type of deepbox: a stable code plus a message a person (or a
// model) can act on. Fallible calls return Result<T> = tl::expected<T, Error>.
#pragma once

#include <string>
#include <string_view>
#include <tl/expected.hpp>
#include <utility>

namespace deepbox {

enum class ErrorCode {
  kNotFound,
  kPermissionDenied,
  kInvalidArgument,
  kConflict,
  kIsDirectory,
  kNotDirectory,
  kTimeout,
  kUnavailable,
  kResourceExhausted,
  kUnauthenticated,
  kCancelled,
  kUnimplemented,
  kInternal,
};

// Stable wire name, e.g. "NOT_FOUND". Part of the public API: never rename.
std::string_view ErrorCodeName(ErrorCode code);
// Inverse of ErrorCodeName; unknown names map to kInternal.
ErrorCode ErrorCodeFromName(std::string_view name);
// The HTTP status deepbox uses for a code.
int ErrorCodeHttpStatus(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;

  Error() = default;
  Error(ErrorCode c, std::string msg) : code(c), message(std::move(msg)) {}

  // "NOT_FOUND: no such file '/x'"
  std::string ToString() const;
};

template <typename T>
using Result = tl::expected<T, Error>;
using Status = tl::expected<void, Error>;

inline tl::unexpected<Error> MakeError(ErrorCode code, std::string message) {
  return tl::unexpected<Error>(Error(code, std::move(message)));
}

// An error for a failed syscall: names the call and errno, maps errno to a code.
// Example: SyscallError("openat2", errno, "/workspace/a") ->
//   "openat2(/workspace/a): No such file or directory (ENOENT)".
Error SyscallError(std::string_view call, int err, std::string_view subject = {});
tl::unexpected<Error> MakeSyscallError(std::string_view call, int err,
                                       std::string_view subject = {});
ErrorCode ErrorCodeFromErrno(int err);

}  // namespace deepbox
