// RunStreaming with interactive stdin (on_started) and on a pseudo-terminal
// (spec.tty): what `deepbox sandbox exec -i/-t` stands on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <string>

#include "sandboxd/proc/pty.h"
#include "sandboxd/proc/reaper.h"
#include "sandboxd/proc/runner.h"
#include "sandboxd/proc/spawn.h"

namespace deepbox::sandboxd::proc {
namespace {

using ::testing::HasSubstr;

class InteractiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(BecomeSubreaper().has_value());
    auto r = Reaper::Start();
    ASSERT_TRUE(r.has_value()) << r.error().ToString();
    reaper_ = std::move(*r);
  }
  void TearDown() override { reaper_.reset(); }
  std::unique_ptr<Reaper> reaper_;
};

bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = WriteNoSigpipe(fd, data.data(), data.size());
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Each line is written only after the command answered the previous one: the
// command sees its stdin while it runs, not at its end.
TEST_F(InteractiveTest, StdinIsFedWhileTheCommandRuns) {
  CommandSpec spec = CommandSpec::Shell("while read l; do echo got:$l; done; echo eof");
  spec.stdin_data = "ignored\n";  // on_started wins over stdin_data
  UniqueFd input;
  pid_t started_pid = 0;
  std::string out;
  StreamCallbacks cb;
  cb.on_started = [&](UniqueFd fd, pid_t pid) {
    input = std::move(fd);
    started_pid = pid;
    EXPECT_TRUE(WriteAll(input.get(), "one\n"));
  };
  cb.on_output = [&](StreamKind kind, std::string_view bytes) {
    EXPECT_EQ(kind, StreamKind::kStdout);
    out.append(bytes);
    if (out == "got:one\n") {
      EXPECT_TRUE(WriteAll(input.get(), "two\n"));
    } else if (out == "got:one\ngot:two\n") {
      input.reset();  // EOF
    }
    return true;
  };
  StreamResult r = RunStreaming(spec, cb);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kExited) << DescribeOutcome(r.outcome);
  EXPECT_EQ(std::get<Exited>(r.outcome).code, 0);
  EXPECT_EQ(out, "got:one\ngot:two\neof\n");
  EXPECT_EQ(started_pid, r.pid);
}

TEST_F(InteractiveTest, OnStartedIsNotCalledWhenTheSpawnFails) {
  bool called = false;
  StreamCallbacks cb;
  cb.on_started = [&](UniqueFd, pid_t) { called = true; };
  cb.on_output = [](StreamKind, std::string_view) { return true; };
  StreamResult r = RunStreaming(CommandSpec::Argv({"/no/such/program"}), cb);
  EXPECT_EQ(KindOf(r.outcome), OutcomeKind::kSpawnFailed);
  EXPECT_FALSE(called);
}

TEST_F(InteractiveTest, TerminalIsStdinStdoutStderrAndControllingTerminal) {
  CommandSpec spec = CommandSpec::Shell(
      "stty size; test -t 0 && echo in-tty; test -t 1 && echo out-tty; echo to-stderr >&2; "
      "tty >/dev/null && echo has-name; ps -o tty= -p $$ | grep -q pts && echo ctty; "
      "[ \"$(ps -o sid= -p $$)\" -eq $$ ] && echo session-leader; exit 5");
  spec.tty = WindowSize{33, 91};
  std::string out;
  StreamCallbacks cb;
  cb.on_output = [&](StreamKind kind, std::string_view bytes) {
    EXPECT_EQ(kind, StreamKind::kStdout);  // one stream on a terminal
    out.append(bytes);
    return true;
  };
  StreamResult r = RunStreaming(spec, cb);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kExited) << DescribeOutcome(r.outcome);
  EXPECT_EQ(std::get<Exited>(r.outcome).code, 5);
  // The line discipline turns "\n" into "\r\n".
  EXPECT_THAT(out, HasSubstr("33 91\r\n"));
  for (const char* want : {"in-tty\r\n", "out-tty\r\n", "to-stderr\r\n", "has-name\r\n", "ctty\r\n",
                           "session-leader\r\n"}) {
    EXPECT_THAT(out, HasSubstr(want));
  }
  EXPECT_EQ(r.stderr_total, 0u);
}

// ^C typed on the terminal interrupts the foreground group, as at a shell:
// only a controlling terminal does that.
TEST_F(InteractiveTest, InterruptCharacterSignalsTheForegroundGroup) {
  CommandSpec spec =
      CommandSpec::Shell("trap 'echo got-int; exit 7' INT; echo ready; while :; do sleep 1; done");
  spec.tty = WindowSize{24, 80};
  UniqueFd input;
  std::string out;
  bool sent = false;
  StreamCallbacks cb;
  cb.on_started = [&](UniqueFd fd, pid_t) { input = std::move(fd); };
  cb.on_output = [&](StreamKind, std::string_view bytes) {
    out.append(bytes);
    if (!sent && out.find("ready\r\n") != std::string::npos) {
      sent = true;
      EXPECT_TRUE(WriteAll(input.get(), "\x03"));
    }
    return true;
  };
  StreamResult r = RunStreaming(spec, cb);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kExited) << DescribeOutcome(r.outcome) << out;
  EXPECT_EQ(std::get<Exited>(r.outcome).code, 7);
  EXPECT_THAT(out, HasSubstr("got-int"));
}

TEST_F(InteractiveTest, ResizeReachesTheCommand) {
  CommandSpec spec =
      CommandSpec::Shell("trap 'stty size; exit 0' WINCH; echo ready; while :; do sleep 1; done");
  spec.tty = WindowSize{24, 80};
  UniqueFd input;
  std::string out;
  bool resized = false;
  StreamCallbacks cb;
  cb.on_started = [&](UniqueFd fd, pid_t) { input = std::move(fd); };
  cb.on_output = [&](StreamKind, std::string_view bytes) {
    out.append(bytes);
    if (!resized && out.find("ready\r\n") != std::string::npos) {
      resized = true;
      auto st = ResizePty(input.get(), WindowSize{50, 132});
      EXPECT_TRUE(st.has_value()) << st.error().ToString();
    }
    return true;
  };
  StreamResult r = RunStreaming(spec, cb);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kExited) << DescribeOutcome(r.outcome) << out;
  EXPECT_THAT(out, HasSubstr("50 132\r\n"));
}

TEST_F(InteractiveTest, BinaryBytesPassThroughATerminalInRawMode) {
  // stty raw on the command's side: what it writes arrives unchanged.
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  CommandSpec spec = CommandSpec::Shell("stty raw -echo; printf 'start'; head -c 256; exit 0");
  spec.tty = WindowSize{24, 80};
  UniqueFd input;
  std::string out;
  bool sent = false;
  StreamCallbacks cb;
  cb.on_started = [&](UniqueFd fd, pid_t) { input = std::move(fd); };
  cb.on_output = [&](StreamKind, std::string_view bytes) {
    out.append(bytes);
    if (!sent && out == "start") {
      sent = true;
      EXPECT_TRUE(WriteAll(input.get(), all));
    }
    return true;
  };
  StreamResult r = RunStreaming(spec, cb);
  ASSERT_EQ(KindOf(r.outcome), OutcomeKind::kExited) << DescribeOutcome(r.outcome);
  EXPECT_EQ(out, "start" + all);
}

TEST_F(InteractiveTest, OpenPtyRefusesAnEmptyWindow) {
  EXPECT_FALSE(OpenPty(WindowSize{0, 80}).has_value());
  CommandSpec spec = CommandSpec::Argv({"/bin/true"});
  spec.tty = WindowSize{24, 0};
  EXPECT_FALSE(ValidateSpec(spec).has_value());
  auto pty = OpenPty(WindowSize{10, 20});
  ASSERT_TRUE(pty.has_value()) << pty.error().ToString();
  winsize ws{};
  ASSERT_EQ(::ioctl(pty->slave.get(), TIOCGWINSZ, &ws), 0);
  EXPECT_EQ(ws.ws_row, 10);
  EXPECT_EQ(ws.ws_col, 20);
  EXPECT_EQ(::isatty(pty->slave.get()), 1);
}

}  // namespace
}  // namespace deepbox::sandboxd::proc
