// Sandbox implemented over deepbox-sandboxd's HTTP API (docs/sandboxd-api.md).
// Used by both providers: locally the base URL is the sandbox's unix socket;
// on Kubernetes it is the sandbox router, with X-Sandbox-* default headers.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "net/http.h"
#include "sandbox/sandbox.h"

namespace deepbox::net {
class HttpClient;
struct ClientRequest;
}  // namespace deepbox::net

namespace deepbox {

struct SandboxdClientOptions {
  std::string id;                // reported by Sandbox::id(); default = the daemon's hostname
  std::string token;             // bearer token, if the daemon requires one
  net::Headers default_headers;  // e.g. router headers
  std::chrono::milliseconds connect_timeout{10000};
  // Extra time allowed beyond a command's own timeout before the client gives up.
  std::chrono::milliseconds request_slack{30000};
  std::chrono::milliseconds file_op_timeout{120000};
  // Connect() reads /deepbox/v1/info at once, so a dead daemon fails there.
  // false (needs `id`): no request until the first call, which is then the
  // check (one round trip less before a first command's result); what /info
  // tells (root, exec features) is read when first needed, and until the
  // daemon first answered a connection that cannot be made (nothing sent) is
  // retried with backoff.
  bool read_info_on_connect = true;
  // Why a request's connection broke after it was sent (the daemon closed or
  // reset it without a full answer), as the provider knows it, e.g. "its
  // daemon (deepbox-sandboxd) restarted"; "" when it does not know. The
  // request's error then says so, and that the request may not have
  // completed. Called on the failing call's thread; may wait briefly.
  std::function<std::string()> lost_connection_reason;
  // The sandbox's count of OOM kills (its cgroup's memory events), read
  // before and after each exec: a command killed by SIGKILL while it grew is
  // reported as ExecResult::oom_killed. nullopt: cannot be read (no memory
  // controller); unset: not observable by this provider.
  std::function<std::optional<uint64_t>()> oom_kill_count;
  uint64_t memory_limit_bytes = 0;  // the limit those kills enforce (0: unknown)
  // Called before each request (not on a running command's stdin): where a
  // provider wakes a paused or suspended sandbox, the caller waiting. Must be
  // cheap when there is nothing to do (the local one stats a file). An error
  // fails the request, nothing sent.
  std::function<Status()> before_request;
};

class SandboxdClient : public Sandbox {
 public:
  // Connects and reads /deepbox/v1/info (so a dead daemon fails here, clearly).
  static Result<std::unique_ptr<SandboxdClient>> Connect(const std::string& base_url,
                                                         SandboxdClientOptions options = {});
  ~SandboxdClient() override;

  std::string id() const override { return id_; }
  std::string root() const override;  // "" if /info cannot be read

  Result<ExecResult> Exec(const ExecRequest& request) override;
  Result<ExecResult> ExecStream(const ExecRequest& request,
                                const OutputCallback& on_output) override;
  Result<FileInfo> Stat(const std::string& path) override;
  Result<std::vector<FileInfo>> List(const std::string& path) override;
  // fs/list with "stat": false (a daemon that does not know it answers
  // List's entries, which say more).
  Result<std::vector<FileInfo>> ListNames(const std::string& path) override;
  Result<ReadResult> Read(const std::string& path, const ReadOptions& options) override;
  Status Write(const std::string& path, std::string_view content, uint32_t mode) override;
  Result<EditResult> Edit(const std::string& path, const std::string& old_string,
                          const std::string& new_string, bool replace_all) override;
  Status Mkdir(const std::string& path, bool parents) override;
  Status Move(const std::string& from, const std::string& to, bool overwrite) override;
  Status Delete(const std::string& path, bool recursive) override;
  Result<GlobResult> Glob(const std::string& pattern, const std::string& path,
                          size_t max_results) override;
  Result<GrepResult> Grep(const GrepRequest& request) override;
  Result<TreeResult> Tree(const TreeRequest& request) override;
  Result<std::string> Download(const std::string& path) override;
  Status Upload(const std::string& path, std::string_view content, uint32_t mode) override;

  // Whether the daemon answers its health check now.
  bool Healthy();

  // Stops a named exec (ExecRequest::on_exec_id): its process group gets
  // SIGTERM at its next output or keepalive, SIGKILL after the daemon's grace,
  // and its stream ends with a `killed` exit. NOT_FOUND: no such exec (ended
  // and forgotten, or not started yet). Safe from any thread.
  Status CancelExec(const std::string& exec_id);

  // Bounded-memory transfers (deepbox sandbox cp): the file's bytes go to
  // `sink` as they arrive; an error from the sink stops the download.
  Status DownloadTo(const std::string& path,
                    const std::function<Status(std::string_view data)>& sink);
  // Exactly `length` bytes pulled from `source` become the file (atomically,
  // daemon side); no size cap but the sandbox's disk.
  Status UploadFrom(const std::string& path, uint32_t mode, uint64_t length,
                    const std::function<Result<size_t>(char* buf, size_t size)>& source);
  // The daemon's HTTP client (token and router headers included), for the
  // streams the interface above does not cover (tar).
  net::HttpClient& http() { return *http_; }
  // The error a daemon's non-2xx answer carries (its JSON error, else the
  // status), with `what` for context. Never trusts the answer's shape.
  static Error AnswerError(const net::Response& response, std::string_view what);

 private:
  SandboxdClient() = default;
  struct Call;
  Result<std::string> PostJson(const std::string& target, const std::string& body,
                               std::chrono::milliseconds timeout);
  // Reads /info once (later calls return at once).
  Status EnsureInfo() const;
  // http_->Send, retrying a connection that cannot be made until the daemon
  // first answered (read_info_on_connect = false only).
  Result<net::Response> Send(const net::ClientRequest& request) const;
  // A transport failure of a request that was sent: the connection broke
  // (the daemon died or restarted) → one clear error, else `e` as it is.
  Error Lost(Error e, std::string_view what) const;
  Status Wake() const;  // options_.before_request
  std::optional<uint64_t> OomKills() const;
  void NoteOomKill(std::optional<uint64_t> before, ExecResult& result) const;

  std::unique_ptr<net::HttpClient> http_;
  SandboxdClientOptions options_;
  Result<std::vector<FileInfo>> ListEntries(const std::string& path, bool stat);

  std::string id_;
  // What /info says; written once under info_mu_, then read freely.
  mutable std::mutex info_mu_;
  mutable std::atomic<bool> info_known_{false};
  mutable std::atomic<bool> answered_{false};  // the daemon (or router) answered once
  mutable std::string root_;
  mutable std::string hostname_;
  // Exec features the daemon lists in /info (docs/sandboxd-api.md).
  mutable bool exec_base64_ = false;        // exact output bytes (base64 in JSON)
  mutable bool exec_stdin_stream_ = false;  // stdin fed while the command runs
  mutable bool exec_tty_ = false;           // pseudo-terminal
  mutable bool exec_attach_ = false;        // exec ids and /exec/attach (re-attach to a cut stream)
};

}  // namespace deepbox
