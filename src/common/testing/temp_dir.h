// A test's scratch directory: made fresh under $TMPDIR (else /tmp) and
// removed with everything in it when the TempDir goes out of scope, even
// entries without write or search permission (RemoveTree makes them
// removable). Header-only: test code of every folder uses it.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "common/error.h"
#include "common/remove_tree.h"

namespace deepbox::testing {

class TempDir {
 public:
  // `prefix` names the directory (/tmp/PREFIX-XXXXXX) so a leftover says
  // which test left it. `parent` replaces $TMPDIR where the path must stay
  // short (a unix socket's path fits 107 bytes): "/tmp". Aborts when no
  // directory can be made: nothing a test could do without one.
  explicit TempDir(std::string_view prefix = "deepbox-test", std::string_view parent = {}) {
    auto made = Create(prefix, parent);
    if (!made) {
      std::fprintf(stderr, "%s\n", made.error().ToString().c_str());
      std::abort();
    }
    path_ = std::move(*made);
  }
  // For fixtures that report their failures (Result<...>) instead.
  static Result<TempDir> Make(std::string_view prefix = "deepbox-test",
                              std::string_view parent = {}) {
    auto made = Create(prefix, parent);
    if (!made) return tl::unexpected(made.error());
    return TempDir(std::move(*made), Adopt{});
  }

  TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  TempDir& operator=(TempDir&& other) noexcept {
    if (this != &other) {
      Remove();
      path_ = std::exchange(other.path_, {});
    }
    return *this;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() { Remove(); }

  const std::filesystem::path& path() const { return path_; }
  // path() / rel, as text.
  std::string Path(std::string_view rel) const { return (path_ / rel).string(); }
  // Hands the directory over: it stays on disk, and this TempDir is empty.
  std::filesystem::path Release() { return std::exchange(path_, {}); }

 private:
  struct Adopt {};
  TempDir(std::filesystem::path path, Adopt) : path_(std::move(path)) {}

  static Result<std::filesystem::path> Create(std::string_view prefix, std::string_view parent) {
    std::string tmpl(parent);
    if (tmpl.empty()) {
      const char* env = std::getenv("TMPDIR");
      tmpl = env != nullptr && *env != '\0' ? env : "/tmp";
    }
    tmpl += "/" + std::string(prefix) + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) return MakeSyscallError("mkdtemp", errno, tmpl);
    // The real path: what the code under test reports (/tmp may be a link).
    char* real = ::realpath(tmpl.c_str(), nullptr);
    if (real == nullptr) {
      int err = errno;
      (void)RemoveTree(tmpl);
      return MakeSyscallError("realpath", err, tmpl);
    }
    std::filesystem::path path = real;
    ::free(real);
    return path;
  }

  void Remove() {
    if (!path_.empty()) (void)RemoveTree(path_);
    path_.clear();
  }

  std::filesystem::path path_;
};

}  // namespace deepbox::testing
