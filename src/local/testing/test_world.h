// A test "internet": network namespaces the test creates (root only). The
// "world" netns stands in for the host's network namespace: sandboxes get
// their uplink (pasta, the proxy) in there, so nothing a test does ever
// leaves this machine. Its test hosts sit one hop away in a "hosts" netns.
//
// Every address is a documentation one (never a real host): sandboxes refuse
// those ranges by default (L2), so the world's "public" hosts are reachable
// only through the operator exceptions its tests set (AllowedCidrs(): the
// hosts' 203.0.113.0/25 and 2001:db8:1::/48). Build() checks with `ip route
// get` that each test address is routed into the hosts netns before any
// test sends a packet.
// world (the "host"):   w0 203.0.113.1/24, 2001:db8::1/64; default routes via
//                       203.0.113.254 / 2001:db8::ffff (the hosts netns);
//                       TCP 8081 and 443 on every address (its "services",
//                       loopback included) send "TOKEN <addr>\n"
// hosts (the internet): w1 203.0.113.254/24, 2001:db8::ffff/64, and on lo:
//     203.0.113.10, 2001:db8:1::10   public test host
//     203.0.113.53, 2001:db8:1::53   test DNS server (names under .test)
//     10.99.0.10, fd00:99::10      private host
//     100.64.0.10                  CGNAT host
//     169.254.169.254              fake cloud metadata
//     198.51.100.10                documentation host outside AllowedCidrs()
// Servers in hosts (forked children, on every address):
//   TCP 8080 (v4+v6)  sends "TOKEN <local address>\n" on connect
//   TCP 80, 443       waits for the client's first bytes, then answers: HTTP
//                     responses "TOKEN <addr> <request line>\n", one per
//                     request on the connection (keep-alive unless the request
//                     says "Connection: close"; Content-Length bodies are
//                     skipped) or, after a TLS ClientHello, a TLS-looking
//                     record (type 0x16) holding "TOKEN <addr> tls\n"
//   UDP 9053          answers every datagram with "TOKEN udp" (one socket per
//                     address: a reply must come from the address asked)
//   DNS 53            on 203.0.113.53, 2001:db8:1::53 and 10.99.0.10:
//                     public.test, allowed.test, www.allowed.test,
//                     other.test, plain.test -> 203.0.113.10 + 2001:db8:1::10;
//                     hostself.allowed.test -> 203.0.113.1 (the
//                     world's own); doc.allowed.test -> 198.51.100.10;
//                     private.test, rebind.allowed.test -> 10.99.0.10;
//                     metadata.test -> 169.254.169.254; mixed.allowed.test ->
//                     203.0.113.10 + 10.99.0.10; anything else NXDOMAIN.
// Servers are forked before any thread exists in the test (fork + C++ code).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "local/dns_client.h"
#include "local/netns.h"
#include "local/network.h"
#include "local/testing/netns_holder.h"

namespace deepbox::local::testing {

// A forked server process in a netns; killed (by its pid) on destruction.
class WorldServer {
 public:
  // make_socket runs in the child after setns; serve(socket) never returns.
  WorldServer(int netns_fd, const std::function<int()>& make_socket,
              const std::function<void(int)>& serve) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(p[0]);
      if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) != 0) _exit(1);
      int s = make_socket();
      if (s < 0) _exit(2);
      (void)!write(p[1], "r", 1);
      close(p[1]);
      serve(s);
      _exit(0);
    }
    close(p[1]);
    char c;
    ready_ = read(p[0], &c, 1) == 1;
    close(p[0]);
  }
  ~WorldServer() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  WorldServer(const WorldServer&) = delete;
  WorldServer& operator=(const WorldServer&) = delete;
  bool ready() const { return ready_; }

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
};

inline std::string LocalAddressOf(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  std::string a = AddressText(ss);
  if (a.rfind("::ffff:", 0) == 0) a = a.substr(7);
  return a;
}

// Binds a dual-stack socket on [::]:port (type SOCK_STREAM / SOCK_DGRAM).
inline int BindAny(int type, int port) {
  int s = socket(AF_INET6, type | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  int one = 1, zero = 0;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(static_cast<uint16_t>(port));
  a.sin6_addr = in6addr_any;
  if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return -1;
  if (type == SOCK_STREAM && listen(s, 128) != 0) return -1;
  return s;
}

// A UDP socket bound to one address.
inline int BindUdp(const std::string& ip, int port) {
  sockaddr_storage ss{};
  socklen_t len;
  auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, ip.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*a4);
  } else if (inet_pton(AF_INET6, ip.c_str(), &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*a6);
  } else {
    return -1;
  }
  int s = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&ss), len) != 0) return -1;
  return s;
}

// A DNS answer for the test names (see the header comment).
inline std::string TestDnsAnswer(const std::string& query) {
  if (query.size() < 17) return {};
  size_t pos = 12;
  std::string name;
  while (pos < query.size() && query[pos] != 0) {
    size_t len = static_cast<uint8_t>(query[pos]);
    if (pos + 1 + len > query.size()) return {};
    if (!name.empty()) name += '.';
    name += query.substr(pos + 1, len);
    pos += 1 + len;
  }
  if (pos + 5 > query.size()) return {};
  size_t qend = pos + 5;
  uint16_t qtype = static_cast<uint16_t>((static_cast<uint8_t>(query[pos + 1]) << 8) |
                                         static_cast<uint8_t>(query[pos + 2]));
  for (char& c : name) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  static const std::map<std::string, std::vector<std::string>> kZone = {
      {"public.test", {"203.0.113.10", "2001:db8:1::10"}},
      {"allowed.test", {"203.0.113.10", "2001:db8:1::10"}},
      {"www.allowed.test", {"203.0.113.10", "2001:db8:1::10"}},
      {"other.test", {"203.0.113.10", "2001:db8:1::10"}},
      {"plain.test", {"203.0.113.10", "2001:db8:1::10"}},
      {"hostself.allowed.test", {"203.0.113.1"}},
      {"doc.allowed.test", {"198.51.100.10"}},
      {"private.test", {"10.99.0.10"}},
      {"rebind.allowed.test", {"10.99.0.10"}},
      {"metadata.test", {"169.254.169.254"}},
      {"mixed.allowed.test", {"203.0.113.10", "10.99.0.10"}},
  };
  auto it = kZone.find(name);
  std::string r = query.substr(0, qend);
  r[2] = static_cast<char>(0x81);                             // QR, RD
  r[3] = static_cast<char>(it == kZone.end() ? 0x83 : 0x80);  // RA; NXDOMAIN
  std::vector<std::string> rdatas;
  if (it != kZone.end()) {
    for (const auto& a : it->second) {
      unsigned char b[16];
      if (qtype == 1 && inet_pton(AF_INET, a.c_str(), b) == 1) {
        rdatas.emplace_back(reinterpret_cast<char*>(b), 4);
      } else if (qtype == 28 && inet_pton(AF_INET6, a.c_str(), b) == 1) {
        rdatas.emplace_back(reinterpret_cast<char*>(b), 16);
      }
    }
  }
  r[6] = 0;
  r[7] = static_cast<char>(rdatas.size());
  r[8] = r[9] = r[10] = r[11] = 0;
  for (const auto& d : rdatas) {
    r += std::string("\xc0\x0c", 2);  // the question's name
    r += static_cast<char>(qtype >> 8);
    r += static_cast<char>(qtype & 0xff);
    r += std::string("\x00\x01\x00\x00\x00\x3c\x00", 7);  // IN, TTL 60
    r += static_cast<char>(d.size());
    r += d;
  }
  return r;
}

struct ChildRun {
  int status = -1;     // waitpid status
  std::string output;  // what fn wrote to its fd
};
// Gives this process (and its children) a /dev/net/tun of mode 0666 (Debian's
// default) in a private mount namespace: some hosts ship it 0600, which keeps
// an unprivileged pasta from opening it. Nothing changes on the host. Root only.
inline bool PrivateTunDevice() {
  if (unshare(CLONE_NEWNS) != 0) return false;
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return false;
  if (mount("tmpfs", "/dev/net", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755") != 0) return false;
  if (mknod("/dev/net/tun", S_IFCHR | 0666, makedev(10, 200)) != 0) return false;
  return chmod("/dev/net/tun", 0666) == 0;  // past the umask
}

// Forks; the child joins `netns_fd` (the world), optionally gets a 0666 tun
// device (PrivateTunDevice), drops to `uid` (gid = uid, no groups) and exits
// with fn(out_fd). Only from a single-threaded test process.
inline ChildRun RunAsUserInNetns(int netns_fd, uid_t uid, const std::function<int(int)>& fn,
                                 bool private_tun = false) {
  ChildRun run;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return run;
  UniqueFd r(fds[0]), w(fds[1]);
  pid_t child = fork();
  if (child < 0) return run;
  if (child == 0) {
    r.reset();
    if (private_tun && !PrivateTunDevice()) _exit(121);
    if (setns(netns_fd, CLONE_NEWNET) != 0 || setgroups(0, nullptr) != 0 ||
        setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0 ||
        prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) {  // the uid change cleared it: /proc/PID/* of
      _exit(120);                                   // our children must be ours to write
    }
    _exit(fn(w.get()));
  }
  w.reset();
  char buf[4096];
  for (ssize_t n; (n = read(r.get(), buf, sizeof(buf))) > 0;) {
    run.output.append(buf, static_cast<size_t>(n));
  }
  while (waitpid(child, &run.status, 0) < 0 && errno == EINTR) {
  }
  return run;
}

class TestWorld {
 public:
  static constexpr const char* kPublic4 = "203.0.113.10";
  static constexpr const char* kPublic6 = "2001:db8:1::10";
  static constexpr const char* kDns4 = "203.0.113.53";
  static constexpr const char* kDns6 = "2001:db8:1::53";
  static constexpr const char* kPrivate4 = "10.99.0.10";
  static constexpr const char* kPrivate6 = "fd00:99::10";
  static constexpr const char* kCgnat4 = "100.64.0.10";
  static constexpr const char* kMetadata4 = "169.254.169.254";
  static constexpr const char* kDoc4 = "198.51.100.10";
  static constexpr const char* kUplinkAddr4 = "203.0.113.1";  // the world's own (host) address
  static constexpr const char* kUplinkAddr6 = "2001:db8::1";
  static constexpr const char* kGateway4 = "203.0.113.254";  // the world's gateway
  static constexpr const char* kGateway6 = "2001:db8::ffff";
  // The operator exceptions that make the public test host reachable (set them
  // in PublicNetworkConfig::allowed_cidrs). The world's own 203.0.113.1 lies
  // inside and must still be refused; its gateway and kDoc4 lie outside.
  static std::vector<std::string> AllowedCidrs() { return {"203.0.113.0/25", "2001:db8:1::/48"}; }

  // Builds the namespace and starts the servers; "" or why it failed.
  std::string Build(const std::string& token) {
    token_ = token;
    if (!ns_.ok() || !hosts_.ok()) return "cannot create a network namespace";
    auto r = ns_.Ip(
        "link set lo up\n"
        "link add w0 type veth peer name w1 netns " +
        std::to_string(hosts_.pid()) +
        "\n"
        "link set w0 up\n"
        "addr add 203.0.113.1/24 dev w0\n"
        "addr add 2001:db8::1/64 dev w0 nodad\n"
        "route add default via 203.0.113.254\n"
        "route add default via 2001:db8::ffff\n");
    if (!r) return r.error().ToString();
    r = hosts_.Ip(
        "link set lo up\nlink set w1 up\n"
        "addr add 203.0.113.254/24 dev w1\n"
        "addr add 2001:db8::ffff/64 dev w1 nodad\n"
        "route add default via 203.0.113.1\n"
        "route add default via 2001:db8::1\n"
        "addr add 203.0.113.10/32 dev lo\naddr add 203.0.113.53/32 dev lo\n"
        "addr add 10.99.0.10/32 dev lo\naddr add 100.64.0.10/32 dev lo\n"
        "addr add 169.254.169.254/32 dev lo\n"
        "addr add 2001:db8:1::10/128 dev lo\naddr add 2001:db8:1::53/128 dev lo\n"
        "addr add fd00:99::10/128 dev lo\naddr add 198.51.100.10/32 dev lo\n");
    if (!r) return r.error().ToString();
    // Before the first packet: every test address is routed into the hosts netns.
    for (const char* a : {kPublic4, kPublic6, kDns4, kDns6, kPrivate4, kPrivate6, kCgnat4,
                          kMetadata4, kDoc4, kGateway4, kGateway6}) {
      auto route = ns_.Sh(std::string("/usr/sbin/ip route get ") + a);
      if (!route) return route.error().ToString();
      if (route->find(" dev w0 ") == std::string::npos) {
        return std::string("the test world routes ") + a + " elsewhere: " + *route;
      }
    }
    const std::string tok = token_;
    auto line = [tok](int s) {
      for (;;) {
        int c = accept4(s, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        std::string msg = tok + " " + LocalAddressOf(c) + "\n";
        (void)!write(c, msg.data(), msg.size());
        close(c);
      }
    };
    auto web = [tok](int s) {
      for (;;) {
        int c = accept4(s, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        if (fork() == 0) {
          char buf[8192];
          std::string got;
          pollfd p{c, POLLIN, 0};
          for (;;) {
            // One request head (or a ClientHello), then its Content-Length body.
            size_t head_end = std::string::npos;
            while ((got.empty() || static_cast<uint8_t>(got[0]) != 0x16) &&
                   (head_end = got.find("\r\n\r\n")) == std::string::npos) {
              if (poll(&p, 1, 5000) <= 0) _exit(0);
              ssize_t n = read(c, buf, sizeof(buf));
              if (n <= 0) _exit(0);
              got.append(buf, static_cast<size_t>(n));
            }
            if (static_cast<uint8_t>(got[0]) == 0x16) {
              std::string body = tok + " " + LocalAddressOf(c) + " tls\n";
              std::string msg = std::string("\x16\x03\x03", 3) +
                                static_cast<char>(body.size() >> 8) +
                                static_cast<char>(body.size() & 255) + body;
              (void)!write(c, msg.data(), msg.size());
              _exit(0);
            }
            std::string head = got.substr(0, head_end + 2), lower = head;
            for (char& ch : lower) ch = static_cast<char>(tolower(static_cast<unsigned char>(ch)));
            size_t length = 0;
            if (size_t at = lower.find("\r\ncontent-length:"); at != std::string::npos) {
              length = std::strtoul(lower.c_str() + at + 17, nullptr, 10);
            }
            bool close_after = lower.find("\r\nconnection: close") != std::string::npos;
            got.erase(0, head_end + 4);
            while (got.size() < length) {
              if (poll(&p, 1, 5000) <= 0) _exit(0);
              ssize_t n = read(c, buf, sizeof(buf));
              if (n <= 0) _exit(0);
              got.append(buf, static_cast<size_t>(n));
            }
            got.erase(0, length);
            std::string body =
                tok + " " + LocalAddressOf(c) + " " + head.substr(0, head.find('\r')) + "\n";
            std::string msg = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                              (close_after ? "\r\nConnection: close" : "") + "\r\n\r\n" + body;
            (void)!write(c, msg.data(), msg.size());
            if (close_after) _exit(0);
          }
        }
        close(c);
        while (waitpid(-1, nullptr, WNOHANG) > 0) {
        }
      }
    };
    auto udp = [tok](int s) {
      char buf[2048];
      for (;;) {
        sockaddr_storage from{};
        socklen_t len = sizeof(from);
        ssize_t n = recvfrom(s, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &len);
        if (n < 0) continue;
        std::string msg = tok + " udp";
        sendto(s, msg.data(), msg.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
      }
    };
    auto dns = [](int s) {
      char buf[2048];
      for (;;) {
        sockaddr_storage from{};
        socklen_t len = sizeof(from);
        ssize_t n = recvfrom(s, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &len);
        if (n < 0) continue;
        std::string answer = TestDnsAnswer(std::string(buf, static_cast<size_t>(n)));
        if (!answer.empty()) {
          sendto(s, answer.data(), answer.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
        }
      }
    };
    const int h = hosts_.fd();
    servers_.push_back(std::make_unique<WorldServer>(
        h, [] { return BindAny(SOCK_STREAM, 8080); }, line));
    servers_.push_back(std::make_unique<WorldServer>(
        h, [] { return BindAny(SOCK_STREAM, 80); }, web));
    servers_.push_back(std::make_unique<WorldServer>(
        h, [] { return BindAny(SOCK_STREAM, 443); }, web));
    for (const char* a : {kPublic4, kPublic6, kPrivate4, kPrivate6, kMetadata4}) {
      servers_.push_back(std::make_unique<WorldServer>(
          h, [a] { return BindUdp(a, 9053); }, udp));
    }
    for (const char* a : {kDns4, kDns6, kPrivate4}) {
      servers_.push_back(std::make_unique<WorldServer>(
          h, [a] { return BindUdp(a, 53); }, dns));
    }
    // The "host's" own services, on its loopback and its addresses.
    servers_.push_back(std::make_unique<WorldServer>(
        ns_.fd(), [] { return BindAny(SOCK_STREAM, 8081); }, line));
    servers_.push_back(std::make_unique<WorldServer>(
        ns_.fd(), [] { return BindAny(SOCK_STREAM, 443); }, line));
    for (const auto& s : servers_) {
      if (!s->ready()) return "a test server could not start";
    }
    return {};
  }

  const NetnsHolder& ns() const { return ns_; }  // the "host"
  const NetnsHolder& hosts() const { return hosts_; }
  const std::string& token() const { return token_; }
  // The nameservers a sandbox in this world uses.
  static std::vector<std::string> Nameservers() { return {kDns4, kDns6}; }

 private:
  NetnsHolder ns_;
  NetnsHolder hosts_;
  std::string token_;
  std::vector<std::unique_ptr<WorldServer>> servers_;
};

}  // namespace deepbox::local::testing
