// Helpers for the fs tests: a real temporary directory and raw file access
// that bypasses the library under test.
#pragma once

#include <string>
#include <string_view>

#include "common/testing/temp_dir.h"

namespace deepbox::fs::testing {

// A fresh directory (its real path), removed recursively on destruction.
using TempDir = deepbox::testing::TempDir;

// Concatenation (GCC 12 -O3 warns falsely on `"literal" + std::string&&`).
template <typename... Parts>
std::string Cat(const Parts&... parts) {
  std::string out;
  (out.append(std::string_view(parts)), ...);
  return out;
}

// Creates parents as needed. Aborts the test binary on failure (test setup).
void WriteRaw(const std::string& path, std::string_view content);
std::string ReadRaw(const std::string& path);
bool Exists(const std::string& path);      // lstat succeeds
void MakeDirRaw(const std::string& path);  // mkdir -p
void SymlinkRaw(const std::string& target, const std::string& link);

}  // namespace deepbox::fs::testing
