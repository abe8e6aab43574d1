#include "local/daemon_socket.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace deepbox::local {
namespace {

namespace fs = std::filesystem;

class DaemonSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dbx-dsock-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static int ConnectErrno(const fs::path& p) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, p.c_str(), sizeof(a.sun_path) - 1);
    int rc = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? 0 : errno;
    close(fd);
    return rc;
  }

  fs::path dir_;
};

TEST_F(DaemonSocketTest, ListensOwnerOnlyAndRefusesAfterClose) {
  auto s = DaemonSocket::Create(dir_ / "d.sock");
  ASSERT_TRUE(s) << s.error().ToString();
  int accepting = 0;
  socklen_t len = sizeof accepting;
  ASSERT_EQ(getsockopt(s->fd(), SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len), 0);
  EXPECT_EQ(accepting, 1);
  struct stat st;
  ASSERT_EQ(lstat((dir_ / "d.sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(ConnectErrno(dir_ / "d.sock"), 0);
  s->CloseFd();
  EXPECT_EQ(ConnectErrno(dir_ / "d.sock"), ECONNREFUSED);
}

TEST_F(DaemonSocketTest, ReplacesAStaleSocketButNothingElse) {
  ASSERT_TRUE(DaemonSocket::Create(dir_ / "d.sock"));  // closed at once: stale
  auto again = DaemonSocket::Create(dir_ / "d.sock");
  ASSERT_TRUE(again) << again.error().ToString();
  EXPECT_EQ(ConnectErrno(dir_ / "d.sock"), 0);
  std::ofstream(dir_ / "file") << "precious";
  auto onto_file = DaemonSocket::Create(dir_ / "file");
  ASSERT_FALSE(onto_file);
  EXPECT_EQ(onto_file.error().code, ErrorCode::kConflict);
  std::ifstream in(dir_ / "file");
  std::string content;
  in >> content;
  EXPECT_EQ(content, "precious");
}

TEST_F(DaemonSocketTest, RefusesADirectoryOthersCanReach) {
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  auto s = DaemonSocket::Create(dir_ / "d.sock");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kPermissionDenied) << s.error().message;
  EXPECT_FALSE(fs::exists(dir_ / "d.sock"));
}

TEST_F(DaemonSocketTest, RefusesASymlinkedDirectory) {
  ASSERT_EQ(mkdir((dir_ / "real").c_str(), 0700), 0);
  fs::create_directory_symlink(dir_ / "real", dir_ / "link");
  auto s = DaemonSocket::Create(dir_ / "link" / "d.sock");
  ASSERT_FALSE(s);
  EXPECT_FALSE(fs::exists(dir_ / "real" / "d.sock"));
}

TEST_F(DaemonSocketTest, RefusesRelativePaths) {
  EXPECT_FALSE(DaemonSocket::Create("d.sock"));
  EXPECT_FALSE(DaemonSocket::Create(""));
}

}  // namespace
}  // namespace deepbox::local
