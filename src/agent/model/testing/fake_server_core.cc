#include "agent/model/testing/fake_server_core.h"

#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "net/testing/test_certs.h"

namespace deepbox::agent::testing::internal {

namespace {
[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "fake model server: %s\n", what.c_str());
  std::abort();
}
}  // namespace

FakeServerCore::FakeServerCore(bool tls, int port, std::string url_path, net::Handler handler)
    : url_path_(std::move(url_path)) {
  net::ServerOptions options;
  if (tls) {
    net::testing::TestPki pki = net::testing::GenerateTestPki();
    auto ctx = net::TlsContext::ForServer({pki.server_cert_pem, pki.server_key_pem, "", false});
    if (!ctx) Die(ctx.error().ToString());
    options.tls = *ctx;
    ca_pem_ = pki.ca_cert_pem;
    std::string tmpl = (std::getenv("TMPDIR") ? std::string(std::getenv("TMPDIR")) : "/tmp") +
                       "/deepbox-fake-ca-XXXXXX";
    int fd = ::mkstemp(tmpl.data());
    if (fd < 0) Die("mkstemp for the CA file failed");
    if (::write(fd, ca_pem_.data(), ca_pem_.size()) != static_cast<ssize_t>(ca_pem_.size())) {
      Die("writing the CA file failed");
    }
    ::close(fd);
    ca_file_ = tmpl;
  }
  auto ep = net::Endpoint::Parse(fmt::format("127.0.0.1:{}", port));
  if (!ep) Die(ep.error().ToString());
  auto server = net::HttpServer::Create(*ep, std::move(handler), std::move(options));
  if (!server) Die(server.error().ToString());
  server_ = std::move(*server);
  server_->Start();
}

void FakeServerCore::Shutdown() {
  stopping_ = true;
  server_.reset();
}

FakeServerCore::~FakeServerCore() {
  Shutdown();
  if (!ca_file_.empty()) ::unlink(ca_file_.c_str());
}

void FakeServerCore::Enqueue(ScriptedTurn turn) {
  std::lock_guard lock(mu_);
  turns_.push_back(std::move(turn));
}

std::optional<ScriptedTurn> FakeServerCore::Pop() {
  std::lock_guard lock(mu_);
  if (turns_.empty()) return std::nullopt;
  ScriptedTurn t = std::move(turns_.front());
  turns_.pop_front();
  return t;
}

RecordedRequest FakeServerCore::Record(const net::Request& request) {
  RecordedRequest r;
  r.method = request.method;
  r.path = request.path;
  r.headers = request.headers;
  r.body = request.body;
  if (auto obj = ParseJsonObject(request.body)) r.json = std::move(*obj);
  std::lock_guard lock(mu_);
  requests_.push_back(r);
  return r;
}

std::string FakeServerCore::url() const {
  return fmt::format("{}://127.0.0.1:{}{}", ca_pem_.empty() ? "http" : "https", server_->port(),
                     url_path_);
}

std::vector<RecordedRequest> FakeServerCore::requests() const {
  std::lock_guard lock(mu_);
  return requests_;
}

size_t FakeServerCore::request_count() const {
  std::lock_guard lock(mu_);
  return requests_.size();
}

size_t FakeServerCore::pending_turns() const {
  std::lock_guard lock(mu_);
  return turns_.size();
}

bool FakeServerCore::Write(net::ResponseWriter& w, std::string_view data, size_t write_bytes) {
  if (write_bytes == 0) return w.WriteChunk(data).has_value();
  while (!data.empty()) {
    size_t n = std::min(write_bytes, data.size());
    if (!w.WriteChunk(data.substr(0, n))) return false;
    data.remove_prefix(n);
  }
  return true;
}

}  // namespace deepbox::agent::testing::internal
