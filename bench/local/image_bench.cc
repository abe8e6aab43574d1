#include "image_bench.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "local/testing/host_userland_layer.h"
#include "oci/image_pull.h"
#include "oci/image_store.h"
#include "oci/manifest.h"
#include "oci/reference.h"
#include "oci/testing/layer_builder.h"
#include "oci/testing/test_registry.h"
#include "sandbox/sandboxd_client.h"

namespace deepbox::bench {
namespace {

namespace fs = std::filesystem;
namespace ot = oci::testing;
using BenchClock = std::chrono::steady_clock;

// Bytes `dir` takes on disk (blocks of each inode counted once).
uint64_t DiskBytes(const fs::path& dir) {
  std::set<std::pair<dev_t, ino_t>> seen;
  uint64_t bytes = 0;
  std::error_code ec;
  for (auto it =
           fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (lstat(it->path().c_str(), &st) != 0) continue;
    if (seen.emplace(st.st_dev, st.st_ino).second)
      bytes += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return bytes;
}

double SinceMs(BenchClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(BenchClock::now() - t0).count();
}

}  // namespace

ImageBenchResult RunImageBench(local::lifecycle::LocalSandboxProvider& provider, int iterations,
                               int density) {
  ImageBenchResult result;
  auto registry = ot::TestRegistry::Start({});
  if (!registry) {
    result.skipped = registry.error().message;
    return result;
  }
  // One layer: this host's userland (with `true`), as the tests build it.
  std::set<std::string> dirs;
  std::vector<ot::LayerEntry> entries = local::testing::HostUserlandLayer(
      local::testing::CollectHostUserland({"sh", "true", "cat", "ls", "id"}), dirs);
  std::string layer = ot::BuildLayer(entries, ot::Compression::kGzip);
  std::string config = ot::ConfigJson(oci::HostPlatform().architecture,
                                      {"PATH=/usr/local/bin:/usr/bin:/bin"}, "", "");
  if (!(*registry)->PushBlob("bench/box", config) || !(*registry)->PushBlob("bench/box", layer)) {
    result.skipped = "pushing the bench image failed";
    return result;
  }
  std::string manifest =
      ot::ManifestJson(ot::RefOf(std::string(oci::kOciConfig), config),
                       {ot::RefOf(ot::LayerMediaType(ot::Compression::kGzip), layer)});
  if (!(*registry)->PushManifest("bench/box", "v1", std::string(oci::kOciManifest), manifest)) {
    result.skipped = "pushing the bench manifest failed";
    return result;
  }
  const std::string image = (*registry)->host() + "/bench/box:v1";
  // Pulled before the timing: the row is "from a cached image".
  auto store = oci::ImageStore::Open(provider.options().image_dir);
  if (!store) {
    result.skipped = store.error().message;
    return result;
  }
  auto ref = oci::ParseImageReference(image);
  // A named object: GCC 12 at -O3 took a temporary's optionals for uninitialized.
  const oci::PullOptions options;
  auto pulled = oci::EnsureImage(**store, *ref, options);
  if (!pulled) {
    result.skipped = pulled.error().message;
    return result;
  }

  ClaimOptions claim;
  claim.network = "none";
  claim.image = image;
  ExecRequest first_cmd;
  first_cmd.argv = {"true"};
  for (int i = 0; i < iterations + 2; ++i) {
    auto t0 = BenchClock::now();
    auto m = provider.CreateSandbox(claim, false);
    if (!m) {
      result.skipped = "create on an image: " + m.error().message;
      return result;
    }
    auto c = provider.Connect(*m);
    if (!c) {
      result.skipped = "connect: " + c.error().message;
      (void)provider.Delete(m->id);
      return result;
    }
    auto r = (*c)->Exec(first_cmd);
    double ms = SinceMs(t0);
    c->reset();
    (void)provider.Delete(m->id);
    if (!r || r->exit_code != 0) {
      result.skipped = "exec true on an image failed";
      return result;
    }
    if (i >= 2) result.cold_ms.push_back(ms);
  }
  result.ran = true;

  if (density > 0) {
    const fs::path cache = (*store)->dir();
    const fs::path sandboxes = provider.store().sandboxes_dir();
    const uint64_t cache_before = DiskBytes(cache);
    const uint64_t state_before = DiskBytes(sandboxes);
    std::vector<std::string> ids;
    for (int i = 0; i < density; ++i) {
      auto m = provider.CreateSandbox(claim, false);
      if (!m) {
        result.density_report =
            fmt::format("\nImage density: create {} failed: {}\n", i + 1, m.error().message);
        break;
      }
      ids.push_back(m->id);
    }
    size_t layer_dirs = 0;
    std::error_code ec;
    for (auto it = fs::directory_iterator(cache / "layers/sha256", ec);
         it != fs::directory_iterator(); it.increment(ec)) {
      ++layer_dirs;
    }
    const uint64_t cache_after = DiskBytes(cache);
    const uint64_t state_after = DiskBytes(sandboxes);
    if (result.density_report.empty()) {
      result.density_report = fmt::format(
          "\nDisk for {} sandboxes of one image ({} layer, {:.1f} MiB extracted):\n"
          "  image cache: {:.1f} MiB before, {:.1f} MiB with them ({} layer dir: stored once;\n"
          "  what grew is one pin file per sandbox)\n"
          "  sandboxes' state dirs: {:.2f} MiB in all, {:.1f} KiB per sandbox (its /workspace "
          "disk\n"
          "  image, as for a host-root sandbox; the writable layer is a tmpfs of its own: nothing\n"
          "  of the image is copied per sandbox)\n",
          ids.size(), pulled->record.layers.size(),
          static_cast<double>(DiskBytes(cache / "layers")) / (1 << 20),
          static_cast<double>(cache_before) / (1 << 20),
          static_cast<double>(cache_after) / (1 << 20), layer_dirs,
          static_cast<double>(state_after - std::min(state_after, state_before)) / (1 << 20),
          ids.empty() ? 0.0
                      : static_cast<double>(state_after - std::min(state_after, state_before)) /
                            1024 / static_cast<double>(ids.size()));
    }
    for (const auto& id : ids) (void)provider.Delete(id);
  }
  return result;
}

}  // namespace deepbox::bench
