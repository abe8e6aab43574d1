// deepbox-sandboxd's request handling: one Daemon object owns the confinement
// root, the background process table and the configuration, and answers HTTP
// requests for the deepbox API and the two upstream APIs.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "common/error.h"
#include "common/json.h"
#include "net/http.h"
#include "net/http_server.h"
#include "sandboxd/fs/path_resolver.h"

namespace deepbox::sandboxd::proc {
class ProcessTable;
}

namespace deepbox::sandboxd {

class ExecSessions;
class ExecRecords;
class ExecRecord;

inline constexpr std::string_view kVersion = "0.1.0";

struct DaemonConfig {
  std::string root_dir = "/workspace";
  // Root of the native file API (files, glob, grep, transfers, exec cwd);
  // empty: root_dir. "/" inside a sandbox: the file API sees what commands
  // see, relative paths still resolve against root_dir, kernel pseudo
  // filesystems are refused. The upstream APIs always use root_dir.
  std::string files_root;
  std::string token;  // empty: no authentication
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
  // Routes whose request bodies are read as they arrive (uploads of any size):
  // for net::ServerOptions::stream_request_body.
  static bool StreamsRequestBody(const net::Request& head);

  // Health turns 503; running background processes are terminated.
  void BeginShutdown(std::chrono::milliseconds grace);
  const DaemonConfig& config() const { return config_; }
  const fs::Root& root() const { return root_; }
  // The native file API's root (DaemonConfig::files_root).
  const fs::Root& files_root() const { return files_root_ ? *files_root_ : root_; }

 private:
  Daemon(DaemonConfig config, fs::Root root);

  bool Authorized(const net::Request& request) const;
  void HandleDeepbox(net::Request& request, net::ResponseWriter& writer);
  bool HandleUpstream(net::Request& request, net::ResponseWriter& writer);

  // deepbox API pieces (deepbox_api.cc).
  net::Response Health() const;
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
  void RawDownload(const net::Request& request, net::ResponseWriter& writer);
  // Streams a file's bytes from its fd (no whole-file buffering).
  void RawDownloadPath(const std::string& path, net::ResponseWriter& writer, bool v1_errors);
  net::Response RawUpload(const net::Request& request);
  void TarDownload(const net::Request& request, net::ResponseWriter& writer);
  net::Response TarUpload(const net::Request& request);

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
  fs::Root root_;
  std::optional<fs::Root> files_root_;  // set when it differs from root_
  std::unique_ptr<proc::ProcessTable> processes_;
  std::unique_ptr<ExecSessions> exec_sessions_;
  // Identified streamed execs, for re-attaching to a cut stream (exec_records.h).
  std::unique_ptr<ExecRecords> exec_records_;
  std::chrono::steady_clock::time_point started_;
  std::atomic<bool> shutting_down_{false};
};

// {"error":{"code","message"}} with the code's HTTP status.
net::Response ErrorResponse(const Error& error);
net::Response JsonResponse(int status, const std::string& body);

}  // namespace deepbox::sandboxd
