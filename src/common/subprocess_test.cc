#include "common/subprocess.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "common/testing/temp_dir.h"

namespace deepbox {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

bool Alive(pid_t pid) { return ::kill(pid, 0) == 0; }

TEST(SubprocessTest, RunCommandCapturesOutputGivesInputAndSetsTheEnvironment) {
  SubprocessOptions o;
  o.argv = {"sh", "-c", "read line; echo \"out:$line:$GREETING\"; echo err >&2; exit 3"};
  o.env = {{"GREETING", "hello"}};
  o.stdin_data = "typed\n";
  auto r = RunCommand(o, 60s);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->out, "out:typed:hello\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_FALSE(r->exited_ok());
  EXPECT_EQ(DescribeWaitStatus(r->wait_status), "exited with status 3");
}

TEST(SubprocessTest, OutputBeyondTheCapIsDroppedNotBuffered) {
  SubprocessOptions o;
  o.argv = {"sh", "-c", "head -c 100000 /dev/zero"};
  auto r = RunCommand(o, 60s, 1000);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->out.size(), 1000u);
  EXPECT_TRUE(r->exited_ok());
}

// A timeout ends the whole process group: the command and what it started.
TEST(SubprocessTest, ATimeoutKillsTheProcessGroup) {
  SubprocessOptions o;
  o.argv = {"sh", "-c", "sleep 600 & echo $!; wait"};
  SubprocessOptions captured = o;
  captured.capture_stdout = true;
  auto child = Subprocess::Spawn(captured);
  ASSERT_TRUE(child.has_value()) << child.error().ToString();
  std::string pid_text;
  char c;
  while (::read(child->stdout_fd(), &c, 1) == 1 && c != '\n') pid_text += c;
  const pid_t grandchild = std::stoi(pid_text);
  ASSERT_TRUE(Alive(grandchild));
  int status = child->Terminate(100ms);  // sh dies of SIGTERM
  EXPECT_TRUE(WIFSIGNALED(status)) << DescribeWaitStatus(status);
  // The sleep was in the same group: it got the signal too.
  for (int i = 0; i < 500 && Alive(grandchild); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(Alive(grandchild));

  auto r = RunCommand(o, 300ms);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kTimeout);
  EXPECT_THAT(r.error().message, HasSubstr("'sh' did not finish within 300 ms"));
}

TEST(SubprocessTest, TerminateKillsWhatIgnoresSigterm) {
  SubprocessOptions o;
  o.argv = {"sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"};
  o.capture_stdout = true;
  auto child = Subprocess::Spawn(o);
  ASSERT_TRUE(child.has_value()) << child.error().ToString();
  char buf[6];
  ASSERT_EQ(::read(child->stdout_fd(), buf, sizeof(buf)), 6);  // the trap is set
  int status = child->Terminate(200ms);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_EQ(DescribeWaitStatus(status), "killed by signal 9 (Killed)");
  EXPECT_FALSE(child->running());
}

TEST(SubprocessTest, AMissingProgramIsNotFoundWithTheCallAndErrno) {
  SubprocessOptions o;
  o.argv = {"/nonexistent/deepbox-no-such-program"};
  auto child = Subprocess::Spawn(o);
  ASSERT_FALSE(child.has_value());
  EXPECT_EQ(child.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(child.error().message,
              HasSubstr("posix_spawn(/nonexistent/deepbox-no-such-program)"));
  EXPECT_THAT(child.error().message, HasSubstr("ENOENT"));
  o.argv = {};
  EXPECT_EQ(Subprocess::Spawn(o).error().code, ErrorCode::kInvalidArgument);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ReadToEnd(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

// An MCP server's stdio: the parent writes lines as it goes, EOF ends it.
TEST(SubprocessTest, AStdinPipeStaysOpenUntilTheParentClosesIt) {
  SubprocessOptions o;
  o.argv = {"sh", "-c", "while read l; do echo got:$l; done; echo end"};
  o.stdin_pipe = true;
  o.capture_stdout = true;
  auto child = Subprocess::Spawn(o);
  ASSERT_TRUE(child.has_value()) << child.error().ToString();
  UniqueFd in = child->TakeStdin();
  ASSERT_TRUE(in.valid());
  ASSERT_EQ(::write(in.get(), "one\n", 4), 4);
  std::string got;
  char c;
  while (got.find('\n') == std::string::npos && ::read(child->stdout_fd(), &c, 1) == 1) {
    got.push_back(c);
  }
  EXPECT_EQ(got, "got:one\n");  // answered while stdin is still open
  ASSERT_EQ(::write(in.get(), "two\n", 4), 4);
  in.reset();
  EXPECT_EQ(got + ReadToEnd(child->stdout_fd()), "got:one\ngot:two\nend\n");
  EXPECT_EQ(DescribeWaitStatus(child->Wait()), "exited with status 0");
}

TEST(SubprocessTest, StreamsGoToFilesAndDescriptorsAndItRunsInCwd) {
  deepbox::testing::TempDir tmp("deepbox-subprocess");
  const std::string dir = tmp.path().string();
  std::ofstream(dir + "/in") << "from a file\n";
  int out[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  SubprocessOptions o;
  o.argv = {"sh", "-c", "cat; pwd >&2"};
  o.cwd = dir;
  o.stdin_from.path = dir + "/in";
  o.stdout_to.fd = out[1];
  o.stderr_to.path = dir + "/err";
  auto r = Subprocess::Spawn(o);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  ::close(out[1]);
  EXPECT_EQ(ReadToEnd(out[0]), "from a file\n");
  ::close(out[0]);
  EXPECT_EQ(r->Wait(), 0);
  EXPECT_EQ(ReadText(dir + "/err"), dir + "\n");
}

TEST(SubprocessTest, TheEnvironmentCanBeReplacedOrHaveNamesTakenOut) {
  ::setenv("DEEPBOX_SUBPROCESS_SECRET", "s3cret", 1);
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", "echo \"${DEEPBOX_SUBPROCESS_SECRET:-unset}:${ONLY:-unset}\""};
  o.unset_env = {"DEEPBOX_SUBPROCESS_SECRET"};
  auto r = RunCommand(o, 60s);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->out, "unset:unset\n");
  // Only the inherited value goes: one given in env is set.
  o.env = {{"DEEPBOX_SUBPROCESS_SECRET", "given"}};
  r = RunCommand(o, 60s);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->out, "given:unset\n");
  o.unset_env.clear();
  o.replace_environment = true;
  o.env = {{"ONLY", "this"}};
  r = RunCommand(o, 60s);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->out, "unset:this\n");
  ::unsetenv("DEEPBOX_SUBPROCESS_SECRET");
}

TEST(SubprocessTest, ANewSessionIsLedByTheChild) {
  SubprocessOptions o;
  o.argv = {"sh", "-c", "ps -o sid= -p $$; echo $$"};
  o.new_session = true;
  auto r = RunCommand(o, 60s);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  std::istringstream lines(r->out);
  std::string sid, pid;
  lines >> sid >> pid;
  EXPECT_EQ(sid, pid) << r->out;
}

// The fork path: the child dies with the thread that spawned it.
TEST(SubprocessTest, AParentDeathSignalEndsTheChildWithItsSpawningThread) {
  Result<Subprocess> child = MakeError(ErrorCode::kInternal, "not spawned");
  std::thread spawner([&] {
    SubprocessOptions o;
    o.argv = {"sleep", "600"};  // found in PATH before the fork
    o.parent_death_signal = SIGKILL;
    child = Subprocess::Spawn(o);
  });
  spawner.join();
  ASSERT_TRUE(child.has_value()) << child.error().ToString();
  int status = child->Wait();
  ASSERT_TRUE(WIFSIGNALED(status)) << DescribeWaitStatus(status);
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

TEST(SubprocessTest, AForkedChildsFailureNamesTheCallAndErrno) {
  SubprocessOptions o;
  o.argv = {"true"};
  o.parent_death_signal = SIGKILL;
  o.cwd = "/nonexistent/deepbox-no-such-dir";
  auto child = Subprocess::Spawn(o);
  ASSERT_FALSE(child.has_value());
  EXPECT_THAT(child.error().message, HasSubstr("chdir(true)"));
  EXPECT_THAT(child.error().message, HasSubstr("ENOENT"));
  o.cwd.clear();
  o.argv = {"deepbox-no-such-program"};
  child = Subprocess::Spawn(o);
  ASSERT_FALSE(child.has_value());
  EXPECT_EQ(child.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(child.error().message, HasSubstr("execve(deepbox-no-such-program)"));
}

TEST(SubprocessTest, AReleasedChildIsTheCallersToReap) {
  pid_t pid = -1;
  {
    SubprocessOptions o;
    o.argv = {"sh", "-c", "exit 7"};
    auto child = Subprocess::Spawn(o);
    ASSERT_TRUE(child.has_value()) << child.error().ToString();
    pid = child->Release();
    EXPECT_FALSE(child->running());
  }  // not killed, not reaped
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_EQ(DescribeWaitStatus(status), "exited with status 7");
}

}  // namespace
}  // namespace deepbox
