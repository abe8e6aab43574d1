// Test-only: an image layer of this host's userland (local/testing/
// host_userland.h) for the tests and benches that push such an image to a
// loopback registry: every file (mode 0755) and symlink, each parent
// directory listed once before what it holds.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "local/testing/host_userland.h"
#include "oci/testing/layer_builder.h"

namespace deepbox::local::testing {

// `dirs` collects the directories listed, so a caller adding entries of its
// own can list a directory only once too.
inline std::vector<oci::testing::LayerEntry> HostUserlandLayer(const HostUserland& land,
                                                               std::set<std::string>& dirs) {
  namespace fs = std::filesystem;
  std::vector<oci::testing::LayerEntry> entries;
  auto add_dirs = [&](const fs::path& path) {
    std::vector<std::string> parents;
    for (fs::path p = path.parent_path(); p != p.root_path(); p = p.parent_path()) {
      parents.push_back(p.relative_path().string());
    }
    for (auto it = parents.rbegin(); it != parents.rend(); ++it) {
      if (dirs.insert(*it).second) entries.push_back(oci::testing::Dir(*it));
    }
  };
  for (const auto& file : land.files) {
    add_dirs(file);
    std::ifstream in(file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    entries.push_back(oci::testing::File(fs::path(file).relative_path().string(), bytes, 0755));
  }
  for (const auto& [link, target] : land.symlinks) {
    add_dirs(link);
    entries.push_back(oci::testing::Symlink(fs::path(link).relative_path().string(), target));
  }
  return entries;
}

}  // namespace deepbox::local::testing
