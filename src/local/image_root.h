// The root of a sandbox on an OCI image (`--image`): the image's extracted
// layers (oci/image_store.h: overlayfs form, a whiteout is a 0/0 character
// device, an opaque directory carries user.overlay.opaque=y) as read-only
// lower layers under a per-sandbox writable upper layer.
//
// The overlay is mounted by the sandbox's child inside its own user and mount
// namespaces (mounts.h: MountOp::kOverlay), with `userxattr` (Linux 5.11+), as
// the sandbox user still holding its user-namespace capabilities: overlayfs
// then copies files up and creates whiteouts with that user's credentials, on
// an upper dir owned by the sandbox's host id. The layers are reached through
// O_PATH descriptors opened before the switch, so their host paths (under a
// 0700 cache) are never visible or resolvable inside the sandbox, and the
// overlay's own mount point is detached once its top-level entries are bound
// into the sandbox's root: nothing inside can name a layer directory.
//
// The mount plan is built before the clone, so it needs to know what the
// merged view will hold (its top-level entries, /etc files, python3, the CA
// bundle): MergedLayers computes that from the layer directories on the
// host, with overlayfs' rules.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace deepbox::local {

class MergedLayers {
 public:
  explicit MergedLayers(std::vector<std::filesystem::path> layers_bottom_first);

  // The host file the overlay shows at `inside` (an absolute path in the
  // image; "/" is the top layer): nullopt when no layer has it, a whiteout or
  // an opaque directory hides it, or it lies below a non-directory. Symlinks
  // on the way are resolved inside the image (as the sandbox will), the last
  // component is not followed.
  std::optional<std::filesystem::path> Find(std::string_view inside) const;

  struct Entry {
    std::string name;
    std::filesystem::path host;  // in the topmost layer that has it
    mode_t type = 0;             // S_IFDIR, S_IFREG, S_IFLNK, ...
  };
  // The entries of the merged root, sorted by name.
  Result<std::vector<Entry>> TopLevel() const;

  const std::vector<std::filesystem::path>& top_first() const { return top_first_; }

 private:
  std::optional<std::filesystem::path> FindOnce(const std::vector<std::string>& parts,
                                                std::vector<std::string>* through_link,
                                                size_t* link_at) const;
  std::vector<std::filesystem::path> top_first_;
};

// Whether this host can give a sandbox an image root: a user namespace
// mounting overlayfs (userxattr) with an upper layer, as a sandbox's child
// does (what `deepbox doctor` shows). `reason` names what failed.
struct ImageRootSupport {
  bool works = false;
  std::string reason;
};
ImageRootSupport ProbeImageRoots();

}  // namespace deepbox::local
