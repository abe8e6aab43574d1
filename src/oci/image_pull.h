// Pulling an image into the cache (image_store.h), and what a sandbox needs
// of a pulled one: its extracted layer directories, bottom first, and its
// config (Env, WorkingDir, User).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "oci/image_store.h"
#include "oci/manifest.h"
#include "oci/reference.h"
#include "oci/registries_conf.h"
#include "oci/registry_client.h"

namespace deepbox::oci {

struct PullOptions {
  RegistryOptions registry;
  Platform platform = HostPlatform();  // chosen from an image index
  int parallel_layers = 3;             // layers downloaded at once
  // Mirrors, rewritten locations, insecure and blocked registries;
  // nullopt: LoadRegistriesConf() (the files Podman reads).
  std::optional<RegistriesConf> registries;
};

// What a pull reports, in order per layer: start, progress..., done.
struct PullEvent {
  enum class Kind {
    kResolved,       // manifest_digest (and index_digest) known, layers counted
    kLayerStart,     // layer `index` begins (cached: already in the cache)
    kLayerProgress,  // `done` of `size` bytes present
    kLayerDone,      // downloaded and verified, extracted
    kImageDone,      // recorded under its name
  };
  Kind kind = Kind::kResolved;
  std::string name;             // the canonical reference
  std::string manifest_digest;  // kResolved, kImageDone
  std::string index_digest;     // kResolved: "" unless the name is an index
  std::string source;           // kResolved: the mirror's name it came from, "" for the primary
  size_t index = 0;             // layer position, bottom first
  size_t count = 0;             // layers in the image
  std::string digest;           // the layer's
  uint64_t size = 0;            // the layer's compressed size
  uint64_t done = 0;            // bytes present
  uint64_t resumed_from = 0;    // kLayerStart/kLayerDone: bytes an earlier pull left
  bool cached = false;          // kLayerStart/kLayerDone: nothing downloaded or extracted
  bool downloaded = false;      // kLayerDone: this pull downloaded the blob
};
// Called from the pulling threads, one call at a time.
using PullProgressFn = std::function<void(const PullEvent&)>;

// A pulled image, ready to use.
struct LocalImage {
  ImageRecord record;
  ImageConfig config;
  std::vector<std::string> layer_dirs;  // extracted layers, bottom first
};

// Pulls `ref` (its manifest, config and every layer, verified, extracted)
// and records it under ref.ToString(). Layers already cached are neither
// downloaded nor extracted again.
Result<LocalImage> PullImage(const ImageStore& store, const ImageReference& ref,
                             const PullOptions& options, const PullProgressFn& progress = nullptr);

// The pulled image recorded under ref.ToString(): NOT_FOUND when it was
// never pulled (or was removed); INTERNAL when its content is missing.
Result<LocalImage> OpenLocalImage(const ImageStore& store, const ImageReference& ref);

// "Pull on first use": the cached image when there is a complete one for
// this name (a tag is not resolved again), else PullImage.
Result<LocalImage> EnsureImage(const ImageStore& store, const ImageReference& ref,
                               const PullOptions& options,
                               const PullProgressFn& progress = nullptr);

}  // namespace deepbox::oci
