#include "fs/testing/test_util.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace deepbox::fs::testing {
namespace {
[[noreturn]] void Die(const std::string& what) {
  std::perror(what.c_str());
  std::abort();
}
}  // namespace

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

}  // namespace deepbox::fs::testing
