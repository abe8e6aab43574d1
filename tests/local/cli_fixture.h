// What the local lifecycle, limits and churn tests share: a private state
// directory with a LocalSandboxProvider on it, the real `deepbox` CLI run as
// a process, and `deepbox pool serve` daemons that die with the test.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"
#include "local/lifecycle/provider.h"

namespace deepbox::local::lifecycle::testing {

namespace fs = std::filesystem;

inline const std::string kBinDir = DEEPBOX_BIN_DIR;
inline const std::string kDeepbox = kBinDir + "/deepbox";

std::string ReadFile(const fs::path& path);

// Starts deepbox with `args`, stdin from `in`, stdout and stderr to `out` and
// `err` (created or truncated), in `envp` (this process's environment when
// null). Returns 0 and *pid (the caller reaps it), or the spawn's errno.
int SpawnDeepbox(const std::vector<std::string>& args, const fs::path& in, const fs::path& out,
                 const fs::path& err, pid_t* pid, char* const* envp = nullptr);

// Polls `done` until it holds or `limit` passes (a safety net, not an
// assertion on time).
bool Eventually(const std::function<bool()>& done,
                std::chrono::seconds limit = std::chrono::seconds(60));

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};

class LocalCliTest : public ::testing::Test {
 protected:
  // Skips without user namespaces or a built CLI; DEEPBOX_STATE_DIR points
  // the CLI at the private state directory.
  void SetUp() override;
  // Kills the pool daemons, deletes every sandbox, removes the state directory.
  void TearDown() override;

  // Starts `deepbox ARGS` (stdin: `stdin_data`, or /dev/null when empty). It
  // inherits every fd of this process that is not close-on-exec. Thread-safe.
  pid_t Spawn(const std::vector<std::string>& args, const fs::path& out, const fs::path& err,
              const std::string& stdin_data = "");
  // Runs `deepbox ARGS` to completion. Thread-safe; its files are removed after.
  CliResult Cli(const std::vector<std::string>& args, const std::string& stdin_data = "");

  // `deepbox pool serve --name NAME --replicas N --network none EXTRA...`,
  // stderr in PoolLog(name). It dies with this process (PR_SET_PDEATHSIG).
  pid_t StartPool(const std::string& name, int replicas,
                  const std::vector<std::string>& extra = {});
  std::string PoolLog(const std::string& name);
  void StopDaemon(pid_t pid, int sig = SIGTERM);

  // The id `deepbox sandbox create` printed (a test failure unless it is one).
  std::string CreatedId(const CliResult& created);
  // Sandbox `id`'s record (a test failure if it has none).
  SandboxMeta Meta(const std::string& id);
  // What is left of sandbox `m` on the host: its supervisor or init alive,
  // its cgroups, a mount or a loop device naming it ("" = nothing).
  static std::string Leftovers(const SandboxMeta& m);

  // A provider on the same state directory that claims from `pool`.
  std::unique_ptr<LocalSandboxProvider> Provider(const std::string& pool);
  // Warm and ready members of `pool` (claimable now).
  std::vector<SandboxMeta> WarmOf(const std::string& pool);

  std::optional<deepbox::testing::TempDir> state_dir_;
  fs::path state_;
  std::unique_ptr<LocalSandboxProvider> provider_;
  std::vector<pid_t> daemons_;  // pool daemons (the test's own thread only)
  std::atomic<int> counter_{0};
};

}  // namespace deepbox::local::lifecycle::testing
