// The daemon's gRPC connection (src/sandboxd/server/grpc_connection.h) on
// any HTTP/2 bytes after the client preface, over a socketpair, with a
// handler that decodes ExecuteRequest but runs nothing (a fuzzer must not
// run command lines). Properties: the connection ends after the client's
// EOF (a hang is libFuzzer's timeout), and what the server sends is a
// sequence of whole HTTP/2 frames, SETTINGS first, none over the default
// 16384-byte frame size.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <thread>

#include "common/unique_fd.h"
#include "fuzz/fuzz_util.h"
#include "net/conn.h"
#include "sandboxd/server/grpc_connection.h"
#include "sandboxd/server/process_proto.h"

namespace sbd = deepbox::sandboxd;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return 0;
  deepbox::UniqueFd client(fds[0]);
  deepbox::net::Conn server_conn{deepbox::UniqueFd(fds[1])};
  sbd::GrpcServerOptions options;
  options.idle_timeout = std::chrono::milliseconds(0);
  options.max_message_bytes = 1024;
  const sbd::GrpcHandler handler = [](const sbd::GrpcCall& call) {
    auto request = sbd::proto::DecodeExecuteRequest(call.message);
    if (!request)
      return sbd::GrpcReply{sbd::GrpcStatus::kInvalidArgument, request.error().message, {}};
    sbd::proto::ExecuteResponse response;
    response.stdout_data = request->config.command.empty() ? "" : request->config.command[0];
    return sbd::GrpcReply{sbd::GrpcStatus::kOk, {}, sbd::proto::EncodeExecuteResponse(response)};
  };
  std::thread server([&] {
    sbd::ServeGrpcConnection(server_conn, sbd::kHttp2Preface, options, handler, -1);
    server_conn = deepbox::net::Conn();  // closed: the client sees EOF
  });
  std::thread writer([&] {
    size_t off = 0;
    while (off < size) {
      ssize_t n = ::send(client.get(), data + off, size - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;  // libFuzzer's SIGALRM has no SA_RESTART
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    ::shutdown(client.get(), SHUT_WR);
  });
  std::string out;
  char buf[16384];
  for (;;) {
    ssize_t n = ::recv(client.get(), buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;  // not the server's doing
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  writer.join();
  server.join();
  FUZZ_CHECK(out.size() >= 9 && out[3] == 4, "the server did not start with SETTINGS");
  size_t off = 0;
  while (out.size() - off >= 9) {
    const size_t length = (static_cast<size_t>(static_cast<uint8_t>(out[off])) << 16) |
                          (static_cast<size_t>(static_cast<uint8_t>(out[off + 1])) << 8) |
                          static_cast<uint8_t>(out[off + 2]);
    FUZZ_CHECK(length <= 16384, "a frame over 16384 bytes");
    off += 9 + length;
  }
  FUZZ_CHECK(off == out.size(), "the server's bytes end inside a frame");
  return 0;
}
