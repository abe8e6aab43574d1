#include "agent/testing/test_sandbox.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace deepbox::agent::testing {

std::unique_ptr<deepbox::testing::ScopedSandboxd> StartSandbox(std::string* why) {
  std::string binary = deepbox::testing::ScopedSandboxd::DefaultBinary();
  if (::access(binary.c_str(), X_OK) != 0) {
    *why = "no daemon binary at " + binary;
    return nullptr;
  }
  auto s = deepbox::testing::ScopedSandboxd::Start();
  if (!s) {
    *why = s.error().ToString();
    return nullptr;
  }
  return std::move(*s);
}

std::string MakeTempDir(const std::string& prefix) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  char* d = ::mkdtemp(tmpl.data());
  return d ? std::string(d) : std::string();
}

void RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

}  // namespace deepbox::agent::testing
