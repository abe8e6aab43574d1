// A test's scratch directory: made fresh under $TMPDIR (else /tmp) and
// removed with everything in it when the TempDir goes out of scope, even
// entries without write or search permission (RemoveTree makes them
// removable). Header-only: test code of every folder uses it.
#pragma once

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

#include "common/remove_tree.h"

namespace deepbox::testing {

class TempDir {
 public:
  // `prefix` names the directory (/tmp/PREFIX-XXXXXX) so a leftover says
  // which test left it.
  explicit TempDir(std::string_view prefix = "deepbox-test") {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/" +
                       std::string(prefix) + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp(" + tmpl + ")");
    // The real path: what the code under test reports (/tmp may be a link).
    char* real = ::realpath(tmpl.c_str(), nullptr);
    if (real == nullptr) Die("realpath(" + tmpl + ")");
    path_ = real;
    ::free(real);
  }
  ~TempDir() { (void)RemoveTree(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // path() / rel, as text.
  std::string Path(std::string_view rel) const { return (path_ / rel).string(); }

 private:
  [[noreturn]] static void Die(const std::string& what) {
    std::perror(what.c_str());  // no scratch directory: nothing a test could do
    std::abort();
  }

  std::filesystem::path path_;
};

}  // namespace deepbox::testing
