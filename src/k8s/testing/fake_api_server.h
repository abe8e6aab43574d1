// Test-only: a fake Kubernetes API server that speaks the real REST and watch
// protocol over HTTPS (our HttpServer with TLS): bearer-token or client-
// certificate authentication, discovery (/apis/<group> lists served versions),
// create/get/list/delete with label and field selectors, JSON merge patches
// (of spec and metadata only, as for a CRD with a status subresource; the
// Sandbox CRD's operatingMode enum checked), watches with
// resourceVersions and bookmarks, Status errors. Faults can be injected: 410
// Gone (as an ERROR event or an HTTP status), dropped watch connections,
// server-side watch timeouts, 429/5xx answers with Retry-After, and a
// stop/resume of the whole server on the same port (an apiserver restart).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "k8s/kubeconfig.h"
#include "k8s/testing/object_store.h"
#include "net/http_server.h"
#include "net/testing/test_certs.h"

namespace deepbox::k8s::testing {

struct FakeApiServerOptions {
  enum class Auth { kToken, kClientCert };
  Auth auth = Auth::kToken;
  std::set<std::string> tokens = {"test-token"};
  // Versions served for the agent-sandbox groups (empty = group not served):
  // v1beta1 only, as agent-sandbox v1.0+ (v1.0.0 removed v1alpha1).
  std::vector<std::string> extension_versions = {"v1beta1"};
  std::vector<std::string> sandbox_versions = {"v1beta1"};
  bool discovery_forbidden = false;  // GET /apis/<group> answers 403
  bool events_forbidden = false;     // /api/v1/... (Events) answers 403, as without RBAC for them
  bool gone_as_http_status = false;  // stale watch versions: HTTP 410, not an ERROR event
};

struct RecordedRequest {
  std::string method;
  std::string path;
  std::vector<std::pair<std::string, std::string>> query;
  std::string Query(std::string_view name) const;
};

class FakeApiServer {
 public:
  static Result<std::unique_ptr<FakeApiServer>> Start(FakeApiServerOptions options = {},
                                                      std::shared_ptr<ObjectStore> store = nullptr);
  ~FakeApiServer();

  std::string url() const;
  int port() const { return port_; }
  const net::testing::TestPki& pki() const { return pki_; }
  ObjectStore& store() { return *store_; }
  std::shared_ptr<ObjectStore> shared_store() { return store_; }
  // A client configuration that authenticates the way the server expects.
  RestConfig ClientConfig() const;
  // A kubeconfig file for it (written to `path`).
  Status WriteKubeconfig(const std::string& path, const std::string& namespace_name) const;
  void SetTokens(std::set<std::string> tokens);

  // ---- fault injection
  // The next `count` requests matching method ("" any) and path substring get
  // `status` (a Status body) and the Retry-After header when non-empty.
  void FailNext(int count, int status, std::string retry_after = "", std::string method = "",
                std::string path_contains = "");
  void ExpireWatches();  // ERROR 410 to every open watch, history compacted
  void DropWatches();    // open watch connections cut without the final chunk
  void EndWatches();     // open watch streams ended cleanly (server-side timeout)
  void SendBookmarks();  // BOOKMARK at the current version to watches that allow them
  void Compact() { store_->Compact(); }
  // Apiserver restart: Stop() closes the listener and every connection;
  // Resume() listens again on the same port with the same state.
  void Stop();
  Status Resume();

  // ---- observation
  // Blocks until at least n watches are open (false after `timeout`).
  bool WaitForWatches(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  size_t open_watches() const;
  // Watches opened since the start (a re-watch after a drop counts again).
  bool WaitForWatchesOpened(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  size_t watches_opened() const;
  std::vector<RecordedRequest> requests() const;
  int CountRequests(std::string_view method, std::string_view path_contains) const;

  struct Impl;

 private:
  FakeApiServer() = default;
  void Handle(net::Request& req, net::ResponseWriter& w);

  FakeApiServerOptions options_;
  net::testing::TestPki pki_;
  std::shared_ptr<ObjectStore> store_;
  std::shared_ptr<net::TlsContext> tls_;
  int port_ = 0;
  mutable std::mutex mu_;
  std::unique_ptr<net::HttpServer> server_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace deepbox::k8s::testing
