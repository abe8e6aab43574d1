#include "sandboxd/proc/command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <string>

namespace deepbox::sandboxd::proc {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CommandSpecTest, ValidateRequiresExactlyOneOfArgvAndShell) {
  EXPECT_EQ(ValidateSpec(CommandSpec{}).error().code, ErrorCode::kInvalidArgument);
  CommandSpec both = CommandSpec::Argv({"true"});
  both.shell = "true";
  EXPECT_FALSE(ValidateSpec(both).has_value());
  EXPECT_TRUE(ValidateSpec(CommandSpec::Argv({"true"})).has_value());
  EXPECT_TRUE(ValidateSpec(CommandSpec::Shell("")).has_value());  // `sh -c ''` is fine
}

TEST(CommandSpecTest, ValidateRejectsBadInput) {
  CommandSpec nul = CommandSpec::Shell(std::string("echo a\0b", 8));
  EXPECT_FALSE(ValidateSpec(nul).has_value());
  CommandSpec env = CommandSpec::Argv({"true"});
  env.env["A=B"] = "x";
  EXPECT_THAT(ValidateSpec(env).error().message, HasSubstr("A=B"));
  CommandSpec empty_key = CommandSpec::Argv({"true"});
  empty_key.env[""] = "x";
  EXPECT_FALSE(ValidateSpec(empty_key).has_value());
  CommandSpec negative = CommandSpec::Argv({"true"});
  negative.timeout = std::chrono::milliseconds(-1);
  EXPECT_FALSE(ValidateSpec(negative).has_value());
  CommandSpec empty_argv0 = CommandSpec::Argv({""});
  EXPECT_FALSE(ValidateSpec(empty_argv0).has_value());
}

TEST(CommandSpecTest, EffectiveArgvAndDisplay) {
  CommandSpec shell = CommandSpec::Shell("echo $HOME | wc -c");
  EXPECT_THAT(EffectiveArgv(shell), ElementsAre("/bin/sh", "-c", "echo $HOME | wc -c"));
  EXPECT_EQ(CommandDisplay(shell), "echo $HOME | wc -c");
  CommandSpec argv = CommandSpec::Argv({"ls", "-l", "my file", "it's", ""});
  EXPECT_THAT(EffectiveArgv(argv), ElementsAre("ls", "-l", "my file", "it's", ""));
  EXPECT_EQ(CommandDisplay(argv), "ls -l 'my file' 'it'\\''s' ''");
}

TEST(CommandSpecTest, EffectiveEnvIsExactOrInheritedPlusOverlay) {
  ASSERT_EQ(setenv("DEEPBOX_PROC_TEST_VAR", "from-daemon", 1), 0);
  CommandSpec spec = CommandSpec::Argv({"env"});
  spec.env = {{"B", "2"}, {"A", "1"}};
  EXPECT_THAT(EffectiveEnv(spec), ElementsAre("A=1", "B=2"));
  spec.inherit_env = true;
  spec.env["DEEPBOX_PROC_TEST_VAR"] = "overridden";
  auto env = EffectiveEnv(spec);
  EXPECT_THAT(env, Contains("A=1"));
  EXPECT_THAT(env, Contains("DEEPBOX_PROC_TEST_VAR=overridden"));
  EXPECT_EQ(
      std::count_if(env.begin(), env.end(),
                    [](const std::string& kv) { return kv.starts_with("DEEPBOX_PROC_TEST_VAR="); }),
      1);
  EXPECT_TRUE(std::is_sorted(env.begin(), env.end()));
  unsetenv("DEEPBOX_PROC_TEST_VAR");
}

TEST(OutcomeTest, KindsAndNames) {
  EXPECT_EQ(KindOf(Outcome{Exited{0}}), OutcomeKind::kExited);
  EXPECT_EQ(KindOf(Outcome{Signaled{9}}), OutcomeKind::kSignaled);
  EXPECT_EQ(KindOf(Outcome{TimedOut{}}), OutcomeKind::kTimedOut);
  EXPECT_EQ(KindOf(Outcome{Killed{}}), OutcomeKind::kKilled);
  EXPECT_EQ(KindOf(Outcome{SpawnFailed{}}), OutcomeKind::kSpawnFailed);
  EXPECT_EQ(OutcomeKindName(OutcomeKind::kExited), "exited");
  EXPECT_EQ(OutcomeKindName(OutcomeKind::kSignaled), "signaled");
  EXPECT_EQ(OutcomeKindName(OutcomeKind::kTimedOut), "timed_out");
  EXPECT_EQ(OutcomeKindName(OutcomeKind::kKilled), "killed");
  EXPECT_EQ(OutcomeKindName(OutcomeKind::kSpawnFailed), "spawn_failed");
}

TEST(OutcomeTest, DescriptionsAndShellCodes) {
  EXPECT_EQ(DescribeOutcome(Exited{3}), "exited with code 3");
  EXPECT_EQ(ShellExitCode(Exited{3}), 3);
  EXPECT_EQ(DescribeOutcome(Signaled{SIGSEGV, true}), "killed by SIGSEGV (core dumped)");
  EXPECT_EQ(ShellExitCode(Signaled{SIGSEGV, false}), 128 + SIGSEGV);
  ExitStatus killed;
  killed.signal = SIGKILL;
  EXPECT_EQ(DescribeOutcome(TimedOut{std::chrono::milliseconds(1500), true, killed}),
            "timed out after 1500 ms (SIGKILL after grace period; SIGKILL)");
  EXPECT_EQ(ShellExitCode(TimedOut{}), 124);
  ExitStatus term;
  term.signal = SIGTERM;
  EXPECT_EQ(DescribeOutcome(Killed{false, term}), "killed on request (SIGTERM)");
  EXPECT_EQ(ShellExitCode(Killed{false, term}), 128 + SIGTERM);
  SpawnFailed failed{Error(ErrorCode::kNotFound, "execve(x): No such file or directory (ENOENT)")};
  EXPECT_EQ(DescribeOutcome(failed),
            "failed to start: execve(x): No such file or directory (ENOENT)");
  EXPECT_EQ(ShellExitCode(failed), 127);
  EXPECT_EQ(ShellExitCode(SpawnFailed{Error(ErrorCode::kPermissionDenied, "x")}), 126);
}

TEST(OutcomeTest, FromStatus) {
  ExitStatus exited;
  exited.exit_code = 7;
  EXPECT_EQ(std::get<Exited>(OutcomeFromStatus(exited)).code, 7);
  ExitStatus sig;
  sig.signal = SIGABRT;
  sig.core_dumped = true;
  auto s = std::get<Signaled>(OutcomeFromStatus(sig));
  EXPECT_EQ(s.signal, SIGABRT);
  EXPECT_TRUE(s.core_dumped);
}

TEST(OutcomeTest, SignalNames) {
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
  EXPECT_EQ(SignalName(SIGKILL), "SIGKILL");
  EXPECT_EQ(SignalName(SIGRTMIN), "SIGRTMIN");
  EXPECT_EQ(SignalName(SIGRTMIN + 2), "SIGRTMIN+2");
  EXPECT_EQ(SignalName(200), "signal 200");
}

TEST(StartCommandTest, PipesAreWiredAndNonBlocking) {
  CommandSpec spec = CommandSpec::Shell("read line; echo \"out:$line\"; echo err >&2");
  auto started = StartCommand(spec, StdinMode::kPipe);
  ASSERT_TRUE(started.has_value()) << started.error().ToString();
  ASSERT_TRUE(started->stdin_fd.valid());
  ASSERT_EQ(WriteNoSigpipe(started->stdin_fd.get(), "hi\n", 3), 3);
  started->stdin_fd.reset();
  auto status = started->child.Wait();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->exit_code, 0);
  char buf[64];
  ssize_t n = read(started->stdout_fd.get(), buf, sizeof(buf));
  EXPECT_EQ(std::string(buf, static_cast<size_t>(std::max<ssize_t>(n, 0))), "out:hi\n");
  n = read(started->stderr_fd.get(), buf, sizeof(buf));
  EXPECT_EQ(std::string(buf, static_cast<size_t>(std::max<ssize_t>(n, 0))), "err\n");
  // Everything read and all writers gone: EOF, not EAGAIN.
  EXPECT_EQ(read(started->stdout_fd.get(), buf, sizeof(buf)), 0);
}

TEST(StartCommandTest, InvalidSpecAndSpawnFailure) {
  EXPECT_EQ(StartCommand(CommandSpec{}, StdinMode::kNull).error().code,
            ErrorCode::kInvalidArgument);
  auto missing = StartCommand(CommandSpec::Argv({"/nonexistent/deepbox"}), StdinMode::kNull);
  ASSERT_FALSE(missing.has_value());
  EXPECT_THAT(missing.error().message, HasSubstr("execve(/nonexistent/deepbox)"));
}

}  // namespace
}  // namespace deepbox::sandboxd::proc
