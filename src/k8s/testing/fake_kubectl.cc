// Test-only stand-in for `kubectl port-forward`: listens on 127.0.0.1:<local>
// and proxies every connection (real TCP, both directions) to the address in
// $DEEPBOX_FAKE_KUBECTL_TARGET ("127.0.0.1:PORT", e.g. the test router).
//   deepbox-fake-kubectl [global flags] port-forward [--address 127.0.0.1]
//       svc/NAME [LOCAL]:REMOTE -n NS
// An empty or 0 LOCAL port lets the kernel choose; as kubectl, the port is
// printed on stdout: "Forwarding from 127.0.0.1:PORT -> REMOTE".
// $DEEPBOX_FAKE_KUBECTL_LOG: append the argument list to this file.
// $DEEPBOX_FAKE_KUBECTL_FAIL_IF: if this file exists, print its content to
// stderr and exit 1 (as kubectl does when the service is missing).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

// As kubectl (Go sets TCP_NODELAY on every TCP connection): without it a
// request the client writes in two pieces waits out Nagle + delayed ACK.
void NoDelay(int fd) {
  int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int Connect(const std::string& hostport) {
  auto colon = hostport.rfind(':');
  if (colon == std::string::npos) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(hostport.c_str() + colon + 1)));
  if (::inet_pton(AF_INET, hostport.substr(0, colon).c_str(), &addr.sin_addr) != 1) return -1;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  NoDelay(fd);
  return fd;
}

bool WriteAll(int fd, const char* data, ssize_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, data, static_cast<size_t>(n), MSG_NOSIGNAL);
    if (w <= 0) return false;
    data += w;
    n -= w;
  }
  return true;
}

void Pipe(int client, std::string target) {
  int upstream = Connect(target);
  if (upstream < 0) {
    std::fprintf(stderr, "E0000 error forwarding port: cannot connect to %s\n", target.c_str());
    ::close(client);
    return;
  }
  NoDelay(client);
  pollfd fds[2] = {{client, POLLIN, 0}, {upstream, POLLIN, 0}};
  bool open[2] = {true, true};
  char buf[65536];
  while (open[0] || open[1]) {
    fds[0].events = open[0] ? POLLIN : 0;
    fds[1].events = open[1] ? POLLIN : 0;
    if (::poll(fds, 2, -1) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (!open[i] || fds[i].revents == 0) continue;
      ssize_t n = ::recv(fds[i].fd, buf, sizeof buf, 0);
      int other = fds[1 - i].fd;
      if (n <= 0) {
        open[i] = false;
        ::shutdown(other, SHUT_WR);
        continue;
      }
      if (!WriteAll(other, buf, n)) open[0] = open[1] = false;
    }
  }
  ::close(client);
  ::close(upstream);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (const char* log = std::getenv("DEEPBOX_FAKE_KUBECTL_LOG")) {
    std::ofstream out(log, std::ios::app);
    for (const auto& a : args) out << a << ' ';
    out << '\n';
  }
  if (const char* fail = std::getenv("DEEPBOX_FAKE_KUBECTL_FAIL_IF")) {
    std::ifstream in(fail);
    if (in) {
      std::stringstream ss;
      ss << in.rdbuf();
      std::fprintf(stderr, "%s\n", ss.str().c_str());
      return 1;
    }
  }
  size_t i = 0;
  while (i < args.size() && args[i] != "port-forward") ++i;
  std::vector<std::string> positional;
  std::string address = "127.0.0.1";
  for (size_t j = i + 1; j < args.size(); ++j) {
    if (args[j] == "-n" || args[j] == "--namespace") {
      ++j;
    } else if (args[j] == "--address" && j + 1 < args.size()) {
      address = args[++j];
    } else {
      positional.push_back(args[j]);
    }
  }
  if (i == args.size() || positional.size() != 2 || address != "127.0.0.1") {
    std::fprintf(stderr,
                 "error: usage: port-forward [--address 127.0.0.1] TYPE/NAME "
                 "[LOCAL]:REMOTE -n NS\n");
    return 2;
  }
  std::string ports = positional[1];
  int local = std::atoi(ports.substr(0, ports.find(':')).c_str());
  const char* target = std::getenv("DEEPBOX_FAKE_KUBECTL_TARGET");
  if (target == nullptr) {
    std::fprintf(stderr, "error: DEEPBOX_FAKE_KUBECTL_TARGET is not set\n");
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(local));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(lfd, 64) != 0) {
    std::fprintf(stderr, "error: unable to listen on port %d: %s\n", local, std::strerror(errno));
    return 1;
  }
  socklen_t len = sizeof addr;
  if (::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    local = ntohs(addr.sin_port);
  std::printf("Forwarding from 127.0.0.1:%d -> %s\n", local,
              ports.substr(ports.find(':') + 1).c_str());
  std::fflush(stdout);
  for (;;) {
    int c = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    std::printf("Handling connection for %d\n", local);
    std::fflush(stdout);
    std::thread(Pipe, c, std::string(target)).detach();
  }
}
