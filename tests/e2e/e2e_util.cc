#include "e2e_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/subprocess.h"
#include "local/lifecycle/provider.h"
#include "local/namespaces.h"

extern char** environ;

namespace deepbox::e2e {

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

bool Eventually(const std::function<bool()>& done, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return done();
}

std::vector<std::string> MakeEnv(const std::map<std::string, std::string>& set) {
  static const char* kDropped[] = {"ANTHROPIC_API_KEY",
                                   "ANTHROPIC_BASE_URL",
                                   "OPENAI_API_KEY",
                                   "OPENAI_BASE_URL",
                                   "NO_COLOR",
                                   "DEEPBOX_MODEL",
                                   "DEEPBOX_SANDBOX",
                                   "DEEPBOX_CONFIG",
                                   "DEEPBOX_FIB_REPLAY",
                                   "DEEPBOX_THREADS_DIR",
                                   "DEEPBOX_STATE_DIR",
                                   "XDG_STATE_HOME",
                                   "AGENT_SANDBOX_NAMESPACE",
                                   "SSL_CERT_FILE",
                                   "TERM",
                                   "DEEPBOX_K8S_CLAIM_KEY_FILE",
                                   "DEEPBOX_SNAPSHOT_DIR",
                                   "DEEPBOX_SNAPSHOT_QUOTA"};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    std::string name = kv.substr(0, kv.find('='));
    bool drop = set.count(name) > 0;
    for (const char* d : kDropped) drop = drop || name == d;
    if (!drop) env.push_back(kv);
  }
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  return env;
}

namespace {

// `env` ("NAME=value" each) as the whole environment of a child.
void SetEnvironment(SubprocessOptions& o, const std::vector<std::string>& env) {
  o.replace_environment = true;
  for (const std::string& kv : env) {
    size_t eq = kv.find('=');
    o.env.emplace_back(kv.substr(0, eq), eq == std::string::npos ? "" : kv.substr(eq + 1));
  }
}

int DecodeStatus(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

Process::Process(const std::vector<std::string>& argv_in, const std::vector<std::string>& env_in,
                 const fs::path& dir, const std::string& stdin_data, const fs::path& cwd) {
  static int counter = 0;
  int n = counter++;
  out_ = dir / ("out-" + std::to_string(n));
  err_ = dir / ("err-" + std::to_string(n));
  fs::path in = dir / ("in-" + std::to_string(n));
  WriteFile(in, stdin_data);
  SubprocessOptions o;
  o.argv = argv_in;
  SetEnvironment(o, env_in);
  o.stdin_from.path = in.string();
  o.stdout_to.path = out_.string();
  o.stderr_to.path = err_.string();
  o.cwd = cwd.string();
  o.new_process_group = true;  // as a shell would start a job
  auto child = Subprocess::Spawn(o);
  EXPECT_TRUE(child.has_value()) << child.error().ToString();
  if (child) pid_ = child->Release();  // Wait() and the destructor reap it
}

Process::~Process() {
  if (pid_ > 0 && !code_) {
    kill(pid_, SIGKILL);
    Wait();
  }
}

int Process::Wait() {
  if (code_) return *code_;
  if (pid_ <= 0) return -1;
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  code_ = DecodeStatus(status);
  return *code_;
}

std::optional<int> Process::WaitAtMost(std::chrono::seconds limit) {
  if (code_) return code_;
  if (pid_ <= 0) return -1;
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      code_ = DecodeStatus(status);
      return code_;
    }
    if (r < 0 && errno != EINTR) return std::nullopt;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(20ms);
  }
}

SilentServer::SilentServer() {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  EXPECT_GE(listen_fd_, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(listen(listen_fd_, 16), 0);
  socklen_t len = sizeof addr;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] {
    std::vector<int> conns;
    for (;;) {
      std::vector<pollfd> fds = {{stop_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      for (int c : conns) fds.push_back({c, POLLIN, 0});
      if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) break;
      if (fds[0].revents != 0) break;
      if (fds[1].revents != 0) {
        int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) {
          conns.push_back(c);
          accepted_.fetch_add(1);
        }
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        char buf[4096];
        if (read(fds[i].fd, buf, sizeof buf) <= 0) {
          close(fds[i].fd);
          conns.erase(std::find(conns.begin(), conns.end(), fds[i].fd));
        }
      }
    }
    for (int c : conns) close(c);
  });
}

SilentServer::~SilentServer() {
  uint64_t one = 1;
  (void)!write(stop_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  close(stop_fd_);
}

PtyProcess::PtyProcess(const std::vector<std::string>& argv_in,
                       const std::vector<std::string>& env_in, const fs::path& dir) {
  struct winsize ws {};
  ws.ws_col = 120;
  ws.ws_row = 40;
  int slave = -1;
  char name[256];
  if (openpty(&master_, &slave, name, nullptr, &ws) != 0) {
    ADD_FAILURE() << "openpty: " << std::strerror(errno);
    master_ = -1;
    return;
  }
  fcntl(master_, F_SETFD, FD_CLOEXEC);
  SubprocessOptions o;
  o.argv = argv_in;
  SetEnvironment(o, env_in);
  o.cwd = dir.string();
  o.new_session = true;  // the terminal becomes its controlling one
  o.terminal = name;
  auto child = Subprocess::Spawn(o);
  close(slave);
  EXPECT_TRUE(child.has_value()) << child.error().ToString();
  if (child) pid_ = child->Release();  // Wait() and the destructor reap it
}

PtyProcess::~PtyProcess() {
  if (pid_ > 0 && !code_) {
    kill(pid_, SIGKILL);
    Wait();
  }
  if (master_ >= 0) close(master_);
}

bool PtyProcess::ReadSome(int timeout_ms) {
  if (eof_) return false;
  struct pollfd pfd = {master_, POLLIN, 0};
  int rc = poll(&pfd, 1, timeout_ms);
  if (rc <= 0) return true;
  char buf[4096];
  ssize_t n = read(master_, buf, sizeof buf);
  if (n <= 0) {
    if (n < 0 && errno == EINTR) return true;
    eof_ = true;  // EIO: the child side closed
    return false;
  }
  output_.append(buf, static_cast<size_t>(n));
  return true;
}

bool PtyProcess::WaitFor(const std::string& text, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (output_.find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (!ReadSome(50)) return output_.find(text) != std::string::npos;
  }
  return true;
}

bool PtyProcess::WaitForNext(const std::string& text, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (size_t at = output_.find(text, next_); at != std::string::npos) {
      next_ = at + text.size();
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (!ReadSome(50) && output_.find(text, next_) == std::string::npos) return false;
  }
}

void PtyProcess::Write(const std::string& text) {
  ASSERT_EQ(write(master_, text.data(), text.size()), static_cast<ssize_t>(text.size()));
}

int PtyProcess::Wait() {
  if (code_) return *code_;
  if (pid_ <= 0) return -1;
  auto deadline = std::chrono::steady_clock::now() + 300s;
  while (ReadSome(50) && std::chrono::steady_clock::now() < deadline) {
  }
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  code_ = DecodeStatus(status);
  return *code_;
}

void E2eTest::SetUp() {
  if (!local::UserNamespacesAvailable()) GTEST_SKIP() << "user namespaces are not available";
  for (const auto& bin : {kDeepbox, kExample, kBinDir + "/deepbox-sandboxd"}) {
    if (access(bin.c_str(), X_OK) != 0) GTEST_SKIP() << bin << " is not built";
  }
  tmp_.emplace("dbx-e2e", "/tmp");
  dir_ = tmp_->path();
  fs::create_directories(dir_ / "xdg");
}

void E2eTest::TearDown() {
  if (dir_.empty()) return;
  // Whatever a failed test left behind.
  local::lifecycle::LocalProviderOptions o;
  o.state_dir = (dir_ / "state").string();
  o.deepbox_binary = kDeepbox;
  o.sandboxd_binary = kBinDir + "/deepbox-sandboxd";
  if (fs::exists(o.state_dir)) {
    if (auto p = local::lifecycle::LocalSandboxProvider::Create(o)) {
      if (auto list = (*p)->ListMeta()) {
        for (const auto& m : *list) (void)(*p)->Delete(m.id);
      }
    }
  }
  tmp_.reset();
}

std::vector<std::string> E2eTest::Env(std::map<std::string, std::string> extra) const {
  extra.emplace("DEEPBOX_STATE_DIR", (dir_ / "state").string());
  extra.emplace("XDG_STATE_HOME", (dir_ / "xdg").string());
  return MakeEnv(extra);
}

E2eTest::Outcome E2eTest::Run(const std::vector<std::string>& argv,
                              std::map<std::string, std::string> env,
                              const std::string& stdin_data) {
  Process p(argv, Env(std::move(env)), dir_, stdin_data);
  Outcome o;
  o.code = p.Wait();
  o.out = p.out();
  o.err = p.err();
  return o;
}

json::array E2eTest::Sandboxes(const std::string& selector) {
  auto o = Run({kDeepbox, "sandbox", "ls", "--json", "--selector", selector});
  EXPECT_EQ(o.code, 0) << o.err;
  auto v = ParseJson(o.out);
  EXPECT_TRUE(v.has_value() && v->is_array()) << o.out;
  if (!v || !v->is_array()) return {};
  return v->as_array();
}

std::string E2eTest::WaitForSandbox(const std::string& selector) {
  std::string id;
  EXPECT_TRUE(Eventually([&] {
    auto list = Sandboxes(selector);
    if (list.size() != 1 || !list[0].is_object()) return false;
    id = GetOptString(list[0].as_object(), "id").value_or("");
    return !id.empty();
  }));
  return id;
}

std::vector<json::object> JsonLines(const std::string& text) {
  std::vector<json::object> out;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    auto o = ParseJsonObject(line);
    EXPECT_TRUE(o.has_value()) << "not a JSON object: " << line;
    if (o) out.push_back(std::move(*o));
  }
  return out;
}

}  // namespace deepbox::e2e
