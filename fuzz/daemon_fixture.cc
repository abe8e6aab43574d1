#include "fuzz/daemon_fixture.h"

#include <chrono>

namespace deepbox::fuzz {

DaemonFixture::DaemonFixture() {
  root_ = base_.Path("root");
  MakeDirs(root_);
  MakeDirs(base_.Path("outside"));
  WriteFile(base_.Path("outside/secret"), "outside the root");
  Reset();
  sandboxd::DaemonConfig config;
  config.root_dir = root_;
  // Defense in depth: Spawns() already keeps requests from starting programs.
  config.shell = "/nonexistent/deepbox-fuzz-shell";
  config.default_timeout = std::chrono::milliseconds(2000);
  config.kill_grace = std::chrono::milliseconds(100);
  auto daemon = sandboxd::Daemon::Create(config);
  if (!daemon) Fail("fixture: " + daemon.error().ToString());
  daemon_ = std::move(*daemon);
}

void DaemonFixture::Reset() {
  EmptyDir(root_);
  MakeDirs(root_ + "/src/deep");
  MakeDirs(root_ + "/.hidden");
  WriteFile(root_ + "/hello.txt", "hello\nworld\n");
  WriteFile(root_ + "/src/main.py", "print('hi')\n# TODO: more\n");
  WriteFile(root_ + "/src/deep/data.bin", std::string("\0\1\2binary", 9));
  WriteFile(root_ + "/.hidden/.env", "SECRET=1\n");
  WriteFile(root_ + "/ro.txt", "read only\n", 0444);
  Symlink("src/main.py", root_ + "/link_in");
  Symlink("../outside/secret", root_ + "/link_out");
  Symlink(base_.Path("outside"), root_ + "/abs_out");
  Symlink("src", root_ + "/dir_link");
}

bool DaemonFixture::Spawns(const net::Request& request) {
  if (request.method != "POST") return false;
  const std::string& p = request.path;
  return p == "/deepbox/v1/exec" || p == "/deepbox/v1/exec/stream" ||
         p == "/deepbox/v1/processes" || p == "/execute";
}

void DaemonFixture::Handle(net::Request& request, net::ResponseWriter& writer) {
  if (Spawns(request)) {
    (void)writer.Send(net::Response::Json(403, R"({"error":"not while fuzzing"})"));
    return;
  }
  daemon_->Handle(request, writer);
}

Status MemoryWriter::Send(const net::Response& response) {
  FUZZ_CHECK(!started_, "a handler answered twice");
  started_ = true;
  ended = true;
  status = response.status;
  body = response.body;
  return {};
}

Status MemoryWriter::BeginStream(int s, const net::Headers&) {
  FUZZ_CHECK(!started_, "a handler answered twice");
  started_ = true;
  status = s;
  return {};
}

Status MemoryWriter::WriteChunk(std::string_view data) {
  FUZZ_CHECK(started_ && !ended, "a chunk outside a stream");
  body.append(data);
  return {};
}

Status MemoryWriter::EndStream() {
  FUZZ_CHECK(started_ && !ended, "a stream ended twice");
  ended = true;
  return {};
}

}  // namespace deepbox::fuzz
