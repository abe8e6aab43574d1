#include "sandboxd/proc/spawn.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "sandboxd/proc/reaper.h"
#include "sandboxd/proc/test_util.h"

namespace deepbox::sandboxd::proc {
namespace {

using ::testing::HasSubstr;
using testing::LiveGroupMembers;
using testing::ProcState;
using testing::TempDir;
using testing::WaitFor;

// Reads everything from fd until EOF.
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Spawns argv with stdout on a pipe; returns {output, status}.
std::pair<std::string, ExitStatus> Capture(SpawnRequest request) {
  auto p = MakePipe(false, false);
  EXPECT_TRUE(p.has_value());
  request.stdout_fd = p->write.get();
  auto child = Spawn(request);
  EXPECT_TRUE(child.has_value()) << child.error().ToString();
  p->write.reset();
  std::string out = ReadAll(p->read.get());
  auto status = child->Wait();
  EXPECT_TRUE(status.has_value());
  return {out, *status};
}

TEST(SpawnTest, TrueExitsZero) {
  auto child = Spawn({.argv = {"true"}});
  ASSERT_TRUE(child.has_value()) << child.error().ToString();
  EXPECT_GT(child->pid(), 0);
  EXPECT_GE(child->pidfd(), 0);
  auto status = child->Wait();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->exited());
  EXPECT_EQ(status->exit_code, 0);
  EXPECT_TRUE(child->reaped());
  EXPECT_EQ(child->pidfd(), -1);
}

TEST(SpawnTest, ExitCodeAndSignalAreDecoded) {
  auto code = Spawn({.argv = {"/bin/sh", "-c", "exit 42"}});
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(code->Wait()->exit_code, 42);

  auto sig = Spawn({.argv = {"/bin/sh", "-c", "kill -TERM $$"}});
  ASSERT_TRUE(sig.has_value());
  auto st = sig->Wait();
  ASSERT_TRUE(st.has_value());
  EXPECT_FALSE(st->exited());
  EXPECT_EQ(st->signal, SIGTERM);
}

TEST(SpawnTest, NonexistentProgramNamesExecveAndErrno) {
  const size_t owned_before = ChildRegistry::Instance().size();
  auto child = Spawn({.argv = {"deepbox-no-such-program-xyz"}});
  ASSERT_FALSE(child.has_value());
  EXPECT_EQ(child.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(child.error().message, HasSubstr("execve"));
  EXPECT_THAT(child.error().message, HasSubstr("deepbox-no-such-program-xyz"));
  EXPECT_THAT(child.error().message, HasSubstr("ENOENT"));
  // The failed child was reaped (children leave the registry when reaped).
  EXPECT_EQ(ChildRegistry::Instance().size(), owned_before);
}

TEST(SpawnTest, MissingCwdNamesChdir) {
  auto child = Spawn({.argv = {"true"}, .cwd = "/nonexistent-deepbox-dir"});
  ASSERT_FALSE(child.has_value());
  EXPECT_THAT(child.error().message, HasSubstr("chdir(/nonexistent-deepbox-dir)"));
  EXPECT_THAT(child.error().message, HasSubstr("ENOENT"));
}

TEST(SpawnTest, NonExecutableFileIsPermissionDenied) {
  TempDir dir;
  const std::string script = dir.Path("script.sh");
  testing::WriteFile(script, "#!/bin/sh\necho hi\n", 0644);
  auto child = Spawn({.argv = {script}});
  ASSERT_FALSE(child.has_value());
  EXPECT_EQ(child.error().code, ErrorCode::kPermissionDenied);
  EXPECT_THAT(child.error().message, HasSubstr("execve(" + script + ")"));
  EXPECT_THAT(child.error().message, HasSubstr("EACCES"));
}

TEST(SpawnTest, ExecutableWithoutShebangRunsWithTheShell) {
  TempDir dir;
  const std::string script = dir.Path("noshebang");
  testing::WriteFile(script, "echo \"script args: $1 $2\"\n", 0755);
  auto [out, status] = Capture({.argv = {script, "one", "two"}});
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_EQ(out, "script args: one two\n");
}

TEST(SpawnTest, PathIsSearchedInTheChildEnvironment) {
  TempDir dir;
  testing::WriteFile(dir.Path("deepbox-hello"), "#!/bin/sh\necho hello from path\n", 0755);
  auto [out, status] = Capture(
      {.argv = {"deepbox-hello"}, .env = std::vector<std::string>{"PATH=" + dir.path().string()}});
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_EQ(out, "hello from path\n");

  // Not in the daemon's PATH.
  auto missing = Spawn({.argv = {"deepbox-hello"}});
  EXPECT_FALSE(missing.has_value());
}

TEST(SpawnTest, EnvironmentIsExactlyTheGivenOne) {
  auto [out, status] =
      Capture({.argv = {"/usr/bin/env"}, .env = std::vector<std::string>{"A=1", "B=two words"}});
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_EQ(out, "A=1\nB=two words\n");
}

TEST(SpawnTest, CwdIsApplied) {
  TempDir dir;
  auto [out, status] = Capture({.argv = {"/bin/pwd"}, .cwd = dir.path().string()});
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_EQ(out, dir.path().string() + "\n");
}

TEST(SpawnTest, ChildLeadsItsOwnProcessGroup) {
  auto child = Spawn({.argv = {"sleep", "1000"}});
  ASSERT_TRUE(child.has_value());
  EXPECT_EQ(getpgid(child->pid()), child->pid());
  EXPECT_EQ(child->pgid(), child->pid());
  EXPECT_NE(getpgid(child->pid()), getpgrp());
  ASSERT_TRUE(child->SignalGroup(SIGKILL).has_value());
  EXPECT_EQ(child->Wait()->signal, SIGKILL);
}

TEST(SpawnTest, SharedGroupSignalsOnlyTheChild) {
  auto child = Spawn({.argv = {"sleep", "1000"}, .new_process_group = false});
  ASSERT_TRUE(child.has_value());
  EXPECT_EQ(getpgid(child->pid()), getpgrp());
  EXPECT_EQ(child->pgid(), 0);
  ASSERT_TRUE(child->SignalGroup(SIGKILL).has_value());  // must not kill the test
  EXPECT_EQ(child->Wait()->signal, SIGKILL);
}

TEST(SpawnTest, NoDescriptorLeaksIntoTheChild) {
  // A descriptor without O_CLOEXEC, as careless code elsewhere might create.
  int leaky[2];
  ASSERT_EQ(pipe(leaky), 0);
  // `ls` reads the shell's descriptor table (the shell itself opens nothing).
  auto [out, status] = Capture({.argv = {"/bin/sh", "-c", "ls /proc/$$/fd"}});
  close(leaky[0]);
  close(leaky[1]);
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_EQ(out, "0\n1\n2\n");
}

TEST(SpawnTest, LowDescriptorsAreInstalledCorrectly) {
  // Passing fds 0..2 of the parent as the child's stdio must work (they are
  // duplicated above 2 first).
  auto p = MakePipe(false, false);
  ASSERT_TRUE(p.has_value());
  int saved_stdout = dup(1);
  ASSERT_GE(saved_stdout, 0);
  ASSERT_EQ(dup2(p->write.get(), 1), 1);
  auto child = Spawn({.argv = {"/bin/echo", "via fd 1"}, .stdout_fd = 1});
  dup2(saved_stdout, 1);
  close(saved_stdout);
  ASSERT_TRUE(child.has_value());
  p->write.reset();
  EXPECT_EQ(ReadAll(p->read.get()), "via fd 1\n");
  EXPECT_EQ(child->Wait()->exit_code, 0);
}

TEST(SpawnTest, SignalDispositionsAndMaskAreReset) {
  struct sigaction old_pipe, old_int, ign;
  sigemptyset(&ign.sa_mask);
  ign.sa_flags = 0;
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, &old_pipe);
  sigaction(SIGINT, &ign, &old_int);
  sigset_t block, old_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &block, &old_mask);

  auto [out, status] = Capture({.argv = {"grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"}});

  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  sigaction(SIGPIPE, &old_pipe, nullptr);
  sigaction(SIGINT, &old_int, nullptr);
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_EQ(out, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
}

TEST(SpawnTest, PollDoesNotReapWaitDoes) {
  auto child = Spawn({.argv = {"true"}});
  ASSERT_TRUE(child.has_value());
  std::optional<ExitStatus> status;
  ASSERT_TRUE(WaitFor([&] {
    auto polled = child->Poll();
    EXPECT_TRUE(polled.has_value());
    if (polled && *polled) status = **polled;
    return status.has_value();
  }));
  EXPECT_EQ(status->exit_code, 0);
  // Still a zombie: pid and group pinned, signals still allowed.
  EXPECT_EQ(ProcState(child->pid()), 'Z');
  EXPECT_TRUE(child->SignalGroup(0).has_value());
  const pid_t pid = child->pid();
  EXPECT_EQ(child->Wait()->exit_code, 0);
  EXPECT_EQ(ProcState(pid), 0);
  EXPECT_FALSE(ChildRegistry::Instance().IsRegistered(pid));
  auto late = child->SignalGroup(SIGTERM);
  ASSERT_FALSE(late.has_value());
  EXPECT_EQ(late.error().code, ErrorCode::kConflict);
}

TEST(SpawnTest, DestructorKillsTheWholeGroupAndReaps) {
  pid_t pid;
  {
    auto child = Spawn({.argv = {"/bin/sh", "-c", "sleep 1000 & sleep 1000"}});
    ASSERT_TRUE(child.has_value());
    pid = child->pid();
    ASSERT_TRUE(WaitFor([&] { return LiveGroupMembers(pid).size() == 3; }));
    EXPECT_TRUE(ChildRegistry::Instance().IsRegistered(pid));
  }
  EXPECT_NE(ProcState(pid), 'Z');  // reaped, not a zombie
  EXPECT_FALSE(ChildRegistry::Instance().IsRegistered(pid));
  EXPECT_TRUE(WaitFor([&] { return LiveGroupMembers(pid).empty(); }));
}

TEST(SpawnTest, ChildIsRegisteredWhileOwned) {
  auto child = Spawn({.argv = {"sleep", "1000"}});
  ASSERT_TRUE(child.has_value());
  EXPECT_TRUE(ChildRegistry::Instance().IsRegistered(child->pid()));
  // Moving keeps ownership.
  Child moved = std::move(*child);
  EXPECT_FALSE(child->valid());
  EXPECT_TRUE(ChildRegistry::Instance().IsRegistered(moved.pid()));
}

TEST(SpawnTest, InvalidRequests) {
  EXPECT_EQ(Spawn({}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(Spawn({.argv = {std::string("a\0b", 3)}}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(Spawn({.argv = {"true"}, .env = std::vector<std::string>{"NOEQUALS"}}).error().code,
            ErrorCode::kInvalidArgument);
}

TEST(SpawnTest, ConcurrentSpawnsFromManyThreads) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 40;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &failures] {
      for (int i = 0; i < kPerThread; ++i) {
        const int code = (t * kPerThread + i) % 200;
        auto child = Spawn({.argv = {"/bin/sh", "-c", "exit " + std::to_string(code)}});
        if (!child) {
          ++failures[t];
          continue;
        }
        auto status = child->Wait();
        if (!status || status->exit_code != code) ++failures[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

TEST(WriteNoSigpipeTest, EpipeWithoutDyingWhateverTheDisposition) {
  struct sigaction dfl, old;
  sigemptyset(&dfl.sa_mask);
  dfl.sa_flags = 0;
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &dfl, &old);  // a SIGPIPE would kill this test
  auto p = MakePipe(false, true);
  ASSERT_TRUE(p.has_value());
  p->read.reset();
  errno = 0;
  EXPECT_EQ(WriteNoSigpipe(p->write.get(), "x", 1), -1);
  EXPECT_EQ(errno, EPIPE);
  sigset_t pending;
  sigpending(&pending);
  EXPECT_EQ(sigismember(&pending, SIGPIPE), 0);
  sigaction(SIGPIPE, &old, nullptr);
}

TEST(MakePipeTest, FlagsAreApplied) {
  auto p = MakePipe(true, false);
  ASSERT_TRUE(p.has_value());
  EXPECT_NE(fcntl(p->read.get(), F_GETFL) & O_NONBLOCK, 0);
  EXPECT_EQ(fcntl(p->write.get(), F_GETFL) & O_NONBLOCK, 0);
  EXPECT_NE(fcntl(p->read.get(), F_GETFD) & FD_CLOEXEC, 0);
  EXPECT_NE(fcntl(p->write.get(), F_GETFD) & FD_CLOEXEC, 0);
}

}  // namespace
}  // namespace deepbox::sandboxd::proc
