// A typed Kubernetes REST client over net::HttpClient: get/create/list/
// patch/delete and discovery, a client-side token bucket and retries with
// backoff on 429/5xx (honouring Retry-After), API Status errors. Watches are
// in watch.h, the agent-sandbox resources in sandbox_api.h.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
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
// 429 and the 5xx a server gives while it is overloaded or restarting.
bool IsRetryableStatus(int http_status);
// initial * 2^attempt, at most `max`.
std::chrono::milliseconds BackoffDelay(std::chrono::milliseconds initial,
                                       std::chrono::milliseconds max, int attempt);

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

  // One streaming GET (a watch), rate limited and authenticated but sent
  // once: the watch decides itself what a failure means. Its timeout is what
  // is left until `deadline` when it goes out (at least 1 ms), or
  // `timeout_without_deadline` when the deadline is time_point::max(). The
  // outer error: nothing could be sent (credentials, client certificate);
  // the inner result: the HTTP layer's (an error is a refused or dropped
  // connection, or the cancel_fd).
  Result<Result<net::Response>> SendStreamingOnce(
      const std::string& target, std::chrono::steady_clock::time_point deadline,
      std::chrono::milliseconds timeout_without_deadline, int cancel_fd,
      const std::function<bool(const net::Response& head)>& on_head,
      const std::function<bool(std::string_view data)>& on_data);

  const ClientOptions& options() const { return options_; }
  // Whether a 401 can be cured by fetching the credentials again (an exec
  // plugin or a token file: the token may have expired or been rotated).
  bool CanRefreshCredentials() const;
  // Forget the cached credentials: the next request fetches fresh ones.
  void InvalidateCredentials();
  // Waits as options().sleep says (nothing for d <= 0).
  void Sleep(std::chrono::milliseconds d) const;

  ClientMetrics metrics() const;

 private:
  KubeClient(RestConfig config, ClientOptions options);
  struct Transport;
  Result<std::shared_ptr<Transport>> CurrentTransport();
  Status PrepareHeaders(net::Headers& headers);
  void Throttle();
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

}  // namespace deepbox::k8s
