// Test helpers: a temp dir tree for a sandbox and a one-shot "run this script" call.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

#include "common/testing/temp_dir.h"
#include "local/launcher.h"
#include "local/namespaces.h"

namespace deepbox::local::testing {

using TempDir = deepbox::testing::TempDir;

struct RunResult {
  ExitStatus status;
  std::string output;  // stdout + stderr
  SetupTimings timings;
  LimitSupport limits;
  NetworkMode network = NetworkMode::kNone;
  std::string network_note;
};

inline std::string UniqueId(const char* prefix) {
  static std::atomic<int> counter{0};
  return std::string(prefix) + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

class SandboxFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!UserNamespacesAvailable()) GTEST_SKIP() << "user namespaces are not available here";
    ASSERT_FALSE(tmp_.path().empty());
    workspace_ = tmp_.path() / "workspace";
    std::filesystem::create_directory(workspace_);
    spec_.id = UniqueId("t");
    spec_.runtime_dir = tmp_.path() / "rt";
    spec_.workspace_dir = workspace_;
    spec_.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace", "LANG=C.UTF-8"};
  }

  // Runs `/bin/sh -c script` in a sandbox made from spec_, returns output and status.
  Result<RunResult> Run(const std::string& script) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return MakeSyscallError("pipe2", errno);
    UniqueFd r(fds[0]), w(fds[1]);
    SandboxSpec spec = spec_;
    spec.argv = {"/bin/sh", "-c", script};
    spec.stdout_fd = w.get();
    spec.stderr_fd = w.get();
    auto sp = Launch(spec);
    w.reset();
    if (!sp) return tl::unexpected(sp.error());
    std::string out;
    char buf[4096];
    for (;;) {
      ssize_t n = read(r.get(), buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    auto st = sp->Wait(std::chrono::milliseconds(60000));
    if (!st) return tl::unexpected(st.error());
    RunResult result{*st, out, sp->timings(), sp->limits(), sp->network(), sp->network_note()};
    return result;
  }

  TempDir tmp_;
  std::filesystem::path workspace_;
  SandboxSpec spec_;
};

}  // namespace deepbox::local::testing
