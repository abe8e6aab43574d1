#include "common/io.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "common/unique_fd.h"

namespace deepbox {
namespace {

using ::testing::HasSubstr;

struct Pipe {
  UniqueFd r, w;
  Pipe() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) == 0) {
      r.reset(fds[0]);
      w.reset(fds[1]);
    }
  }
};

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 131 % 251);
  return s;
}

TEST(Io, WriteAllAndReadAllCarryMoreThanAPipeHolds) {
  Pipe p;
  ASSERT_TRUE(p.r && p.w);
  const std::string data = Pattern(3 << 20);  // 3 MiB: the writer blocks many times
  std::thread writer([&] {
    EXPECT_TRUE(WriteAll(p.w.get(), data, "the pipe").has_value());
    p.w.reset();
  });
  auto got = ReadAll(p.r.get(), "the pipe");
  writer.join();
  ASSERT_TRUE(got.has_value()) << got.error().ToString();
  EXPECT_TRUE(*got == data);
}

TEST(Io, ReadFullStopsAtEndOfFile) {
  Pipe p;
  ASSERT_TRUE(WriteAll(p.w.get(), "abc", "the pipe").has_value());
  p.w.reset();
  char buf[10];
  auto n = ReadFull(p.r.get(), buf, sizeof(buf), "the pipe");
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(*n, 3u);
  EXPECT_EQ(std::string(buf, 3), "abc");
  n = ReadFull(p.r.get(), buf, sizeof(buf), "the pipe");
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(*n, 0u);
}

TEST(Io, ReadAllPastItsLimitIsAnError) {
  Pipe p;
  ASSERT_TRUE(WriteAll(p.w.get(), std::string(100, 'x'), "the pipe").has_value());
  p.w.reset();
  auto got = ReadAll(p.r.get(), "the pipe", 99);
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error().code, ErrorCode::kResourceExhausted);
  EXPECT_THAT(got.error().message, HasSubstr("the pipe: more than 99 bytes"));
}

TEST(Io, FailuresNameTheCallTheErrnoAndWhat) {
  Pipe p;
  p.r.reset();  // no reader: EPIPE (SIGPIPE blocked on this thread)
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &pipe_only, &old), 0);
  auto st = WriteAll(p.w.get(), "x", "the reader's pipe");
  // Take the pending SIGPIPE before unblocking it.
  timespec zero{0, 0};
  (void)sigtimedwait(&pipe_only, nullptr, &zero);
  ASSERT_EQ(pthread_sigmask(SIG_SETMASK, &old, nullptr), 0);
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(st.error().sys_errno, EPIPE);
  EXPECT_THAT(st.error().message, HasSubstr("write(the reader's pipe)"));
  EXPECT_THAT(st.error().message, HasSubstr("EPIPE"));

  char c;
  auto n = ReadFull(-1, &c, 1, "nothing");
  ASSERT_FALSE(n.has_value());
  EXPECT_EQ(n.error().sys_errno, EBADF);
  EXPECT_THAT(n.error().message, HasSubstr("read(nothing)"));
}

void Ignore(int) {}

TEST(Io, ASignalDuringAReadIsRetried) {
  // A handler without SA_RESTART: the blocked read(2) fails with EINTR.
  struct sigaction sa {
  }, old{};
  sa.sa_handler = Ignore;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  Pipe p;
  std::atomic<bool> reading{false};
  pthread_t reader_thread = pthread_self();
  Result<std::string> got;
  std::thread reader([&] {
    reader_thread = pthread_self();
    reading = true;
    got = ReadAll(p.r.get(), "the pipe");
  });
  while (!reading) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pthread_kill(reader_thread, SIGUSR1);
  }
  ASSERT_TRUE(WriteAll(p.w.get(), "after the signals", "the pipe").has_value());
  p.w.reset();
  reader.join();
  sigaction(SIGUSR1, &old, nullptr);
  ASSERT_TRUE(got.has_value()) << got.error().ToString();
  EXPECT_EQ(*got, "after the signals");
}

}  // namespace
}  // namespace deepbox
