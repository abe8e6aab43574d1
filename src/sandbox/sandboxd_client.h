// Sandbox implemented over deepbox-sandboxd's HTTP API (docs/sandboxd-api.md).
// Used by both providers: locally the base URL is the sandbox's unix socket;
// on Kubernetes it is the sandbox router, with X-Sandbox-* default headers.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "net/http.h"
#include "sandbox/sandbox.h"

namespace deepbox::net {
class HttpClient;
}

namespace deepbox {

struct SandboxdClientOptions {
  std::string id;                // reported by Sandbox::id(); default = the daemon's hostname
  std::string token;             // bearer token, if the daemon requires one
  net::Headers default_headers;  // e.g. router headers
  std::chrono::milliseconds connect_timeout{10000};
  // Extra time allowed beyond a command's own timeout before the client gives up.
  std::chrono::milliseconds request_slack{30000};
  std::chrono::milliseconds file_op_timeout{120000};
};

class SandboxdClient : public Sandbox {
 public:
  // Connects and reads /deepbox/v1/info (so a dead daemon fails here, clearly).
  static Result<std::unique_ptr<SandboxdClient>> Connect(const std::string& base_url,
                                                         SandboxdClientOptions options = {});
  ~SandboxdClient() override;

  std::string id() const override { return id_; }
  std::string root() const override { return root_; }

  Result<ExecResult> Exec(const ExecRequest& request) override;
  Result<ExecResult> ExecStream(const ExecRequest& request,
                                const OutputCallback& on_output) override;
  Result<FileInfo> Stat(const std::string& path) override;
  Result<std::vector<FileInfo>> List(const std::string& path) override;
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
  Result<std::string> Download(const std::string& path) override;
  Status Upload(const std::string& path, std::string_view content, uint32_t mode) override;

  // Whether the daemon answers its health check now.
  bool Healthy();

 private:
  SandboxdClient() = default;
  struct Call;
  Result<std::string> PostJson(const std::string& target, const std::string& body,
                               std::chrono::milliseconds timeout);

  std::unique_ptr<net::HttpClient> http_;
  SandboxdClientOptions options_;
  std::string id_;
  std::string root_;
};

}  // namespace deepbox
