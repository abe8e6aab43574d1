#include "acp/terminal_spool.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "common/io.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"

namespace deepbox::acp {
namespace {

namespace fs = std::filesystem;

// The viewer's output: a pipe read on a thread of its own until it closes.
struct Captured {
  int write_fd = -1;
  std::future<std::string> text;
};
Captured CapturePipe() {
  int fds[2];
  EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  Captured c;
  c.write_fd = fds[1];
  c.text = std::async(std::launch::async, [fd = fds[0]] {
    auto all = ReadAll(fd, "pipe");
    ::close(fd);
    return all ? *all : std::string();
  });
  return c;
}

TEST(TerminalSpoolTest, TheViewerFollowsTheOutputAndEndsWithTheStatus) {
  auto dir = SpoolDir::Create();
  ASSERT_TRUE(dir) << dir.error().message;
  struct stat st {};
  ASSERT_EQ(::stat((*dir)->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);  // the output is nobody else's to read
  auto spool = OutputSpool::Create((*dir)->path(), "1.out");
  ASSERT_TRUE(spool) << spool.error().message;
  ASSERT_TRUE((*spool)->Append("first\n"));

  Captured out = CapturePipe();
  // The viewer starts while the command runs: it replays what came before,
  // then follows (no timing is asserted: only what it shows in the end).
  auto viewer = std::async(std::launch::async, [&out, path = (*spool)->path()] {
    auto r = FollowSpool(path, out.write_fd);
    ::close(out.write_fd);
    return r;
  });
  ASSERT_TRUE((*spool)->Append("second\n"));
  ASSERT_TRUE((*spool)->Append(std::string(100000, 'x')));
  ASSERT_TRUE((*spool)->Finish(3));
  EXPECT_TRUE((*spool)->finished());
  EXPECT_TRUE((*spool)->Append("after the end\n"));  // ignored
  auto code = viewer.get();
  ASSERT_TRUE(code) << code.error().message;
  EXPECT_EQ(*code, 3);
  EXPECT_EQ(out.text.get(), "first\nsecond\n" + std::string(100000, 'x'));

  // A viewer started after the end replays it all.
  Captured again = CapturePipe();
  auto late = FollowSpool((*spool)->path(), again.write_fd);
  ::close(again.write_fd);
  ASSERT_TRUE(late) << late.error().message;
  EXPECT_EQ(*late, 3);
  EXPECT_EQ(again.text.get().substr(0, 13), "first\nsecond\n");

  const std::string path = (*spool)->path();
  spool->reset();  // both files go with it
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".exit"));
  const std::string dir_path = (*dir)->path();
  dir->reset();
  EXPECT_FALSE(fs::exists(dir_path));
}

TEST(TerminalSpoolTest, AViewerWhoseSpoolIsRemovedEnds) {
  auto dir = SpoolDir::Create();
  ASSERT_TRUE(dir) << dir.error().message;
  auto spool = OutputSpool::Create((*dir)->path(), "2.out");
  ASSERT_TRUE(spool) << spool.error().message;
  ASSERT_TRUE((*spool)->Append("partial"));
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  UniqueFd read_end(fds[0]);
  auto viewer = std::async(std::launch::async, [fd = fds[1], path = (*spool)->path()] {
    auto r = FollowSpool(path, fd);
    ::close(fd);
    return r;
  });
  // Once the viewer showed what was there, the `deepbox acp` that wrote it
  // ends without a status.
  char shown[7];
  auto n = ReadFull(read_end.get(), shown, sizeof shown, "pipe");
  ASSERT_TRUE(n && *n == sizeof shown);
  EXPECT_EQ(std::string_view(shown, sizeof shown), "partial");
  spool->reset();
  auto code = viewer.get();
  ASSERT_FALSE(code);
  EXPECT_EQ(code.error().code, ErrorCode::kNotFound);
}

TEST(TerminalSpoolTest, OnlyRegularFilesAreFollowedAndNamesStayInTheDirectory) {
  testing::TempDir tmp("acp-spool");
  const fs::path target = tmp.path() / "secret";
  std::ofstream(target) << "not a spool";
  fs::create_symlink(target, tmp.path() / "link.out");
  auto r = FollowSpool(tmp.path() / "link.out", STDOUT_FILENO);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("symlink"), std::string::npos);
  auto d = FollowSpool(tmp.path(), STDOUT_FILENO);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, ErrorCode::kInvalidArgument);
  // A file that is no spool is refused, not followed until it "ends".
  auto other = FollowSpool(target, STDOUT_FILENO);
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(other.error().message.find("not a spool"), std::string::npos);

  EXPECT_FALSE(OutputSpool::Create(tmp.path(), "../escape"));
  EXPECT_FALSE(OutputSpool::Create(tmp.path(), ".."));
  // Never through a symlink, never over an existing file.
  EXPECT_FALSE(OutputSpool::Create(tmp.path(), "link.out"));
  EXPECT_FALSE(OutputSpool::Create(tmp.path(), "secret"));
  std::ifstream in(target);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "not a spool");
}

}  // namespace
}  // namespace deepbox::acp
