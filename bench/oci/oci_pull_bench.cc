// `deepbox image pull` next to `skopeo copy` of the same image to a local
// directory, from the same loopback registry (Debian's docker-registry), in
// one run: the issue's goal is >= 1x skopeo's throughput. deepbox's pull
// also extracts every layer; skopeo's copy only stores the blobs.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/remove_tree.h"
#include "common/subprocess.h"
#include "common/testing/temp_dir.h"
#include "oci/image_pull.h"
#include "oci/testing/layer_builder.h"
#include "oci/testing/test_registry.h"

namespace {

using namespace deepbox;                // NOLINT
using namespace deepbox::oci::testing;  // NOLINT

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_oci_pull: %s\n", what.c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  int layers = 4;
  int mib = 50;
  int rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    int value = std::atoi(argv[i + 1]);
    if (flag == "--layers") layers = value;
    if (flag == "--mib") mib = value;
    if (flag == "--rounds") rounds = value;
  }
  if (access("/usr/bin/skopeo", X_OK) != 0)
    Die("skopeo is not installed (scripts/install-deps.sh)");
  auto registry = TestRegistry::Start({});
  if (!registry) Die(registry.error().message);
  std::mt19937_64 rng(42);
  std::string config = ConfigJson("amd64", {}, "/", "");
  if (!(*registry)->PushBlob("bench", config)) Die("pushing the config");
  std::vector<BlobRef> refs;
  uint64_t total = 0;
  for (int l = 0; l < layers; ++l) {
    std::string data(static_cast<size_t>(mib) << 20, '\0');
    for (size_t i = 0; i + 8 <= data.size(); i += 8) {
      uint64_t x = rng();
      std::memcpy(&data[i], &x, 8);
    }
    std::string layer = BuildLayer({File("blob" + std::to_string(l), data)}, Compression::kGzip);
    auto pushed = (*registry)->PushBlob("bench", layer);
    if (!pushed) Die(pushed.error().message);
    refs.push_back(RefOf(LayerMediaType(Compression::kGzip), layer));
    total += layer.size();
  }
  std::string manifest = ManifestJson(RefOf(std::string(oci::kOciConfig), config), refs);
  if (!(*registry)->PushManifest("bench", "v1", std::string(oci::kOciManifest), manifest)) {
    Die("pushing the manifest");
  }
  const std::string ref_text = (*registry)->host() + "/bench:v1";
  auto ref = oci::ParseImageReference(ref_text);
  if (!ref) Die(ref.error().message);

  testing::TempDir work("oci-bench");
  std::ofstream(work.Path("policy.json")) << R"({"default":[{"type":"insecureAcceptAnything"}]})";
  std::vector<double> ours, skopeo;
  for (int r = 0; r < rounds; ++r) {
    // skopeo copy docker://... dir:...
    std::string out = work.Path("skopeo-" + std::to_string(r));
    SubprocessOptions copy;
    copy.argv = {"/usr/bin/skopeo",
                 "--policy",
                 work.Path("policy.json"),
                 "copy",
                 "--quiet",
                 "--src-tls-verify=false",
                 "docker://" + ref_text,
                 "dir:" + out};
    copy.capture_stderr = true;
    auto t0 = std::chrono::steady_clock::now();
    auto done = RunCommand(copy, std::chrono::minutes(10));
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!done || !done->exited_ok())
      Die("skopeo copy: " + (done ? done->err : done.error().message));
    skopeo.push_back(s);
    (void)RemoveTree(out);

    auto store = oci::ImageStore::Open(work.Path("cache-" + std::to_string(r)));
    if (!store) Die(store.error().message);
    oci::PullOptions options;
    options.registry.lookup_credentials = false;
    t0 = std::chrono::steady_clock::now();
    auto pulled = oci::PullImage(**store, *ref, options);
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!pulled) Die(pulled.error().message);
    ours.push_back(s);
    (void)RemoveTree(work.Path("cache-" + std::to_string(r)));
  }
  const double mb = static_cast<double>(total) / (1 << 20);
  std::printf(
      "Image pull: %d layers of %d MiB (gzip, %.0f MiB in all) from docker-registry on "
      "loopback, median of %d\n\n",
      layers, mib, mb, rounds);
  std::printf("%-44s %10s %10s %14s\n", "path", "seconds", "MiB/s", "vs skopeo");
  std::printf("%-44s %10.2f %10.1f %14s\n", "skopeo copy to dir: (download + verify)",
              Median(skopeo), mb / Median(skopeo), "1.00x");
  std::printf("%-44s %10.2f %10.1f %13.2fx\n", "deepbox pull (download + verify + extract)",
              Median(ours), mb / Median(ours), Median(skopeo) / Median(ours));
  return 0;
}
