// The local image cache: content-addressed blobs stored once, their layers
// extracted once, and image records naming what each pulled reference is.
//
//   <dir>/store.lock                 flock: pulls hold it shared, rm/prune exclusive
//   <dir>/blobs/sha256/<hex>         a blob whose digest AND size were verified
//   <dir>/layers/sha256/<hex>/       that layer blob extracted (layer_extract.h);
//                                    it exists only once complete
//   <dir>/images/<sha256(name)>.json the record of one reference (ImageRecord)
//   <dir>/tmp/<hex>.partial          a download in progress or interrupted:
//                                    resumed with an HTTP Range, re-verified whole
//   <dir>/tmp/<hex>.lock             flock per blob: one process downloads and
//                                    extracts it, the others wait and find it done
//   <dir>/tmp/layer-<hex>-XXXXXX/    an extraction in progress
//   <dir>/pins/<sandbox id>.json     a sandbox using an image (ImagePin): rm and
//                                    prune keep what a live pin names
//
// <dir> is $DEEPBOX_IMAGE_DIR, else $DEEPBOX_STATE_DIR/images when a state
// directory was chosen, else $XDG_STATE_HOME/deepbox/images, else
// ~/.local/state/deepbox/images (root without a home: /var/lib/deepbox/images):
// persistent disk, as for snapshots, not the runtime state dir (a tmpfs).
// Whoever can write <dir> chooses what sandboxes run, so Open refuses one not
// owned by us or writable by others.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"
#include "oci/credentials.h"
#include "oci/manifest.h"
#include "oci/registry_client.h"

namespace deepbox::oci {

// What one pulled reference is.
struct ImageRecord {
  std::string name;             // canonical reference (ImageReference::ToString)
  std::string index_digest;     // "" when the reference named a manifest
  std::string manifest_digest;  // the platform's manifest
  std::string config_digest;
  Platform platform;
  std::vector<Descriptor> layers;  // bottom first
  uint64_t size = 0;               // compressed layers + config
  std::string pulled_at;           // RFC 3339
};

// Who owns the files of an extracted layer when the cache is root's: the
// host id a sandbox's user namespace maps its root (uid/gid 0) to
// (local/namespaces.h: kImageRootHostId), so that an image's files appear
// owned by root inside the sandbox and overlayfs can copy them up; no host
// account uses it. An unprivileged cache keeps its user's own files (the only
// id such a sandbox can map: they appear owned by the sandbox user).
inline constexpr uint32_t kRootCacheLayerOwner = 1000000;

// A sandbox that uses an image: pins/<sandbox>.json. It is live while
// `sandbox_dir` (the sandbox's state directory) exists; a dead sandbox's pin
// (its directory gone: deleted, reaped) is stale, and rm/prune remove it.
struct ImagePin {
  std::string sandbox;      // its id ([A-Za-z0-9_.-], the pin's file name)
  std::string sandbox_dir;  // absolute
  ImageRecord image;        // what it uses: name, digests, layers
  bool Live() const;
};

// A flock held until destroyed.
class StoreLock {
 public:
  StoreLock() = default;
  explicit StoreLock(UniqueFd fd) : fd_(std::move(fd)) {}

 private:
  UniqueFd fd_;
};

struct BlobResult {
  bool downloaded = false;    // false: it was already in the cache
  uint64_t resumed_from = 0;  // bytes a partial download had already
};

struct PruneResult {
  uint64_t blobs_removed = 0;
  uint64_t layers_removed = 0;
  uint64_t temporaries_removed = 0;
  uint64_t bytes_freed = 0;  // blob bytes (extracted layers are not counted)
};

// Downloads a blob from `offset` into the sink (RegistryClient::FetchBlob).
using BlobFetch = std::function<Status(uint64_t offset, const BlobSink& sink)>;
// Bytes of the blob present so far.
using BlobProgress = std::function<void(uint64_t done)>;

Result<std::string> DefaultImageDir(const EnvFn& env = nullptr);

class ImageStore {
 public:
  // Creates the layout when missing. `dir` "" = DefaultImageDir().
  static Result<std::unique_ptr<ImageStore>> Open(const std::string& dir = "");

  const std::string& dir() const { return dir_; }
  std::string BlobPath(std::string_view digest) const;
  std::string LayerDir(std::string_view digest) const;
  bool HasBlob(std::string_view digest) const;
  bool HasLayer(std::string_view digest) const;

  // Pulls hold the store shared; rm and prune exclusive (they wait for pulls).
  Result<StoreLock> LockShared() const;
  Result<StoreLock> LockExclusive() const;

  // Makes sure blob `d` is in the cache, verified: if it is not, downloads it
  // with `fetch` into a partial file (continuing one an interrupted pull
  // left), checks its size and digest, and renames it into place. Another
  // process fetching the same blob meanwhile is waited for (one download).
  // A blob whose digest is wrong is deleted: INVALID_ARGUMENT.
  Result<BlobResult> EnsureBlob(const Descriptor& d, const BlobFetch& fetch,
                                const BlobProgress& progress = nullptr) const;
  // Stores small verified content (a manifest): `bytes` must hash to `digest`.
  Status PutBlob(std::string_view digest, std::string_view bytes) const;
  Result<std::string> ReadBlob(std::string_view digest, size_t limit) const;

  // Extracts layer blob `d` (in the cache) once, into LayerDir (one process
  // does it; the others wait). false: it already was. Errors name the layer.
  Result<bool> EnsureLayerExtracted(const Descriptor& d) const;
  // A layer extracted by a deepbox before layers of root's cache were given
  // to kRootCacheLayerOwner (its files owned by root: a sandbox would see
  // them as nobody's and could not copy them up) is given to it now, under
  // the layer's lock. Nothing to do for an unprivileged cache.
  Status AdoptOldLayerOwner(std::string_view digest) const;

  // Image records, written atomically (rename over).
  Status RecordImage(const ImageRecord& record) const;
  Result<std::optional<ImageRecord>> FindImage(std::string_view name) const;
  Result<std::vector<ImageRecord>> ListImages() const;
  // Removes the record of `name` and the blobs and layers no other record
  // uses (taking the store exclusive). false: there was no such record.
  Result<bool> RemoveImage(std::string_view name) const;
  // Removes every blob, layer and temporary file no record and no live pin
  // uses. RemoveImage refuses (CONFLICT, naming the sandbox) a name a live
  // pin uses.
  Result<PruneResult> Prune() const;

  // Pins: written atomically while the caller holds the store shared (so no
  // rm/prune runs between finding an image and pinning it).
  Status Pin(const ImagePin& pin) const;
  Status Unpin(std::string_view sandbox) const;  // a missing pin is no error
  Result<std::vector<ImagePin>> ListPins() const;

 private:
  explicit ImageStore(std::string dir) : dir_(std::move(dir)) {}
  Result<StoreLock> Lock(const std::string& path, int how) const;
  // The collection behind RemoveImage and Prune (store held exclusive).
  Result<PruneResult> Collect(bool temporaries) const;
  std::string RecordPath(std::string_view name) const;

  std::string dir_;
};

std::string ImageRecordToJson(const ImageRecord& record);
Result<ImageRecord> ImageRecordFromJson(std::string_view text);

}  // namespace deepbox::oci
