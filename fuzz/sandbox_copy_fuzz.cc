// The host side of `deepbox sandbox cp SANDBOX:DIR HOST_DIR` (src/cli/
// sandbox_copy.h): the tar a hostile daemon streams is extracted on the host.
// The daemon is testing::HostileDaemon on a unix socket; its stat says "a
// directory" and its tar download answers with the input. Input: a flags
// byte (bit 0: copy the directory's contents, "r/.", instead of "r"; bits
// 1-7: how the body is cut into HTTP chunks), then the archive. The host
// destination holds files of the user's (.bashrc, .ssh/authorized_keys) and
// has a file beside it. Properties: nothing outside what the copy may write
// changes, and a copy that fails leaves nothing new behind.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include "cli/sandbox_copy.h"
#include "fuzz/fuzz_util.h"
#include "sandbox/testing/hostile_daemon.h"

namespace {

using deepbox::fuzz::TakeSnapshot;

struct Fixture {
  deepbox::fuzz::TempTree outer{"copy"};
  std::unique_ptr<deepbox::testing::HostileDaemon> daemon = [] {
    auto d = deepbox::testing::HostileDaemon::Start();
    if (!d) deepbox::fuzz::Fail("fixture: " + d.error().ToString());
    (*d)->Answer("/deepbox/v1/fs/stat", R"({"path":"/workspace/r","type":"directory"})");
    return std::move(*d);
  }();
  std::unique_ptr<deepbox::SandboxdClient> client = [this] {
    auto c = daemon->Connect();
    if (!c) deepbox::fuzz::Fail("fixture: " + c.error().ToString());
    return std::move(*c);
  }();
  std::FILE* warnings = std::fopen("/dev/null", "w");
  ~Fixture() {
    if (warnings != nullptr) std::fclose(warnings);
  }

  void Reset() {
    using namespace deepbox::fuzz;
    EmptyDir(outer.path());
    MakeDirs(outer.Path("dest/.ssh"));
    WriteFile(outer.Path("precious"), "do not touch\n");
    WriteFile(outer.Path("dest/.bashrc"), "mine\n");
    WriteFile(outer.Path("dest/.ssh/authorized_keys"), "my key\n");
    Symlink("../precious", outer.Path("dest/precious_link"));
  }
};

Fixture* fixture = nullptr;

// Torn down at exit, before the leak check: the client's connections close,
// and the daemon's connection threads end while it waits for them. Left
// running, a 40-minute run once ended with LeakSanitizer reporting a live
// connection thread's read buffer at exit (no input: the empty "crash").
void TearDown() {
  delete fixture;
  fixture = nullptr;
}

Fixture& F() {
  if (fixture == nullptr) {
    fixture = new Fixture();
    std::atexit(TearDown);
  }
  return *fixture;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const bool contents = flags & 1;
  std::string_view archive(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<std::string> chunks;
  uint32_t state = (flags >> 1) * 2654435761u + 3;
  while (!archive.empty()) {
    state = state * 1103515245u + 12345u;
    size_t n = std::min(archive.size(), size_t{1} + (state >> 16) % 1500);
    chunks.emplace_back(archive.substr(0, n));
    archive.remove_prefix(n);
  }
  Fixture& f = F();
  f.Reset();
  f.daemon->AnswerStream("/deepbox/v1/fs/tar/download", std::move(chunks));
  // What the copy may write: dest/r (a new directory), or dest's contents.
  const std::string writable = contents ? "dest" : "dest/r";
  const auto before = TakeSnapshot(f.outer.path(), writable);
  const auto dest_before = TakeSnapshot(f.outer.Path("dest"));

  deepbox::cli::SandboxCopier copier(*f.client, f.warnings);
  auto result = copier.FromSandbox(contents ? "r/." : "r", f.outer.Path("dest") + "/");

  const std::string diff =
      deepbox::fuzz::DescribeDifference(before, TakeSnapshot(f.outer.path(), writable));
  FUZZ_CHECK(diff.empty(), "the copy changed something outside " + writable + ": " + diff);
  if (!result) {
    for (const auto& [rel, v] : TakeSnapshot(f.outer.Path("dest"))) {
      FUZZ_CHECK(dest_before.contains(rel), fmt::format("a failed copy ({}) left dest/{} behind",
                                                        result.error().message, rel));
    }
  }
  return 0;
}
