// Test-only: image layers made in memory (libarchive's writer), hostile ones
// included, and the JSON of OCI manifests, configs and indexes around them.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace deepbox::oci::testing {

struct LayerEntry {
  enum class Type { kFile, kDir, kSymlink, kHardlink, kCharDevice, kFifo };
  Type type = Type::kFile;
  std::string name;     // written as is: "../x", "/abs", ".wh.gone" all allowed
  std::string content;  // kFile
  std::string target;   // kSymlink, kHardlink
  mode_t mode = 0644;
};

LayerEntry File(std::string name, std::string content, mode_t mode = 0644);
LayerEntry Dir(std::string name, mode_t mode = 0755);
LayerEntry Symlink(std::string name, std::string target);
LayerEntry Hardlink(std::string name, std::string target);
LayerEntry CharDevice(std::string name);
LayerEntry Fifo(std::string name);

enum class Compression { kNone, kGzip, kZstd };

// A pax tar of `entries`, compressed as asked. Aborts on libarchive errors.
std::string BuildLayer(const std::vector<LayerEntry>& entries,
                       Compression compression = Compression::kGzip);

// The media type of a layer compressed so.
std::string LayerMediaType(Compression compression);

struct BlobRef {
  std::string media_type;
  std::string digest;
  size_t size = 0;
};
BlobRef RefOf(const std::string& media_type, const std::string& bytes);

// An image config for `architecture` with Env, WorkingDir and User set.
std::string ConfigJson(const std::string& architecture, const std::vector<std::string>& env,
                       const std::string& working_dir, const std::string& user);
std::string ManifestJson(const BlobRef& config, const std::vector<BlobRef>& layers);
struct IndexEntry {
  BlobRef manifest;
  std::string architecture;
};
std::string IndexJson(const std::vector<IndexEntry>& manifests);

}  // namespace deepbox::oci::testing
