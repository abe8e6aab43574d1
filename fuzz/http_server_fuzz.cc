// Whole HTTP request bytes through the real server (src/net/http_server.h:
// Beast's parser, keep-alive, pipelining, chunked and streamed bodies,
// 100-continue, limits) into the real daemon handler on a temporary root.
// Input: the bytes a client sends on one connection, which is then
// half-closed. Properties: the server answers with HTTP (or nothing), closes
// the connection and ends its connection thread after the client's end of
// stream (else libFuzzer's -timeout reports a hang), and
// nothing outside the root changes.
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>

#include "fuzz/daemon_fixture.h"
#include "sandboxd/server/daemon.h"

namespace {

using namespace std::chrono_literals;
using deepbox::fuzz::DaemonFixture;
using deepbox::fuzz::Fail;

struct Server {
  DaemonFixture fixture;
  std::string socket_path = fixture.base() + "/sock";
  std::unique_ptr<deepbox::net::HttpServer> server = Start();

  std::unique_ptr<deepbox::net::HttpServer> Start() {
    deepbox::net::ServerOptions options;
    options.stream_request_body = [](const deepbox::net::Request& head) {
      return deepbox::sandboxd::Daemon::StreamsRequestBody(head);
    };
    options.idle_timeout = 3s;
    options.header_timeout = 3s;
    options.body_timeout = 3s;
    options.write_timeout = 3s;
    options.max_body_bytes = 1 << 20;
    auto endpoint = deepbox::net::Endpoint::Parse("unix:" + socket_path);
    if (!endpoint) Fail("fixture: " + endpoint.error().ToString());
    auto s = deepbox::net::HttpServer::Create(
        *endpoint,
        [this](deepbox::net::Request& req, deepbox::net::ResponseWriter& w) {
          fixture.Handle(req, w);
        },
        options);
    if (!s) Fail("fixture: " + s.error().ToString());
    (*s)->Start();
    return std::move(*s);
  }
};

Server& S() {
  static Server* s = new Server();
  return *s;
}

// Sends `request` on a fresh connection, half-closes it and returns all the
// server sent until it closed. Reads while writing: a pipelined input can
// fill both socket buffers.
std::string Exchange(std::string_view request) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) Fail("socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", S().socket_path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) Fail("connect");
  std::string response;
  bool write_open = true;
  if (request.empty()) {
    ::shutdown(fd, SHUT_WR);
    write_open = false;
  }
  // A server that never closes is a hang: libFuzzer's -timeout (and ctest's)
  // reports it with the input.
  for (;;) {
    pollfd p{fd, static_cast<short>(POLLIN | (write_open ? POLLOUT : 0)), 0};
    if (::poll(&p, 1, 1000) < 0) continue;
    if (write_open && (p.revents & POLLOUT)) {
      ssize_t n = ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
      if (n > 0) request.remove_prefix(static_cast<size_t>(n));
      if (n < 0 && errno != EAGAIN && errno != EINTR) request = {};  // server closed early
      if (request.empty()) {
        ::shutdown(fd, SHUT_WR);
        write_open = false;
      }
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[16384];
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        response.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        break;  // closed (or reset)
      }
    }
  }
  ::close(fd);
  return response;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Server& s = S();
  s.fixture.Reset();
  const auto before = deepbox::fuzz::TakeSnapshot(s.fixture.base(), "root");
  std::string response = Exchange(std::string_view(reinterpret_cast<const char*>(data), size));
  FUZZ_CHECK(response.empty() || response.starts_with("HTTP/1.1 "),
             "the server answered something that is not HTTP/1.1: " + response.substr(0, 100));
  // The connection thread must end too (it may still be unwinding); one that
  // never does is a hang (-timeout).
  while (s.server->active_connections() != 0)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  const auto after = deepbox::fuzz::TakeSnapshot(s.fixture.base(), "root");
  const std::string diff = deepbox::fuzz::DescribeDifference(before, after);
  FUZZ_CHECK(diff.empty(), "a request changed something outside the root: " + diff);
  return 0;
}
