// A typed Kubernetes REST client over net::HttpClient: get/create/list/delete
// and watch (newline-delimited JSON events read incrementally, bookmarks,
// 410 Gone -> re-list and resume, dropped connections and server timeouts ->
// re-watch from the last resourceVersion), discovery, a client-side token
// bucket and retries with backoff on 429/5xx (honouring Retry-After).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "k8s/kubeconfig.h"
#include "net/http.h"

namespace deepbox::net {
class HttpClient;
}

namespace deepbox::k8s {

// A namespaced resource type.
struct ResourceType {
  std::string group;  // "" = core
  std::string version;
  std::string plural;
  std::string kind;

  std::string ApiVersion() const { return group.empty() ? version : group + "/" + version; }
  // "/apis/<group>/<version>/namespaces/<ns>/<plural>[/<name>]"
  std::string Path(std::string_view ns, std::string_view name = {}) const;
};

// The Status object an API server returns with errors.
struct ApiStatus {
  int code = 0;
  std::string reason;  // "NotFound", "AlreadyExists", "Expired", ...
  std::string message;
};
ApiStatus ParseApiStatus(int http_status, std::string_view body);
// NOT_FOUND for 404, CONFLICT for 409, UNAUTHENTICATED for 401, ... with a
// message like "POST /apis/...: 409 AlreadyExists: ... already exists".
Error ApiStatusError(const ApiStatus& status, std::string_view what);

struct ClientOptions {
  double qps = 20;      // token bucket: sustained rate
  int burst = 40;       // token bucket: capacity
  int max_retries = 5;  // on 429, 5xx and connection failures
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{10000};
  std::chrono::milliseconds max_retry_after{60000};
  std::chrono::milliseconds request_timeout{30000};
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::seconds watch_timeout{300};  // timeoutSeconds of one watch request
  std::string user_agent = "deepbox/0.1 (k8s)";
  // How the client waits (backoff, Retry-After, rate limit); empty = really
  // sleep. Tests substitute it to record the waits instead of spending them.
  // A watch with a cancel_fd waits on that fd instead (Stop() must not wait
  // out a backoff).
  std::function<void(std::chrono::milliseconds)> sleep;
};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;
  int64_t limit = 0;  // page size (pages are followed until the end)
};

struct ObjectList {
  std::string resource_version;
  std::vector<json::object> items;
};

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark };
std::string_view WatchEventTypeName(WatchEventType type);

struct WatchEvent {
  WatchEventType type = WatchEventType::kAdded;
  json::object object;
  bool synthetic = false;  // produced by a (re-)list rather than the stream
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  // "" = list first, then watch from the list's version; "0" = the server's
  // current state as ADDED events, then changes; else resume after it.
  std::string resource_version;
  // Objects the caller already holds (read at resource_version): a re-list
  // after 410 Gone that no longer shows one of them reports its DELETED.
  std::vector<json::object> known_objects;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  bool allow_bookmarks = true;
  // An fd (eventfd/pipe) that ends the watch with CANCELLED once readable:
  // the stream and the waits between attempts stop at once.
  int cancel_fd = -1;
};

struct WatchStats {
  int watch_requests = 0;
  int relists = 0;  // after 410 Gone (or the initial list)
  int bookmarks = 0;
  int reconnects = 0;            // dropped connections, refused connections, server timeouts
  std::string resource_version;  // last seen
};

// Counters for tests and diagnostics.
struct ClientMetrics {
  int requests = 0;  // HTTP requests sent (including retries and watches)
  int retries = 0;
  int throttled_waits = 0;  // times the token bucket made a request wait
};

class KubeClient {
 public:
  static Result<std::unique_ptr<KubeClient>> Create(RestConfig config, ClientOptions options = {});
  ~KubeClient();

  const RestConfig& config() const { return config_; }

  Result<json::object> Get(const ResourceType& type, std::string_view ns, std::string_view name);
  // A create that had to be retried and then meets AlreadyExists returns the
  // existing object (our own first attempt went through).
  Result<json::object> Create(const ResourceType& type, std::string_view ns,
                              const json::object& object);
  Result<ObjectList> List(const ResourceType& type, std::string_view ns,
                          const ListOptions& options = {});
  // A JSON merge patch (RFC 7386) of one object; the object as written.
  // Retried like every request: applying the same merge patch twice is
  // harmless.
  Result<json::object> Patch(const ResourceType& type, std::string_view ns, std::string_view name,
                             const json::object& patch);
  // NOT_FOUND when it is already gone.
  Status Delete(const ResourceType& type, std::string_view ns, std::string_view name,
                std::string_view propagation = "Background");
  // Calls on_event for every event until it returns false (then OK), the
  // deadline passes (TIMEOUT) or a non-retryable error happens.
  Result<WatchStats> Watch(const ResourceType& type, std::string_view ns,
                           const WatchOptions& options,
                           const std::function<bool(const WatchEvent&)>& on_event);
  // Versions of an API group the server serves (GET /apis/<group>), preferred
  // first. NOT_FOUND when the group is not served at all.
  Result<std::vector<std::string>> ServedVersions(std::string_view group);

  // One request with authentication, rate limiting and retries.
  struct RawResult {
    net::Response response;
    int attempts = 0;
  };
  Result<RawResult> Send(std::string_view method, const std::string& target,
                         const std::string& body = {},
                         std::string_view content_type = "application/json");

  ClientMetrics metrics() const;

 private:
  KubeClient(RestConfig config, ClientOptions options);
  struct Transport;
  Result<std::shared_ptr<Transport>> CurrentTransport();
  Status PrepareHeaders(net::Headers& headers);
  void Throttle();
  void Sleep(std::chrono::milliseconds d);
  std::chrono::milliseconds Backoff(int attempt) const;

  RestConfig config_;
  ClientOptions options_;
  CredentialSource credentials_;
  mutable std::mutex mu_;
  std::shared_ptr<Transport> transport_;
  // token bucket
  double tokens_;
  std::chrono::steady_clock::time_point last_refill_;
  ClientMetrics metrics_;
};

// ------------------------------------------------------------------ agent-sandbox

inline constexpr std::string_view kExtensionsGroup = "extensions.agents.x-k8s.io";
inline constexpr std::string_view kSandboxGroup = "agents.x-k8s.io";

// The agent-sandbox resources at the versions the server serves: v1beta1, or
// v1alpha1 when discovery shows the server lacks v1beta1. Thread-safe.
class SandboxApi {
 public:
  explicit SandboxApi(KubeClient& client) : client_(client) {}
  KubeClient& client() { return client_; }

  Result<ResourceType> ClaimType();
  Result<ResourceType> WarmPoolType();
  Result<ResourceType> SandboxType();
  // Forget v1beta1 for the extensions group (a 404 on create showed the
  // server does not serve it although discovery could not be read).
  void FallBackToV1alpha1();
  // The claim type as far as known without a request: from discovery or a
  // create that worked (RememberClaimVersion); nullopt before either.
  std::optional<ResourceType> KnownClaimType();
  void RememberClaimVersion(const std::string& version);

  Result<json::object> CreateClaim(std::string_view ns, const json::object& claim);
  Result<json::object> CreateClaim(const ResourceType& type, std::string_view ns,
                                   const json::object& claim);
  Result<json::object> GetClaim(std::string_view ns, std::string_view name);
  Result<ObjectList> ListClaims(std::string_view ns, const ListOptions& options = {});
  Status DeleteClaim(std::string_view ns, std::string_view name);  // NOT_FOUND when gone
  Result<WatchStats> WatchClaims(std::string_view ns, const WatchOptions& options,
                                 const std::function<bool(const WatchEvent&)>& on_event);
  Result<json::object> GetSandbox(std::string_view ns, std::string_view name);
  // A merge patch of a Sandbox (spec.operatingMode: operating_mode.h).
  Result<json::object> PatchSandbox(std::string_view ns, std::string_view name,
                                    const json::object& patch);
  Result<WatchStats> WatchSandboxes(std::string_view ns, const WatchOptions& options,
                                    const std::function<bool(const WatchEvent&)>& on_event);
  Result<json::object> GetWarmPool(std::string_view ns, std::string_view name);

 private:
  Result<std::string> Version(std::string_view group);
  KubeClient& client_;
  std::mutex mu_;
  std::map<std::string, std::string, std::less<>> versions_;
};

}  // namespace deepbox::k8s
