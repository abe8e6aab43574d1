#include "k8s/socket_owner.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "common/subprocess.h"
#include "common/unique_fd.h"

namespace deepbox::k8s {
namespace {

constexpr std::string_view kHeader =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
    "timeout inode\n";

// One address as the kernel prints it: each 32-bit word as a native %08X.
std::string KernelHex(const void* bytes, size_t words) {
  std::string out;
  for (size_t w = 0; w < words; ++w) {
    uint32_t v = 0;
    std::memcpy(&v, static_cast<const char*>(bytes) + w * 4, 4);
    out += fmt::format("{:08X}", v);
  }
  return out;
}

std::string V4Line(const char* ip, int port, int state, uint64_t inode) {
  in_addr a{};
  EXPECT_EQ(::inet_pton(AF_INET, ip, &a), 1);
  return fmt::format(
      "   0: {}:{:04X} 00000000:0000 {:02X} 00000000:00000000 00:00000000 00000000  1000        0 "
      "{} 1 0000000000000000 100 0 0 10 0\n",
      KernelHex(&a, 1), port, state, inode);
}

std::string V6Line(const char* ip, int port, int state, uint64_t inode) {
  in6_addr a{};
  EXPECT_EQ(::inet_pton(AF_INET6, ip, &a), 1);
  return fmt::format(
      "   0: {}:{:04X} 00000000000000000000000000000000:0000 {:02X} 00000000:00000000 "
      "00:00000000 00000000  1000        0 {} 1 0000000000000000 100 0 0 10 0\n",
      KernelHex(&a, 4), port, state, inode);
}

TEST(SocketOwnerTest, FindsTheListenersALoopbackConnectionCanReach) {
  std::string v4 = std::string(kHeader) + V4Line("127.0.0.1", 43121, 0x0A, 101) +
                   V4Line("0.0.0.0", 43121, 0x0A, 102) + V4Line("127.0.0.1", 43121, 0x01, 103) +
                   V4Line("127.0.0.2", 43121, 0x0A, 104) + V4Line("127.0.0.1", 43122, 0x0A, 105) +
                   V4Line("10.0.0.1", 43121, 0x0A, 106);
  auto found = ParseLoopbackListeners(v4, false, 43121);
  ASSERT_TRUE(found) << found.error().ToString();
  EXPECT_EQ(*found, (std::vector<uint64_t>{101, 102}));

  std::string v6 =
      std::string(kHeader) + V6Line("::", 43121, 0x0A, 201) + V6Line("::1", 43121, 0x0A, 202) +
      V6Line("::ffff:127.0.0.1", 43121, 0x0A, 203) + V6Line("::ffff:0.0.0.0", 43121, 0x0A, 204) +
      V6Line("::ffff:10.1.1.1", 43121, 0x0A, 205) + V6Line("fd00::7", 43121, 0x0A, 206);
  found = ParseLoopbackListeners(v6, true, 43121);
  ASSERT_TRUE(found) << found.error().ToString();
  EXPECT_EQ(*found, (std::vector<uint64_t>{201, 203, 204}));

  found = ParseLoopbackListeners(kHeader, false, 43121);
  ASSERT_TRUE(found);
  EXPECT_TRUE(found->empty());
}

TEST(SocketOwnerTest, ALineNotInTheKernelsFormatIsAnError) {
  for (std::string bad :
       {"   0: 0100007F:A871 00000000:0000 0A\n",
        "   0: 0100007Z:A871 00000000:0000 0A 0:0 0:0 0 1000 0 7\n",
        "   0: 0100007F:XYZ 00000000:0000 0A 0:0 0:0 0 1000 0 7\n",
        "   0: 0100007F:A871 00000000:0000 0A 0:0 0:0 0 1000 0 -7\n",
        "   0: 0100007F:A871 00000000:0000 0A 0:0 0:0 0 1000 0 99999999999999999999\n",
        "   0: 0100007FA871 00000000:0000 0A 0:0 0:0 0 1000 0 7\n"}) {
    auto r = ParseLoopbackListeners(std::string(kHeader) + bad, false, 43121);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInternal);
  }
  // An IPv4-sized address in the IPv6 table.
  EXPECT_FALSE(
      ParseLoopbackListeners(std::string(kHeader) + V4Line("127.0.0.1", 1, 0x0A, 1), true, 1));
}

struct Listening {
  UniqueFd fd;
  int port = 0;
  uint64_t inode = 0;
};

Listening ListenOnLoopback(bool listen = true) {
  Listening l;
  l.fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  EXPECT_TRUE(l.fd.valid());
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(l.fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  if (listen) {
    EXPECT_EQ(::listen(l.fd.get(), 8), 0);
  }
  socklen_t len = sizeof addr;
  EXPECT_EQ(::getsockname(l.fd.get(), reinterpret_cast<sockaddr*>(&addr), &len), 0);
  l.port = ntohs(addr.sin_port);
  struct stat st {};
  EXPECT_EQ(::fstat(l.fd.get(), &st), 0);
  l.inode = st.st_ino;
  return l;
}

TEST(SocketOwnerTest, ARealListenerIsFoundAndAttributedToItsProcess) {
  Listening l = ListenOnLoopback();
  auto found = LoopbackListeners(static_cast<uint16_t>(l.port));
  ASSERT_TRUE(found) << found.error().ToString();
  EXPECT_EQ(*found, (std::vector<uint64_t>{l.inode}));
  auto mine = SocketInodesOf(::getpid());
  ASSERT_TRUE(mine) << mine.error().ToString();
  EXPECT_TRUE(mine->contains(l.inode));
  EXPECT_TRUE(CheckListenerOwner(::getpid(), static_cast<uint16_t>(l.port)));

  // Another process (our own child, even) does not hold it: refused.
  SubprocessOptions so;
  so.argv = {"sleep", "1000"};
  auto other = Subprocess::Spawn(so);
  ASSERT_TRUE(other) << other.error().ToString();
  auto s = CheckListenerOwner(other->pid(), static_cast<uint16_t>(l.port));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(s.error().message.find(fmt::format("127.0.0.1:{}", l.port)), std::string::npos)
      << s.error().message;
  other->Terminate(std::chrono::milliseconds(2000));
}

TEST(SocketOwnerTest, ABoundPortNobodyListensOnIsReported) {
  Listening bound = ListenOnLoopback(/*listen=*/false);
  auto s = CheckListenerOwner(::getpid(), static_cast<uint16_t>(bound.port));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(s.error().message.find("nothing listens"), std::string::npos) << s.error().message;
}

}  // namespace
}  // namespace deepbox::k8s
