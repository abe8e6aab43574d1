// Extraction of one image layer (a tar, plain, gzip or zstd) into a
// directory of its own, in the form overlayfs takes as a lower layer:
//
// - a whiteout `.wh.NAME` becomes a character device 0/0 named NAME (what
//   overlayfs reads as "deleted below"; unprivileged users may make it since
//   Linux 5.8);
// - an opaque marker `.wh..wh..opq` sets the xattr user.overlay.opaque="y"
//   on its directory (read by overlay mounts with `userxattr`, which a mount
//   inside a user namespace needs) and, where this process may,
//   trusted.overlay.opaque too (an overlay mounted by real root).
//
// Layers stay separate (not flattened into one tree per image), so a layer
// shared by many images is stored and extracted once.
//
// A layer is hostile input. Refused, stopping the extraction (the caller
// removes the directory): an absolute name, a ".." component, a name with an
// empty or over-long component, a path through a symlink (nothing is ever
// followed: the walk of src/fs with no symlinks), a hard link whose target is
// not a regular file this layer already holds, a file whose data does not
// match its header's size, a truncated or corrupt archive. Neutralised (and
// counted): device nodes and sockets are left out, setuid/setgid bits
// dropped, ownership and extended attributes not kept (the files belong to
// whoever extracts). Symlinks are kept as written, absolute ones too: they
// resolve inside the image's root when the sandbox uses it, never here.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace deepbox::oci {

inline constexpr std::string_view kOverlayOpaqueXattr = "user.overlay.opaque";
inline constexpr std::string_view kOverlayOpaqueTrustedXattr = "trusted.overlay.opaque";

struct LayerExtractStats {
  uint64_t entries = 0;
  uint64_t file_bytes = 0;  // regular files' data written
  uint64_t whiteouts = 0;
  uint64_t opaque_dirs = 0;
  uint64_t neutralised = 0;        // devices and sockets skipped, setuid/setgid dropped
  std::vector<std::string> notes;  // what was neutralised (the first few), for logs
};

// Reads the layer's bytes (a tar stream, optionally gzip- or
// zstd-compressed): fills `buf` with up to `size` bytes, 0 at the end.
using LayerSource = std::function<Result<size_t>(char* buf, size_t size)>;

// Extracts the layer beneath `dest_dir` (an existing empty directory). On an
// error, what was written stays in dest_dir (the caller removes it).
// libarchive is loaded at the first call (dlopen): UNAVAILABLE without it.
Result<LayerExtractStats> ExtractLayer(const LayerSource& source, const std::string& dest_dir);

// The same from a file (a verified blob).
Result<LayerExtractStats> ExtractLayerFile(int fd, const std::string& dest_dir);

}  // namespace deepbox::oci
