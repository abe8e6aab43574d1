// A real deepbox-sandboxd Daemon on a temporary root, for the fuzz targets
// that drive its request handling (daemon_api_fuzz, http_server_fuzz). The
// root is refilled before each input with a small tree (files, directories,
// symlinks inside and out of it), so inputs do not depend on each other.
//
// Routes that start programs (exec, exec/stream, POST processes, upstream
// /execute) are answered 403 by the fixture itself: the fuzzer must not run
// whatever command line it stumbles on, on the machine that fuzzes. Their
// JSON bodies are still parsed (ParseCommandSpec) by daemon_api_fuzz.
#pragma once

#include <memory>
#include <string>

#include "fuzz/fuzz_util.h"
#include "net/http.h"
#include "net/http_server.h"
#include "sandboxd/server/daemon.h"

namespace deepbox::fuzz {

class DaemonFixture {
 public:
  DaemonFixture();
  sandboxd::Daemon& daemon() { return *daemon_; }
  const std::string& root() const { return root_; }
  // The directory holding the root (and an "outside" sibling).
  const std::string& base() const { return base_.path(); }

  // Empties the root and builds the tree again.
  void Reset();
  // Whether the request would start a program (the fixture refuses those).
  static bool Spawns(const net::Request& request);
  // Daemon::Handle, except for Spawns() requests (403).
  void Handle(net::Request& request, net::ResponseWriter& writer);

 private:
  TempTree base_{"daemon"};
  std::string root_;
  std::unique_ptr<sandboxd::Daemon> daemon_;
};

// A ResponseWriter that keeps the answer in memory.
class MemoryWriter : public net::ResponseWriter {
 public:
  Status Send(const net::Response& response) override;
  Status BeginStream(int status, const net::Headers& headers) override;
  Status WriteChunk(std::string_view data) override;
  Status EndStream() override;
  bool ClientGone() const override { return false; }
  bool started() const override { return started_; }

  int status = 0;
  std::string body;
  bool ended = false;

 private:
  bool started_ = false;
};

}  // namespace deepbox::fuzz
