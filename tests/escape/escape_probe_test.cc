// The escape-probe suite: every probe runs inside a real sandbox, launched the
// production way (deepbox-sandboxd as init from a read-only bind, the probe run
// through the daemon's exec API as the agent's code would be) and must not breach.
// A probe exits 0 only on a breach; some checks also need the host's view, which
// the driver adds (file contents, hostname, surviving processes, listeners).
//
// Network: probes only contact loopback or test hosts in network namespaces this
// test creates (an uplink netns standing in for the host, a testhost netns with
// 10.123.0.2, 169.254.169.254 and 198.18.0.2), as in src/local/network_test.cc.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"
#include "local/image_root.h"
#include "local/launcher.h"
#include "local/namespaces.h"
#include "local/netns.h"
#include "local/network.h"
#include "local/sandboxd_bundle.h"
#include "local/testing/host_userland.h"
#include "local/testing/netns_holder.h"
#include "local/testing/test_world.h"
#include "local/uplink.h"
#include "sandbox/sandboxd_client.h"

namespace deepbox::escape {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kProbeInside[] = "/workspace/escape_probe";

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& p, const std::string& content, mode_t mode = 0644) {
  std::ofstream(p, std::ios::binary) << content;
  chmod(p.c_str(), mode);
}

std::string RandomToken() {
  unsigned char b[12];
  std::ifstream("/dev/urandom", std::ios::binary).read(reinterpret_cast<char*>(b), sizeof(b));
  static const char* hex = "0123456789abcdef";
  std::string s = "dbxtok";
  for (unsigned char c : b) {
    s += hex[c >> 4];
    s += hex[c & 15];
  }
  return s;
}

bool Root() { return geteuid() == 0; }

// Host processes whose command line contains `needle` (the test's own excluded).
std::vector<pid_t> HostProcessesWith(const std::string& needle) {
  std::vector<pid_t> found;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    pid_t pid = std::stoi(name);
    if (pid == getpid()) continue;
    std::string cmd = ReadAll(e.path() / "cmdline");
    if (cmd.find(needle) != std::string::npos) found.push_back(pid);
  }
  return found;
}

// A listener that answers every connection with `reply` and counts connections
// in a pipe. Runs in a forked child (optionally inside a network namespace).
class Listener {
 public:
  // TCP on ip:port (port 0 = any) inside netns_fd (-1 = the test's own netns).
  static std::unique_ptr<Listener> Tcp(const std::string& ip, int port, const std::string& reply,
                                       int netns_fd = -1) {
    auto l = std::unique_ptr<Listener>(new Listener());
    l->Start(reply, [ip, port, netns_fd]() -> int {
      if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) != 0) return -1;
      int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      int one = 1;
      setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
      if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return -1;
      return s;
    });
    return l;
  }
  // Unix socket at `path`, or abstract when path starts with '@'.
  static std::unique_ptr<Listener> Unix(const std::string& path, const std::string& reply) {
    auto l = std::unique_ptr<Listener>(new Listener());
    l->Start(reply, [path]() -> int {
      int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::memcpy(a.sun_path, path.data(), path.size());
      socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
      if (path[0] == '@') {
        a.sun_path[0] = '\0';
      } else {
        len += 1;
      }
      if (bind(s, reinterpret_cast<sockaddr*>(&a), len) != 0) return -1;
      return s;
    });
    return l;
  }

  ~Listener() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool ready() const { return port_ >= 0; }
  int port() const { return port_; }
  // Connections accepted so far.
  int Accepted() {
    char buf[64];
    for (;;) {
      ssize_t n = read(events_.get(), buf, sizeof(buf));
      if (n <= 0) break;
      accepted_ += static_cast<int>(n);
    }
    return accepted_;
  }

 private:
  Listener() = default;
  void Start(const std::string& reply, const std::function<int()>& make_socket) {
    int ready[2], events[2];
    if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(events, O_CLOEXEC | O_NONBLOCK) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(ready[0]);
      close(events[0]);
      int s = make_socket();
      if (s < 0 || listen(s, 64) != 0) _exit(2);
      sockaddr_in a{};
      socklen_t len = sizeof(a);
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
      int port = a.sin_family == AF_INET ? ntohs(a.sin_port) : 0;
      (void)!write(ready[1], &port, sizeof(port));
      for (;;) {
        int c = accept4(s, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        (void)!write(events[1], "c", 1);
        (void)!write(c, reply.data(), reply.size());
        (void)!write(c, "\n", 1);
        close(c);
      }
    }
    close(ready[1]);
    close(events[1]);
    events_.reset(events[0]);
    int port = -1;
    if (read(ready[0], &port, sizeof(port)) != static_cast<ssize_t>(sizeof(port))) port = -1;
    port_ = port;
    close(ready[0]);
  }

  pid_t pid_ = -1;
  int port_ = -1;
  int accepted_ = 0;
  UniqueFd events_;
};

// A network namespace held by a paused child.
using TestNetns = local::testing::NetnsHolder;

// A running sandbox with its daemon client.
struct Box {
  local::SandboxProcess sp;
  std::unique_ptr<SandboxdClient> client;
};

struct ProbeRun {
  bool ran = false;   // the daemon answered
  std::string error;  // why not
  ExecResult result;
};

class EscapeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!local::UserNamespacesAvailable()) GTEST_SKIP() << "user namespaces are not available";
    tmp_dir_.emplace("deepbox-escape", "/tmp");  // short: the daemon's socket is in it
    tmp_ = tmp_dir_->path();
    chmod(tmp_.c_str(), 0755);
    token_ = RandomToken();
    hostdir_ = tmp_ / "host";
    fs::create_directory(hostdir_);
    WriteFile(hostdir_ / "marker", "host marker " + token_ + "\n");
    WriteFile(hostdir_ / "target", "original\n");
    workspace_ = tmp_ / "workspace";
    fs::create_directory(workspace_);
    // A private copy of the daemon: a breach must not damage the build's binary.
    fs::create_directory(tmp_ / "bin");
    sandboxd_ = tmp_ / "bin" / "deepbox-sandboxd";
    fs::copy_file(ESCAPE_SANDBOXD_BIN, sandboxd_);
    chmod(sandboxd_.c_str(), 0755);
    sandboxd_content_ = ReadAll(sandboxd_);
    ASSERT_FALSE(sandboxd_content_.empty());
    static int counter = 0;
    spec_.id = "esc-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    spec_.runtime_dir = tmp_ / "rt";
    spec_.workspace_dir = workspace_;
    spec_.sandboxd_binary = sandboxd_;
    spec_.argv = {local::kSandboxdPath, "--listen", local::kSandboxdListen, "--root-dir",
                  "/workspace"};
    spec_.daemon_listener = true;
    spec_.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                 "HOME=/workspace", "LANG=C.UTF-8", "USER=sandbox"};
    spec_.use_cgroups = Root();
  }

  void TearDown() override { tmp_dir_.reset(); }

  // Launches spec_, copies the probes in, connects to the daemon.
  Result<std::unique_ptr<Box>> Start() {
    auto box = std::make_unique<Box>();
    UniqueFd log(
        open((tmp_ / "sandboxd.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    local::SandboxSpec spec = spec_;
    spec.stderr_fd = log.get();
    spec.stdout_fd = log.get();
    auto sp = local::Launch(spec);
    if (!sp) return tl::unexpected(sp.error());
    box->sp = std::move(*sp);
    const uint32_t owner = Root() ? local::kDefaultRootHostId : geteuid();
    for (const auto& [src, name] : std::vector<std::pair<fs::path, std::string>>{
             {ESCAPE_PROBE_BIN, "escape_probe"},
             {fs::path(ESCAPE_SCRIPTS_DIR) / "sh_host_tools.sh", "sh_host_tools.sh"},
             {fs::path(ESCAPE_SCRIPTS_DIR) / "sh_token_search.sh", "sh_token_search.sh"}}) {
      fs::path dst = workspace_ / name;
      std::error_code ec;
      fs::copy_file(src, dst, fs::copy_options::overwrite_existing, ec);
      if (ec) return MakeError(ErrorCode::kInternal, "copy " + src.string() + ": " + ec.message());
      chmod(dst.c_str(), 0755);
      if (Root()) (void)!chown(dst.c_str(), owner, owner);
    }
    // The launcher bound the socket before init ran; requests wait in its
    // backlog until the daemon accepts.
    fs::path sock = box->sp.daemon_socket();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    // The socket file appears at bind(), slightly before listen(): retry until it answers.
    for (;;) {
      auto client = SandboxdClient::Connect("unix:" + sock.string());
      if (client) {
        box->client = std::move(*client);
        return box;
      }
      if (std::chrono::steady_clock::now() > deadline) return tl::unexpected(client.error());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  // Runs `escape_probe NAME ARGS...` (or a shell probe: NAME ends in .sh) via the daemon.
  ProbeRun Run(Box& box, const std::string& name, const std::vector<std::string>& args = {}) {
    ExecRequest req;
    if (name.size() > 3 && name.substr(name.size() - 3) == ".sh") {
      req.argv = {"/bin/sh", "/workspace/" + name};
    } else {
      req.argv = {kProbeInside, name};
    }
    req.argv.insert(req.argv.end(), args.begin(), args.end());
    req.timeout = std::chrono::milliseconds(120000);
    ProbeRun run;
    auto r = box.client->Exec(req);
    if (!r) {
      run.error = r.error().ToString();
      return run;
    }
    run.ran = true;
    run.result = *r;
    return run;
  }

  // The verdict: exit 0 is a breach; exit 1 held; a kill is a hold when allowed.
  void ExpectHeld(const ProbeRun& run, const std::string& name, bool may_be_killed = false) {
    ASSERT_TRUE(run.ran) << name << ": the daemon did not answer: " << run.error;
    const ExecResult& r = run.result;
    std::string out = r.combined.empty() ? r.stdout_data + r.stderr_data : r.combined;
    if (!out.empty()) std::cout << "[probe] " << out << (out.back() != '\n' ? "\n" : "");
    RecordProperty("probe_" + name, out);
    if (r.kind == ExitKind::kExited && r.exit_code == 0) {
      ADD_FAILURE() << "BREACH by probe " << name << ": " << out;
    } else if (r.kind == ExitKind::kExited && r.exit_code == 1) {
      SUCCEED();
    } else if (may_be_killed && r.kind == ExitKind::kSignaled) {
      std::cout << "[probe] " << name << ": HELD: killed by signal " << r.signal << "\n";
    } else {
      ADD_FAILURE() << "probe " << name << " did not run as designed: " << ExitKindName(r.kind)
                    << " code " << r.exit_code << " signal " << r.signal << " " << r.error << ": "
                    << out;
    }
  }

  // The host's view after an attack on the daemon: a fresh connection to the
  // socket reaches the real daemon (it runs a command and reads a file only
  // the host could have put in the workspace) and never the impostor's token.
  void ExpectRealDaemon(Box& box) {
    const std::string fresh = RandomToken();
    WriteFile(workspace_ / "host-proof", fresh + "\n");
    SandboxdClientOptions o;
    o.connect_timeout = std::chrono::milliseconds(5000);
    auto client = SandboxdClient::Connect("unix:" + box.sp.daemon_socket().string(), o);
    ASSERT_TRUE(client.has_value())
        << "the real daemon no longer answers: " << client.error().ToString();
    ExecRequest req;
    req.argv = {"/bin/cat", "/workspace/host-proof"};
    req.timeout = std::chrono::milliseconds(20000);
    auto r = (*client)->Exec(req);
    ASSERT_TRUE(r.has_value()) << r.error().ToString()
                               << "\ndaemon log: " << ReadAll(tmp_ / "sandboxd.log");
    EXPECT_EQ(r->stdout_data, fresh + "\n");
    EXPECT_THAT(r->stdout_data + r->stderr_data, Not(HasSubstr(token_)));
    auto info = (*client)->Stat("/workspace/host-proof");
    ASSERT_TRUE(info.has_value()) << info.error().ToString();
    EXPECT_EQ(info->size, static_cast<int64_t>(fresh.size() + 1));
  }
  void ExpectImpostorIdle() {
    std::string log = ReadAll(workspace_ / "impostor.log");
    EXPECT_EQ(log, "") << "BREACH: the host connected to the sandbox's impostor daemon";
  }

  // Start + Run + ExpectHeld.
  void RunHeld(const std::string& name, const std::vector<std::string>& args = {}) {
    auto box = Start();
    ASSERT_TRUE(box.has_value()) << box.error().ToString();
    ExpectHeld(Run(**box, name, args), name);
  }

  std::optional<deepbox::testing::TempDir> tmp_dir_;
  fs::path tmp_;
  fs::path hostdir_;
  fs::path workspace_;
  fs::path sandboxd_;
  std::string sandboxd_content_;
  std::string token_;
  local::SandboxSpec spec_;
};

// ------------------------------------------------------------- simple probes

// Probes that need nothing from the host but their arguments.
struct SimpleCase {
  const char* name;
  std::function<std::vector<std::string>(EscapeTest*)> args;
};

void PrintTo(const SimpleCase& c, std::ostream* os) { *os << c.name; }

class SimpleProbe : public EscapeTest, public ::testing::WithParamInterface<SimpleCase> {
 public:
  const fs::path& hostdir() const { return hostdir_; }
  const std::string& token() const { return token_; }
};

std::vector<std::string> NoArgs(EscapeTest*) { return {}; }

// Each of these is only a sandbox-side check: the probe's exit code is the verdict.
const SimpleCase kSimple[] = {
    {"host_read",
     [](EscapeTest* t) -> std::vector<std::string> {
       auto* s = static_cast<SimpleProbe*>(t);
       return {s->hostdir().string(), s->token()};
     }},
    {"chroot_escape",
     [](EscapeTest* t) -> std::vector<std::string> {
       auto* s = static_cast<SimpleProbe*>(t);
       return {s->hostdir().string(), s->token()};
     }},
    {"hardlink",
     [](EscapeTest* t) -> std::vector<std::string> {
       return {static_cast<SimpleProbe*>(t)->hostdir().string()};
     }},
    {"sh_token_search.sh",
     [](EscapeTest* t) -> std::vector<std::string> {
       return {static_cast<SimpleProbe*>(t)->token()};
     }},
    {"host_pids",
     [](EscapeTest*) -> std::vector<std::string> { return {std::to_string(getpid())}; }},
    {"write_usr", NoArgs},
    {"proc_sys_write", NoArgs},
    {"sysrq_trigger", NoArgs},
    {"sys_write", NoArgs},
    {"proc_masks", NoArgs},
    {"capabilities", NoArgs},
    {"setuid_root", NoArgs},
    {"ptrace", NoArgs},
    {"setuid_binaries", NoArgs},
    {"seccomp_removal", NoArgs},
    {"personality", NoArgs},
    {"foreign_abi", NoArgs},
    {"rlimit_raise", NoArgs},
    {"realtime_sched", NoArgs},
    {"mount", NoArgs},
    {"unshare_userns", NoArgs},
    {"setns", NoArgs},
    {"pivot_root", NoArgs},
    {"open_by_handle", NoArgs},
    {"kexec", NoArgs},
    {"kernel_modules", NoArgs},
    {"bpf", NoArgs},
    {"perf_event_open", NoArgs},
    {"userfaultfd", NoArgs},
    {"io_uring", NoArgs},
    {"keyctl", NoArgs},
    {"mknod", NoArgs},
    {"dev_access", NoArgs},
    {"tiocsti", NoArgs},
    {"clock_settime", NoArgs},
    {"reboot", NoArgs},
    {"swapon", NoArgs},
    {"acct", NoArgs},
    {"quotactl_ioperm", NoArgs},
    {"socket_families", NoArgs},
    {"daemon_fd_steal", NoArgs},
    {"raw_socket", NoArgs},
    {"netlink_admin", NoArgs},
    {"sh_host_tools.sh", NoArgs},
};

TEST_P(SimpleProbe, Holds) {
  const SimpleCase& c = GetParam();
  RunHeld(c.name, c.args(this));
}

INSTANTIATE_TEST_SUITE_P(Escape, SimpleProbe, ::testing::ValuesIn(kSimple),
                         [](const ::testing::TestParamInfo<SimpleCase>& info) {
                           std::string n = info.param.name;
                           for (char& ch : n) {
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

// ------------------------------------------------------- a sandbox on an image

// Issue 24: the same probes in a sandbox whose root is an image's layers (a
// layer made of this host's shell and coreutils, owned as root's image cache
// owns them), with the daemon from its bundle; and afterwards the layer is
// exactly as it was (nothing inside could write into the cache).
class ImageProbe : public SimpleProbe {
 protected:
  void SetUp() override {
    SimpleProbe::SetUp();
    if (IsSkipped()) return;
    if (auto support = local::ProbeImageRoots(); !support.works) {
      GTEST_SKIP() << "no image roots here: " << support.reason;
    }
    layer_ = tmp_ / "layer";
    local::testing::HostUserland land = local::testing::CollectHostUserland();
    for (const auto& file : land.files) {
      fs::path to = layer_ / fs::path(file).relative_path();
      fs::create_directories(to.parent_path());
      fs::copy_file(file, to);
    }
    for (const auto& [link, target] : land.symlinks) {
      fs::path at = layer_ / fs::path(link).relative_path();
      fs::create_directories(at.parent_path());
      if (!fs::exists(at)) fs::create_symlink(target, at);
    }
    fs::create_directories(layer_ / "etc");
    fs::create_directories(layer_ / "var/tmp");
    chmod((layer_ / "var/tmp").c_str(), 01777);
    if (Root()) {
      for (const auto& e : fs::recursive_directory_iterator(layer_)) {
        (void)!lchown(e.path().c_str(), local::kImageRootHostId, local::kImageRootHostId);
      }
      (void)!lchown(layer_.c_str(), local::kImageRootHostId, local::kImageRootHostId);
    }
    before_ = LayerState();
    auto bundle = local::ResolveSandboxdBundle(sandboxd_, tmp_ / "bundles");
    ASSERT_TRUE(bundle) << bundle.error().message;
    spec_.image_layers = {layer_};
    spec_.sandboxd_binary.reset();
    spec_.sandboxd_bundle = bundle->files;
    spec_.sandboxd_bundle_loader = bundle->loader;
    spec_.argv =
        local::SandboxdBundleArgv({"--listen", local::kSandboxdListen, "--root-dir", "/workspace"});
  }
  void TearDown() override {
    if (!layer_.empty() && !before_.empty()) {
      EXPECT_EQ(LayerState(), before_) << "the image's layer changed";
    }
    SimpleProbe::TearDown();
  }
  std::string LayerState() const {
    std::string out;
    for (const auto& e : fs::recursive_directory_iterator(layer_)) {
      struct stat st {};
      lstat(e.path().c_str(), &st);
      out += fmt::format("{} {:o} {} {} {}\n", e.path().string(), st.st_mode, st.st_uid, st.st_size,
                         st.st_mtim.tv_sec);
    }
    return out;
  }

  fs::path layer_;
  std::string before_;
};

TEST_P(ImageProbe, Holds) {
  const SimpleCase& c = GetParam();
  RunHeld(c.name, c.args(this));
}

// Binary probes (the image has a shell and a few coreutils, not the host's tools).
const SimpleCase kOnImage[] = {
    {"host_read",
     [](EscapeTest* t) -> std::vector<std::string> {
       auto* s = static_cast<SimpleProbe*>(t);
       return {s->hostdir().string(), s->token()};
     }},
    {"chroot_escape",
     [](EscapeTest* t) -> std::vector<std::string> {
       auto* s = static_cast<SimpleProbe*>(t);
       return {s->hostdir().string(), s->token()};
     }},
    {"hardlink",
     [](EscapeTest* t) -> std::vector<std::string> {
       return {static_cast<SimpleProbe*>(t)->hostdir().string()};
     }},
    {"write_usr", NoArgs},
    {"setuid_root", NoArgs},
    {"setuid_binaries", NoArgs},
    {"capabilities", NoArgs},
    {"mount", NoArgs},
    {"mknod", NoArgs},
    {"open_by_handle", NoArgs},
    {"daemon_fd_steal", NoArgs},
};

INSTANTIATE_TEST_SUITE_P(EscapeOnImage, ImageProbe, ::testing::ValuesIn(kOnImage),
                         [](const ::testing::TestParamInfo<SimpleCase>& info) {
                           std::string n = info.param.name;
                           for (char& ch : n) {
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

// Positive control: outside any sandbox, probes must see the breach (so "held"
// inside means something). Only probes that are harmless on a bare host.
TEST_F(EscapeTest, ProbesDetectBreachesOutsideASandbox) {
  std::vector<std::string> probes = {"personality", "unshare_userns", "ptrace"};
  if (Root()) {
    probes.push_back("capabilities");
    probes.push_back("setuid_root");
  }
  for (const auto& name : probes) {
    int out[2];
    ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
    pid_t pid = fork();
    if (pid == 0) {
      dup2(out[1], 1);
      execl(ESCAPE_PROBE_BIN, "escape_probe", name.c_str(), nullptr);
      _exit(127);
    }
    close(out[1]);
    std::string text;
    char buf[512];
    for (ssize_t n; (n = read(out[0], buf, sizeof(buf))) > 0;) {
      text.append(buf, static_cast<size_t>(n));
    }
    close(out[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << name << " did not detect the (intended) breach outside a sandbox: " << text;
  }
}

// ------------------------------------------------------- host-side checks

TEST_F(EscapeTest, HostWrite) {
  RunHeld("host_write", {hostdir_.string(), token_});
  EXPECT_EQ(ReadAll(hostdir_ / "target"), "original\n");
  EXPECT_FALSE(fs::exists(hostdir_ / "new"));
}

TEST_F(EscapeTest, WriteSandboxdBinary) {
  for (const char* probe : {"write_sandboxd", "proc_exe_write", "setxattr_sandboxd"}) {
    RunHeld(probe);
    EXPECT_EQ(ReadAll(sandboxd_), sandboxd_content_) << probe << " changed the daemon binary";
    struct stat st;
    ASSERT_EQ(stat(sandboxd_.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0755u);
    char buf[256];
    EXPECT_LE(listxattr(sandboxd_.c_str(), buf, sizeof(buf)), 0) << "xattrs appeared";
  }
}

TEST_F(EscapeTest, WriteUsrLeavesHostUntouched) {
  RunHeld("write_usr");
  EXPECT_FALSE(fs::exists("/usr/deepbox-escape-probe"));
  EXPECT_FALSE(fs::exists("/etc/deepbox-escape-probe"));
  EXPECT_FALSE(fs::exists("/deepbox-escape-probe"));
}

TEST_F(EscapeTest, CorePatternUntouched) {
  std::string before = ReadAll("/proc/sys/kernel/core_pattern");
  RunHeld("core_pattern");
  EXPECT_EQ(ReadAll("/proc/sys/kernel/core_pattern"), before);
}

TEST_F(EscapeTest, SymlinksResolveInsideTheSandbox) {
  auto box = Start();
  ASSERT_TRUE(box.has_value()) << box.error().ToString();
  ExpectHeld(Run(**box, "symlink_host", {hostdir_.string(), token_}), "symlink_host");
  // The daemon's own file API (what the agent's tools use) must not follow them out either.
  for (const char* p : {"/workspace/escape-link-marker", "/workspace/escape-link-dir/marker"}) {
    auto read = (*box)->client->Read(p, {});
    if (read) {
      EXPECT_THAT(read->content, Not(HasSubstr(token_))) << p;
    }
  }
  EXPECT_THAT(ReadAll(hostdir_ / "marker"), HasSubstr(token_));
}

// The daemon's file API serves the whole sandbox (its --files-root is "/" as
// the sandbox's init): what the agent's file tools use must give no more than
// a process of the sandbox has. The daemon's own /proc entries (its memory,
// environment, fds: the host's listener), other processes' memory (the daemon
// is their ancestor), read-only mounts and the host stay out of reach.
TEST_F(EscapeTest, DaemonFileApiGivesNoMoreThanTheSandbox) {
  auto box = Start();
  ASSERT_TRUE(box.has_value()) << box.error().ToString();
  Sandbox& c = *(*box)->client;
  // The whole sandbox, as commands see it.
  auto os_release = c.Read("/etc/os-release", {});
  if (fs::exists("/etc/os-release")) {
    EXPECT_TRUE(os_release.has_value()) << os_release.error().ToString();
  }
  // A long-running process of the sandbox whose memory the daemon may reach.
  ExecRequest sleeper;
  sleeper.shell = "sleep 60 & echo $!";
  sleeper.timeout = std::chrono::milliseconds(20000);
  auto started = c.Exec(sleeper);
  ASSERT_TRUE(started.has_value()) << started.error().ToString();
  std::string pid = started->stdout_data;
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  ASSERT_FALSE(pid.empty());
  for (const std::string& p :
       {std::string("/proc/self/environ"), std::string("/proc/self/mem"),
        std::string("/proc/1/environ"), std::string("/proc/1/mem"), std::string("/proc/1/fd/3"),
        std::string("/proc/1/root/etc/passwd"), std::string("/proc/thread-self/environ"),
        "/proc/" + pid + "/mem", "/proc/" + pid + "/environ", std::string("/dev/fd/3"),
        std::string("/dev/stdin")}) {
    auto r = c.Read(p, {});
    EXPECT_FALSE(r.has_value()) << "BREACH: the daemon served " << p;
    EXPECT_FALSE(c.Download(p).has_value()) << "BREACH: the daemon served " << p;
    EXPECT_FALSE(c.Write(p, "x").has_value()) << "BREACH: the daemon wrote " << p;
  }
  for (const char* dir : {"/proc/self/fd", "/proc/1", "/proc"}) {
    EXPECT_FALSE(c.List(dir).has_value()) << "BREACH: the daemon listed " << dir;
  }
  // Reached through a symlink the sandbox planted: the same.
  ExecRequest plant;
  plant.shell = "ln -sf /proc/1/environ /workspace/env-link && ln -sfn /proc/1 /workspace/init";
  plant.timeout = std::chrono::milliseconds(20000);
  ASSERT_TRUE(c.Exec(plant).has_value());
  EXPECT_FALSE(c.Read("/workspace/env-link", {}).has_value());
  EXPECT_FALSE(c.Read("/workspace/init/mem", {}).has_value());
  // Read-only places stay read-only; the daemon's binary and the host too.
  for (const char* p : {"/.deepbox/sandboxd", "/usr/deepbox-escape-probe",
                        "/etc/deepbox-escape-probe", "/deepbox-escape-probe"}) {
    auto w = c.Write(p, "owned");
    EXPECT_FALSE(w.has_value()) << "BREACH: the daemon wrote " << p;
    if (!w) {
      EXPECT_EQ(w.error().code, ErrorCode::kPermissionDenied) << p << ": " << w.error().message;
    }
  }
  EXPECT_FALSE(c.Delete("/.deepbox/sandboxd").has_value());
  EXPECT_FALSE(c.Delete("/usr/bin", true).has_value());
  EXPECT_EQ(ReadAll(sandboxd_), sandboxd_content_);
  EXPECT_FALSE(fs::exists("/usr/deepbox-escape-probe"));
  EXPECT_FALSE(fs::exists("/etc/deepbox-escape-probe"));
  EXPECT_FALSE(fs::exists("/deepbox-escape-probe"));
  // The host's files are not in the sandbox's filesystem at all.
  auto host = c.Read((hostdir_ / "marker").string(), {});
  if (host) {
    EXPECT_THAT(host->content, Not(HasSubstr(token_)));
  }
}

TEST_F(EscapeTest, HostnameOfTheHostUnchanged) {
  utsname before;
  uname(&before);
  RunHeld("sethostname");
  utsname after;
  uname(&after);
  EXPECT_STREQ(after.nodename, before.nodename);
  EXPECT_STREQ(after.domainname, before.domainname);
}

TEST_F(EscapeTest, EnvironmentDoesNotLeak) {
  const std::string secret = "secret-" + token_;
  setenv("DEEPBOX_ESCAPE_SECRET", secret.c_str(), 1);
  auto box = Start();
  unsetenv("DEEPBOX_ESCAPE_SECRET");
  ASSERT_TRUE(box.has_value()) << box.error().ToString();
  ExpectHeld(Run(**box, "env_leak", {secret}), "env_leak");
}

TEST_F(EscapeTest, InheritedFdsDoNotLeak) {
  WriteFile(hostdir_ / "leak.txt", "leaked " + token_ + "\n");
  int leak = open((hostdir_ / "leak.txt").c_str(), O_RDONLY);  // no O_CLOEXEC on purpose
  ASSERT_GE(leak, 0);
  auto box = Start();
  close(leak);
  ASSERT_TRUE(box.has_value()) << box.error().ToString();
  ExpectHeld(Run(**box, "fd_leak", {token_}), "fd_leak");
}

TEST_F(EscapeTest, HostIpcObjectsInvisible) {
  const key_t shm_key = static_cast<key_t>(0x64620000 | (getpid() & 0xffff));
  const key_t msg_key = shm_key + 1;
  int shm = shmget(shm_key, 4096, IPC_CREAT | IPC_EXCL | 0666);
  ASSERT_GE(shm, 0) << strerror(errno);
  void* p = shmat(shm, nullptr, 0);
  ASSERT_NE(p, reinterpret_cast<void*>(-1));
  std::strcpy(static_cast<char*>(p), token_.c_str());
  shmdt(p);
  int msq = msgget(msg_key, IPC_CREAT | IPC_EXCL | 0666);
  fs::path posix_shm = "/dev/shm/deepbox-escape-" + token_;
  WriteFile(posix_shm, token_, 0666);
  RunHeld("ipc_namespace", {std::to_string(shm_key), std::to_string(msg_key), token_});
  shmctl(shm, IPC_RMID, nullptr);
  if (msq >= 0) msgctl(msq, IPC_RMID, nullptr);
  fs::remove(posix_shm);
}

TEST_F(EscapeTest, HostTerminalsInvisible) {
  int pty = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);  // a host pty that exists meanwhile
  ASSERT_GE(pty, 0);
  RunHeld("devpts_host");
  close(pty);
}

TEST_F(EscapeTest, HostProcessOfTheSameUidSurvives) {
  if (!Root()) GTEST_SKIP() << "needs root to run a sentinel as the sandbox's host uid";
  pid_t sentinel = fork();
  if (sentinel == 0) {
    if (setresgid(local::kDefaultRootHostId, local::kDefaultRootHostId,
                  local::kDefaultRootHostId) != 0 ||
        setresuid(local::kDefaultRootHostId, local::kDefaultRootHostId,
                  local::kDefaultRootHostId) != 0) {
      _exit(3);
    }
    for (;;) pause();
  }
  ASSERT_GT(sentinel, 0);
  RunHeld("signal_host", {std::to_string(sentinel)});
  int status = 0;
  EXPECT_EQ(waitpid(sentinel, &status, WNOHANG), 0) << "the host sentinel died";
  kill(sentinel, SIGKILL);
  waitpid(sentinel, nullptr, 0);
}

TEST_F(EscapeTest, HostLoopbackUnreachable) {
  auto host = Listener::Tcp("127.0.0.1", 0, token_);
  ASSERT_TRUE(host->ready());
  RunHeld("host_loopback", {token_, "127.0.0.1:" + std::to_string(host->port())});
  EXPECT_EQ(host->Accepted(), 0);
}

TEST_F(EscapeTest, HostUnixSocketsUnreachable) {
  const std::string abstract = "deepbox-escape-" + token_;
  auto host = Listener::Unix("@" + abstract, token_);
  ASSERT_TRUE(host->ready());
  RunHeld("host_unix_sockets", {abstract, token_});
  EXPECT_EQ(host->Accepted(), 0);
}

// The daemon's socket is the host's (rt/run, never mounted in the sandbox), so
// the old attack (replace /.deepbox/run/sandboxd.sock with a symlink to a host
// socket) finds nothing to replace; the host must still reach only its daemon.
TEST_F(EscapeTest, DaemonSocketSymlinkNotFollowedByHost) {
  fs::path trap = hostdir_ / "trap.sock";
  auto host = Listener::Unix(trap.string(), "trap " + token_);
  ASSERT_TRUE(host->ready());
  auto box = Start();
  ASSERT_TRUE(box.has_value()) << box.error().ToString();
  ExpectHeld(Run(**box, "socket_symlink", {trap.string()}), "socket_symlink");
  ExpectRealDaemon(**box);
  EXPECT_EQ(host->Accepted(), 0) << "BREACH: the host connected to a host socket named by "
                                 << "the sandbox";
}

// Take the socket path over from inside (unlink, rename over, bind everywhere):
// the host keeps talking to the real daemon; the impostor never gets a call.
TEST_F(EscapeTest, DaemonSocketCannotBeTakenOver) {
  auto box = Start();
  ASSERT_TRUE(box.has_value()) << box.error().ToString();
  ExpectHeld(Run(**box, "daemon_socket_takeover", {token_}), "daemon_socket_takeover");
  ExpectRealDaemon(**box);
  ExpectImpostorIdle();
}

// Kill the daemon from inside (every signal) and answer in its place: the host
// reaches the real daemon (init ignores signals from inside the sandbox) or, had
// it died, nothing at all; never the impostor.
TEST_F(EscapeTest, DaemonCannotBeKilledAndImpersonated) {
  auto box = Start();
  ASSERT_TRUE(box.has_value()) << box.error().ToString();
  ExpectHeld(Run(**box, "daemon_kill_impersonate", {token_}), "daemon_kill_impersonate");
  auto alive = (*box)->sp.TryWait();
  ASSERT_TRUE(alive.has_value());
  EXPECT_FALSE(alive->has_value())
      << "a process of the sandbox stopped its daemon: " << (*alive)->ToString();
  if (alive->has_value()) {
    SandboxdClientOptions o;
    o.connect_timeout = std::chrono::milliseconds(2000);
    auto c = SandboxdClient::Connect("unix:" + (*box)->sp.daemon_socket().string(), o);
    EXPECT_FALSE(c.has_value()) << "something answered for a dead daemon";
  } else {
    ExpectRealDaemon(**box);
  }
  ExpectImpostorIdle();
}

// -------------------------------------------------------------- resources

// Reads the last number a probe wrote to a progress file (host side).
uint64_t LastProgress(const fs::path& p) {
  std::istringstream in(ReadAll(p));
  uint64_t v = 0, last = 0;
  while (in >> v) last = v;
  return last;
}

TEST_F(EscapeTest, ForkBombContained) {
  constexpr int kLimit = 32;
  spec_.limits.max_processes = kLimit;
  auto box = Start();
  ASSERT_TRUE(box.has_value()) << box.error().ToString();
  ASSERT_TRUE((*box)->sp.limits().processes.enforced) << (*box)->sp.limits().Describe();
  ExpectHeld(Run(**box, "fork_bomb", {std::to_string(kLimit)}), "fork_bomb");
  if (auto pids = (*box)->sp.Pids(); pids) {
    EXPECT_LE(pids->size(), static_cast<size_t>(kLimit));
  }
}

TEST_F(EscapeTest, MemoryBombContained) {
  if (!Root()) GTEST_SKIP() << "the memory limit needs cgroups (root)";
  constexpr uint64_t kLimit = 96ULL << 20;
  spec_.limits.memory_bytes = kLimit;
  auto box = Start();
  ASSERT_TRUE(box.has_value()) << box.error().ToString();
  if (!(*box)->sp.limits().memory.enforced) {
    GTEST_SKIP() << "memory limit not enforced here: " << (*box)->sp.limits().memory.detail;
  }
  ExpectHeld(Run(**box, "memory_bomb", {std::to_string(kLimit)}), "memory_bomb",
             /*may_be_killed=*/true);
  uint64_t peak = LastProgress(workspace_ / "escape-progress");
  std::cout << "[probe] memory_bomb: last progress " << (peak >> 20) << " MiB\n";
  EXPECT_LE(peak, kLimit) << "touched more than the limit";
}

TEST_F(EscapeTest, TmpfsMemoryBombContained) {
  if (!Root()) GTEST_SKIP() << "the memory limit needs cgroups (root)";
  constexpr uint64_t kLimit = 96ULL << 20;
  spec_.limits.memory_bytes = kLimit;
  spec_.limits.tmp_bytes = 1ULL << 30;  // the tmpfs itself would allow 1 GiB
  auto box = Start();
  ASSERT_TRUE(box.has_value()) << box.error().ToString();
  if (!(*box)->sp.limits().memory.enforced) GTEST_SKIP() << "memory limit not enforced here";
  ProbeRun run = Run(**box, "tmpfs_memory_bomb", {std::to_string(kLimit)});
  uint64_t peak = LastProgress(workspace_ / "escape-progress");
  std::cout << "[probe] tmpfs_memory_bomb: last progress " << (peak >> 20) << " MiB\n";
  EXPECT_LE(peak, kLimit) << "BREACH: wrote more tmpfs data than the memory limit";
  // tmpfs pages stay charged after the writer dies, so the OOM killer may take the
  // daemon instead: the sandbox then ends, which contains the bomb too.
  if (run.ran) {
    ExpectHeld(run, "tmpfs_memory_bomb", /*may_be_killed=*/true);
  } else {
    std::cout << "[probe] tmpfs_memory_bomb: HELD: the sandbox's init was OOM-killed (" << run.error
              << ")\n";
  }
}

TEST_F(EscapeTest, DiskFillContained) {
  std::string why;
  if (!local::WorkspaceDiskSupported(&why)) GTEST_SKIP() << why;
  constexpr uint64_t kLimit = 32ULL << 20;
  spec_.limits.workspace_bytes = kLimit;
  auto box = Start();
  ASSERT_TRUE(box.has_value()) << box.error().ToString();
  ASSERT_TRUE((*box)->sp.limits().workspace_disk.enforced);
  ExpectHeld(Run(**box, "disk_fill", {std::to_string(kLimit)}), "disk_fill");
}

TEST_F(EscapeTest, TmpFillContained) {
  constexpr uint64_t kLimit = 16ULL << 20;
  spec_.limits.tmp_bytes = kLimit;
  RunHeld("tmp_fill", {std::to_string(kLimit)});
}

TEST_F(EscapeTest, CpuQuotaContained) {
  if (!Root()) GTEST_SKIP() << "the CPU quota needs cgroups (root)";
  spec_.limits.cpu_cores = 0.25;
  auto box = Start();
  ASSERT_TRUE(box.has_value()) << box.error().ToString();
  if (!(*box)->sp.limits().cpu_rate.enforced) GTEST_SKIP() << "CPU quota not enforced here";
  ExpectHeld(Run(**box, "cpu_quota", {"0.25"}), "cpu_quota");
}

// Starts a detaching probe, checks it is running, destroys the sandbox and checks
// nothing carrying the probe's token is left on the host.
void ExpectNothingOutlives(EscapeTest* t, std::unique_ptr<Box> box, const std::string& token,
                           const std::string& probe) {
  bool seen = false;
  for (int i = 0; i < 100 && !seen; ++i) {
    seen = !HostProcessesWith(token).empty();
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(seen) << probe << ": its detached process never showed up";
  std::vector<pid_t> before;
  if (auto pids = box->sp.Pids(); pids) before = *pids;
  box.reset();  // ~SandboxProcess: kill everything, remove cgroups, dirs
  std::vector<pid_t> left;
  for (int i = 0; i < 200; ++i) {
    left = HostProcessesWith(token);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!left.empty()) {
    ADD_FAILURE() << "BREACH by " << probe << ": " << left.size()
                  << " process(es) outlived the sandbox, e.g. host pid " << left[0];
    for (int round = 0; round < 100 && !left.empty(); ++round) {  // clean up the host
      for (pid_t p : left) kill(p, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      left = HostProcessesWith(token);
    }
  } else {
    std::cout << "[probe] " << probe << ": HELD: nothing left after destruction (" << before.size()
              << " sandbox pids before)\n";
  }
  (void)t;
}

TEST_F(EscapeTest, PidHopperDoesNotOutliveTheSandbox) {
  auto box = Start();
  ASSERT_TRUE(box.has_value()) << box.error().ToString();
  ExpectHeld(Run(**box, "outlive", {token_}), "outlive");
  ExpectNothingOutlives(this, std::move(*box), token_, "outlive");
}

TEST_F(EscapeTest, NoOrphanAfterDelete) {
  auto box = Start();
  ASSERT_TRUE(box.has_value()) << box.error().ToString();
  ExpectHeld(Run(**box, "orphan", {token_}), "orphan");
  ExpectNothingOutlives(this, std::move(*box), token_, "orphan");
}

// ------------------------------------------------------------ public mode

class PublicNetworkEscape : public EscapeTest {
 protected:
  void SetUp() override {
    EscapeTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (!Root()) GTEST_SKIP() << "public mode needs root";
    for (const char* bin : {"/usr/sbin/ip", "/usr/sbin/nft", "/bin/bash"}) {
      if (access(bin, X_OK) != 0) GTEST_SKIP() << bin << " missing";
    }
    uplink_ = std::make_unique<TestNetns>();
    testhost_ = std::make_unique<TestNetns>();
    ASSERT_TRUE(uplink_->ok() && testhost_->ok());
    auto r = uplink_->Ip("link add tup type veth peer name tth netns " +
                         std::to_string(testhost_->pid()) +
                         "\naddr add 10.123.0.1/24 dev tup\nlink set tup up\nlink set lo up\n"
                         "route add default via 10.123.0.2\n");
    ASSERT_TRUE(r.has_value()) << r.error().ToString();
    r = uplink_->Sh("echo 1 > /proc/sys/net/ipv4/ip_forward");
    ASSERT_TRUE(r.has_value()) << r.error().ToString();
    r = testhost_->Ip(
        "addr add 10.123.0.2/24 dev tth\nlink set tth up\nlink set lo up\n"
        "addr add 198.18.0.2/32 dev lo\naddr add 169.254.169.254/32 dev lo\n"
        "route add default via 10.123.0.1\n");
    ASSERT_TRUE(r.has_value()) << r.error().ToString();
    for (int port : {80, 8080, 53}) {
      remote_.push_back(Listener::Tcp("0.0.0.0", port, token_, testhost_->fd()));
      ASSERT_TRUE(remote_.back()->ready());
    }
    uplink_service_ = Listener::Tcp("0.0.0.0", 8081, token_, uplink_->fd());
    ASSERT_TRUE(uplink_service_->ready());
    spec_.network = NetworkMode::kPublic;
    spec_.public_network.uplink = local::UplinkChoice::kVeth;  // WorldEscape tests pasta
    spec_.public_network.uplink_netns = uplink_->path();
    spec_.public_network.slot = 151;
    spec_.public_network.nameservers = {"198.18.0.53"};
    // Benchmarking range: refused by default; the operator's exception opens it.
    spec_.public_network.allowed_cidrs = {"198.18.0.2/32"};
  }

  // Starts a public sandbox and checks the public-like test host answers (so a
  // refusal below means the policy refused, not that the network is down).
  Result<std::unique_ptr<Box>> StartPublic() {
    auto box = Start();
    if (!box) return box;
    if ((*box)->sp.network() != NetworkMode::kPublic) {
      return MakeError(ErrorCode::kUnavailable, "fell back: " + (*box)->sp.network_note());
    }
    ExecRequest req;
    req.shell = "timeout 5 bash -c 'exec 3<>/dev/tcp/198.18.0.2/8080 && head -1 <&3'";
    auto r = (*box)->client->Exec(req);
    if (!r || r->stdout_data.find(token_) == std::string::npos) {
      return MakeError(ErrorCode::kInternal, "the public-like test host is unreachable: " +
                                                 (r ? r->combined : r.error().ToString()));
    }
    return box;
  }

  int Accepted() {
    int n = 0;
    for (auto& l : remote_) n += l->Accepted();
    return n;
  }

  std::unique_ptr<TestNetns> uplink_;
  std::unique_ptr<TestNetns> testhost_;
  std::vector<std::unique_ptr<Listener>> remote_;
  std::unique_ptr<Listener> uplink_service_;
};

TEST_F(PublicNetworkEscape, PrivateRangeMetadataAndUplinkRefused) {
  auto box = StartPublic();
  ASSERT_TRUE(box.has_value()) << box.error().ToString();
  const int sanity = Accepted();  // the 198.18.0.2 check above
  const std::string gw = local::AddressesForSlot(151).gateway;
  ExpectHeld(
      Run(**box, "private_range", {token_, "10.123.0.2:8080", "10.123.0.2:80", "10.123.0.2:53"}),
      "private_range");
  ExpectHeld(Run(**box, "metadata", {token_, "169.254.169.254:80", "169.254.169.254:8080"}),
             "metadata");
  ExpectHeld(
      Run(**box, "uplink_services", {token_, gw + ":8081", "10.123.0.1:8081", "127.0.0.1:8081"}),
      "uplink_services");
  EXPECT_EQ(Accepted(), sanity) << "a refused test host saw a connection";
  EXPECT_EQ(uplink_service_->Accepted(), 0);
}

TEST_F(PublicNetworkEscape, PolicyCannotBeFlushedFromInside) {
  auto box = StartPublic();
  ASSERT_TRUE(box.has_value()) << box.error().ToString();
  ExpectHeld(Run(**box, "netlink_admin"), "netlink_admin");
  ExpectHeld(Run(**box, "sh_host_tools.sh"), "sh_host_tools.sh");
  // The policy is still in force afterwards.
  ExpectHeld(Run(**box, "private_range", {token_, "10.123.0.2:8080"}), "private_range");
  ExpectHeld(Run(**box, "metadata", {token_, "169.254.169.254:80"}), "metadata");
}

TEST_F(PublicNetworkEscape, HostLoopbackUnreachable) {
  auto host = Listener::Tcp("127.0.0.1", 0, token_);
  ASSERT_TRUE(host->ready());
  auto box = StartPublic();
  ASSERT_TRUE(box.has_value()) << box.error().ToString();
  ExpectHeld(Run(**box, "host_loopback", {token_, "127.0.0.1:" + std::to_string(host->port())}),
             "host_loopback");
  EXPECT_EQ(host->Accepted(), 0);
}

// ------------------------------------------- pasta and the allowlist (issue 14)
//
// Each test builds its own internet (local/testing/test_world.h): a "world"
// netns standing in for the host (its own services on 8081, loopback
// included) and a "hosts" netns with the public, private, CGNAT and metadata
// test hosts and the test DNS server. pasta and the proxy run in the world, so
// nothing ever leaves this machine. The same probes run with the launcher as
// root and as uid 65534 (a child that joined the world and dropped root).

// A probe call and, for the unprivileged runs, its result carried over a pipe.
struct ProbeCall {
  std::string name;
  std::vector<std::string> args;
};

std::string Hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

std::string Unhex(const std::string& s) {
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  std::string out;
  for (size_t i = 0; i + 1 < s.size(); i += 2) {
    out += static_cast<char>(nibble(s[i]) * 16 + nibble(s[i + 1]));
  }
  return out;
}

class WorldEscape : public EscapeTest {
 protected:
  void SetUp() override {
    EscapeTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (!Root()) GTEST_SKIP() << "building the test world needs root";
    for (const char* bin : {"/usr/sbin/ip", "/usr/sbin/nft", "/usr/bin/pasta"}) {
      if (access(bin, X_OK) != 0) GTEST_SKIP() << bin << " missing";
    }
    ASSERT_EQ(world_.Build(token_), "");
    spec_.public_network.uplink_netns = world_.ns().path();
    spec_.public_network.nameservers = local::testing::TestWorld::Nameservers();
    // Documentation addresses: the world's hosts are reachable only through
    // the operator's exceptions (the world's own, its gateway and 198.51.100.10
    // stay refused).
    spec_.public_network.allowed_cidrs = local::testing::TestWorld::AllowedCidrs();
  }

  void UsePasta() {
    spec_.network = NetworkMode::kPublic;
    spec_.public_network.uplink = local::UplinkChoice::kPasta;
  }
  void UseAllowlist() {
    spec_.network = NetworkMode::kAllow;
    spec_.public_network.allow = {"allowed.test", "*.allowed.test"};
  }

  // Starts a sandbox from spec_ and runs `calls` in it, with the launcher as
  // root or as uid 65534 inside the world. *skip: why it could not run.
  std::vector<ProbeRun> RunCalls(bool unprivileged, const std::vector<ProbeCall>& calls,
                                 std::string* skip) {
    std::vector<ProbeRun> runs;
    if (!unprivileged) {
      auto box = Start();
      if (!box) {
        ADD_FAILURE() << box.error().ToString();
        return runs;
      }
      for (const auto& c : calls) runs.push_back(Run(**box, c.name, c.args));
      return runs;
    }
    constexpr uid_t kUid = 65534;
    for (const auto& p : {tmp_, workspace_}) {
      if (chown(p.c_str(), kUid, kUid) != 0) ADD_FAILURE() << "chown " << p;
    }
    auto child = local::testing::RunAsUserInNetns(
        world_.ns().fd(), kUid,
        [&](int w) {
          auto say = [w](const std::string& line) { (void)!write(w, line.data(), line.size()); };
          if (!local::UserNamespacesAvailable()) {
            say("SKIP no unprivileged user namespaces here\n");
            return 0;
          }
          spec_.public_network.uplink_netns = "";  // the world is our own netns now
          spec_.use_cgroups = false;
          if (spec_.network == NetworkMode::kPublic) {
            if (std::string why = local::PastaObstacle(spec_.public_network); !why.empty()) {
              say("SKIP " + why + "\n");
              return 0;
            }
          }
          auto box = Start();
          if (!box) {
            say("ERROR " + box.error().ToString() + "\n");
            return 1;
          }
          for (const auto& c : calls) {
            ProbeRun run = Run(**box, c.name, c.args);
            const ExecResult& r = run.result;
            std::string out = r.combined.empty() ? r.stdout_data + r.stderr_data : r.combined;
            say(fmt::format("RUN {} {} {} {} {} {}\n", run.ran ? 1 : 0, static_cast<int>(r.kind),
                            r.exit_code, r.signal, Hex(out), Hex(run.error)));
          }
          return 0;
        },
        /*private_tun=*/true);  // this host's /dev/net/tun may be 0600: see test_world.h
    std::istringstream in(child.output);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("SKIP ", 0) == 0) {
        *skip = line.substr(5);
        return {};
      }
      if (line.rfind("ERROR ", 0) == 0) {
        ADD_FAILURE() << "unprivileged launch failed: " << line.substr(6);
        continue;
      }
      std::istringstream f(line.substr(4));
      int ran = 0, kind = 0;
      ProbeRun run;
      std::string out, err;
      f >> ran >> kind >> run.result.exit_code >> run.result.signal >> out >> err;
      run.ran = ran == 1;
      run.result.kind = static_cast<ExitKind>(kind);
      run.result.combined = Unhex(out);
      run.error = Unhex(err);
      runs.push_back(run);
    }
    if (!WIFEXITED(child.status) || WEXITSTATUS(child.status) != 0) {
      ADD_FAILURE() << "unprivileged child: status " << child.status << ": " << child.output;
    }
    return runs;
  }

  // The public test host answers: a refusal below means the policy refused.
  ProbeCall PublicControl() const {
    return {"egress_ranges", {token_, "203.0.113.10:8080", "[2001:db8:1::10]:8080"}};
  }
  void ExpectReached(const ProbeRun& run) {
    ASSERT_TRUE(run.ran) << run.error;
    EXPECT_TRUE(run.result.kind == ExitKind::kExited && run.result.exit_code == 0)
        << "the public test host is unreachable (positive control): " << run.result.combined;
  }

  std::vector<ProbeCall> PastaCalls() const {
    return {PublicControl(),
            {"egress_ranges",
             {token_,
              "10.99.0.10:8080",
              "[fd00:99::10]:8080",
              "100.64.0.10:8080",
              "169.254.169.254:80",
              "169.254.169.254:8080",
              "[::ffff:10.99.0.10]:8080",
              "[::ffff:169.254.169.254]:80",
              "[64:ff9b::a63:a]:8080",
              "203.0.113.1:8081",
              "[2001:db8::1]:8081",
              "127.0.0.1:8081",
              "[::1]:8081",
              "udp:10.99.0.10:9053",
              "udp:[fd00:99::10]:9053",
              "udp:169.254.169.254:9053",
              "udp:10.99.0.10:53",
              "203.0.113.254:8080",
              "[2001:db8::ffff]:8080",
              "198.51.100.10:8080",
              "203.0.113.1:443"}},
            {"netlink_admin", {}},
            {"egress_ranges", {token_, "10.99.0.10:8080", "169.254.169.254:80"}}};
  }

  std::vector<ProbeCall> AllowCalls() const {
    return {{"proxy_bypass",
             {token_, "allowed.test", "other.test", "rebind.allowed.test", "203.0.113.10",
              "hostself.allowed.test"}},
            {"egress_ranges",
             {token_, "[2001:db8:1::10]:8080", "10.99.0.10:8080", "169.254.169.254:80",
              "203.0.113.1:8081", "udp:203.0.113.53:53", "udp:[2001:db8:1::53]:53"}},
            {"netlink_admin", {}},
            {"proxy_bypass",
             {token_, "allowed.test", "other.test", "rebind.allowed.test", "203.0.113.10",
              "hostself.allowed.test"}}};
  }

  void ExpectAllHeld(const std::vector<ProbeRun>& runs, const std::vector<ProbeCall>& calls,
                     size_t first) {
    ASSERT_EQ(runs.size(), calls.size());
    for (size_t i = first; i < runs.size(); ++i) ExpectHeld(runs[i], calls[i].name);
  }

  local::testing::TestWorld world_;
};

TEST_F(WorldEscape, PastaPolicyHoldsAsRoot) {
  UsePasta();
  auto calls = PastaCalls();
  std::string skip;
  auto runs = RunCalls(false, calls, &skip);
  ASSERT_EQ(runs.size(), calls.size());
  ExpectReached(runs[0]);
  ExpectAllHeld(runs, calls, 1);
}

TEST_F(WorldEscape, PastaPolicyHoldsUnprivileged) {
  UsePasta();
  auto calls = PastaCalls();
  std::string skip;
  auto runs = RunCalls(true, calls, &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_EQ(runs.size(), calls.size());
  ExpectReached(runs[0]);
  ExpectAllHeld(runs, calls, 1);
}

TEST_F(WorldEscape, AllowlistHoldsAsRoot) {
  UseAllowlist();
  auto calls = AllowCalls();
  std::string skip;
  auto runs = RunCalls(false, calls, &skip);
  ExpectAllHeld(runs, calls, 0);
}

TEST_F(WorldEscape, AllowlistHoldsUnprivileged) {
  UseAllowlist();
  auto calls = AllowCalls();
  std::string skip;
  auto runs = RunCalls(true, calls, &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ExpectAllHeld(runs, calls, 0);
}

TEST_F(WorldEscape, SandboxesCannotReachEachOther) {
  UsePasta();
  // Sandbox A: a listener on every address, port 9000, answering the token.
  local::SandboxSpec a = spec_;
  a.id = spec_.id + "a";
  a.runtime_dir = tmp_ / "rt-a";
  a.workspace_dir = tmp_ / "ws-a";
  fs::create_directory(a.workspace_dir);
  a.daemon_listener = false;
  a.sandboxd_binary.reset();
  a.argv = {"/usr/bin/python3", "-c",
            "import socket\n"
            "s = socket.socket(socket.AF_INET6); s.bind(('::', 9000)); s.listen()\n"
            "while True:\n"
            "    c, _ = s.accept(); c.send(b'" +
                token_ + "\\n'); c.close()\n"};
  auto listener = local::Launch(a);
  ASSERT_TRUE(listener.has_value()) << listener.error().ToString();
  ASSERT_EQ(listener->uplink(), local::Uplink::kPasta);
  // Sandbox B tries A through every address they could share.
  std::string skip;
  std::vector<ProbeCall> calls = {
      PublicControl(),
      {"sandbox_to_sandbox",
       {token_, "203.0.113.1:9000", "[2001:db8::1]:9000", "127.0.0.1:9000", "[::1]:9000",
        "203.0.113.254:9000", "10.0.2.2:9000"}}};
  auto runs = RunCalls(false, calls, &skip);
  ASSERT_EQ(runs.size(), calls.size());
  ExpectReached(runs[0]);
  ExpectHeld(runs[1], "sandbox_to_sandbox");
}

}  // namespace
}  // namespace deepbox::escape
