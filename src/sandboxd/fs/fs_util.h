// Small helpers shared by the daemon's fs facilities (binary detection,
// newline counting, timestamps). Internal to the library, but public so that
// tests and the benches can use them. Directory and link reading are in
// fs/dir_entries.h.
#pragma once

#include <sys/stat.h>
#include <time.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/random.h"

namespace deepbox::sandboxd::fs {

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
