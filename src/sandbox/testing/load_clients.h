// Test and benchmark support for load on deepbox-sandboxd, shared by
// tests/sandboxd/load_test.cc (invariants) and bench/sandboxd_load (timings):
// a hand-driven HTTP/1.1 connection, whose user decides what is sent when and
// how fast the answer is read, and the mixed request workload.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "net/conn.h"
#include "sandbox/sandbox.h"

namespace deepbox::testing {

// A complete POST request with a JSON body.
std::string JsonPost(std::string_view target, std::string_view body);

struct RawResponse {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;  // de-chunked
};

class RawClient {
 public:
  static Result<RawClient> Connect(const std::string& endpoint, net::Deadline deadline);

  Status Send(std::string_view bytes, net::Deadline deadline);
  // At most `max` bytes, as they come; "" at the end of the stream.
  Result<std::string> ReadSome(size_t max, net::Deadline deadline);
  // One response with a Content-Length or a chunked body (a 100 Continue
  // before it is skipped).
  Result<RawResponse> ReadResponse(net::Deadline deadline);
  // Everything until the peer closes (a reset after a close ends it too);
  // TIMEOUT if it does not close by the deadline.
  Result<std::string> ReadToEnd(net::Deadline deadline);

  // The peer closed or shut down its side, seen without reading what it sent
  // first (unix sockets show it at once; TCP only after the data before it).
  bool PeerClosed() const;
  bool Readable() const;
  int fd() const { return conn_.fd(); }

 private:
  Status Fill(net::Deadline deadline);
  net::Conn conn_;
  std::string pending_;
};

// A numeric field of /proc/PID/status ("VmRSS" in kB, "Threads"); -1 if absent.
long ProcStatusField(pid_t pid, std::string_view key);
// Entries of /proc/PID/fd.
long OpenFdCount(pid_t pid);

// The mixed workload: request i of a client is, in turn, a stat, a read, a
// write, an ls, an exec of `true`, a glob, a grep and a line-window read, each
// checked against what Prepare() wrote.
class MixedWorkload {
 public:
  static constexpr std::string_view kDir = "mix";
  static Status Prepare(Sandbox& sandbox);
  // OK, or what went wrong.
  static Status One(Sandbox& sandbox, int client, size_t i);
  // Requests 0..total-1, spread over the clients (one thread each, client c
  // sends c, c + n, c + 2n, ...). Returns the number of failed requests and
  // the first failure in *first_failure.
  static size_t Run(const std::vector<Sandbox*>& clients, size_t total,
                    std::string* first_failure = nullptr);
};

}  // namespace deepbox::testing
