// The daemon's tar extraction (PUT /deepbox/v1/fs/tar/upload; src/fs/tar.h). Input: the archive
// (tar, optionally gzip). It is extracted twice into the same destination (the second time over
// what the first left, attacker-made symlinks included), beneath a root that also holds a sibling
// directory, next to a directory outside the root, and with symlinks out of
// the destination planted in it beforehand. Properties: nothing outside the
// destination changes (entries, modes, sizes, times, link counts); nothing
// inside is a device, FIFO or socket or has setuid/setgid/sticky bits; every
// path reported is inside the destination.
#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "fs/tar.h"
#include "fuzz/fuzz_util.h"

namespace {

namespace dfs = deepbox::fs;

struct Fixture {
  deepbox::fuzz::TempTree base{"tar"};
  std::string root_path = base.Path("root");
  std::string dest_path = root_path + "/dest";
  dfs::Root root = Build();

  dfs::Root Build() {
    using namespace deepbox::fuzz;
    MakeDirs(dest_path);
    MakeDirs(root_path + "/sibling");
    MakeDirs(base.Path("outside"));
    WriteFile(root_path + "/sibling/keep", "sibling");
    WriteFile(base.Path("outside/keep"), "outside");
    auto r = dfs::Root::Open(root_path);
    if (!r) Fail("fixture: " + r.error().ToString());
    return std::move(*r);
  }

  void Reset() {
    using namespace deepbox::fuzz;
    EmptyDir(dest_path);
    Symlink("../../outside", dest_path + "/out_link");
    Symlink("../sibling", dest_path + "/sibling_link");
    Symlink(base.Path("outside/keep"), dest_path + "/abs_file_link");
  }
};

Fixture& F() {
  static Fixture* f = new Fixture();
  return *f;
}

void CheckInside(const std::string& dir) {
  auto snap = deepbox::fuzz::TakeSnapshot(dir);
  for (const auto& [rel, v] : snap) {
    struct stat st {};
    std::string p = dir + "/" + rel;
    if (::lstat(p.c_str(), &st) != 0) continue;
    FUZZ_CHECK(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode),
               "extraction made a special file: " + rel);
    FUZZ_CHECK((st.st_mode & 07000) == 0, "extraction kept setuid/setgid/sticky bits: " + rel);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = F();
  f.Reset();
  const auto before = deepbox::fuzz::TakeSnapshot(f.base.path(), "root/dest");
  for (int round = 0; round < 2; ++round) {
    std::string_view archive(reinterpret_cast<const char*>(data), size);
    size_t piece = 1 + size % 700;  // odd read sizes, as a socket gives them
    dfs::TarSource source = [&](char* buf, size_t cap) -> deepbox::Result<size_t> {
      size_t n = std::min({cap, piece, archive.size()});
      if (n == 0) return size_t{0};
      std::memcpy(buf, archive.data(), n);
      archive.remove_prefix(n);
      return n;
    };
    auto written = dfs::ExtractTar(f.root, "dest", source);
    if (written) {
      for (const auto& p : *written) {
        FUZZ_CHECK(deepbox::fuzz::IsWithin(p, f.dest_path),
                   "extraction reported a path outside the destination: " + p);
      }
    }
  }
  const auto after = deepbox::fuzz::TakeSnapshot(f.base.path(), "root/dest");
  const std::string diff = deepbox::fuzz::DescribeDifference(before, after);
  FUZZ_CHECK(diff.empty(), "extraction changed something outside the destination: " + diff);
  CheckInside(f.dest_path);
  return 0;
}
