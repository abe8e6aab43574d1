// Small helpers shared by the fs facilities (directory reading, link reading,
// binary detection, newline counting). Internal to the library, but public so
// that tests and the benches can use them.
#pragma once

#include <sys/stat.h>
#include <time.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/random.h"

namespace deepbox::sandboxd::fs {

// readlinkat(2) into a string; on failure returns nullopt and sets *err
// (EINVAL: not a symlink). An empty `name` reads the link `dirfd` refers to.
std::optional<std::string> ReadLinkAt(int dirfd, const char* name, int* err);

struct DirEntry {
  std::string name;
  unsigned char type;  // DT_* from getdents64; DT_UNKNOWN on some filesystems
};
// All entries of an open directory (O_RDONLY|O_DIRECTORY fd) but "." and "..",
// unsorted. getdents64 directly: no DIR*, one 32 KiB buffer per call.
Result<std::vector<DirEntry>> ReadDir(int dirfd, std::string_view subject);

// The bytes deepbox treats as a file's head for binary detection.
inline constexpr size_t kBinaryProbeBytes = 8192;
// NUL byte in the first kBinaryProbeBytes: ripgrep's (and grep's) rule.
bool HasNulInHead(std::string_view data);
// For reads: a NUL byte, or invalid UTF-8, in the first kBinaryProbeBytes (a
// multi-byte sequence cut by the probe boundary does not count).
bool LooksBinary(std::string_view data);

// Number of '\n' bytes in [data, data+len): SSE2 when available.
size_t CountNewlines(const char* data, size_t len);

// "2024-05-01T12:34:56Z" (UTC, whole seconds).
std::string FormatRfc3339(const struct timespec& ts);

// RandomHex: common/random.h.

}  // namespace deepbox::sandboxd::fs
