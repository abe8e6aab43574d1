#include "sandboxd/server/daemon.h"

#include <fmt/format.h>

#include "common/json.h"
#include "sandboxd/proc/process_table.h"
#include "sandboxd/server/exec_records.h"
#include "sandboxd/server/exec_sessions.h"

namespace deepbox::sandboxd {

net::Response JsonResponse(int status, const std::string& body) {
  return net::Response::Json(status, body);
}

net::Response ErrorResponse(const Error& error) {
  return net::Response::Json(ErrorCodeHttpStatus(error.code), ToJson(ErrorToJson(error)));
}

Result<std::unique_ptr<Daemon>> Daemon::Create(DaemonConfig config) {
  auto root = fs::Root::Open(config.root_dir);
  if (!root) {
    Error e = root.error();
    e.message = fmt::format("cannot use root dir '{}': {}", config.root_dir, e.message);
    return tl::unexpected(e);
  }
  std::optional<fs::Root> files_root;
  if (!config.files_root.empty() &&
      fs::NormalizeAbsolute(config.files_root) != fs::NormalizeAbsolute(root->path())) {
    fs::RootOptions options;
    options.relative_base = root->path();
    options.refuse_pseudo_fs = true;
    auto opened = fs::Root::Open(config.files_root, options);
    if (!opened) {
      Error e = opened.error();
      e.message = fmt::format("cannot use files root '{}' (with root dir '{}'): {}",
                              config.files_root, config.root_dir, e.message);
      return tl::unexpected(e);
    }
    files_root = std::move(*opened);
  }
  proc::ProcessTable::Options table_options;
  table_options.log_capacity = config.max_log_bytes;
  auto table = proc::ProcessTable::Create(table_options);
  if (!table) return tl::unexpected(table.error());
  std::unique_ptr<Daemon> daemon(new Daemon(std::move(config), std::move(*root)));
  daemon->files_root_ = std::move(files_root);
  daemon->processes_ = std::move(*table);
  daemon->exec_sessions_ = std::make_unique<ExecSessions>();
  ExecRecordsOptions record_options;
  record_options.keep_after_exit = daemon->config_.exec_record_retention;
  daemon->exec_records_ = std::make_unique<ExecRecords>(record_options);
  return daemon;
}

Daemon::Daemon(DaemonConfig config, fs::Root root)
    : config_(std::move(config)),
      root_(std::move(root)),
      started_(std::chrono::steady_clock::now()) {}

Daemon::~Daemon() { BeginShutdown(config_.kill_grace); }

void Daemon::BeginShutdown(std::chrono::milliseconds grace) {
  if (shutting_down_.exchange(true)) return;
  processes_->Shutdown(grace);
}

bool Daemon::Authorized(const net::Request& request) const {
  if (config_.token.empty()) return true;
  auto auth = request.Header("Authorization");
  if (!auth || !auth->starts_with("Bearer ")) return false;
  std::string_view given = std::string_view(*auth).substr(7);
  // Constant-time comparison: the token is a secret.
  if (given.size() != config_.token.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ config_.token[i]);
  }
  return diff == 0;
}

void Daemon::Handle(net::Request& request, net::ResponseWriter& writer) {
  if (!Authorized(request)) {
    net::Response r = ErrorResponse(Error(
        ErrorCode::kUnauthenticated, "missing or invalid bearer token (Authorization: Bearer …)"));
    r.headers.Set("WWW-Authenticate", "Bearer");
    (void)writer.Send(r);
    return;
  }
  if (request.path.starts_with("/deepbox/v1/") || request.path == "/healthz") {
    HandleDeepbox(request, writer);
    return;
  }
  if (HandleUpstream(request, writer)) return;
  (void)writer.Send(ErrorResponse(Error(
      ErrorCode::kNotFound, fmt::format("no such endpoint: {} {}", request.method, request.path))));
}

net::Response Daemon::Health() const {
  json::object o;
  o["status"] = shutting_down_ ? "shutting_down" : "ok";
  o["uptime_seconds"] =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_)
          .count();
  o["version"] = std::string(kVersion);
  return JsonResponse(shutting_down_ ? 503 : 200, ToJson(o));
}

}  // namespace deepbox::sandboxd
