#include "sandboxd/server/daemon.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/json.h"
#include "common/unique_fd.h"
#include "net/token_digest.h"
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
  auto root = deepbox::fs::Root::Open(config.root_dir);
  if (!root) {
    Error e = root.error();
    e.message = fmt::format("cannot use root dir '{}': {}", config.root_dir, e.message);
    return tl::unexpected(e);
  }
  std::optional<deepbox::fs::Root> files_root;
  if (!config.files_root.empty() && deepbox::fs::NormalizeAbsolute(config.files_root) !=
                                        deepbox::fs::NormalizeAbsolute(root->path())) {
    deepbox::fs::RootOptions options;
    options.relative_base = root->path();
    options.refuse_pseudo_fs = true;
    auto opened = deepbox::fs::Root::Open(config.files_root, options);
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

Daemon::Daemon(DaemonConfig config, deepbox::fs::Root root)
    : config_(std::move(config)),
      root_(std::move(root)),
      started_(std::chrono::steady_clock::now()) {}

Daemon::~Daemon() { BeginShutdown(config_.kill_grace); }

void Daemon::BeginShutdown(std::chrono::milliseconds grace) {
  if (shutting_down_.exchange(true)) return;
  processes_->Shutdown(grace);
}

bool IsHealthCheck(const net::Request& request) {
  if (request.method != "GET" && request.method != "HEAD") return false;
  const std::string& p = request.path;
  return p == "/" || p == "/healthz" || p == "/v1/health" || p == "/deepbox/v1/health";
}

std::string Daemon::CurrentTokenDigest() const {
  const std::string& path = config_.token_sha256_file;
  std::lock_guard lock(verifier_mu_);
  // stat follows the downward API's ..data symlink: an update (an atomic
  // swap of that link) is a new inode.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (!verifier_.read || verifier_.ino != 0) {
      std::fprintf(stderr,
                   "deepbox-sandboxd: token verifier %s: %s; only health checks are served\n",
                   path.c_str(), std::strerror(errno));
    }
    verifier_ = VerifierState{.read = true};
    return {};
  }
  int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (verifier_.read && verifier_.dev == st.st_dev && verifier_.ino == st.st_ino &&
      verifier_.mtime_ns == mtime_ns && verifier_.size == st.st_size) {
    return verifier_.digest;
  }
  VerifierState next{.read = true,
                     .dev = st.st_dev,
                     .ino = st.st_ino,
                     .mtime_ns = mtime_ns,
                     .size = st.st_size,
                     .digest = {}};
  std::string text;
  if (UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)); fd) {
    char buf[256];
    for (;;) {
      ssize_t n = ::read(fd.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
      if (text.size() > 4096) break;  // a verifier is 50 bytes
    }
  }
  if (auto digest = net::ParseTokenVerifier(text)) {
    next.digest = std::move(*digest);
    std::fprintf(stderr, "deepbox-sandboxd: token verifier %s read: token required\n",
                 path.c_str());
  } else {
    std::fprintf(stderr,
                 "deepbox-sandboxd: token verifier %s holds %s; only health checks are "
                 "served\n",
                 path.c_str(), text.empty() ? "nothing (not claimed yet)" : "no sha256: verifier");
  }
  verifier_ = std::move(next);
  return verifier_.digest;
}

std::optional<Error> Daemon::Unauthorized(const net::Request& request) const {
  const bool by_digest = !config_.token_sha256_file.empty();
  if (config_.token.empty() && !by_digest) return std::nullopt;
  if (IsHealthCheck(request)) return std::nullopt;
  // The dedicated header first: behind a sandbox router, Authorization is the
  // router's (upstream routers strip it; older ones pass it on).
  std::optional<std::string> given = request.Header(net::kSandboxdTokenHeader);
  if (!given) {
    if (auto auth = request.Header("Authorization"); auth && auth->starts_with("Bearer ")) {
      given = auth->substr(7);
    }
  }
  if (!by_digest) {
    if (given && net::ConstantTimeEquals(*given, config_.token)) return std::nullopt;
    return Error(ErrorCode::kUnauthenticated,
                 fmt::format("missing or invalid token ({}: …, or Authorization: Bearer …)",
                             net::kSandboxdTokenHeader));
  }
  std::string digest = CurrentTokenDigest();
  if (digest.empty()) {
    return Error(ErrorCode::kUnauthenticated,
                 "this sandbox has no owner yet: its token verifier has not arrived (on "
                 "Kubernetes: the claim's annotation has not reached the pod)");
  }
  if (given && net::TokenMatchesDigest(*given, digest)) return std::nullopt;
  return Error(ErrorCode::kUnauthenticated,
               fmt::format("missing or invalid token: this sandbox takes only its owner's token "
                           "({}: …)",
                           net::kSandboxdTokenHeader));
}

void Daemon::Handle(net::Request& request, net::ResponseWriter& writer) {
  if (auto refused = Unauthorized(request)) {
    net::Response r = ErrorResponse(*refused);
    r.headers.Set("WWW-Authenticate", "Bearer");
    (void)writer.Send(r);
    return;
  }
  // Activity: every request but the health checks and the activity probe.
  const bool probe = request.path == "/deepbox/v1/activity" || request.path == "/healthz" ||
                     request.path == "/deepbox/v1/health" || request.path == "/v1/health" ||
                     request.path == "/";
  struct InFlight {
    const Daemon* daemon;
    std::atomic<int>& count;
    std::atomic<int64_t>& last;
    ~InFlight() {
      if (daemon == nullptr) return;
      last.store(std::chrono::steady_clock::now().time_since_epoch().count());
      count.fetch_sub(1);
    }
  } in_flight{probe ? nullptr : this, in_flight_, last_request_ns_};
  if (!probe) in_flight_.fetch_add(1);
  if (request.path == "/deepbox/v1/activity" && request.method == "GET") {
    (void)writer.Send(Activity());
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

net::Response Daemon::Activity() const {
  const auto now = std::chrono::steady_clock::now();
  int64_t last = last_request_ns_.load();
  auto since =
      last == 0
          ? now - started_
          : now - std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(last));
  int running = 0;
  for (const auto& p : processes_->List()) running += p.state == proc::ProcessState::kRunning;
  json::object o;
  o["requests_in_flight"] = in_flight_.load();
  o["processes_running"] = running;
  o["idle_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(since).count();
  return JsonResponse(200, ToJson(o));
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
