// Test support for the end-to-end tests: spawning the real binaries with a
// controlled environment (their own state directory, no API keys unless
// given), running them under a pseudo-terminal, and asking `deepbox sandbox
// ls` what is left.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/json.h"
#include "common/testing/temp_dir.h"

namespace deepbox::e2e {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

inline const std::string kBinDir = DEEPBOX_BIN_DIR;
inline const std::string kSourceDir = DEEPBOX_SOURCE_DIR;
inline const std::string kDeepbox = kBinDir + "/deepbox";
inline const std::string kExample = kBinDir + "/deepbox-fib-example";
inline const std::string kFibReplay = kSourceDir + "/examples/fib/fib.replay.jsonl";
// The task of the Fibonacci example, and the API key the fake model expects.
inline constexpr char kFibTask[] =
    "Write fib.py that prints the first 10 Fibonacci numbers and run it";
inline constexpr char kFakeApiKey[] = "sk-ant-e2e-test";
// The example's last line: "in the pod" on k8s, "in the sandbox" for a local one.
inline const std::string kVerified =
    "Sandbox verification passed: fib.py runs in the pod and prints the expected sequence.";
inline const std::string kVerifiedLocal =
    "Sandbox verification passed: fib.py runs in the sandbox and prints the expected sequence.";
inline const std::string kExampleLabel = "deepagents.example/claim=true";

std::string ReadFile(const fs::path& p);
void WriteFile(const fs::path& p, const std::string& text);

// Polls `done` every 20 ms until it holds or `limit` passes: a safety net
// against hangs, never an assertion on time.
bool Eventually(const std::function<bool()>& done, std::chrono::seconds limit = 120s);

// The environment of a spawned binary: this process's, minus anything that
// would change the behaviour under test, plus `set`.
std::vector<std::string> MakeEnv(const std::map<std::string, std::string>& set);

// A process whose stdout and stderr go to files.
class Process {
 public:
  // Output files go to `dir`; the process runs in `cwd` (this process's own
  // working directory when empty).
  Process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
          const fs::path& dir, const std::string& stdin_data = "", const fs::path& cwd = {});
  ~Process();  // kills it if still running
  pid_t pid() const { return pid_; }
  std::string out() const { return ReadFile(out_); }
  std::string err() const { return ReadFile(err_); }
  // The exit code (128+N for a signal); waits.
  int Wait();
  // The exit code, or nullopt if the process still runs after `limit` (a
  // safety net against hangs: the test fails instead of waiting forever).
  std::optional<int> WaitAtMost(std::chrono::seconds limit);

 private:
  pid_t pid_ = -1;
  fs::path out_, err_;
  std::optional<int> code_;
};

// A process on a pseudo-terminal (its stdin, stdout and stderr, and its
// controlling terminal), 120x40.
class PtyProcess {
 public:
  // `dir`: its working directory (default: this process's).
  PtyProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
             const fs::path& dir = {});
  ~PtyProcess();
  // Reads until the output contains `text` (true) or the process is done.
  bool WaitFor(const std::string& text, std::chrono::seconds limit = 120s);
  // The same, but only output after the previous WaitForNext match counts
  // (the second prompt, not the first one again).
  bool WaitForNext(const std::string& text, std::chrono::seconds limit = 120s);
  void Write(const std::string& text);
  int Wait();  // reads everything, then the exit code
  const std::string& output() const { return output_; }

 private:
  bool ReadSome(int timeout_ms);  // false at EOF
  pid_t pid_ = -1;
  int master_ = -1;
  bool eof_ = false;
  std::string output_;
  size_t next_ = 0;  // WaitForNext searches from here
  std::optional<int> code_;
};

// A TCP server on 127.0.0.1 that accepts connections and never answers (it
// reads and discards what it gets): a model API that stalls before its first
// byte, over HTTP (no response head) or HTTPS (no TLS handshake).
class SilentServer {
 public:
  SilentServer();
  ~SilentServer();
  int port() const { return port_; }
  int accepted() const { return accepted_.load(); }

 private:
  int listen_fd_ = -1;
  int stop_fd_ = -1;
  int port_ = 0;
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

// Every test gets its own local state directory and threads directory.
class E2eTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // The environment for spawned binaries (DEEPBOX_STATE_DIR etc.) plus `extra`.
  std::vector<std::string> Env(std::map<std::string, std::string> extra = {}) const;
  // Runs a binary to completion.
  struct Outcome {
    int code = -1;
    std::string out, err;
  };
  Outcome Run(const std::vector<std::string>& argv, std::map<std::string, std::string> env = {},
              const std::string& stdin_data = "");
  // `deepbox sandbox ls --json --selector selector`.
  json::array Sandboxes(const std::string& selector);
  // Waits for one sandbox matching `selector` and returns its id.
  std::string WaitForSandbox(const std::string& selector);

  std::optional<deepbox::testing::TempDir> tmp_;
  fs::path dir_;  // short: sandbox socket paths must fit 107 bytes
};

// Lines of JSON objects (an INVALID one fails the test).
std::vector<json::object> JsonLines(const std::string& text);

}  // namespace deepbox::e2e
