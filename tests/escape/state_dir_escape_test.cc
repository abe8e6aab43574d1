// Escape probes for the local state directory (issue 21, H2; docs/security.md,
// "The state directory"). Whoever can write the state dir, or plant a record in
// it, must not make `deepbox sandbox ls / rm / exec` kill a process, kill or
// remove a cgroup, or talk to a daemon that the record merely names. The
// "attacker" plants exactly what the audit planted: a record whose init is a
// process of ours (a victim `sleep`), whose cgroups are a victim cgroup we
// made (another `sleep` in it), and whose socket is a fake daemon's that this
// test serves. A test fails iff the real CLI acted on any of them.
//
// No sandbox is created, so nothing here needs user namespaces. Root only:
// chown to a foreign uid (65534, no account needed) and the victim cgroup
// (cgroup v2, else the v1 pids hierarchy: hybrid hosts have both). What is
// unavailable is skipped with the reason.
#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../local/cli_fixture.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"
#include "local/cgroups.h"
#include "local/lifecycle/provider.h"
#include "local/lifecycle/state.h"

extern char** environ;

namespace deepbox::escape {
namespace {

namespace fs = std::filesystem;
using deepbox::RemoveTree;
using local::lifecycle::ProcessRef;
using local::lifecycle::ProcessStartTime;
using ::testing::HasSubstr;

using local::lifecycle::testing::kDeepbox;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A child of ours that sleeps; the victim a planted record names.
struct Victim {
  pid_t pid = -1;
  uint64_t start_time = 0;
  bool Alive() const {
    int status = 0;
    return pid > 0 && waitpid(pid, &status, WNOHANG) == 0;
  }
  void Stop() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    pid = -1;
  }
};

Victim SpawnSleep(const char* seconds) {
  Victim v;
  const char* argv[] = {"sleep", seconds, nullptr};
  if (posix_spawnp(&v.pid, "sleep", nullptr, nullptr, const_cast<char* const*>(argv), environ) !=
      0) {
    v.pid = -1;
    return v;
  }
  v.start_time = ProcessStartTime(v.pid).value_or(0);
  return v;
}

// A unix socket that records every connection and what it was sent, then hangs
// up (so an old deepbox that talks to it fails instead of waiting).
class FakeDaemon {
 public:
  explicit FakeDaemon(const fs::path& path) : path_(path) {
    fd_.reset(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    if (!fd_ || bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(fd_.get(), 16) != 0) {
      fd_.reset();
      return;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return;
    stop_r_.reset(p[0]);
    stop_w_.reset(p[1]);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeDaemon() {
    if (thread_.joinable()) {
      (void)!write(stop_w_.get(), "x", 1);
      thread_.join();
    }
  }
  bool ok() const { return fd_.valid(); }
  int connections() const { return connections_.load(); }
  std::string received() {
    std::lock_guard<std::mutex> g(mu_);
    return received_;
  }

 private:
  void Serve() {
    for (;;) {
      pollfd pfds[2] = {{fd_.get(), POLLIN, 0}, {stop_r_.get(), POLLIN, 0}};
      if (poll(pfds, 2, -1) < 0) continue;
      if (pfds[1].revents) return;
      UniqueFd c(accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c) continue;
      ++connections_;
      pollfd in = {c.get(), POLLIN, 0};
      char buf[4096];
      while (poll(&in, 1, 200) > 0) {  // what the client sends at once, then hang up
        ssize_t n = read(c.get(), buf, sizeof(buf));
        if (n <= 0) break;
        std::lock_guard<std::mutex> g(mu_);
        received_.append(buf, static_cast<size_t>(n));
      }
    }
  }

  fs::path path_;
  UniqueFd fd_, stop_r_, stop_w_;
  std::thread thread_;
  std::atomic<int> connections_{0};
  std::mutex mu_;
  std::string received_;
};

struct CliResult {
  int code = -1;
  std::string out, err;
};

class StateDirEscapeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kDeepbox.c_str(), X_OK) != 0) GTEST_SKIP() << kDeepbox << " is not built";
    work_dir_.emplace("dbx-h2", "/tmp");  // short: a socket path
    work_ = work_dir_->path();
    victim_ = SpawnSleep("1000");
    ASSERT_TRUE(victim_.Alive());
    fake_supervisor_ = SpawnSleep("1002");
    ASSERT_TRUE(fake_supervisor_.Alive());
    daemon_ = std::make_unique<FakeDaemon>(work_ / "evil.sock");
    ASSERT_TRUE(daemon_->ok());
    MakeVictimCgroup();
  }

  void TearDown() override {
    victim_.Stop();
    fake_supervisor_.Stop();
    cgroup_victim_.Stop();
    if (!cgroup_.empty()) rmdir(cgroup_.c_str());
    daemon_.reset();
    if (!work_.empty()) {
      // Foreign owners and modes planted by a test must not stop the cleanup.
      std::error_code ec;
      for (auto it = fs::recursive_directory_iterator(work_, ec);
           it != fs::recursive_directory_iterator(); it.increment(ec)) {
        (void)lchown(it->path().c_str(), geteuid(), getegid());
      }
      work_dir_.reset();
    }
  }

  // A cgroup that is no sandbox's, with a `sleep` in it.
  void MakeVictimCgroup() {
    if (geteuid() != 0) {
      cgroup_note_ = "making a victim cgroup needs root";
      return;
    }
    auto host = local::DetectCgroups();
    if (!host) {
      cgroup_note_ = host.error().message;
      return;
    }
    std::string parent;
    if (!host->v2_mount.empty()) {
      parent = host->v2_mount + (host->v2_self == "/" ? "" : host->v2_self);
    } else if (host->v1_mounts.count("pids")) {
      auto self = host->v1_self.find("pids");
      parent = host->v1_mounts.at("pids") +
               (self == host->v1_self.end() || self->second == "/" ? "" : self->second);
    } else {
      cgroup_note_ = "no cgroup v2 and no v1 pids hierarchy on this host";
      return;
    }
    std::string dir = fmt::format("{}/dbx-h2-victim-{}", parent, getpid());
    if (mkdir(dir.c_str(), 0755) != 0) {
      cgroup_note_ = fmt::format("mkdir {}: {}", dir, strerror(errno));
      return;
    }
    cgroup_ = dir;
    cgroup_victim_ = SpawnSleep("1001");
    std::ofstream(dir + "/cgroup.procs") << cgroup_victim_.pid << "\n";
    if (ReadAll(dir + "/cgroup.procs").find(std::to_string(cgroup_victim_.pid)) ==
        std::string::npos) {
      cgroup_note_ = "could not move a process into " + dir;
      cgroup_victim_.Stop();
      rmdir(dir.c_str());
      cgroup_.clear();
    }
  }

  // The audit's record: init = our victim, cgroups = our victim cgroup,
  // socket = the fake daemon, and the supervisor given.
  std::string Record(const std::string& id, const ProcessRef& supervisor) const {
    return fmt::format(
        R"({{"id":"{}","created_at":"2026-12-03T16:00:00.000Z","state":"claimed","ready":true,)"
        R"("network":"none","supervisor":{{"pid":{},"start_time":{}}},)"
        R"("init":{{"pid":{},"start_time":{}}},"cgroups":[{}],"socket":"{}"}})",
        id, supervisor.pid, supervisor.start_time, victim_.pid, victim_.start_time,
        cgroup_.empty() ? "" : "\"" + cgroup_ + "\"", (work_ / "evil.sock").string());
  }
  ProcessRef DeadSupervisor() const { return ProcessRef{4000000, 1}; }
  ProcessRef LiveImpostor() const {
    return ProcessRef{fake_supervisor_.pid, fake_supervisor_.start_time};
  }

  // state/sandboxes/<id>/meta.json, every dir with `mode`.
  void Plant(const fs::path& state, const std::string& id, const std::string& record, mode_t mode) {
    for (const fs::path& d :
         {state, state / "sandboxes", state / "trash", state / "sandboxes" / id}) {
      mkdir(d.c_str(), mode);
      ASSERT_EQ(chmod(d.c_str(), mode), 0) << d;
    }
    std::ofstream(state / "sandboxes" / id / "meta.json") << record;
  }

  CliResult Cli(const fs::path& state, const std::vector<std::string>& args,
                const std::string& stdin_data = "") {
    fs::path in = work_ / "cli.in", out = work_ / "cli.out", err = work_ / "cli.err";
    std::ofstream(in, std::ios::trunc) << stdin_data;
    std::vector<std::string> env_store;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::string_view(*e).rfind("DEEPBOX_STATE_DIR=", 0) != 0) env_store.emplace_back(*e);
    }
    env_store.push_back("DEEPBOX_STATE_DIR=" + state.string());
    std::vector<char*> envp;
    for (auto& e : env_store) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = -1;
    CliResult r;
    int rc = local::lifecycle::testing::SpawnDeepbox(args, in, out, err, &pid, envp.data());
    if (rc != 0) {
      r.err = "posix_spawn: " + std::string(strerror(rc));
      return r;
    }
    // A safety net (an old deepbox could wait on the fake daemon), not a verdict.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = ReadAll(out);
    r.err = ReadAll(err);
    return r;
  }

  // What must hold after every command: nothing the record named was touched.
  void ExpectUntouched(const std::string& when) {
    EXPECT_TRUE(victim_.Alive()) << when << ": the record's `init` (pid " << victim_.pid
                                 << ") was killed";
    EXPECT_TRUE(fake_supervisor_.Alive())
        << when << ": the record's `supervisor` (pid " << fake_supervisor_.pid << ") was signalled";
    if (!cgroup_.empty()) {
      EXPECT_TRUE(fs::exists(cgroup_))
          << when << ": the record's cgroup " << cgroup_ << " was removed";
      EXPECT_TRUE(cgroup_victim_.Alive())
          << when << ": the process in " << cgroup_ << " was killed";
    }
    EXPECT_EQ(daemon_->connections(), 0)
        << when << ": the record's `socket` was connected to; it received: " << daemon_->received();
  }

  void NoteSkips() {
    if (!cgroup_note_.empty()) {
      std::cerr << "[  PARTIAL ] no victim cgroup: " << cgroup_note_ << "\n";
      RecordProperty("victim_cgroup_skipped", cgroup_note_);
    }
  }

  std::optional<deepbox::testing::TempDir> work_dir_;
  fs::path work_;
  Victim victim_, fake_supervisor_, cgroup_victim_;
  std::string cgroup_, cgroup_note_;
  std::unique_ptr<FakeDaemon> daemon_;
};

constexpr char kId[] = "sb-0123456789ab";

// The audit's first reproduction: a state dir anyone can write, with a record
// whose supervisor is dead, so `sandbox ls` reaps it.
TEST_F(StateDirEscapeTest, WorldWritableStateDirIsRefused) {
  NoteSkips();
  fs::path state = work_ / "open";
  Plant(state, kId, Record(kId, DeadSupervisor()), 0777);
  auto r = Cli(state, {"sandbox", "ls"});
  EXPECT_NE(r.code, 0) << "a world-writable state dir was used:\n" << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr(state.string()));
  EXPECT_THAT(r.err, HasSubstr("mode 0777"));
  ExpectUntouched("sandbox ls in a 0777 state dir");
  r = Cli(state, {"sandbox", "rm", kId});
  EXPECT_NE(r.code, 0) << r.out << r.err;
  ExpectUntouched("sandbox rm in a 0777 state dir");
  EXPECT_TRUE(fs::exists(state / "sandboxes" / kId / "meta.json"));  // not ours to remove
}

// The same tree made by another user (uid 65534), open or not.
TEST_F(StateDirEscapeTest, ForeignOwnedStateDirIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "chown to another uid needs root";
  NoteSkips();
  for (mode_t mode : {0777, 0755}) {
    fs::path state = work_ / fmt::format("foreign-{:o}", mode);
    Plant(state, kId, Record(kId, DeadSupervisor()), mode);
    for (const fs::path& p : {state, state / "sandboxes", state / "trash",
                              state / "sandboxes" / kId, state / "sandboxes" / kId / "meta.json"}) {
      ASSERT_EQ(chown(p.c_str(), 65534, 65534), 0) << p;
    }
    auto r = Cli(state, {"sandbox", "ls"});
    EXPECT_NE(r.code, 0) << "a state dir of uid 65534 was used:\n" << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(state.string()));
    EXPECT_THAT(r.err, HasSubstr("uid 65534"));
    ExpectUntouched(fmt::format("sandbox ls in a state dir of uid 65534, mode {:o}", mode));
  }
  // Ours, but its sandboxes/ is not.
  fs::path state = work_ / "foreign-sub";
  Plant(state, kId, Record(kId, DeadSupervisor()), 0700);
  ASSERT_EQ(chown((state / "sandboxes").c_str(), 65534, 65534), 0);
  auto r = Cli(state, {"sandbox", "ls"});
  EXPECT_NE(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr((state / "sandboxes").string()));
  ExpectUntouched("sandbox ls with sandboxes/ of uid 65534");
}

// DEEPBOX_STATE_DIR naming a symlink (which another user could re-point).
TEST_F(StateDirEscapeTest, SymlinkedStateDirIsRefused) {
  NoteSkips();
  fs::path real = work_ / "real";
  Plant(real, kId, Record(kId, DeadSupervisor()), 0700);
  fs::create_directory_symlink(real, work_ / "link");
  auto r = Cli(work_ / "link", {"sandbox", "ls"});
  EXPECT_NE(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("symbolic link"));
  ExpectUntouched("sandbox ls through a symlinked state dir");
}

// A state dir that passes every check (ours, 0700) with a planted record: what
// the record names is still not believed (the second, independent defence).
TEST_F(StateDirEscapeTest, PlantedRecordIsNotActedOn) {
  NoteSkips();
  fs::path state = work_ / "state";
  // exec: the record's supervisor is a live process of ours that is no
  // supervisor; the audit's second reproduction sent root's secret to the
  // record's socket.
  const std::string a = "sb-00000000000a", b = "sb-00000000000b", c = "sb-00000000000c";
  Plant(state, a, Record(a, LiveImpostor()), 0700);
  auto r = Cli(state, {"sandbox", "exec", "-i", a, "--", "sh", "-c", "cat > /workspace/key"},
               "root-secret-h2\n");
  EXPECT_NE(r.code, 0) << r.out << r.err;
  EXPECT_THAT(daemon_->received(), ::testing::Not(HasSubstr("cm9vdC1zZWNyZXQt")));
  ExpectUntouched("sandbox exec of a planted record");
  // rm: would SIGTERM the record's supervisor, then reap.
  Plant(state, b, Record(b, LiveImpostor()), 0700);
  r = Cli(state, {"sandbox", "rm", b});
  ExpectUntouched("sandbox rm of a planted record");
  // ls: a record whose supervisor is dead is reaped; only the record goes.
  Plant(state, c, Record(c, DeadSupervisor()), 0700);
  r = Cli(state, {"sandbox", "ls"});
  EXPECT_EQ(r.code, 0) << r.err;
  ExpectUntouched("sandbox ls reaping a planted record");
  EXPECT_FALSE(fs::exists(state / "sandboxes" / c)) << "a dead supervisor's record was not reaped";
  r = Cli(state, {"sandbox", "ls", "-q"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "") << "planted records are listed as sandboxes";
  ExpectUntouched("sandbox ls");
}

// Connect itself, given a record (the MCP server, pools and `run` call it
// with records they read): the socket is the one derived from the id.
TEST_F(StateDirEscapeTest, ConnectUsesTheSocketOfTheIdNotOfTheRecord) {
  local::lifecycle::LocalProviderOptions o;
  o.state_dir = (work_ / "state").string();
  o.deepbox_binary = kDeepbox;
  o.sandboxd_binary = std::string(DEEPBOX_BIN_DIR) + "/deepbox-sandboxd";
  auto provider = local::lifecycle::LocalSandboxProvider::Create(o);
  ASSERT_TRUE(provider.has_value()) << provider.error().ToString();
  local::lifecycle::SandboxMeta meta;
  meta.id = kId;
  meta.ready = true;
  meta.socket = (work_ / "evil.sock").string();
  auto client = (*provider)->Connect(meta);
  if (client) {
    ExecRequest req;
    req.argv = {"sh", "-c", "cat > /workspace/key"};
    req.stdin_data = "root-secret-h2";
    auto r = (*client)->Exec(req);
    EXPECT_FALSE(r.has_value());
  }
  ExpectUntouched("Connect(record) and an exec");
}

}  // namespace
}  // namespace deepbox::escape
