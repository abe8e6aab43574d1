// Network-namespace plumbing: `lo` in a new netns, programs run in another
// netns (stdin fed, failures named), and a listener made in a sandbox's netns.
#include "local/netns.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "local/testing/netns_holder.h"

namespace deepbox::local {
namespace {

using ::testing::HasSubstr;

TEST(NetnsTest, LoopbackUpInNewNetns) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a bare network namespace";
  pid_t p = fork();
  if (p == 0) {
    if (unshare(CLONE_NEWNET) != 0) _exit(1);
    ChildCall call;
    if (BringUpLoopbackRaw(&call) != 0) _exit(2);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) _exit(3);
    _exit(0);
  }
  int status = 0;
  waitpid(p, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(NetnsTest, RunFeedsInputAndNamesFailures) {
  auto out = RunInNetns(-1, {"/bin/cat"}, "to stdin and back");
  ASSERT_TRUE(out.has_value()) << out.error().ToString();
  EXPECT_EQ(*out, "to stdin and back");
  auto relative = RunInNetns(-1, {"cat"});
  ASSERT_FALSE(relative.has_value());
  EXPECT_EQ(relative.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(relative.error().message, HasSubstr("absolute"));
  auto failed = RunInNetns(-1, {"/bin/sh", "-c", "echo oops; exit 3"});
  ASSERT_FALSE(failed.has_value());
  EXPECT_THAT(failed.error().message, HasSubstr("status 3"));
  EXPECT_THAT(failed.error().message, HasSubstr("oops"));
  auto missing = RunInNetns(-1, {"/nonexistent/program"});
  ASSERT_FALSE(missing.has_value());
  EXPECT_THAT(missing.error().message, HasSubstr("status 127"));
}

TEST(NetnsTest, OpenNetns) {
  auto own = OpenNetns("");
  ASSERT_TRUE(own.has_value()) << own.error().ToString();
  EXPECT_TRUE(own->valid());
  auto missing = OpenNetns("/nonexistent/ns/net");
  ASSERT_FALSE(missing.has_value());
  EXPECT_THAT(missing.error().ToString(), HasSubstr("open"));
  EXPECT_THAT(missing.error().ToString(), HasSubstr("/nonexistent/ns/net"));
}

ino_t InodeOf(int fd) {
  struct stat st {};
  return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

TEST(NetnsTest, RunAndListenInAnotherProcessNetns) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a bare network namespace";
  testing::NetnsHolder ns;
  ASSERT_TRUE(ns.ok());
  auto links = RunInSandboxNetns(ns.pid(), {"/usr/sbin/ip", "-br", "link"});
  ASSERT_TRUE(links.has_value()) << links.error().ToString();
  EXPECT_THAT(*links, HasSubstr("lo"));
  auto listener = ListenInSandboxNetns(ns.pid(), "127.0.0.1", 3128);
  ASSERT_TRUE(listener.has_value()) << listener.error().ToString();
  // The socket belongs to that netns, whichever process holds it.
  UniqueFd socket_ns(ioctl(listener->get(), SIOCGSKNS));
  ASSERT_TRUE(socket_ns.valid()) << strerror(errno);
  EXPECT_EQ(InodeOf(socket_ns.get()), InodeOf(ns.fd()));
  // ListenInSandboxNetns brought `lo` up there: a client inside connects.
  auto connect =
      RunInNetns(ns.fd(), {"/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/3128 && echo connected"});
  ASSERT_TRUE(connect.has_value()) << connect.error().ToString();
  EXPECT_EQ(*connect, "connected\n");
  auto bad = ListenInSandboxNetns(ns.pid(), "localhost", 3128);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace deepbox::local
