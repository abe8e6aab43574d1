#include "cli_fixture.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/subprocess.h"
#include "local/namespaces.h"

namespace deepbox::local::lifecycle::testing {

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Eventually(const std::function<bool()>& done, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

void LocalCliTest::SetUp() {
  if (!UserNamespacesAvailable()) GTEST_SKIP() << "user namespaces are not available here";
  if (access(kDeepbox.c_str(), X_OK) != 0) GTEST_SKIP() << kDeepbox << " is not built";
  state_dir_.emplace("dbx", "/tmp");  // short: socket paths must fit 107 bytes
  state_ = state_dir_->path();
  fs::create_directories(state_ / "io");
  setenv("DEEPBOX_STATE_DIR", state_.c_str(), 1);
  LocalProviderOptions o;
  o.state_dir = state_;
  o.deepbox_binary = kDeepbox;
  o.sandboxd_binary = kBinDir + "/deepbox-sandboxd";
  o.pool = "";
  auto p = LocalSandboxProvider::Create(o);
  ASSERT_TRUE(p.has_value()) << p.error().ToString();
  provider_ = std::move(*p);
}

void LocalCliTest::TearDown() {
  // SIGTERM: a pool daemon stops once the creates under way are done, so every
  // sandbox it made has a record the loop below finds. A SIGKILL left one
  // being made (a replacement for a claim) behind, running on.
  for (pid_t pid : daemons_) kill(pid, SIGTERM);
  for (pid_t pid : daemons_) {
    bool exited = Eventually([&] { return waitpid(pid, nullptr, WNOHANG) == pid; },
                             std::chrono::seconds(120));
    if (!exited) {
      ADD_FAILURE() << "pool daemon " << pid << " did not stop within 120 s of SIGTERM";
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  if (provider_) {
    auto list = provider_->ListMeta();
    if (list) {
      for (const auto& m : *list) (void)provider_->Delete(m.id);
    }
  }
  state_dir_.reset();
  unsetenv("DEEPBOX_STATE_DIR");
}

int SpawnDeepbox(const std::vector<std::string>& args, const fs::path& in, const fs::path& out,
                 const fs::path& err, pid_t* pid, char* const* envp) {
  SubprocessOptions o;
  o.argv = {kDeepbox};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  if (envp != nullptr) {
    o.replace_environment = true;
    for (char* const* e = envp; *e != nullptr; ++e) {
      std::string_view kv = *e;
      size_t eq = kv.find('=');
      o.env.emplace_back(kv.substr(0, eq), eq == kv.npos ? "" : kv.substr(eq + 1));
    }
  }
  o.new_process_group = false;
  o.stdin_from.path = in.string();
  o.stdout_to.path = out.string();
  o.stderr_to.path = err.string();
  auto child = Subprocess::Spawn(o);
  if (!child) return child.error().sys_errno != 0 ? child.error().sys_errno : EINVAL;
  *pid = child->Release();  // the caller waits for it
  return 0;
}

pid_t LocalCliTest::Spawn(const std::vector<std::string>& args, const fs::path& out,
                          const fs::path& err, const std::string& stdin_data) {
  fs::path in = "/dev/null";
  if (!stdin_data.empty()) {
    in = state_ / "io" / fmt::format("stdin-{}", counter_++);
    std::ofstream(in) << stdin_data;
  }
  pid_t pid = -1;
  int rc = SpawnDeepbox(args, in, out, err, &pid);
  EXPECT_EQ(rc, 0) << "posix_spawn(" << kDeepbox << "): " << std::strerror(rc);
  return rc == 0 ? pid : -1;
}

CliResult LocalCliTest::Cli(const std::vector<std::string>& args, const std::string& stdin_data) {
  int n = counter_++;
  fs::path out = state_ / "io" / fmt::format("out-{}", n);
  fs::path err = state_ / "io" / fmt::format("err-{}", n);
  CliResult r;
  pid_t pid = Spawn(args, out, err, stdin_data);
  if (pid < 0) return r;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(out);
  r.err = ReadFile(err);
  std::error_code ec;
  fs::remove(out, ec);
  fs::remove(err, ec);
  return r;
}

pid_t LocalCliTest::StartPool(const std::string& name, int replicas,
                              const std::vector<std::string>& extra) {
  std::string err = (state_ / "io" / fmt::format("pool-{}.log", name)).string();
  SubprocessOptions o;
  o.argv = {kDeepbox,    "pool", "serve", "--name", name, "--replicas", std::to_string(replicas),
            "--network", "none"};
  o.argv.insert(o.argv.end(), extra.begin(), extra.end());
  o.new_process_group = false;
  o.stderr_to.path = err;
  // A test that crashes takes its pool daemon with it.
  o.parent_death_signal = SIGKILL;
  auto child = Subprocess::Spawn(o);
  EXPECT_TRUE(child.has_value()) << child.error().ToString();
  if (!child) return -1;
  pid_t pid = child->Release();  // daemons_: stopped and reaped by StopDaemon or TearDown
  daemons_.push_back(pid);
  return pid;
}

std::string LocalCliTest::PoolLog(const std::string& name) {
  return ReadFile(state_ / "io" / fmt::format("pool-{}.log", name));
}

void LocalCliTest::StopDaemon(pid_t pid, int sig) {
  kill(pid, sig);
  waitpid(pid, nullptr, 0);
  daemons_.erase(std::remove(daemons_.begin(), daemons_.end(), pid), daemons_.end());
}

std::unique_ptr<LocalSandboxProvider> LocalCliTest::Provider(const std::string& pool) {
  LocalProviderOptions o = provider_->options();
  o.pool = pool;
  auto p = LocalSandboxProvider::Create(o);
  EXPECT_TRUE(p.has_value()) << p.error().ToString();
  return p ? std::move(*p) : nullptr;
}

std::vector<SandboxMeta> LocalCliTest::WarmOf(const std::string& pool) {
  std::vector<SandboxMeta> out;
  auto list = provider_->ListMeta();
  if (!list) return out;
  for (auto& m : *list) {
    if (m.pool == pool && m.state == "warm" && m.ready &&
        fs::exists(state_ / "sandboxes" / m.id / "warm")) {
      out.push_back(m);
    }
  }
  return out;
}

std::string LocalCliTest::CreatedId(const CliResult& created) {
  EXPECT_EQ(created.code, 0) << created.err;
  std::string id = created.out;
  while (!id.empty() && id.back() == '\n') id.pop_back();
  EXPECT_TRUE(Store::ValidId(id)) << "'" << id << "' " << created.err;
  return id;
}

SandboxMeta LocalCliTest::Meta(const std::string& id) {
  auto m = provider_->store().Read(id);
  EXPECT_TRUE(m.has_value()) << m.error().ToString();
  return m.value_or(SandboxMeta{});
}

std::string LocalCliTest::Leftovers(const SandboxMeta& m) {
  std::string out;
  if (ProcessAlive(m.supervisor)) out += fmt::format("supervisor {} alive; ", m.supervisor.pid);
  if (ProcessAlive(m.init)) out += fmt::format("init {} alive; ", m.init.pid);
  for (const auto& cg : m.cgroups) {
    if (fs::exists(cg)) out += "cgroup " + cg + "; ";
  }
  if (ReadFile("/proc/self/mountinfo").find(m.id) != std::string::npos) {
    out += "a mount naming " + m.id + "; ";
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/block", ec)) {
    std::string back = ReadFile(e.path() / "loop" / "backing_file");
    if (back.find("/" + m.id + "/") != std::string::npos) {
      out += e.path().filename().string() + " backed by " + back + "; ";
    }
  }
  return out;
}

}  // namespace deepbox::local::lifecycle::testing
