// deploy/k8s/bundle-sandboxd.sh makes the copy of deepbox-sandboxd that the
// SandboxTemplate's init container puts into any image at /deepbox. No OCI
// builder runs here, so this test checks the claim that matters: the bundle
// runs in a root that has nothing else in it (no libc, no shell, no loader
// outside /deepbox), as uid 1000 like the pod, and serves files and
// processes over its socket.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/temp_dir.h"
#include "net/http_client.h"
#include "sandbox/sandboxd_client.h"

namespace deepbox {
namespace {

namespace fs = std::filesystem;

std::string Capture(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// One gRPC Execute of `argv` over cleartext HTTP/2 on a unix socket, framed
// by hand (HPACK literals without indexing): the bytes of every frame the
// daemon sends until it ends stream 1, or the connection ends.
std::string RawGrpcExecute(const std::string& socket_path, const std::vector<std::string>& argv) {
  auto frame = [](uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload) {
    std::string f;
    for (int shift : {16, 8, 0}) f += static_cast<char>((payload.size() >> shift) & 0xff);
    f += static_cast<char>(type);
    f += static_cast<char>(flags);
    for (int shift : {24, 16, 8, 0}) f += static_cast<char>((stream >> shift) & 0xff);
    return f + payload;
  };
  auto literal = [](const std::string& name, const std::string& value) {
    return std::string(1, '\0') + static_cast<char>(name.size()) + name +
           static_cast<char>(value.size()) + value;
  };
  auto field = [](int number, const std::string& bytes) {  // < 128 bytes
    return std::string(1, static_cast<char>(number << 3 | 2)) + static_cast<char>(bytes.size()) +
           bytes;
  };
  std::string config;
  for (const auto& a : argv) config += field(1, a);
  const std::string message = field(1, config);
  std::string grpc(1, '\0');
  for (int shift : {24, 16, 8, 0}) grpc += static_cast<char>((message.size() >> shift) & 0xff);
  grpc += message;
  const std::string headers =
      std::string("\x83\x86") + literal(":path", "/process.v1.ProcessService/Execute") +
      literal(":authority", "x") + literal("content-type", "application/grpc");
  const std::string request = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, "") +
                              frame(1, 4, 1, headers) + frame(0, 1, 1, grpc);
  std::string out;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path.c_str());
  timeval tv{30, 0};  // a safety net against a hang
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return out;
  }
  for (;;) {
    // Stop at a frame on stream 1 that ends it (the trailers).
    for (size_t off = 0; out.size() - off >= 9;) {
      size_t length = (size_t{static_cast<uint8_t>(out[off])} << 16) |
                      (size_t{static_cast<uint8_t>(out[off + 1])} << 8) |
                      static_cast<uint8_t>(out[off + 2]);
      if (out.size() - off < 9 + length) break;
      if (out[off + 3] == 1 && (out[off + 4] & 1) != 0 && out[off + 8] == 1) {
        close(fd);
        return out;
      }
      off += 9 + length;
    }
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

class BundleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (chroot and a mount namespace)";
    tmp_.emplace("deepbox-bundle");
    dir_ = tmp_->path().string();
    root_ = dir_ + "/root";
    for (const char* d : {"deepbox", "workspace", "tmp", "proc", "dev"}) {
      fs::create_directories(root_ + "/" + d);
    }
    ASSERT_EQ(chown((root_ + "/workspace").c_str(), 1000, 1000), 0);
    ASSERT_EQ(chmod((root_ + "/tmp").c_str(), 01777), 0);
    // Mount points for the two device nodes a container runtime provides.
    for (const char* d : {"null", "urandom"}) std::ofstream(root_ + "/dev/" + d);
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
    tmp_.reset();
  }

  // The bundled daemon in its own mount namespace, chrooted into root_.
  void StartDaemon(const std::vector<std::string>& extra_args = {}) {
    std::string proc = root_ + "/proc";
    std::string null_dev = root_ + "/dev/null";
    std::string urandom_dev = root_ + "/dev/urandom";
    std::vector<std::string> args = {"/deepbox/bin/deepbox-sandboxd", "--root-dir=/workspace",
                                     "--listen", "unix:/tmp/sbd.sock"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      // Only async-signal-safe calls until exec.
      if (unshare(CLONE_NEWNS) != 0) _exit(120);
      if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(121);
      if (mount("proc", proc.c_str(), "proc", 0, nullptr) != 0) _exit(122);
      if (mount("/dev/null", null_dev.c_str(), nullptr, MS_BIND, nullptr) != 0) _exit(123);
      if (mount("/dev/urandom", urandom_dev.c_str(), nullptr, MS_BIND, nullptr) != 0) _exit(123);
      if (chroot(root_.c_str()) != 0 || chdir("/") != 0) _exit(124);
      if (setgroups(0, nullptr) != 0 || setgid(1000) != 0 || setuid(1000) != 0) _exit(125);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }

  // The bundle script's output in root_/deepbox, as the init container makes
  // it: "rc=0" and whatever it printed.
  std::string Bundle() {
    return Capture(std::string(DEEPBOX_SOURCE_DIR) + "/deploy/k8s/bundle-sandboxd.sh " +
                   DEEPBOX_SANDBOXD_BINARY + " " + root_ + "/deepbox /deepbox 2>&1; echo rc=$?");
  }

  std::optional<deepbox::testing::TempDir> tmp_;
  std::string dir_, root_;
  pid_t pid_ = -1;
};

TEST_F(BundleTest, RunsInAnOtherwiseEmptyRootAsUid1000) {
  std::string bundle = root_ + "/deepbox";
  std::string out = Bundle();
  ASSERT_NE(out.find("rc=0"), std::string::npos) << out;
  // The binary's loader is the bundle's own.
  std::string interp = Capture("patchelf --print-interpreter " + bundle + "/bin/deepbox-sandboxd");
  EXPECT_EQ(interp.rfind("/deepbox/lib/ld-linux", 0), 0u) << interp;
  // The root has nothing but the bundle: no libc outside /deepbox.
  EXPECT_FALSE(fs::exists(root_ + "/lib"));
  EXPECT_FALSE(fs::exists(root_ + "/usr"));

  StartDaemon();
  std::string socket = root_ + "/tmp/sbd.sock";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(socket) && std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;  // reaped: TearDown must not signal a pid that may be reused
      FAIL() << "the bundled daemon exited: status " << status << " (120-127: setup step failed)";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(fs::exists(socket)) << "the bundled daemon did not listen";

  // The socket file exists from bind(); the daemon listens just after.
  auto client = SandboxdClient::Connect("unix:" + socket);
  for (int i = 0; i < 250 && !client; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    client = SandboxdClient::Connect("unix:" + socket);
  }
  ASSERT_TRUE(client) << client.error().ToString();
  Sandbox& sb = **client;
  ASSERT_TRUE(sb.Write("hello.txt", "from the bundle\n", 0644));
  auto read = sb.Read("hello.txt", {});
  ASSERT_TRUE(read) << read.error().ToString();
  EXPECT_EQ(read->content, "from the bundle\n");
  auto list = sb.List(sb.root());
  ASSERT_TRUE(list) << list.error().ToString();
  ASSERT_EQ(list->size(), 1u);
  // Tar streams (sandbox cp): libarchive is dlopen()ed by the daemon, so the
  // bundle carries it although ldd does not list it.
  EXPECT_TRUE(fs::exists(bundle + "/lib/libarchive.so.13"));
  {
    auto http = net::HttpClient::Create("unix:" + socket);
    ASSERT_TRUE(http) << http.error().ToString();
    net::ClientRequest tar;
    tar.method = "POST";
    tar.target = "/deepbox/v1/fs/tar/download";
    tar.headers.Set("Content-Type", "application/json");
    tar.body = R"({"paths":["hello.txt"]})";
    auto got = (*http)->Send(tar);
    ASSERT_TRUE(got) << got.error().ToString();
    EXPECT_EQ(got->status, 200) << got->body;
    EXPECT_NE(got->body.find("from the bundle"), std::string::npos);
  }
  // Written as the pod's user.
  struct stat st {};
  ASSERT_EQ(stat((root_ + "/workspace/hello.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);

  // Processes: the only program in this root is the daemon itself.
  ExecRequest req;
  req.argv = {"/deepbox/bin/deepbox-sandboxd", "--help"};
  auto ran = sb.Exec(req);
  ASSERT_TRUE(ran) << ran.error().ToString();
  EXPECT_EQ(ran->kind, ExitKind::kExited);
  EXPECT_EQ(ran->exit_code, 0) << ran->stderr_data;
  EXPECT_NE(ran->stdout_data.find("--root-dir"), std::string::npos) << ran->stdout_data;
  // gRPC (the upstream SDK's sandboxd runtime): libnghttp2 is dlopen()ed on
  // the first HTTP/2 connection, so the bundle carries it although ldd does
  // not list it. The ExecuteResponse's stdout is raw bytes in a DATA frame.
  EXPECT_TRUE(fs::exists(bundle + "/lib/libnghttp2.so.14"));
  std::string grpc = RawGrpcExecute(socket, {"/deepbox/bin/deepbox-sandboxd", "--help"});
  EXPECT_NE(grpc.find("--root-dir"), std::string::npos) << grpc;
  EXPECT_EQ(grpc.find("libnghttp2"), std::string::npos) << grpc;
  // And a missing program is a typed spawn failure, not a crash.
  req.argv = {"/bin/sh", "-c", "true"};
  ran = sb.Exec(req);
  ASSERT_TRUE(ran) << ran.error().ToString();
  EXPECT_EQ(ran->kind, ExitKind::kSpawnFailed);
}

// The pod's daemon checks its claim's token with OpenSSL, which it dlopen()s
// (net/openssl_loader.h): the bundle carries libssl and libcrypto although
// ldd does not list them, and the daemon finds them there.
TEST_F(BundleTest, ChecksTokensWithTheBundledOpenSsl) {
  std::string bundle = root_ + "/deepbox";
  std::string out = Bundle();
  ASSERT_NE(out.find("rc=0"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(bundle + "/lib/libssl.so.3"));
  EXPECT_TRUE(fs::exists(bundle + "/lib/libcrypto.so.3"));
  std::ofstream(root_ + "/tmp/token") << "bundle-token\n";

  StartDaemon({"--token-file=/tmp/token"});
  std::string socket = root_ + "/tmp/sbd.sock";
  SandboxdClientOptions owner;
  owner.token = "bundle-token";
  auto client = SandboxdClient::Connect("unix:" + socket, owner);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!client && std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      FAIL() << "the bundled daemon exited: status " << status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    client = SandboxdClient::Connect("unix:" + socket, owner);
  }
  ASSERT_TRUE(client) << client.error().ToString();
  EXPECT_TRUE((*client)->Stat("."));
  SandboxdClientOptions stranger;
  stranger.token = "bundle-tokem";
  auto refused = SandboxdClient::Connect("unix:" + socket, stranger);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kUnauthenticated) << refused.error().ToString();
}

TEST(BundleScriptTest, RejectsBadArguments) {
  std::string script = std::string(DEEPBOX_SOURCE_DIR) + "/deploy/k8s/bundle-sandboxd.sh";
  EXPECT_NE(Capture(script + " 2>&1; echo rc=$?").find("rc=2"), std::string::npos);
  EXPECT_NE(Capture(script + " " + DEEPBOX_SANDBOXD_BINARY + " /tmp/x relative 2>&1; echo rc=$?")
                .find("MOUNT must be an absolute path"),
            std::string::npos);
  EXPECT_NE(Capture(script + " /nonexistent /tmp/x /deepbox 2>&1; echo rc=$?").find("rc=1"),
            std::string::npos);
}

}  // namespace
}  // namespace deepbox
