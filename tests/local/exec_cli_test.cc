// `deepbox sandbox exec` as a user runs it: the real binary, a real local
// sandbox, pipes, files and a pseudo-terminal. Byte-exact output (binary
// files survive `exec -- cat`), every documented exit code, stdin streamed
// with -i, an interactive shell with -it.
#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "cli_fixture.h"
#include "common/subprocess.h"
#include "common/testing/temp_dir.h"
#include "local/lifecycle/provider.h"
#include "local/namespaces.h"

namespace deepbox::local::lifecycle {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

const std::string kBinDir = DEEPBOX_BIN_DIR;
const std::string kDeepbox = kBinDir + "/deepbox";

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& p, const std::string& data) {
  std::ofstream(p, std::ios::binary) << data;
}

// Polls `done` until it holds or `limit` passes (a safety net against hangs,
// never an assertion on time).
bool Eventually(const std::function<bool()>& done, std::chrono::seconds limit = 60s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return done();
}

int ExitCodeOf(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};

// One sandbox for the whole suite (creating one per test costs seconds).
class ExecCliTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    if (!UserNamespacesAvailable() || access(kDeepbox.c_str(), X_OK) != 0) return;
    auto dir = deepbox::testing::TempDir::Make("dbx", "/tmp");  // short: socket paths fit 107 bytes
    if (!dir) return;
    state_dir_ = new deepbox::testing::TempDir(std::move(*dir));
    state_ = new fs::path(state_dir_->path());
    setenv("DEEPBOX_STATE_DIR", state_->c_str(), 1);
    // A TTL is the safety net should this test crash before its teardown.
    auto r = Cli({"sandbox", "create", "--cold", "--ttl", "900", "--network", "none"});
    std::string id = r.out;
    while (!id.empty() && id.back() == '\n') id.pop_back();
    if (r.code == 0 && Store::ValidId(id)) id_ = new std::string(id);
  }
  static void TearDownTestSuite() {
    if (id_ != nullptr) (void)Cli({"sandbox", "rm", *id_});
    delete state_dir_;  // removes the tree
    unsetenv("DEEPBOX_STATE_DIR");
    delete id_;
    delete state_;
    state_dir_ = nullptr;
    id_ = nullptr;
    state_ = nullptr;
  }
  void SetUp() override {
    if (!UserNamespacesAvailable()) GTEST_SKIP() << "user namespaces are not available here";
    if (access(kDeepbox.c_str(), X_OK) != 0) GTEST_SKIP() << kDeepbox << " is not built";
    ASSERT_NE(id_, nullptr) << "could not create the suite's sandbox";
  }
  static const std::string& Id() { return *id_; }
  static fs::path File(const std::string& name) {
    return *state_ / fmt::format("{}-{}", counter_++, name);
  }

  // Runs deepbox with stdin from `stdin_file` (or empty), stdout and stderr to files.
  static CliResult Cli(const std::vector<std::string>& args, const fs::path& stdin_file = {}) {
    fs::path in = stdin_file.empty() ? File("stdin") : stdin_file;
    if (stdin_file.empty()) WriteFile(in, "");
    fs::path out = File("out"), err = File("err");
    pid_t pid = -1;
    int rc = testing::SpawnDeepbox(args, in, out, err, &pid);
    CliResult r;
    if (rc != 0) return r;
    int status = 0;
    waitpid(pid, &status, 0);
    r.code = ExitCodeOf(status);
    r.out = ReadFile(out);
    r.err = ReadFile(err);
    return r;
  }

  static deepbox::testing::TempDir* state_dir_;
  static fs::path* state_;
  static std::string* id_;
  static int counter_;
};

deepbox::testing::TempDir* ExecCliTest::state_dir_ = nullptr;
fs::path* ExecCliTest::state_ = nullptr;
std::string* ExecCliTest::id_ = nullptr;
int ExecCliTest::counter_ = 0;

std::string BinaryData() {
  std::string s;
  for (int i = 0; i < 256; ++i) s.push_back(static_cast<char>(i));
  std::mt19937 gen(42);
  std::string random(3 << 20, '\0');
  for (auto& c : random) c = static_cast<char>(gen() & 0xff);
  return s + random + s;
}

// ---------------------------------------------------------------- bytes

TEST_F(ExecCliTest, BinaryStdinAndOutputAreByteExact) {
  const std::string data = BinaryData();
  fs::path in = File("in.bin");
  WriteFile(in, data);
  auto r = Cli({"sandbox", "exec", "-i", Id(), "--", "sh", "-c", "cat > data.bin"}, in);
  ASSERT_EQ(r.code, 0) << r.err;

  r = Cli({"sandbox", "exec", Id(), "--", "cat", "data.bin"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.out.size(), data.size());
  EXPECT_TRUE(r.out == data);

  r = Cli({"sandbox", "exec", Id(), "--", "sh", "-c", "cat data.bin >&2"});
  ASSERT_EQ(r.code, 0);
  ASSERT_EQ(r.err.size(), data.size());
  EXPECT_TRUE(r.err == data);

  // The example: `exec -- gzip -c x > x.gz` gives a valid archive.
  r = Cli({"sandbox", "exec", Id(), "--", "gzip", "-c", "data.bin"});
  ASSERT_EQ(r.code, 0) << r.err;
  fs::path gz = File("data.bin.gz");
  WriteFile(gz, r.out);
  fs::path unpacked = File("unpacked");
  std::string cmd = fmt::format("gzip -dc {} > {}", gz.string(), unpacked.string());
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_TRUE(ReadFile(unpacked) == data);
}

// ---------------------------------------------------------------- exit codes

TEST_F(ExecCliTest, UsageErrorsExit2) {
  auto r = Cli({"sandbox", "exec", "-e", "BAD", Id(), "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("bad --env 'BAD': use K=V"));
  r = Cli({"sandbox", "exec", "-e", "=x", Id(), "--", "true"});
  EXPECT_EQ(r.code, 2);
  // A word that could be a name (sandbox create --name) is looked up as one.
  r = Cli({"sandbox", "exec", "not-an-id", "--", "true"});
  EXPECT_EQ(r.code, 3);
  EXPECT_THAT(r.err, HasSubstr("no sandbox named 'not-an-id' (ids look like sb-"));
  r = Cli({"sandbox", "exec", "not an id!", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("is not a sandbox id or name"));
  r = Cli({"sandbox", "exec", Id(), "--"});
  EXPECT_EQ(r.code, 2);
  // -it needs a terminal on stdin (here a file).
  r = Cli({"sandbox", "exec", "-it", Id(), "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("not a TTY"));
  r = Cli({"sandbox", "exec", "--timeout", "x", Id(), "--", "true"});
  EXPECT_EQ(r.code, 2);
}

TEST_F(ExecCliTest, MissingSandboxExits3) {
  auto r = Cli({"sandbox", "exec", "sb-000000000000", "--", "true"});
  EXPECT_EQ(r.code, 3);
  EXPECT_THAT(r.err, HasSubstr("no sandbox 'sb-000000000000'"));
}

TEST_F(ExecCliTest, ExpiredSandboxExits3) {
  auto created = Cli({"sandbox", "create", "--cold", "--ttl", "1", "--network", "none"});
  ASSERT_EQ(created.code, 0) << created.err;
  std::string id = created.out.substr(0, created.out.find('\n'));
  ASSERT_TRUE(Eventually([&] { return !fs::exists(*state_ / "sandboxes" / id); }));
  auto r = Cli({"sandbox", "exec", id, "--", "true"});
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("expired"));
}

TEST_F(ExecCliTest, CommandStatusesPassThrough) {
  EXPECT_EQ(Cli({"sandbox", "exec", Id(), "--", "sh", "-c", "exit 3"}).code, 3);
  auto r = Cli({"sandbox", "exec", Id(), "--", "/no/such/program"});
  EXPECT_EQ(r.code, 127);
  EXPECT_THAT(r.err, HasSubstr("ENOENT"));
  r = Cli({"sandbox", "exec", "--cwd", "no-such-dir", Id(), "--", "true"});
  EXPECT_EQ(r.code, 125);
  EXPECT_THAT(r.err, HasSubstr("no-such-dir"));
  r = Cli({"sandbox", "exec", "--timeout", "1", Id(), "--", "sleep", "60"});
  EXPECT_EQ(r.code, 124);
  EXPECT_THAT(r.err, HasSubstr("timed out"));
}

// `exec ... | head -1`: the reader leaving is a normal end (141, silent) and
// the command is stopped. `script` writes its pid to `pidfile` and prints
// "line" at least once.
void ExpectStoppedWhenTheReaderLeaves(const std::string& script, const std::string& pidfile) {
  fs::path err = ExecCliTest::File("err");
  SubprocessOptions o;
  o.argv = {kDeepbox, "sandbox", "exec", ExecCliTest::Id(), "--", "sh", "-c", script};
  o.new_process_group = false;
  o.capture_stdout = true;
  o.stderr_to.path = err.string();
  auto child = Subprocess::Spawn(o);
  ASSERT_TRUE(child.has_value()) << child.error().ToString();
  UniqueFd out = child->TakeStdout();
  // Read the first line, then go away like `head -1`.
  std::string got;
  char c;
  while (got.find('\n') == std::string::npos && read(out.get(), &c, 1) == 1) got.push_back(c);
  EXPECT_EQ(got, "line\n");
  out.reset();
  EXPECT_EQ(ExitCodeOf(child->Wait()), 141);
  EXPECT_EQ(ReadFile(err), "");
  auto pid_text = ExecCliTest::Cli({"sandbox", "exec", ExecCliTest::Id(), "--", "cat", pidfile});
  ASSERT_EQ(pid_text.code, 0);
  std::string in_sandbox = pid_text.out.substr(0, pid_text.out.find('\n'));
  EXPECT_TRUE(Eventually([&] {
    return ExecCliTest::Cli(
               {"sandbox", "exec", ExecCliTest::Id(), "--", "sh", "-c", "kill -0 " + in_sandbox})
               .code != 0;
  }));
}

TEST_F(ExecCliTest, ClosedStdoutStopsTheCommandSilently) {
  ExpectStoppedWhenTheReaderLeaves("echo $$ > yes.pid; exec yes line", "yes.pid");
}

// A command that has gone quiet is stopped too: keepalives check the reader.
TEST_F(ExecCliTest, ClosedStdoutStopsASilentCommand) {
  ExpectStoppedWhenTheReaderLeaves("echo $$ > quiet.pid; echo line; exec sleep 600", "quiet.pid");
}

TEST_F(ExecCliTest, HelpDocumentsEveryExitCode) {
  auto r = Cli({"sandbox", "exec", "--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* text : {"  2 ", "  3 ", "  124 ", "  125 ", "  126 ", "  127 ", "  128+N ",
                           "  141 ", "--tty", "--interactive", "-i", "-t", "--timeout"}) {
    EXPECT_THAT(r.out, HasSubstr(text));
  }
}

// ---------------------------------------------------------------- signals

// Issue 29 M5: Ctrl-C (SIGINT), SIGTERM or SIGHUP on `exec` without -t stops
// the command in the sandbox, not only the client: the counter it writes
// stops growing, and deepbox exits 128+N.
class ExecSignalTest : public ExecCliTest, public ::testing::WithParamInterface<int> {};

TEST_P(ExecSignalTest, StopSignalStopsTheCommandInTheSandbox) {
  const int sig = GetParam();
  const std::string count = fmt::format("/workspace/count-{}", sig);
  fs::path in = File("stdin"), out = File("out"), err = File("err");
  WriteFile(in, "");
  pid_t pid = -1;
  ASSERT_EQ(testing::SpawnDeepbox(
                {"sandbox", "exec", Id(), "--", "sh", "-c",
                 "i=0; while :; do i=$((i+1)); echo $i > " + count + "; sleep 0.1; done"},
                in, out, err, &pid),
            0);
  auto value = [&] {
    auto r = Cli({"sandbox", "exec", Id(), "--", "cat", count});
    return r.code == 0 ? std::stol("0" + r.out) : -1L;
  };
  ASSERT_TRUE(Eventually([&] { return value() >= 3; })) << ReadFile(err);
  ASSERT_EQ(kill(pid, sig), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(ExitCodeOf(status), 128 + sig) << ReadFile(err);
  EXPECT_THAT(ReadFile(err), HasSubstr("stopping the command in the sandbox"));
  // Stopped: the counter no longer moves (it moved every 0.1 s).
  long stopped = value();
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(value(), stopped) << "the command kept running after the signal";
  auto ps = Cli({"sandbox", "exec", Id(), "--", "sh", "-c", "ps -eo args | grep -c '[w]hile :'"});
  EXPECT_EQ(ps.out, "0\n") << ps.err;
}

INSTANTIATE_TEST_SUITE_P(Signals, ExecSignalTest, ::testing::Values(SIGINT, SIGTERM, SIGHUP),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(info.param == SIGINT    ? "SIGINT"
                                              : info.param == SIGTERM ? "SIGTERM"
                                                                      : "SIGHUP");
                         });

// ---------------------------------------------------------------- exit codes

// Issue 29 L7: right after a sandbox's daemon died, exec says "is gone" (exit
// 3) in one line, not 125 with the raw connect() error; or, if the daemon
// was restarted meanwhile, the command just runs.
TEST_F(ExecCliTest, DaemonThatJustDiedIsGoneNotAConnectError) {
  auto created = Cli({"sandbox", "create", "--cold", "--ttl", "300", "--network", "none"});
  ASSERT_EQ(created.code, 0) << created.err;
  std::string id = created.out.substr(0, created.out.find('\n'));
  LocalProviderOptions o;
  o.state_dir = state_->string();
  o.deepbox_binary = kDeepbox;
  auto provider = LocalSandboxProvider::Create(o);
  ASSERT_TRUE(provider) << provider.error().message;
  auto meta = (*provider)->Get(id);
  ASSERT_TRUE(meta) << meta.error().message;
  ASSERT_GT(meta->init.pid, 0);
  ASSERT_EQ(kill(meta->init.pid, SIGKILL), 0);
  auto r = Cli({"sandbox", "exec", id, "--", "echo", "alive"});
  EXPECT_NE(r.code, 125) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("connect(")));
  if (r.code == 3) {
    EXPECT_THAT(r.err, HasSubstr("is gone"));
    // One line: no stray newline inside the message.
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
  } else {
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, "alive\n");
  }
  (void)Cli({"sandbox", "rm", id});
}

// Issue 29 L8 / L6: a misspelt --pool is a usage error; an unknown
// subcommand names the ones that exist.
TEST_F(ExecCliTest, UnknownPoolAndSubcommandsAreUsageErrors) {
  auto r = Cli({"sandbox", "create", "--pool", "nosuchpool", "--network", "none"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--pool nosuchpool: no such warm pool"));
  EXPECT_EQ(r.out, "");
  r = Cli({"sandbox", "frob"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command 'frob'"));
  EXPECT_THAT(r.err, HasSubstr("create, exec, ls, inspect, rm, pause, suspend, resume, network, "
                               "logs, snapshot, fork, cp"));
  r = Cli({"frob"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command 'frob'"));
  EXPECT_THAT(r.err, HasSubstr("sandbox, pool, doctor"));
  r = Cli({"sandbox"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("a command is required (commands: create, exec, ls, inspect, rm, "
                               "pause, suspend, resume, network, logs, snapshot, fork, cp"));
  // Flags and real commands still parse.
  EXPECT_EQ(Cli({"sandbox", "ls", "-q"}).code, 0);
  EXPECT_EQ(Cli({"--version"}).code, 0);
}

// Issue 29 L10: `cp --help` says what happens to a symlink out of the tree.
TEST_F(ExecCliTest, CpHelpStatesWhatHappensToSymlinks) {
  auto r = Cli({"sandbox", "cp", "--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("a symlink that points outside the copied tree"));
  EXPECT_THAT(r.out, HasSubstr("is skipped with a one-line note"));
}

// ---------------------------------------------------------------- -i

// The second line is written only after the command answered the first:
// stdin reaches the command as it arrives, not at its end.
TEST_F(ExecCliTest, InteractiveStdinStreams) {
  SubprocessOptions o;
  o.argv = {kDeepbox, "sandbox", "exec",
            "-i",     Id(),      "--",
            "sh",     "-c",      "while read l; do echo got:$l; done; echo end"};
  o.new_process_group = false;
  o.stdin_pipe = true;
  o.capture_stdout = true;
  o.stderr_to.inherit = true;
  auto child = Subprocess::Spawn(o);
  ASSERT_TRUE(child.has_value()) << child.error().ToString();
  UniqueFd in = child->TakeStdin();
  UniqueFd out = child->TakeStdout();
  std::string got;
  auto read_until = [&](const std::string& text) {
    while (got.find(text) == std::string::npos) {
      pollfd p{out.get(), POLLIN, 0};
      if (poll(&p, 1, 60000) <= 0) return false;  // a safety net against a hang
      char buf[256];
      ssize_t n = read(out.get(), buf, sizeof buf);
      if (n <= 0) return false;
      got.append(buf, static_cast<size_t>(n));
    }
    return true;
  };
  ASSERT_EQ(write(in.get(), "one\n", 4), 4);
  EXPECT_TRUE(read_until("got:one\n")) << got;
  ASSERT_EQ(write(in.get(), "two\n", 4), 4);
  EXPECT_TRUE(read_until("got:two\n")) << got;
  in.reset();
  EXPECT_TRUE(read_until("end\n")) << got;
  out.reset();
  EXPECT_EQ(ExitCodeOf(child->Wait()), 0);
  EXPECT_EQ(got, "got:one\ngot:two\nend\n");
}

// ---------------------------------------------------------------- -it

// deepbox on a pseudo-terminal, as a person runs it.
class Terminal {
 public:
  Terminal(std::vector<std::string> args, winsize size) {
    int slave = -1;
    char name[256];
    if (openpty(&master_, &slave, name, nullptr, &size) != 0) {
      ADD_FAILURE() << "openpty: " << std::strerror(errno);
      return;
    }
    fcntl(master_, F_SETFD, FD_CLOEXEC);
    SubprocessOptions o;
    o.argv = {kDeepbox};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.env = {{"TERM", "vt100"}};
    o.new_session = true;  // the terminal becomes deepbox's controlling one
    o.terminal = name;
    auto child = Subprocess::Spawn(o);
    close(slave);
    if (!child) {
      ADD_FAILURE() << child.error().ToString();
      return;
    }
    pid_ = child->Release();  // reaped by Wait() or the destructor
  }
  ~Terminal() {
    if (pid_ > 0 && !waited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) close(master_);
  }
  bool ok() const { return pid_ > 0 && master_ >= 0; }
  int master() const { return master_; }
  // Reads until the output (from `from`) contains `text`; false at EOF or
  // after a generous safety bound.
  bool WaitFor(const std::string& text, size_t from = 0) {
    auto deadline = std::chrono::steady_clock::now() + 60s;
    while (output_.find(text, from) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline || !ReadSome(200)) {
        return output_.find(text, from) != std::string::npos;
      }
    }
    return true;
  }
  void Type(const std::string& keys) {
    ASSERT_EQ(write(master_, keys.data(), keys.size()), static_cast<ssize_t>(keys.size()));
  }
  int Wait() {
    while (ReadSome(200)) {
    }
    int status = 0;
    waitpid(pid_, &status, 0);
    waited_ = true;
    return ExitCodeOf(status);
  }
  const std::string& output() const { return output_; }

 private:
  // False at EOF; true after a read or a quiet interval.
  bool ReadSome(int timeout_ms) {
    pollfd p{master_, POLLIN, 0};
    int rc = poll(&p, 1, timeout_ms);
    if (rc == 0) return true;
    if (rc < 0) return errno == EINTR;
    char buf[4096];
    ssize_t n = read(master_, buf, sizeof buf);
    if (n <= 0) return false;  // EIO once deepbox has exited
    output_.append(buf, static_cast<size_t>(n));
    return true;
  }
  pid_t pid_ = -1;
  int master_ = -1;
  bool waited_ = false;
  std::string output_;
};

TEST_F(ExecCliTest, InteractiveTerminalSession) {
  Terminal t({"sandbox", "exec", "-it", Id(), "--", "sh"}, winsize{40, 120, 0, 0});
  ASSERT_TRUE(t.ok());
  t.Type("stty size; echo term=$TERM; tty; echo sum=$((6*7))\r");
  ASSERT_TRUE(t.WaitFor("sum=42")) << t.output();
  EXPECT_THAT(t.output(), HasSubstr("40 120"));
  EXPECT_THAT(t.output(), HasSubstr("term=vt100"));  // the terminal's own TERM
  EXPECT_THAT(t.output(), HasSubstr("/dev/pts/"));
  // This terminal is in raw mode: ^C is a byte for the sandbox's terminal,
  // which interrupts the foreground command, not deepbox.
  // ^C once the command runs (zz-5 is its output, not the echo of the typed line).
  t.Type("sh -c 'echo zz-$((2+3)); exec sleep 300'\r");
  ASSERT_TRUE(t.WaitFor("zz-5")) << t.output();
  t.Type("\x03");
  size_t mark = t.output().size();
  t.Type("echo after-$((1+1))\r");
  ASSERT_TRUE(t.WaitFor("after-2", mark)) << t.output();
  // A new window size reaches the sandbox (SIGWINCH -> resize). The resize
  // and the typed command travel separately: ask until the new size shows.
  winsize bigger{50, 132, 0, 0};
  ASSERT_EQ(ioctl(t.master(), TIOCSWINSZ, &bigger), 0);
  bool resized = false;
  for (int i = 0; i < 100 && !resized; ++i) {
    size_t at = t.output().size();
    t.Type("stty size\r");
    ASSERT_TRUE(t.WaitFor("$ ", at + 10)) << t.output();
    resized = t.output().find("50 132", at) != std::string::npos;
  }
  EXPECT_TRUE(resized) << t.output();
  t.Type("exit 3\r");
  EXPECT_EQ(t.Wait(), 3) << t.output();
  // The terminal is back in its cooked mode.
  termios mode{};
  ASSERT_EQ(tcgetattr(t.master(), &mode), 0);
  EXPECT_NE(mode.c_lflag & ICANON, 0u);
  EXPECT_NE(mode.c_lflag & ECHO, 0u);
}

TEST_F(ExecCliTest, TerminalWithoutInteractiveInput) {
  // -t alone: the command runs on a terminal; its output ends lines with \r\n.
  auto r = Cli({"sandbox", "exec", "-t", Id(), "--", "sh", "-c",
                "test -t 0 && test -t 1 && echo on-tty; echo err >&2"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "on-tty\r\nerr\r\n");
}

}  // namespace
}  // namespace deepbox::local::lifecycle
