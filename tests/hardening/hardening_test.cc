// The release flags of the top-level CMakeLists.txt (DEEPBOX_HARDEN: stack
// protector, PIE, -z relro -z now, FORTIFY_SOURCE in optimized builds) are
// checked where they matter, on the ELF files: `readelf` must show a
// position-independent executable, a GNU_RELRO segment, BIND_NOW and calls to
// __stack_chk_fail in deepbox, deepbox-sandboxd and the daemon bundle that
// deploy/k8s/bundle-sandboxd.sh makes (patchelf rewrites that binary, so it
// is checked after the rewrite).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"

namespace deepbox {
namespace {

struct CommandOutput {
  int status = -1;
  std::string out;
};

CommandOutput Capture(const std::string& command) {
  CommandOutput r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  r.status = pclose(p);
  return r;
}

bool Has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// What `path` lacks of the hardening, one word each: "pie", "relro",
// "bindnow", "stackprotector", "fortify" (the last only when expected);
// "readelf: ..." when the file cannot be read.
std::vector<std::string> Missing(const std::string& path, bool want_fortify) {
  CommandOutput header = Capture("readelf -hW '" + path + "'");
  CommandOutput segments = Capture("readelf -lW '" + path + "'");
  CommandOutput dynamic = Capture("readelf -dW '" + path + "'");
  CommandOutput symbols = Capture("readelf --dyn-syms -W '" + path + "'");
  for (const CommandOutput* r : {&header, &segments, &dynamic, &symbols}) {
    if (r->status != 0) return {"readelf: " + r->out};
  }
  std::vector<std::string> missing;
  // PIE: a DYN executable with DF_1_PIE (a shared library is DYN too).
  if (!Has(header.out, "DYN (") || !Has(dynamic.out, "PIE")) missing.push_back("pie");
  // Full RELRO: the segment, and every symbol bound at load time.
  if (!Has(segments.out, "GNU_RELRO")) missing.push_back("relro");
  if (!Has(dynamic.out, "BIND_NOW") && !Has(dynamic.out, "Flags: NOW")) {
    missing.push_back("bindnow");
  }
  // Stack protector: the canary check's failure path is linked in.
  if (!Has(symbols.out, "__stack_chk_fail")) missing.push_back("stackprotector");
  // FORTIFY_SOURCE: checked variants such as __memcpy_chk, __read_chk.
  if (want_fortify && !Has(symbols.out, "_chk@")) missing.push_back("fortify");
  return missing;
}

void ExpectHardened(const std::string& path) {
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  EXPECT_EQ(Missing(path, DEEPBOX_FORTIFIED), std::vector<std::string>{})
      << path << " lacks these hardening features (`readelf -hldW " << path << "` shows why)";
}

class HardeningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Capture("readelf --version").status != 0) GTEST_SKIP() << "readelf is not installed";
  }
};

// The checks of deepbox's own binaries: only where they are built hardened
// (the release presets; dev builds with sanitizers and DEEPBOX_HARDEN=OFF).
class HardenedBinaryTest : public HardeningTest {
 protected:
  void SetUp() override {
    if (!DEEPBOX_HARDENED) GTEST_SKIP() << "built with -DDEEPBOX_HARDEN=OFF";
    HardeningTest::SetUp();
  }
};

TEST_F(HardenedBinaryTest, Cli) { ExpectHardened(DEEPBOX_CLI_BINARY); }

TEST_F(HardenedBinaryTest, Sandboxd) { ExpectHardened(DEEPBOX_SANDBOXD_BINARY); }

TEST_F(HardenedBinaryTest, DaemonBundle) {
  if (Capture("command -v patchelf").status != 0) {
    GTEST_SKIP() << "patchelf is not installed (the bundle script needs it)";
  }
  deepbox::testing::TempDir tmp("deepbox-hardening");
  const std::string dir = tmp.path().string();
  CommandOutput bundle =
      Capture(std::string(DEEPBOX_SOURCE_DIR) + "/deploy/k8s/bundle-sandboxd.sh '" +
              DEEPBOX_SANDBOXD_BINARY + "' '" + dir + "/bundle' /deepbox 2>&1");
  EXPECT_EQ(bundle.status, 0) << bundle.out;
  if (bundle.status == 0) ExpectHardened(dir + "/bundle/bin/deepbox-sandboxd");
}

// The checks themselves must be able to fail: an object linked without the
// flags is reported (a test that cannot fail proves nothing).
TEST_F(HardeningTest, AnUnhardenedBinaryIsRecognized) {
  deepbox::testing::TempDir tmp("deepbox-hardening");
  const std::string dir = tmp.path().string();
  {
    FILE* f = fopen((dir + "/plain.c").c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs("int main(void) { return 0; }\n", f);
    fclose(f);
  }
  CommandOutput cc = Capture("cc -no-pie -fno-stack-protector -Wl,-z,norelro -Wl,-z,lazy -o '" +
                             dir + "/plain' '" + dir + "/plain.c'");
  if (cc.status != 0) {
    GTEST_SKIP() << "no C compiler to build the negative control: " << cc.out;
  }
  EXPECT_EQ(Missing(dir + "/plain", true),
            (std::vector<std::string>{"pie", "relro", "bindnow", "stackprotector", "fortify"}));
}

}  // namespace
}  // namespace deepbox
