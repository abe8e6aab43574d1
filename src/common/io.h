// Whole reads and writes on file descriptors: EINTR is retried, short reads
// and writes are continued, and a failure names the call, its errno and what
// was read or written (`what`: a path, "the daemon's socket", ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"

namespace deepbox {

// write(2) until all of `data` is written. A write that makes no progress
// fails with EIO. (The caller decides about SIGPIPE: a pipe without a reader
// fails with EPIPE only where SIGPIPE is ignored or blocked.)
Status WriteAll(int fd, std::string_view data, std::string_view what);

// read(2) until `len` bytes or end of file; returns how many were read.
Result<size_t> ReadFull(int fd, char* buf, size_t len, std::string_view what);

// read(2) until end of file. More than `limit` bytes is kResourceExhausted
// (nothing past the limit is kept).
Result<std::string> ReadAll(int fd, std::string_view what, size_t limit = SIZE_MAX);

}  // namespace deepbox
