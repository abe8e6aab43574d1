// The JSON documents of an image: image indexes (OCI index, Docker manifest
// list), image manifests (OCI, Docker schema 2) and the image config. Parsed
// strictly where it matters for safety (digests, sizes, media types) and
// leniently elsewhere (unknown fields are ignored, as the spec asks).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace deepbox::oci {

inline constexpr std::string_view kOciIndex = "application/vnd.oci.image.index.v1+json";
inline constexpr std::string_view kOciManifest = "application/vnd.oci.image.manifest.v1+json";
inline constexpr std::string_view kOciConfig = "application/vnd.oci.image.config.v1+json";
inline constexpr std::string_view kOciLayerTar = "application/vnd.oci.image.layer.v1.tar";
inline constexpr std::string_view kOciLayerGzip = "application/vnd.oci.image.layer.v1.tar+gzip";
inline constexpr std::string_view kOciLayerZstd = "application/vnd.oci.image.layer.v1.tar+zstd";
inline constexpr std::string_view kDockerManifestList =
    "application/vnd.docker.distribution.manifest.list.v2+json";
inline constexpr std::string_view kDockerManifest =
    "application/vnd.docker.distribution.manifest.v2+json";
inline constexpr std::string_view kDockerConfig = "application/vnd.docker.container.image.v1+json";
inline constexpr std::string_view kDockerLayerGzip =
    "application/vnd.docker.image.rootfs.diff.tar.gzip";

// Manifests and configs are small; a bigger one is refused before parsing.
inline constexpr size_t kMaxManifestBytes = 4u << 20;

struct Platform {
  std::string os;            // "linux"
  std::string architecture;  // "amd64", "arm64"
  std::string variant;       // "v8", or ""
  std::string ToString() const;
};

struct Descriptor {
  std::string media_type;
  std::string digest;  // valid (digest.h)
  uint64_t size = 0;
  Platform platform;  // index entries only
};

struct ImageIndex {
  std::vector<Descriptor> manifests;
};

struct ImageManifest {
  Descriptor config;
  std::vector<Descriptor> layers;  // bottom first
};

struct ImageConfig {
  Platform platform;
  std::vector<std::string> env;  // "NAME=value"
  std::string working_dir;
  std::string user;
  std::vector<std::string> entrypoint;
  std::vector<std::string> cmd;
  std::vector<std::string> diff_ids;  // uncompressed layer digests
};

bool IsIndexMediaType(std::string_view media_type);
bool IsManifestMediaType(std::string_view media_type);
// Layer media types deepbox can extract (tar, tar+gzip, tar+zstd, Docker's
// gzip, and their non-distributable forms).
bool IsSupportedLayerMediaType(std::string_view media_type);

// The Accept header of a manifest request: every index and manifest type.
std::string ManifestAcceptHeader();

// The document's own mediaType when it has one, else `header_type` (the
// Content-Type the registry sent), else guessed from its fields.
std::string ManifestMediaType(std::string_view body, std::string_view header_type);

Result<ImageIndex> ParseImageIndex(std::string_view body);
Result<ImageManifest> ParseImageManifest(std::string_view body);
Result<ImageConfig> ParseImageConfig(std::string_view body);

// The platform of this machine: linux/amd64 or linux/arm64 (others by uname).
Platform HostPlatform();
// The index entry for `want` (os and architecture must match; a variant
// only when both name one). NOT_FOUND listing the platforms there are.
Result<Descriptor> SelectPlatform(const ImageIndex& index, const Platform& want);

}  // namespace deepbox::oci
