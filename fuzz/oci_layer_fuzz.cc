// Image layer extraction (src/oci/layer_extract.h): the bytes of a layer a
// registry sent (tar, tar.gz or tar.zst), extracted into a fresh directory
// beneath a tree that also holds a sibling and, outside, files a hostile
// layer would want. Properties: nothing outside the layer's directory
// changes; inside it there are only directories, regular files, symlinks,
// FIFOs and overlay whiteouts (character devices 0/0); no setuid/setgid bit.
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cstring>

#include "fuzz/fuzz_util.h"
#include "oci/layer_extract.h"

namespace {

struct OciLayerFixture {
  deepbox::fuzz::TempTree base{"oci-layer"};
  std::string dest_path = base.Path("cache/layer");

  OciLayerFixture() {
    using namespace deepbox::fuzz;
    MakeDirs(dest_path);
    MakeDirs(base.Path("cache/sibling"));
    MakeDirs(base.Path("outside"));
    WriteFile(base.Path("cache/sibling/keep"), "sibling");
    WriteFile(base.Path("outside/keep"), "outside");
    Symlink(base.Path("outside"), base.Path("cache/outside_link"));
  }
};

OciLayerFixture& Fixture() {
  static OciLayerFixture* f = new OciLayerFixture();
  return *f;
}

void CheckLayerTree(const std::string& dir) {
  auto snap = deepbox::fuzz::TakeSnapshot(dir);
  for (const auto& [rel, v] : snap) {
    struct stat st {};
    std::string p = dir + "/" + rel;
    if (::lstat(p.c_str(), &st) != 0) continue;
    const bool whiteout = S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0);
    FUZZ_CHECK(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode) ||
                   S_ISFIFO(st.st_mode) || whiteout,
               "extraction made a special file: " + rel);
    FUZZ_CHECK((st.st_mode & (S_ISUID | S_ISGID)) == 0, "extraction kept setuid/setgid: " + rel);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  OciLayerFixture& f = Fixture();
  deepbox::fuzz::EmptyDir(f.dest_path);
  const auto before = deepbox::fuzz::TakeSnapshot(f.base.path(), "cache/layer");
  std::string_view layer(reinterpret_cast<const char*>(data), size);
  size_t piece = 1 + size % 900;  // odd read sizes, as a socket gives them
  deepbox::oci::LayerSource source = [&](char* buf, size_t cap) -> deepbox::Result<size_t> {
    size_t n = std::min({cap, piece, layer.size()});
    std::memcpy(buf, layer.data(), n);
    layer.remove_prefix(n);
    return n;
  };
  (void)deepbox::oci::ExtractLayer(source, f.dest_path);
  const auto after = deepbox::fuzz::TakeSnapshot(f.base.path(), "cache/layer");
  const std::string diff = deepbox::fuzz::DescribeDifference(before, after);
  FUZZ_CHECK(diff.empty(), "extraction changed something outside the layer: " + diff);
  CheckLayerTree(f.dest_path);
  return 0;
}
