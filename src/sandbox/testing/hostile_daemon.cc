#include "sandbox/testing/hostile_daemon.h"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

namespace deepbox::testing {

Result<std::unique_ptr<HostileDaemon>> HostileDaemon::Start() {
  std::unique_ptr<HostileDaemon> d(new HostileDaemon());
  auto dir = TempDir::Make("deepbox-hostile", "/tmp");  // short: the socket path fits 107 bytes
  if (!dir) return tl::unexpected(dir.error());
  d->dir_.emplace(std::move(*dir));
  d->socket_ = d->dir_->Path("sandboxd.sock");
  d->Answer("/deepbox/v1/info", R"({"root":"/workspace","hostname":"hostile"})");
  d->Answer("/deepbox/v1/health", R"({"status":"ok"})");
  auto ep = net::Endpoint::Parse("unix:" + d->socket_);
  if (!ep) return tl::unexpected(ep.error());
  HostileDaemon* self = d.get();
  auto server = net::HttpServer::Create(
      *ep, [self](net::Request& req, net::ResponseWriter& w) { self->Handle(req, w); });
  if (!server) return tl::unexpected(server.error());
  d->server_ = std::move(*server);
  d->server_->Start();
  return d;
}

HostileDaemon::~HostileDaemon() {
  if (server_) server_->Stop(std::chrono::milliseconds(1000));
}

void HostileDaemon::Answer(const std::string& path, std::string body, int status) {
  std::lock_guard lock(mu_);
  answers_[path] = Canned{status, std::move(body), {}, false};
}

std::vector<std::string> HostileDaemon::requests() {
  std::lock_guard lock(mu_);
  return requests_;
}

void HostileDaemon::AnswerStream(const std::string& path, std::vector<std::string> chunks) {
  std::lock_guard lock(mu_);
  answers_[path] = Canned{200, {}, std::move(chunks), true};
}

Result<std::unique_ptr<SandboxdClient>> HostileDaemon::Connect(
    SandboxdClientOptions options) const {
  return SandboxdClient::Connect(unix_url(), std::move(options));
}

void HostileDaemon::Handle(net::Request& request, net::ResponseWriter& writer) {
  Canned canned;
  {
    std::lock_guard lock(mu_);
    requests_.push_back(request.method + " " + request.path + " " + request.body);
    auto it = answers_.find(request.path);
    if (it == answers_.end()) {
      (void)writer.Send(net::Response::Json(
          404, R"({"error":{"code":"NOT_FOUND","message":"no such endpoint"}})"));
      return;
    }
    canned = it->second;
  }
  if (!canned.stream) {
    (void)writer.Send(net::Response::Json(canned.status, std::move(canned.body)));
    return;
  }
  net::Headers headers;
  headers.Set("Content-Type", "application/x-ndjson");
  if (!writer.BeginStream(200, headers)) return;
  for (const auto& chunk : canned.chunks) {
    if (!writer.WriteChunk(chunk)) return;
  }
  (void)writer.EndStream();
}

}  // namespace deepbox::testing
