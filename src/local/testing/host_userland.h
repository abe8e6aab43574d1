// Test-only: the files of a tiny image userland taken from this host (a
// shell, a few coreutils, the libraries `ldd` names and the loader), at
// their real paths, plus the host's top-level symlinks (bin -> usr/bin, ...)
// so that /bin/sh resolves inside an image made of them. Tests build image
// layers from this (on disk, or as tar layers pushed to a registry).
#pragma once

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "local/sandboxd_bundle.h"

namespace deepbox::local::testing {

struct HostUserland {
  std::vector<std::string> files;                             // absolute host paths
  std::vector<std::pair<std::string, std::string>> symlinks;  // "/bin" -> "usr/bin"
};

inline HostUserland CollectHostUserland(const std::vector<std::string>& programs = {
                                            "sh", "cat", "id", "ls", "stat", "touch", "rm", "env",
                                            "mkdir", "sha256sum", "grep", "readlink", "head"}) {
  HostUserland out;
  std::set<std::string> files;
  std::set<std::pair<std::string, std::string>> links;
  // The file and every symlink on its way (/usr/lib64/ld-linux... -> ../lib/...).
  auto add_real = [&](const std::string& path) {
    std::string at = path;
    for (int hop = 0; hop < 16; ++hop) {
      std::filesystem::path p(at);
      char parent[PATH_MAX];
      if (realpath(p.parent_path().c_str(), parent) == nullptr) return;
      std::filesystem::path here = std::filesystem::path(parent) / p.filename();
      std::error_code ec;
      if (!std::filesystem::is_symlink(here, ec)) {
        if (std::filesystem::exists(here, ec)) files.insert(here.string());
        return;
      }
      std::filesystem::path target = std::filesystem::read_symlink(here, ec);
      links.emplace(here.string(), target.string());
      at = target.is_absolute() ? target.string() : (here.parent_path() / target).string();
    }
  };
  for (const auto& name : programs) {
    std::string path;
    for (const char* dir : {"/usr/bin/", "/bin/", "/usr/sbin/"}) {
      if (access((std::string(dir) + name).c_str(), X_OK) == 0) {
        path = std::string(dir) + name;
        break;
      }
    }
    if (path.empty()) continue;
    add_real(path);
    auto linked = ListLinkedLibraries(path);
    if (!linked) continue;
    for (const auto& lib : linked->libs) add_real(lib.string());
    add_real(linked->loader.string());
  }
  out.files.assign(files.begin(), files.end());
  for (const char* top : {"/bin", "/lib", "/lib64", "/sbin", "/lib32"}) {
    std::error_code ec;
    if (!std::filesystem::is_symlink(top, ec)) continue;
    out.symlinks.emplace_back(top, std::filesystem::read_symlink(top, ec).string());
  }
  for (const auto& link : links) out.symlinks.push_back(link);
  return out;
}

}  // namespace deepbox::local::testing
