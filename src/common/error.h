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
  std::string message;  // for people (and models): never parsed by code
  // For code: a stable snake_case word where a caller must tell one failure
  // from another of the same code (the kReason* constants below); "" =
  // nothing beyond the code. It crosses the daemon's wire ("reason" in its
  // JSON errors, docs/sandboxd-api.md): never rename one.
  std::string reason;
  // The errno of the syscall that failed (SyscallError), 0 = none.
  int sys_errno = 0;

  Error() = default;
  Error(ErrorCode c, std::string msg, std::string why = {})
      : code(c), message(std::move(msg)), reason(std::move(why)) {}

  // "NOT_FOUND: no such file '/x'"
  std::string ToString() const;
};

template <typename T>
using Result = tl::expected<T, Error>;
using Status = tl::expected<void, Error>;

inline tl::unexpected<Error> MakeError(ErrorCode code, std::string message,
                                       std::string reason = {}) {
  return tl::unexpected<Error>(Error(code, std::move(message), std::move(reason)));
}

// Error::reason values. Those a daemon sends are part of its API.
// A file that is not UTF-8 text (binary, or invalid UTF-8): it cannot be
// edited as text (the daemon's fs/edit).
inline constexpr std::string_view kReasonNotText = "not_text";
// Not a regular file (a directory, device, FIFO...) where one is needed.
inline constexpr std::string_view kReasonNotRegularFile = "not_regular_file";
// A TLS handshake failed because the peer's certificate was refused (not
// retried: it will not get better).
inline constexpr std::string_view kReasonTlsCertificate = "tls_certificate";
// A model API refused a request longer than the model's context window.
inline constexpr std::string_view kReasonContextOverflow = "context_overflow";
// A process was killed by SIGKILL (e.g. the memory limit's OOM killer).
inline constexpr std::string_view kReasonKilled = "killed";
// A sandbox was claimed (it exists, Ready) but its daemon cannot be reached.
inline constexpr std::string_view kReasonClaimedButUnreachable = "claimed_but_unreachable";
// Host-side only (never taken from a daemon's reply):
// No connection could be made, so nothing was sent; sys_errno is connect's.
inline constexpr std::string_view kReasonConnectFailed = "connect_failed";
// A local sandbox's supervisor is relaunching its daemon (its files are kept).
inline constexpr std::string_view kReasonDaemonRestarting = "daemon_restarting";

// Whether `reason` is a well-formed reason ([a-z0-9_]{1,64}): what a daemon
// sends is kept only then.
bool ValidErrorReason(std::string_view reason);

// An error for a failed syscall: names the call and errno, maps errno to a code.
// Example: SyscallError("openat2", errno, "/workspace/a") ->
//   "openat2(/workspace/a): No such file or directory (ENOENT)".
Error SyscallError(std::string_view call, int err, std::string_view subject = {});
tl::unexpected<Error> MakeSyscallError(std::string_view call, int err,
                                       std::string_view subject = {});
ErrorCode ErrorCodeFromErrno(int err);

}  // namespace deepbox
