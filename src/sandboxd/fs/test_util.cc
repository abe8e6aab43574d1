#include "sandboxd/fs/test_util.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace deepbox::sandboxd::fs::testing {
namespace {
[[noreturn]] void Die(const std::string& what) {
  std::perror(what.c_str());
  std::abort();
}
}  // namespace

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/deepbox-fs-test-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp");
  // The real path: roots report real paths, tests compare against this one.
  char* real = ::realpath(tmpl.c_str(), nullptr);
  if (real == nullptr) Die("realpath");
  path_ = real;
  ::free(real);
}

TempDir::~TempDir() {
  std::error_code ec;
  // Make everything writable first (tests create read-only files and dirs).
  for (auto it = std::filesystem::recursive_directory_iterator(path_, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_symlink() && it->is_directory()) ::chmod(it->path().c_str(), 0755);
  }
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Path(std::string_view rel) const { return path_ + "/" + std::string(rel); }

void WriteRaw(const std::string& path, std::string_view content) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) Die("open " + path);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  if (!out) Die("write " + path);
}

std::string ReadRaw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "<missing>";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

void MakeDirRaw(const std::string& path) { std::filesystem::create_directories(path); }

void SymlinkRaw(const std::string& target, const std::string& link) {
  if (::symlink(target.c_str(), link.c_str()) != 0) Die("symlink " + link);
}

}  // namespace deepbox::sandboxd::fs::testing
