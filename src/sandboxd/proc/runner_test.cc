#include "sandboxd/proc/runner.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/utf8.h"
#include "sandboxd/proc/reaper.h"
#include "sandboxd/proc/test_util.h"

namespace deepbox::sandboxd::proc {
namespace {

using ::testing::HasSubstr;
using testing::LiveGroupMembers;
using testing::TempDir;
using testing::WaitFor;
using namespace std::chrono_literals;

// Orphans of these tests are re-parented to the test process and reaped, so
// that "no process of the group is left" can be checked with kill(-pgid, 0).
class RunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(BecomeSubreaper().has_value());
    auto r = Reaper::Start();
    ASSERT_TRUE(r.has_value()) << r.error().ToString();
    reaper_ = std::move(*r);
  }
  void TearDown() override { reaper_.reset(); }

  // True once nothing at all (not even a zombie) is left in group `pgid`.
  static bool GroupGone(pid_t pgid) {
    return WaitFor([&] { return ::kill(-pgid, 0) != 0 && errno == ESRCH; });
  }

  std::unique_ptr<Reaper> reaper_;
};

std::string Seq(int from, int to) {
  std::string out;
  for (int i = from; i <= to; ++i) out += std::to_string(i) + "\n";
  return out;
}

void MakeFifo(const std::string& path) { ASSERT_EQ(mkfifo(path.c_str(), 0600), 0); }

// Opens the FIFO for writing (blocks until the child opens it to read) and
// writes a line: a deterministic "go on" for the child.
void Release(const std::string& fifo) {
  // Non-blocking open fails with ENXIO until the child has opened the FIFO to
  // read; poll for that (bounded) instead of blocking forever.
  int fd = -1;
  for (int i = 0; i < 60000 && fd < 0; ++i) {
    fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      ASSERT_EQ(errno, ENXIO);
      ::usleep(1000);
    }
  }
  ASSERT_GE(fd, 0) << "the child never opened " << fifo;
  ASSERT_EQ(::write(fd, "\n", 1), 1);
  ::close(fd);
}

TEST_F(RunnerTest, CapturesStdoutAndExitCode) {
  RunResult r = proc::Run(CommandSpec::Argv({"/bin/echo", "hello", "world"}));
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kExited) << DescribeOutcome(r.outcome);
  EXPECT_EQ(std::get<Exited>(r.outcome).code, 0);
  EXPECT_EQ(r.stdout_data, "hello world\n");
  EXPECT_EQ(r.stderr_data, "");
  EXPECT_EQ(r.combined, "hello world\n");
  EXPECT_EQ(r.stdout_total, 12u);
  EXPECT_FALSE(r.stdout_truncated);
  EXPECT_GT(r.pid, 0);
  EXPECT_GT(r.duration.count(), 0);
}

TEST_F(RunnerTest, ShellCommandsAndExitCodes) {
  RunResult r = proc::Run(CommandSpec::Shell("echo $((6*7)); exit 3"));
  EXPECT_EQ(std::get<Exited>(r.outcome).code, 3);
  EXPECT_EQ(r.stdout_data, "42\n");
}

TEST_F(RunnerTest, StderrIsSeparateAndCombinedKeepsEachStreamsOrder) {
  // Interleaving between the streams depends on when the daemon reads; the order
  // within each stream must be kept in `combined`.
  RunResult r = proc::Run(
      CommandSpec::Shell("i=1; while [ $i -le 300 ]; do echo o$i; echo e$i >&2; i=$((i+1)); done"));
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kExited);
  std::string want_out, want_err;
  for (int i = 1; i <= 300; ++i) {
    want_out += "o" + std::to_string(i) + "\n";
    want_err += "e" + std::to_string(i) + "\n";
  }
  EXPECT_EQ(r.stdout_data, want_out);
  EXPECT_EQ(r.stderr_data, want_err);
  ASSERT_EQ(r.combined.size(), want_out.size() + want_err.size());
  std::string from_out, from_err;
  std::istringstream lines(r.combined);
  for (std::string line; std::getline(lines, line);) {
    (line[0] == 'o' ? from_out : from_err) += line + "\n";
  }
  EXPECT_EQ(from_out, want_out);
  EXPECT_EQ(from_err, want_err);
}

TEST_F(RunnerTest, CombinedFollowsTheReadOrder) {
  // The child writes the next line only after the previous one was delivered,
  // so the read order is known.
  // One FIFO per step: reusing one could let the second "go" land in the
  // first reader's pipe just before it closes, and be lost.
  TempDir dir;
  const std::string go1 = dir.Path("go1");
  const std::string go2 = dir.Path("go2");
  MakeFifo(go1);
  MakeFifo(go2);
  CommandSpec spec = CommandSpec::Shell("echo one; read x < " + go1 + "; echo two >&2; read x < " +
                                        go2 + "; echo three");
  std::vector<std::pair<StreamKind, std::string>> chunks;
  StreamCallbacks cb;
  cb.on_output = [&](StreamKind kind, std::string_view bytes) {
    chunks.emplace_back(kind, std::string(bytes));
    if (chunks.size() == 1) Release(go1);
    if (chunks.size() == 2) Release(go2);
    return true;
  };
  StreamResult r = RunStreaming(spec, cb);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kExited) << DescribeOutcome(r.outcome);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0], std::make_pair(StreamKind::kStdout, std::string("one\n")));
  EXPECT_EQ(chunks[1], std::make_pair(StreamKind::kStderr, std::string("two\n")));
  EXPECT_EQ(chunks[2], std::make_pair(StreamKind::kStdout, std::string("three\n")));
  EXPECT_EQ(r.stdout_total, 10u);
  EXPECT_EQ(r.stderr_total, 4u);
}

TEST_F(RunnerTest, StdinBytesAreDelivered) {
  CommandSpec spec = CommandSpec::Argv({"cat"});
  spec.stdin_data = "line 1\nline 2\n";
  RunResult r = proc::Run(spec);
  EXPECT_EQ(r.stdout_data, "line 1\nline 2\n");
  spec.stdin_data = "";
  EXPECT_EQ(proc::Run(spec).stdout_data, "");  // empty stdin: EOF at once
}

TEST_F(RunnerTest, WithoutStdinDataStdinIsDevNull) {
  RunResult r = proc::Run(CommandSpec::Argv({"readlink", "/proc/self/fd/0"}));
  EXPECT_EQ(r.stdout_data, "/dev/null\n");
  EXPECT_EQ(proc::Run(CommandSpec::Argv({"cat"})).stdout_data, "");
}

TEST_F(RunnerTest, HugeStdinIsWrittenWhileOutputIsRead) {
  // 8 MiB through cat: far beyond both pipe buffers, deadlocks unless stdin is
  // written concurrently with reading stdout.
  std::string input;
  for (int i = 0; input.size() < (8u << 20); ++i) input += "row " + std::to_string(i) + "\n";
  CommandSpec spec = CommandSpec::Argv({"cat"});
  spec.stdin_data = input;
  spec.max_stdout_bytes = 16 << 20;
  spec.max_combined_bytes = 0;
  RunResult r = proc::Run(spec);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kExited);
  EXPECT_EQ(r.stdout_data.size(), input.size());
  EXPECT_TRUE(r.stdout_data == input);
  EXPECT_EQ(r.combined, "");
  EXPECT_TRUE(r.combined_truncated);
}

TEST_F(RunnerTest, UnreadStdinDoesNotRaiseSigpipe) {
  struct sigaction dfl, old;
  sigemptyset(&dfl.sa_mask);
  dfl.sa_flags = 0;
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &dfl, &old);  // SIGPIPE would kill the test process
  CommandSpec spec = CommandSpec::Argv({"true"});
  spec.stdin_data = std::string(4 << 20, 'x');
  RunResult r = proc::Run(spec);
  sigaction(SIGPIPE, &old, nullptr);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kExited);
  EXPECT_EQ(std::get<Exited>(r.outcome).code, 0);
}

TEST_F(RunnerTest, ChildrenGetDefaultSigpipeEvenIfTheDaemonIgnoresIt) {
  IgnoreSigpipe();
  // With SIGPIPE ignored `yes` would loop on EPIPE and print an error.
  RunResult r = proc::Run(CommandSpec::Shell("yes | head -n 2"));
  signal(SIGPIPE, SIG_DFL);
  EXPECT_EQ(std::get<Exited>(r.outcome).code, 0);
  EXPECT_EQ(r.stdout_data, "y\ny\n");
  EXPECT_EQ(r.stderr_data, "");
}

TEST_F(RunnerTest, OutputCapKeepsTheHeadAndCountsTheRest) {
  CommandSpec spec = CommandSpec::Argv({"seq", "1", "100000"});
  spec.max_stdout_bytes = 100;
  spec.max_combined_bytes = 50;
  RunResult r = proc::Run(spec);
  const std::string all = Seq(1, 100000);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kExited);
  EXPECT_EQ(r.stdout_data, all.substr(0, 100));
  EXPECT_EQ(r.combined, all.substr(0, 50));
  EXPECT_TRUE(r.stdout_truncated);
  EXPECT_TRUE(r.combined_truncated);
  EXPECT_FALSE(r.stderr_truncated);
  EXPECT_EQ(r.stdout_total, all.size());
}

long MaxRssKb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

TEST_F(RunnerTest, HugeOutputKeepsRunningWithBoundedMemory) {
  // 1 GiB of output with 1 MiB caps: drained to the end, memory does not grow.
  constexpr uint64_t kTotal = 1ull << 30;
  CommandSpec spec =
      CommandSpec::Shell("head -c " + std::to_string(kTotal) + " /dev/zero; echo done >&2");
  const long before = MaxRssKb();
  RunResult r = proc::Run(spec);
  const long growth_kb = MaxRssKb() - before;
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kExited) << DescribeOutcome(r.outcome);
  EXPECT_EQ(std::get<Exited>(r.outcome).code, 0);
  EXPECT_EQ(r.stdout_total, kTotal);
  EXPECT_EQ(r.stdout_data.size(), kDefaultOutputCap);
  EXPECT_TRUE(r.stdout_truncated);
  EXPECT_EQ(r.stderr_data, "done\n");  // the command ran to its end
  EXPECT_LT(growth_kb, 64 * 1024) << "max RSS grew by " << growth_kb << " KiB";
}

TEST_F(RunnerTest, TimeoutTerminatesTheWholeGroup) {
  CommandSpec spec = CommandSpec::Shell("sleep 1000 & sleep 1000");
  spec.timeout = 200ms;
  spec.kill_grace = 20s;  // sleep dies of SIGTERM: the grace is not used up
  RunResult r = proc::Run(spec);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kTimedOut) << DescribeOutcome(r.outcome);
  const auto& t = std::get<TimedOut>(r.outcome);
  EXPECT_EQ(t.timeout, 200ms);
  EXPECT_FALSE(t.sigkilled);
  EXPECT_EQ(t.status.signal, SIGTERM);
  EXPECT_EQ(ShellExitCode(r.outcome), 124);
  EXPECT_TRUE(GroupGone(r.pid)) << LiveGroupMembers(r.pid).size() << " left";
}

TEST_F(RunnerTest, TimeoutEscalatesToSigkillAfterTheGrace) {
  // Everything in the group ignores SIGTERM.
  CommandSpec spec = CommandSpec::Shell("trap '' TERM; sleep 1000 & sleep 1000");
  spec.timeout = 100ms;
  spec.kill_grace = 200ms;
  RunResult r = proc::Run(spec);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kTimedOut) << DescribeOutcome(r.outcome);
  EXPECT_TRUE(std::get<TimedOut>(r.outcome).sigkilled);
  EXPECT_EQ(std::get<TimedOut>(r.outcome).status.signal, SIGKILL);
  EXPECT_TRUE(GroupGone(r.pid));
}

TEST_F(RunnerTest, TimeoutKillsStragglersThatOutliveTheLeader) {
  // The leader dies of SIGTERM; a background member that ignores SIGTERM and
  // does not hold the pipes must not survive either.
  CommandSpec spec =
      CommandSpec::Shell("(trap '' TERM; exec sleep 1000) >/dev/null 2>&1 & sleep 1000");
  spec.timeout = 200ms;
  spec.kill_grace = 20s;
  RunResult r = proc::Run(spec);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kTimedOut);
  EXPECT_TRUE(GroupGone(r.pid));
}

TEST_F(RunnerTest, OutputBeforeTheTimeoutIsKept) {
  CommandSpec spec = CommandSpec::Shell("echo started; exec sleep 1000");
  spec.timeout = 300ms;
  RunResult r = proc::Run(spec);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kTimedOut);
  EXPECT_EQ(r.stdout_data, "started\n");
}

TEST_F(RunnerTest, GrandchildHoldingThePipesDoesNotHangTheRun) {
  CommandSpec spec = CommandSpec::Shell("sleep 1000 & echo done");
  spec.drain_timeout = 200ms;
  RunResult r = proc::Run(spec);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kExited) << DescribeOutcome(r.outcome);
  EXPECT_EQ(std::get<Exited>(r.outcome).code, 0);
  EXPECT_EQ(r.stdout_data, "done\n");
  EXPECT_TRUE(r.drain_killed);
  EXPECT_TRUE(GroupGone(r.pid));
}

TEST_F(RunnerTest, OutputAfterTheLeaderExitsIsDrained) {
  // A member keeps writing briefly after the leader exits: read until EOF.
  TempDir dir;
  const std::string fifo = dir.Path("go");
  MakeFifo(fifo);
  CommandSpec spec = CommandSpec::Shell("(read x < " + fifo + "; echo late) & echo early");
  spec.drain_timeout = 60s;  // EOF comes first
  std::string out;
  StreamCallbacks cb;
  cb.on_output = [&](StreamKind, std::string_view b) {
    out.append(b);
    if (out == "early\n") Release(fifo);
    return true;
  };
  StreamResult r = RunStreaming(spec, cb);
  EXPECT_EQ(std::get<Exited>(r.outcome).code, 0);
  EXPECT_EQ(out, "early\nlate\n");
  EXPECT_FALSE(r.drain_killed);
}

TEST_F(RunnerTest, BackgroundJobsWithoutThePipesSurviveANormalExit) {
  // Documented behaviour: `cmd >log 2>&1 &` outlives the command.
  RunResult r = proc::Run(CommandSpec::Shell("sleep 1000 >/dev/null 2>&1 & echo $!"));
  ASSERT_EQ(std::get<Exited>(r.outcome).code, 0);
  EXPECT_FALSE(r.drain_killed);
  const pid_t bg = std::stoi(r.stdout_data);
  EXPECT_EQ(::kill(bg, 0), 0);
  ::kill(bg, SIGKILL);
  EXPECT_TRUE(GroupGone(r.pid));
}

TEST_F(RunnerTest, SpawnFailuresAreOutcomes) {
  RunResult missing = proc::Run(CommandSpec::Argv({"/nonexistent/deepbox-bin"}));
  ASSERT_EQ(KindOf(missing.outcome), OutcomeKind::kSpawnFailed);
  const Error& e = std::get<SpawnFailed>(missing.outcome).error;
  EXPECT_EQ(e.code, ErrorCode::kNotFound);
  EXPECT_THAT(e.message, HasSubstr("execve(/nonexistent/deepbox-bin)"));
  EXPECT_EQ(ShellExitCode(missing.outcome), 127);
  EXPECT_EQ(missing.pid, 0);

  CommandSpec bad_cwd = CommandSpec::Argv({"true"});
  bad_cwd.cwd = "/nonexistent/dir";
  RunResult cwd = proc::Run(bad_cwd);
  ASSERT_EQ(KindOf(cwd.outcome), OutcomeKind::kSpawnFailed);
  EXPECT_THAT(std::get<SpawnFailed>(cwd.outcome).error.message, HasSubstr("chdir"));

  RunResult invalid = proc::Run(CommandSpec{});
  ASSERT_EQ(KindOf(invalid.outcome), OutcomeKind::kSpawnFailed);
  EXPECT_EQ(std::get<SpawnFailed>(invalid.outcome).error.code, ErrorCode::kInvalidArgument);
}

TEST_F(RunnerTest, SignaledOutcome) {
  RunResult r = proc::Run(CommandSpec::Shell("kill -KILL $$"));
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kSignaled);
  EXPECT_EQ(std::get<Signaled>(r.outcome).signal, SIGKILL);
  EXPECT_EQ(ShellExitCode(r.outcome), 137);
}

TEST_F(RunnerTest, EnvironmentAndCwd) {
  TempDir dir;
  CommandSpec spec = CommandSpec::Shell("echo \"$FOO|$HOME|$(pwd)\"");
  spec.env = {{"FOO", "bar"}};
  spec.cwd = dir.path().string();
  RunResult r = proc::Run(spec);
  EXPECT_EQ(r.stdout_data, "bar||" + dir.path().string() + "\n");

  ASSERT_EQ(setenv("DEEPBOX_RUNNER_TEST", "inherited", 1), 0);
  spec = CommandSpec::Shell("echo \"$DEEPBOX_RUNNER_TEST|$FOO\"");
  spec.inherit_env = true;
  spec.env = {{"FOO", "overlay"}};
  EXPECT_EQ(proc::Run(spec).stdout_data, "inherited|overlay\n");
  spec.inherit_env = false;
  EXPECT_EQ(proc::Run(spec).stdout_data, "|overlay\n");
  unsetenv("DEEPBOX_RUNNER_TEST");
}

TEST_F(RunnerTest, CancelFdKillsTheGroup) {
  int efd = eventfd(1, EFD_CLOEXEC);  // already readable
  ASSERT_GE(efd, 0);
  CommandSpec spec = CommandSpec::Shell("sleep 1000 & sleep 1000");
  RunResult r = proc::Run(spec, efd);
  close(efd);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kKilled) << DescribeOutcome(r.outcome);
  EXPECT_EQ(std::get<Killed>(r.outcome).status.signal, SIGTERM);
  EXPECT_TRUE(GroupGone(r.pid));
}

TEST_F(RunnerTest, StreamingCallbackCancelKillsTheGroup) {
  int calls = 0;
  StreamCallbacks cb;
  cb.on_output = [&](StreamKind kind, std::string_view bytes) {
    EXPECT_EQ(kind, StreamKind::kStdout);
    EXPECT_FALSE(bytes.empty());
    ++calls;
    return false;  // the client went away
  };
  StreamResult r = RunStreaming(CommandSpec::Shell("yes & yes"), cb);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kKilled) << DescribeOutcome(r.outcome);
  EXPECT_EQ(calls, 1);  // nothing is delivered after a cancel
  EXPECT_TRUE(GroupGone(r.pid));
}

TEST_F(RunnerTest, StreamingIdleTicksAreDeliveredDuringSilence) {
  // The child waits until the first keepalive tick has been delivered.
  TempDir dir;
  const std::string fifo = dir.Path("go");
  MakeFifo(fifo);
  CommandSpec spec = CommandSpec::Shell("read x < " + fifo + "; echo after-tick");
  spec.timeout = 60s;  // safety bound only
  int ticks = 0;
  std::string out;
  StreamCallbacks cb;
  cb.on_output = [&](StreamKind, std::string_view b) {
    out.append(b);
    return true;
  };
  cb.on_idle = [&] {
    if (++ticks == 1) Release(fifo);
    return true;
  };
  cb.idle_interval = 10ms;
  StreamResult r = RunStreaming(spec, cb);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kExited) << DescribeOutcome(r.outcome);
  EXPECT_GE(ticks, 1);
  EXPECT_EQ(out, "after-tick\n");
}

TEST_F(RunnerTest, StreamingIdleCallbackCanCancel) {
  StreamCallbacks cb;
  cb.on_idle = [] { return false; };
  cb.idle_interval = 10ms;
  StreamResult r = RunStreaming(CommandSpec::Argv({"sleep", "1000"}), cb);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kKilled);
  EXPECT_TRUE(GroupGone(r.pid));
}

TEST_F(RunnerTest, StreamingUtf8AlignmentKeepsCharactersWhole) {
  // "é" is written in two halves, the second only after a keepalive tick: the
  // first half must not be delivered alone.
  TempDir dir;
  const std::string fifo = dir.Path("go");
  MakeFifo(fifo);
  CommandSpec spec =
      CommandSpec::Shell("printf 'a\\303'; read x < " + fifo + "; printf '\\251b'; printf '\\342'");
  spec.timeout = 60s;  // safety bound only
  std::vector<std::string> chunks;
  bool released = false;
  StreamCallbacks cb;
  cb.utf8_align = true;
  cb.on_output = [&](StreamKind, std::string_view b) {
    chunks.emplace_back(b);
    return true;
  };
  cb.on_idle = [&] {
    if (!released && !chunks.empty()) {
      released = true;
      Release(fifo);
    }
    return true;
  };
  cb.idle_interval = 10ms;
  StreamResult r = RunStreaming(spec, cb);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kExited) << DescribeOutcome(r.outcome);
  ASSERT_GE(chunks.size(), 2u);
  EXPECT_EQ(chunks[0], "a");
  std::string all;
  for (const auto& c : chunks) all += c;
  EXPECT_EQ(all,
            "a\xc3\xa9"
            "b\xe2");  // the dangling lead byte comes at EOF
  for (size_t i = 0; i + 1 < chunks.size(); ++i) EXPECT_TRUE(IsValidUtf8(chunks[i]));
}

TEST_F(RunnerTest, StreamingTimeout) {
  std::string out;
  StreamCallbacks cb;
  cb.on_output = [&](StreamKind, std::string_view b) {
    out.append(b);
    return true;
  };
  CommandSpec spec = CommandSpec::Shell("echo hi; exec sleep 1000");
  spec.timeout = 200ms;
  StreamResult r = RunStreaming(spec, cb);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kTimedOut);
  EXPECT_EQ(out, "hi\n");
  EXPECT_TRUE(GroupGone(r.pid));
}

TEST_F(RunnerTest, OwnedStatusesSurviveAConcurrentReaper) {
  // Many short runs with distinct exit codes while orphans are being reaped:
  // the reaper must never take an owned child's status.
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([t, &wrong] {
      for (int i = 0; i < 60; ++i) {
        const int code = (t * 60 + i) % 120;
        RunResult r = proc::Run(CommandSpec::Shell("(true &); exit " + std::to_string(code)));
        if (KindOf(r.outcome) != OutcomeKind::kExited || std::get<Exited>(r.outcome).code != code) {
          ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_TRUE(WaitFor([] { return testing::ZombieChildrenOfSelf().empty(); }));
}

}  // namespace
}  // namespace deepbox::sandboxd::proc
