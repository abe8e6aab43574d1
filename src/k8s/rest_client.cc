#include "k8s/rest_client.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <thread>

#include "common/base64.h"
#include "common/parse_number.h"
#include "common/utf8.h"
#include "k8s/util.h"
#include "net/http_client.h"
#include "net/url.h"

namespace deepbox::k8s {

namespace {

constexpr size_t kMaxStatusText = 2000;  // of a Status message quoted in an error
constexpr int kMaxListPages = 100000;

std::string_view ReasonForStatus(int code) {
  switch (code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 405:
      return "MethodNotAllowed";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return "Unknown";
  }
}

ErrorCode CodeForStatus(int code) {
  switch (code) {
    case 400:
    case 422:
      return ErrorCode::kInvalidArgument;
    case 401:
      return ErrorCode::kUnauthenticated;
    case 403:
      return ErrorCode::kPermissionDenied;
    case 404:
      return ErrorCode::kNotFound;
    case 405:
    case 501:
      return ErrorCode::kUnimplemented;
    case 409:
    case 410:
      return ErrorCode::kConflict;
    case 429:
      return ErrorCode::kResourceExhausted;
    case 500:
      return ErrorCode::kInternal;
    case 504:
      return ErrorCode::kTimeout;
    default:
      return code >= 500 ? ErrorCode::kUnavailable : ErrorCode::kInternal;
  }
}

std::optional<std::chrono::milliseconds> RetryAfter(const net::Response& r) {
  auto h = r.headers.Get("Retry-After");
  if (!h) return std::nullopt;
  auto secs = ParseI64(*h);
  if (!secs || *secs < 0) return std::nullopt;
  // Clamped before scaling: a huge value must not overflow (callers cap it anyway).
  constexpr int64_t kMaxSeconds = int64_t{1} << 31;
  return std::chrono::milliseconds(std::min(*secs, kMaxSeconds) * 1000);
}

}  // namespace

std::string ResourceType::Path(std::string_view ns, std::string_view name) const {
  std::string out =
      group.empty() ? fmt::format("/api/{}", version) : fmt::format("/apis/{}/{}", group, version);
  if (!ns.empty()) out += fmt::format("/namespaces/{}", net::PercentEncode(ns));
  out += "/" + plural;
  if (!name.empty()) out += "/" + net::PercentEncode(name);
  return out;
}

ApiStatus ParseApiStatus(int http_status, std::string_view body) {
  ApiStatus s;
  s.code = http_status;
  auto doc = ParseJsonObject(body);
  if (doc && FindString(*doc, {"kind"}) == "Status") {
    // Only a plausible HTTP status replaces the real one (no narrowing of a huge value).
    if (const auto* c = Find(*doc, {"code"});
        c != nullptr && c->is_int64() && c->get_int64() >= 100 && c->get_int64() <= 599) {
      s.code = static_cast<int>(c->get_int64());
    }
    s.reason = FindString(*doc, {"reason"}).substr(0, kMaxStatusText);
    s.message = FindString(*doc, {"message"});
    if (s.message.size() > kMaxStatusText) {
      s.message.resize(kMaxStatusText);
      s.message += "...";
    }
  } else {
    // Not JSON: whatever bytes came, as valid UTF-8 (errors end up in JSON too).
    std::string text = SanitizeUtf8(body.substr(0, 500));
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    s.message = text;
  }
  if (s.reason.empty()) s.reason = std::string(ReasonForStatus(s.code));
  return s;
}

Error ApiStatusError(const ApiStatus& status, std::string_view what) {
  std::string msg = fmt::format("kubernetes API {}: {} {}", what, status.code, status.reason);
  if (!status.message.empty()) msg += ": " + status.message;
  return Error(CodeForStatus(status.code), std::move(msg));
}

bool IsRetryableStatus(int http_status) {
  return http_status == 429 || http_status == 500 || http_status == 502 || http_status == 503 ||
         http_status == 504;
}

std::chrono::milliseconds BackoffDelay(std::chrono::milliseconds initial,
                                       std::chrono::milliseconds max, int attempt) {
  double ms = static_cast<double>(initial.count()) * std::pow(2.0, attempt);
  ms = std::min(ms, static_cast<double>(max.count()));
  return std::chrono::milliseconds(static_cast<int64_t>(ms));
}

// ------------------------------------------------------------------ KubeClient

struct KubeClient::Transport {
  std::unique_ptr<net::HttpClient> http;
  std::string client_cert_pem;
};

KubeClient::KubeClient(RestConfig config, ClientOptions options)
    : config_(config),
      options_(std::move(options)),
      credentials_(std::move(config)),
      tokens_(options_.burst),
      last_refill_(std::chrono::steady_clock::now()) {}

KubeClient::~KubeClient() = default;

Result<std::unique_ptr<KubeClient>> KubeClient::Create(RestConfig config, ClientOptions options) {
  auto url = net::ParseUrl(config.server);
  if (!url || (url->scheme != "https" && url->scheme != "http")) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        fmt::format("{}: server '{}' is not an http(s) URL", config.source, config.server));
  }
  std::unique_ptr<KubeClient> client(new KubeClient(std::move(config), std::move(options)));
  auto t = client->CurrentTransport();
  if (!t) return tl::unexpected(t.error());
  return client;
}

ClientMetrics KubeClient::metrics() const {
  std::lock_guard lock(mu_);
  return metrics_;
}

Result<std::shared_ptr<KubeClient::Transport>> KubeClient::CurrentTransport() {
  std::string cert, key;
  if (config_.exec) {
    auto creds = credentials_.Get();
    if (!creds) return tl::unexpected(creds.error());
    cert = creds->client_cert_pem;
    key = creds->client_key_pem;
  }
  std::lock_guard lock(mu_);
  if (transport_ && (cert.empty() || transport_->client_cert_pem == cert)) return transport_;
  net::ClientOptions opts;
  opts.connect_timeout = options_.connect_timeout;
  opts.read_idle_timeout = std::chrono::milliseconds(0);  // every request has its own deadline
  opts.tls = config_.tls;
  if (!cert.empty()) {
    opts.tls.client_cert_pem = cert;
    opts.tls.client_key_pem = key;
  }
  opts.user_agent = options_.user_agent;
  auto http = net::HttpClient::Create(config_.server, opts);
  if (!http) {
    Error e = http.error();
    e.message = fmt::format("{}: {}", config_.source, e.message);
    return tl::unexpected(e);
  }
  auto t = std::make_shared<Transport>();
  t->http = std::move(*http);
  t->client_cert_pem = cert;
  transport_ = t;
  return t;
}

Status KubeClient::PrepareHeaders(net::Headers& headers) {
  auto creds = credentials_.Get();
  if (!creds) return tl::unexpected(creds.error());
  headers.Set("Accept", "application/json");
  if (!creds->token.empty()) {
    // From a file or a plugin: a line break would forge headers, and the HTTP
    // layer cannot carry a value of 64 KiB or more.
    if (!IsHeaderToken(creds->token)) {
      return MakeError(ErrorCode::kUnauthenticated,
                       fmt::format("{}: the bearer token is not a single HTTP header token "
                                   "(printable ASCII without spaces, at most {} bytes)",
                                   config_.source, kMaxHeaderToken));
    }
    headers.Set("Authorization", "Bearer " + creds->token);
  } else if (!creds->username.empty()) {
    std::string basic = Base64Encode(creds->username + ":" + creds->password);
    if (basic.size() > kMaxHeaderToken) {
      return MakeError(ErrorCode::kUnauthenticated,
                       fmt::format("{}: the username and password are too long", config_.source));
    }
    headers.Set("Authorization", "Basic " + basic);
  }
  return {};
}

void KubeClient::Sleep(std::chrono::milliseconds d) const {
  if (d.count() <= 0) return;
  if (options_.sleep) {
    options_.sleep(d);
  } else {
    std::this_thread::sleep_for(d);
  }
}

void KubeClient::Throttle() {
  if (options_.qps <= 0) return;
  std::chrono::milliseconds wait{0};
  {
    std::lock_guard lock(mu_);
    auto now = std::chrono::steady_clock::now();
    double elapsed = std::chrono::duration<double>(now - last_refill_).count();
    last_refill_ = now;
    tokens_ = std::min<double>(options_.burst, tokens_ + elapsed * options_.qps);
    tokens_ -= 1;  // reserve; a negative balance is paid for by waiting
    if (tokens_ < 0) {
      wait = std::chrono::milliseconds(
          static_cast<int64_t>(std::ceil(-tokens_ / options_.qps * 1000.0)));
      ++metrics_.throttled_waits;
    }
  }
  Sleep(wait);
}

std::chrono::milliseconds KubeClient::Backoff(int attempt) const {
  return BackoffDelay(options_.initial_backoff, options_.max_backoff, attempt);
}

bool KubeClient::CanRefreshCredentials() const {
  return config_.exec || !config_.token_file.empty();
}

void KubeClient::InvalidateCredentials() { credentials_.Invalidate(); }

Result<KubeClient::RawResult> KubeClient::Send(std::string_view method, const std::string& target,
                                               const std::string& body,
                                               std::string_view content_type) {
  bool refreshed = false;
  std::string what = fmt::format("{} {}", method, target);
  for (int attempt = 0;; ++attempt) {
    Throttle();
    auto transport = CurrentTransport();
    if (!transport) return tl::unexpected(transport.error());
    net::ClientRequest req;
    req.method = std::string(method);
    req.target = target;
    req.body = body;
    req.timeout = options_.request_timeout;
    if (auto s = PrepareHeaders(req.headers); !s) return tl::unexpected(s.error());
    if (!body.empty()) req.headers.Set("Content-Type", std::string(content_type));
    auto r = (*transport)->http->Send(req);
    {
      std::lock_guard lock(mu_);
      ++metrics_.requests;
    }
    bool can_retry = attempt < options_.max_retries;
    if (!r) {
      auto code = r.error().code;
      if (can_retry && (code == ErrorCode::kUnavailable || code == ErrorCode::kTimeout)) {
        auto d = Backoff(attempt);
        {
          std::lock_guard lock(mu_);
          ++metrics_.retries;
        }
        Sleep(d);
        continue;
      }
      Error e = r.error();
      e.message = fmt::format("kubernetes API {} ({}): {}", what, config_.server, e.message);
      return tl::unexpected(e);
    }
    if (r->status == 401 && !refreshed && CanRefreshCredentials()) {
      InvalidateCredentials();  // an expired token: fetch a fresh one once
      refreshed = true;
      continue;
    }
    if (can_retry && IsRetryableStatus(r->status)) {
      auto d = RetryAfter(*r).value_or(Backoff(attempt));
      d = std::min(d, options_.max_retry_after);
      {
        std::lock_guard lock(mu_);
        ++metrics_.retries;
      }
      Sleep(d);
      continue;
    }
    return RawResult{std::move(*r), attempt + 1};
  }
}

Result<json::object> KubeClient::Get(const ResourceType& type, std::string_view ns,
                                     std::string_view name) {
  std::string path = type.Path(ns, name);
  auto r = Send("GET", path);
  if (!r) return tl::unexpected(r.error());
  if (r->response.status != 200) {
    return tl::unexpected(
        ApiStatusError(ParseApiStatus(r->response.status, r->response.body), "GET " + path));
  }
  auto obj = ParseJsonObject(r->response.body);
  if (!obj) {
    return MakeError(ErrorCode::kInternal,
                     fmt::format("kubernetes API GET {}: bad JSON: {}", path, obj.error().message));
  }
  return obj;
}

Result<json::object> KubeClient::Create(const ResourceType& type, std::string_view ns,
                                        const json::object& object) {
  std::string path = type.Path(ns);
  auto r = Send("POST", path, ToJson(object));
  if (!r) return tl::unexpected(r.error());
  int status = r->response.status;
  if (status == 409 && r->attempts > 1) {
    ApiStatus st = ParseApiStatus(status, r->response.body);
    std::string name = FindString(object, {"metadata", "name"});
    if (st.reason == "AlreadyExists" && !name.empty()) return Get(type, ns, name);
  }
  if (status != 200 && status != 201 && status != 202) {
    return tl::unexpected(ApiStatusError(ParseApiStatus(status, r->response.body), "POST " + path));
  }
  auto obj = ParseJsonObject(r->response.body);
  if (!obj) {
    return MakeError(ErrorCode::kInternal, fmt::format("kubernetes API POST {}: bad JSON: {}", path,
                                                       obj.error().message));
  }
  return obj;
}

Result<ObjectList> KubeClient::List(const ResourceType& type, std::string_view ns,
                                    const ListOptions& options) {
  ObjectList out;
  std::string cont;
  int pages = 0;
  do {
    // A server that hands out the same continue token (or endless ones) must
    // not keep us here forever.
    if (++pages > kMaxListPages) {
      return MakeError(
          ErrorCode::kInternal,
          fmt::format("kubernetes API GET {}: more than {} pages", type.Path(ns), kMaxListPages));
    }
    std::vector<std::pair<std::string, std::string>> q;
    if (!options.label_selector.empty()) q.emplace_back("labelSelector", options.label_selector);
    if (!options.field_selector.empty()) q.emplace_back("fieldSelector", options.field_selector);
    if (!options.resource_version.empty() && cont.empty()) {
      q.emplace_back("resourceVersion", options.resource_version);
    }
    if (options.limit > 0) q.emplace_back("limit", std::to_string(options.limit));
    if (!cont.empty()) q.emplace_back("continue", cont);
    std::string path = type.Path(ns);
    std::string target = q.empty() ? path : path + "?" + net::BuildQuery(q);
    auto r = Send("GET", target);
    if (!r) return tl::unexpected(r.error());
    if (r->response.status != 200) {
      return tl::unexpected(
          ApiStatusError(ParseApiStatus(r->response.status, r->response.body), "GET " + target));
    }
    auto doc = ParseJsonObject(r->response.body);
    if (!doc) {
      return MakeError(ErrorCode::kInternal, fmt::format("kubernetes API GET {}: bad JSON: {}",
                                                         target, doc.error().message));
    }
    out.resource_version = FindString(*doc, {"metadata", "resourceVersion"});
    std::string next = FindString(*doc, {"metadata", "continue"});
    if (!next.empty() && next == cont) {
      return MakeError(
          ErrorCode::kInternal,
          fmt::format("kubernetes API GET {}: the server repeated its continue token", target));
    }
    cont = std::move(next);
    if (const auto* items = Find(*doc, {"items"}); items != nullptr && items->is_array()) {
      for (const auto& item : items->get_array()) {
        if (item.is_object()) out.items.push_back(item.get_object());
      }
    }
  } while (!cont.empty());
  return out;
}

Result<json::object> KubeClient::Patch(const ResourceType& type, std::string_view ns,
                                       std::string_view name, const json::object& patch) {
  std::string path = type.Path(ns, name);
  auto r = Send("PATCH", path, ToJson(patch), "application/merge-patch+json");
  if (!r) return tl::unexpected(r.error());
  if (r->response.status != 200) {
    return tl::unexpected(
        ApiStatusError(ParseApiStatus(r->response.status, r->response.body), "PATCH " + path));
  }
  auto obj = ParseJsonObject(r->response.body);
  if (!obj) {
    return MakeError(ErrorCode::kInternal, fmt::format("kubernetes API PATCH {}: bad JSON: {}",
                                                       path, obj.error().message));
  }
  return obj;
}

Status KubeClient::Delete(const ResourceType& type, std::string_view ns, std::string_view name,
                          std::string_view propagation) {
  std::string path = type.Path(ns, name);
  json::object opts;
  opts["apiVersion"] = "v1";
  opts["kind"] = "DeleteOptions";
  if (!propagation.empty()) opts["propagationPolicy"] = propagation;
  auto r = Send("DELETE", path, ToJson(opts));
  if (!r) return tl::unexpected(r.error());
  int status = r->response.status;
  if (status == 200 || status == 202) return {};
  return tl::unexpected(ApiStatusError(ParseApiStatus(status, r->response.body), "DELETE " + path));
}

Result<std::vector<std::string>> KubeClient::ServedVersions(std::string_view group) {
  std::string path = fmt::format("/apis/{}", group);
  auto r = Send("GET", path);
  if (!r) return tl::unexpected(r.error());
  if (r->response.status == 404) {
    return MakeError(ErrorCode::kNotFound,
                     fmt::format("kubernetes API GET {}: the API group {} is not served by {}",
                                 path, group, config_.server));
  }
  if (r->response.status != 200) {
    return tl::unexpected(
        ApiStatusError(ParseApiStatus(r->response.status, r->response.body), "GET " + path));
  }
  auto doc = ParseJsonObject(r->response.body);
  if (!doc) return MakeError(ErrorCode::kInternal, "discovery: bad JSON: " + doc.error().message);
  std::vector<std::string> out;
  std::string preferred = FindString(*doc, {"preferredVersion", "version"});
  if (!preferred.empty()) out.push_back(preferred);
  if (const auto* vs = Find(*doc, {"versions"}); vs != nullptr && vs->is_array()) {
    for (const auto& v : vs->get_array()) {
      std::string ver = FindString(v, {"version"});
      if (!ver.empty() && std::find(out.begin(), out.end(), ver) == out.end()) out.push_back(ver);
    }
  }
  return out;
}

Result<Result<net::Response>> KubeClient::SendStreamingOnce(
    const std::string& target, std::chrono::steady_clock::time_point deadline,
    std::chrono::milliseconds timeout_without_deadline, int cancel_fd,
    const std::function<bool(const net::Response& head)>& on_head,
    const std::function<bool(std::string_view data)>& on_data) {
  Throttle();
  auto transport = CurrentTransport();
  if (!transport) return tl::unexpected(transport.error());
  net::ClientRequest req;
  req.method = "GET";
  req.target = target;
  req.cancel_fd = cancel_fd;
  if (deadline == std::chrono::steady_clock::time_point::max()) {
    req.timeout = timeout_without_deadline;
  } else {
    req.timeout = std::max<std::chrono::milliseconds>(
        std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(
                                          deadline - std::chrono::steady_clock::now()));
  }
  if (auto s = PrepareHeaders(req.headers); !s) return tl::unexpected(s.error());
  {
    std::lock_guard lock(mu_);
    ++metrics_.requests;
  }
  Result<net::Response> sent = (*transport)->http->SendStreaming(req, on_head, on_data);
  // In place: converting would turn the inner error into the outer one.
  return Result<Result<net::Response>>(tl::in_place, std::move(sent));
}

}  // namespace deepbox::k8s
