// deepbox-sandboxd's request handling: one Daemon object owns the confinement
// root, the background process table and the configuration, and answers HTTP
// requests for the deepbox API and the two upstream APIs.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/error.h"
#include "common/json.h"
#include "common/version.h"
#include "fs/path_resolver.h"
#include "net/http.h"
#include "net/http_server.h"
#include "sandboxd/server/grpc_connection.h"

namespace deepbox::sandboxd::proc {
class ProcessTable;
}

namespace deepbox::sandboxd {

class ExecSessions;
class ExecRecords;
class ExecRecord;

struct DaemonConfig {
  std::string root_dir = "/workspace";
  // Root of the native file API (files, glob, grep, transfers, exec cwd);
  // empty: root_dir. "/" inside a sandbox: the file API sees what commands
  // see, relative paths still resolve against root_dir, kernel pseudo
  // filesystems are refused. The upstream APIs always use root_dir.
  std::string files_root;
  // The working directory of a command that names none ("" = root_dir): a
  // local sandbox on an image passes its WorkingDir.
  std::string exec_cwd;
  // Authentication (docs/sandboxd-api.md "Authentication"): every request but
  // the health checks (IsHealthCheck) must carry a token, in X-Sandboxd-Token
  // or as "Authorization: Bearer". `token`: that token. `token_sha256_file`:
  // a file holding only its verifier ("sha256:" + base64url of the token's
  // SHA-256, net/token_digest.h), re-read whenever it changes; while it is
  // missing, empty or malformed no request but health is served. On
  // Kubernetes it is a downward API file showing the claim's annotation
  // (deploy/k8s/sandbox-template.yaml). Both empty: no authentication.
  std::string token;
  std::string token_sha256_file;
  std::chrono::milliseconds default_timeout{1800 * 1000};
  std::chrono::milliseconds kill_grace{2000};
  size_t max_output_bytes = 1 << 20;
  std::chrono::milliseconds keepalive_interval{2000};
  std::string metadata_env_prefix = "SANDBOX_";
  std::string shell = "/bin/sh";
  // Upstream python-runtime /execute timeout (SANDBOX_EXEC_TIMEOUT_SECONDS).
  std::chrono::milliseconds legacy_exec_timeout{300 * 1000};
  size_t max_log_bytes = 8 << 20;  // per background process
  // How long an identified exec's record (exec_id, for re-attaching) is kept
  // after its command ended.
  std::chrono::milliseconds exec_record_retention{10 * 60 * 1000};
};

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> Create(DaemonConfig config);
  ~Daemon();

  void Handle(net::Request& request, net::ResponseWriter& writer);
  // A gRPC call (grpc_connection.h): process.v1.ProcessService/Execute, with
  // the same token check as Handle (the token arrives as call metadata).
  GrpcReply HandleGrpc(const GrpcCall& call);
  // UNAUTHENTICATED when the call's metadata lacks the token, before its
  // message is read (GrpcServerOptions::authorize); nullopt to go on.
  std::optional<GrpcReply> GrpcUnauthorized(const std::string& method,
                                            const net::Headers& metadata) const;
  // Routes whose request bodies are read as they arrive (uploads of any size):
  // for net::ServerOptions::stream_request_body.
  static bool StreamsRequestBody(const net::Request& head);

  // Health turns 503; running background processes are terminated.
  void BeginShutdown(std::chrono::milliseconds grace);
  const DaemonConfig& config() const { return config_; }
  const deepbox::fs::Root& root() const { return root_; }
  // The native file API's root (DaemonConfig::files_root).
  const deepbox::fs::Root& files_root() const { return files_root_ ? *files_root_ : root_; }

 private:
  Daemon(DaemonConfig config, deepbox::fs::Root root);

  // Why the request may not go on (UNAUTHENTICATED), or nullopt.
  std::optional<Error> Unauthorized(const net::Request& request) const;
  // The verifier's digest as token_sha256_file holds it now ("" when it holds
  // none), re-read when the file's identity or mtime changed.
  std::string CurrentTokenDigest() const;
  void HandleDeepbox(net::Request& request, net::ResponseWriter& writer);
  bool HandleUpstream(net::Request& request, net::ResponseWriter& writer);

  // deepbox API pieces (deepbox_api.cc).
  net::Response Health() const;
  // GET /deepbox/v1/activity: requests in flight, background processes
  // running, and how long since the last request ended (what an idle timer
  // decides on; neither it nor the health checks count as activity).
  net::Response Activity() const;
  net::Response Info() const;
  net::Response Exec(const net::Request& request);
  void ExecStream(const net::Request& request, net::ResponseWriter& writer);
  // POST /deepbox/v1/exec/attach {exec_id, after}: the rest of an identified
  // exec's stream (and its exit), e.g. after a proxy cut the original one.
  void ExecAttach(const net::Request& request, net::ResponseWriter& writer);
  // POST /deepbox/v1/exec/cancel {exec_id}: stop an identified exec's command.
  net::Response ExecCancel(const net::Request& request);
  void StreamRecord(const std::shared_ptr<ExecRecord>& record, uint64_t after,
                    net::ResponseWriter& writer);
  // /deepbox/v1/exec/sessions/{id}/stdin|resize (input of interactive exec streams).
  net::Response ExecSessionRequest(const net::Request& request, std::string_view rest);
  net::Response Processes(const net::Request& request, std::string_view rest);
  net::Response Files(const net::Request& request, std::string_view op);
  net::Response Glob(const json::object& body);
  net::Response Grep(const json::object& body);
  net::Response Tree(const json::object& body);
  void RawDownload(const net::Request& request, net::ResponseWriter& writer);
  // Streams a file's bytes from its fd (no whole-file buffering).
  void RawDownloadPath(const std::string& path, net::ResponseWriter& writer, bool v1_errors);
  net::Response RawUpload(const net::Request& request);
  void TarDownload(const net::Request& request, net::ResponseWriter& writer);
  net::Response TarUpload(const net::Request& request);

  // process.v1.ProcessService/Execute (process_service.cc).
  GrpcReply GrpcExecute(const GrpcCall& call);

  // Upstream APIs (upstream_api.cc).
  net::Response LegacyExecute(const net::Request& request);
  net::Response LegacyUpload(const net::Request& request);
  void LegacyDownload(const net::Request& request, std::string_view path,
                      net::ResponseWriter& writer);
  net::Response LegacyList(std::string_view path);
  net::Response LegacyExists(std::string_view path);
  void V1Files(net::Request& request, std::string_view path, net::ResponseWriter& writer);
  net::Response V1Health() const;
  net::Response V1Metadata() const;

  DaemonConfig config_;
  deepbox::fs::Root root_;
  std::optional<deepbox::fs::Root> files_root_;  // set when it differs from root_
  std::unique_ptr<proc::ProcessTable> processes_;
  std::unique_ptr<ExecSessions> exec_sessions_;
  // Identified streamed execs, for re-attaching to a cut stream (exec_records.h).
  std::unique_ptr<ExecRecords> exec_records_;
  std::chrono::steady_clock::time_point started_;
  std::atomic<int> in_flight_{0};
  std::atomic<int64_t> last_request_ns_{0};  // steady clock; 0 = none since start
  std::atomic<bool> shutting_down_{false};
  // token_sha256_file as last read.
  struct VerifierState {
    bool read = false;
    dev_t dev = 0;
    ino_t ino = 0;
    int64_t mtime_ns = 0;
    off_t size = 0;
    std::string digest;  // "" = none usable
  };
  mutable std::mutex verifier_mu_;
  mutable VerifierState verifier_;
};

// GET/HEAD of /, /healthz, /v1/health and /deepbox/v1/health: answered
// without a token (Kubernetes probes; they tell nothing but "up").
bool IsHealthCheck(const net::Request& request);

// {"error":{"code","message"}} with the code's HTTP status.
net::Response ErrorResponse(const Error& error);
net::Response JsonResponse(int status, const std::string& body);

}  // namespace deepbox::sandboxd
