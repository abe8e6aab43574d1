#include "oci/image_pull.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "common/time.h"
#include "net/conn.h"
#include "oci/digest.h"

namespace deepbox::oci {

namespace {

constexpr uint64_t kProgressStep = 256u << 10;

Result<LocalImage> LoadLocalImage(const ImageStore& store, ImageRecord record) {
  LocalImage image;
  auto config_text = store.ReadBlob(record.config_digest, kMaxManifestBytes);
  if (!config_text) {
    return MakeError(ErrorCode::kInternal,
                     fmt::format("image {}: its config {} is missing from the cache ({}); pull "
                                 "it again",
                                 record.name, record.config_digest, config_text.error().message));
  }
  auto config = ParseImageConfig(*config_text);
  if (!config) return tl::unexpected(config.error());
  image.config = std::move(*config);
  for (const auto& layer : record.layers) {
    if (!store.HasLayer(layer.digest)) {
      return MakeError(ErrorCode::kInternal,
                       fmt::format("image {}: layer {} is missing from the cache; pull it again",
                                   record.name, layer.digest));
    }
    if (auto s = store.AdoptOldLayerOwner(layer.digest); !s) return tl::unexpected(s.error());
    image.layer_dirs.push_back(store.LayerDir(layer.digest));
  }
  image.record = std::move(record);
  return image;
}

// The first of the places registries.conf names for `ref` (its mirrors,
// then the primary) that serves its manifest: the client stays on it for
// the blobs. An error names every place tried.
struct OpenedSource {
  std::unique_ptr<RegistryClient> client;
  FetchedManifest manifest;
  std::string name;  // what was asked for there
  bool mirror = false;
};

Result<OpenedSource> OpenSource(const ImageReference& ref, const PullOptions& options) {
  RegistriesConf loaded;
  if (!options.registries) {
    auto conf = LoadRegistriesConf();
    if (!conf) return tl::unexpected(conf.error());
    loaded = std::move(*conf);
  }
  auto sources = ResolvePullSources(options.registries ? *options.registries : loaded, ref);
  if (!sources) return tl::unexpected(sources.error());
  std::vector<std::string> mirror_failures;
  for (size_t i = 0; i < sources->size(); ++i) {
    const PullSource& source = (*sources)[i];
    RegistryOptions registry = options.registry;
    registry.insecure = registry.insecure || source.insecure;
    auto client = RegistryClient::Create(source.ref, registry);
    auto manifest = client ? (*client)->GetManifest(source.ref.ManifestReference())
                           : Result<FetchedManifest>(tl::unexpected(client.error()));
    if (manifest) {
      return OpenedSource{std::move(*client), std::move(*manifest), source.ref.ToString(),
                          source.mirror};
    }
    if (source.mirror && i + 1 < sources->size()) {
      mirror_failures.push_back(
          fmt::format("mirror {}: {}", source.ref.ToString(), manifest.error().message));
      continue;
    }
    Error e = manifest.error();
    if (source.ref.ToString() != ref.ToString()) {
      e.message = fmt::format("{} (for {})", e.message, ref.ToString());
    }
    if (!mirror_failures.empty()) {
      e.message = fmt::format("{}; the mirrors failed too: {}", e.message,
                              fmt::join(mirror_failures, "; "));
    }
    return tl::unexpected(e);
  }
  return MakeError(ErrorCode::kInternal, "no place to pull " + ref.ToString() + " from");
}

}  // namespace

Result<LocalImage> PullImage(const ImageStore& store, const ImageReference& ref,
                             const PullOptions& options, const PullProgressFn& progress) {
  std::mutex progress_mu;
  auto report = [&](const PullEvent& e) {
    if (!progress) return;
    std::lock_guard lock(progress_mu);
    progress(e);
  };
  auto shared = store.LockShared();
  if (!shared) return tl::unexpected(shared.error());
  auto source = OpenSource(ref, options);
  if (!source) return tl::unexpected(source.error());
  std::unique_ptr<RegistryClient> client = std::move(source->client);

  ImageRecord record;
  record.name = ref.ToString();
  FetchedManifest manifest = std::move(source->manifest);
  if (IsIndexMediaType(manifest.media_type)) {
    auto index = ParseImageIndex(manifest.body);
    if (!index) return tl::unexpected(index.error());
    auto chosen = SelectPlatform(*index, options.platform);
    if (!chosen) {
      Error e = chosen.error();
      e.message = fmt::format("image {}: {}", record.name, e.message);
      return tl::unexpected(e);
    }
    if (auto s = store.PutBlob(manifest.digest, manifest.body); !s)
      return tl::unexpected(s.error());
    record.index_digest = manifest.digest;
    auto platform_manifest = client->GetManifest(chosen->digest);
    if (!platform_manifest) return tl::unexpected(platform_manifest.error());
    if (platform_manifest->body.size() != chosen->size) {
      return MakeError(
          ErrorCode::kInvalidArgument,
          fmt::format("image {}: manifest {} has {} bytes, its index says {}", record.name,
                      chosen->digest, platform_manifest->body.size(), chosen->size));
    }
    manifest = std::move(*platform_manifest);
    record.platform = chosen->platform;
  } else if (!IsManifestMediaType(manifest.media_type)) {
    return MakeError(ErrorCode::kUnimplemented,
                     fmt::format("image {}: manifest media type '{}' is not an OCI or Docker v2 "
                                 "image manifest or index",
                                 record.name, manifest.media_type.substr(0, 200)));
  }
  auto parsed = ParseImageManifest(manifest.body);
  if (!parsed) {
    Error e = parsed.error();
    e.message = fmt::format("image {}: {}", record.name, e.message);
    return tl::unexpected(e);
  }
  if (auto s = store.PutBlob(manifest.digest, manifest.body); !s) return tl::unexpected(s.error());
  record.manifest_digest = manifest.digest;
  record.config_digest = parsed->config.digest;
  record.layers = parsed->layers;
  record.size = parsed->config.size;
  for (const auto& l : record.layers) record.size += l.size;

  PullEvent resolved;
  resolved.kind = PullEvent::Kind::kResolved;
  resolved.name = record.name;
  resolved.manifest_digest = record.manifest_digest;
  resolved.index_digest = record.index_digest;
  resolved.count = record.layers.size();
  if (source->mirror) resolved.source = source->name;
  report(resolved);

  const std::string config_digest = parsed->config.digest;
  BlobFetch fetch = [&client, &config_digest](uint64_t offset, const BlobSink& sink) {
    return client->FetchBlob(config_digest, offset, sink);
  };
  if (parsed->config.size > kMaxManifestBytes) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("image {}: config of {} bytes, more than {}", record.name,
                                 parsed->config.size, kMaxManifestBytes));
  }
  if (auto c = store.EnsureBlob(parsed->config, fetch); !c) return tl::unexpected(c.error());
  if (record.platform.os.empty()) {
    auto config_text = store.ReadBlob(record.config_digest, kMaxManifestBytes);
    if (!config_text) return tl::unexpected(config_text.error());
    auto config = ParseImageConfig(*config_text);
    if (!config) return tl::unexpected(config.error());
    record.platform = config->platform;
  }

  // Layers, a few at a time; the first failure stops the rest.
  std::atomic<size_t> next{0};
  std::mutex failure_mu;
  std::optional<Error> failure;
  auto worker = [&] {
    for (;;) {
      {
        std::lock_guard lock(failure_mu);
        if (failure) return;
      }
      size_t i = next.fetch_add(1);
      if (i >= record.layers.size()) return;
      const Descriptor& layer = record.layers[i];
      PullEvent e;
      e.name = record.name;
      e.index = i;
      e.count = record.layers.size();
      e.digest = layer.digest;
      e.size = layer.size;
      e.kind = PullEvent::Kind::kLayerStart;
      e.cached = store.HasBlob(layer.digest) && store.HasLayer(layer.digest);
      report(e);
      uint64_t last_reported = 0;
      BlobProgress on_progress = [&](uint64_t done) {
        if (done != layer.size && done - last_reported < kProgressStep && done != 0) return;
        last_reported = done;
        PullEvent p = e;
        p.kind = PullEvent::Kind::kLayerProgress;
        p.done = done;
        report(p);
      };
      BlobFetch layer_fetch = [&client, &layer](uint64_t offset, const BlobSink& sink) {
        return client->FetchBlob(layer.digest, offset, sink);
      };
      auto blob = store.EnsureBlob(layer, layer_fetch, on_progress);
      Result<bool> extracted =
          blob ? store.EnsureLayerExtracted(layer) : Result<bool>(tl::unexpected(blob.error()));
      if (!extracted) {
        std::lock_guard lock(failure_mu);
        if (!failure) {
          failure = extracted.error();
          failure->message = fmt::format("image {}: {}", record.name, failure->message);
        }
        return;
      }
      e.kind = PullEvent::Kind::kLayerDone;
      e.done = layer.size;
      e.cached = !blob->downloaded && !*extracted;
      e.downloaded = blob->downloaded;
      e.resumed_from = blob->resumed_from;
      report(e);
    }
  };
  const size_t threads = std::max<size_t>(
      1, std::min<size_t>(static_cast<size_t>(std::max(1, options.parallel_layers)),
                          record.layers.size()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) {
    pool.emplace_back([&worker] {
      worker();
      net::ReleaseThreadTlsState();
    });
  }
  worker();
  for (auto& t : pool) t.join();
  if (failure) return tl::unexpected(*failure);

  record.pulled_at = FormatRfc3339Ms(NowMs());
  if (auto s = store.RecordImage(record); !s) return tl::unexpected(s.error());
  PullEvent done;
  done.kind = PullEvent::Kind::kImageDone;
  done.name = record.name;
  done.manifest_digest = record.manifest_digest;
  done.count = record.layers.size();
  report(done);
  return LoadLocalImage(store, std::move(record));
}

Result<LocalImage> OpenLocalImage(const ImageStore& store, const ImageReference& ref) {
  auto record = store.FindImage(ref.ToString());
  if (!record) return tl::unexpected(record.error());
  if (!*record) {
    return MakeError(ErrorCode::kNotFound,
                     fmt::format("image {} is not in the cache (deepbox image pull {})",
                                 ref.ToString(), ref.ToString()));
  }
  return LoadLocalImage(store, std::move(**record));
}

Result<LocalImage> EnsureImage(const ImageStore& store, const ImageReference& ref,
                               const PullOptions& options, const PullProgressFn& progress) {
  {
    auto shared = store.LockShared();  // not removed while we look
    if (!shared) return tl::unexpected(shared.error());
    auto cached = OpenLocalImage(store, ref);
    if (cached) return cached;
  }
  return PullImage(store, ref, options, progress);
}

}  // namespace deepbox::oci
