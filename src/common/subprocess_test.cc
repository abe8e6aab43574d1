#include "common/subprocess.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

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

}  // namespace
}  // namespace deepbox
