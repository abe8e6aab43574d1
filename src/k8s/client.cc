#include "k8s/client.h"

#include <fmt/format.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <thread>

#include "common/base64.h"
#include "common/parse_number.h"
#include "common/utf8.h"
#include "k8s/util.h"
#include "net/http_client.h"
#include "net/url.h"

namespace deepbox::k8s {

namespace {

constexpr size_t kMaxWatchLine = 64u << 20;
constexpr size_t kMaxErrorBody = 64u << 10;
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

bool Retryable(int status) {
  return status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
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

std::string ObjectName(const json::object& obj) { return FindString(obj, {"metadata", "name"}); }
std::string ObjectVersion(const json::object& obj) {
  return FindString(obj, {"metadata", "resourceVersion"});
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

std::string_view WatchEventTypeName(WatchEventType type) {
  switch (type) {
    case WatchEventType::kAdded:
      return "ADDED";
    case WatchEventType::kModified:
      return "MODIFIED";
    case WatchEventType::kDeleted:
      return "DELETED";
    case WatchEventType::kBookmark:
      return "BOOKMARK";
  }
  return "?";
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

void KubeClient::Sleep(std::chrono::milliseconds d) {
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
  double ms = static_cast<double>(options_.initial_backoff.count()) * std::pow(2.0, attempt);
  ms = std::min(ms, static_cast<double>(options_.max_backoff.count()));
  return std::chrono::milliseconds(static_cast<int64_t>(ms));
}

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
    if (r->status == 401 && !refreshed && (config_.exec || !config_.token_file.empty())) {
      credentials_.Invalidate();  // an expired token: fetch a fresh one once
      refreshed = true;
      continue;
    }
    if (can_retry && Retryable(r->status)) {
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
    std::string name = ObjectName(object);
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

Result<WatchStats> KubeClient::Watch(const ResourceType& type, std::string_view ns,
                                     const WatchOptions& options,
                                     const std::function<bool(const WatchEvent&)>& on_event) {
  using SteadyClock = std::chrono::steady_clock;
  WatchStats stats;
  std::string rv = options.resource_version;
  bool need_list = rv.empty();
  std::map<std::string, json::object> known;  // by name: for DELETED after a re-list
  for (const auto& o : options.known_objects) known[ObjectName(o)] = o;
  int failures = 0;
  const std::string path = type.Path(ns);
  auto timeout_error = [&] {
    return MakeError(ErrorCode::kTimeout,
                     fmt::format("kubernetes API watch {}: deadline passed", path));
  };
  auto cancelled = [&](int wait_ms) {
    if (options.cancel_fd < 0) return false;
    pollfd p{options.cancel_fd, POLLIN, 0};
    int n;
    while ((n = ::poll(&p, 1, wait_ms)) < 0 && errno == EINTR) {
    }
    return n > 0;
  };
  auto cancel_error = [&] {
    return MakeError(ErrorCode::kCancelled, fmt::format("kubernetes API watch {}: stopped", path));
  };
  auto sleep_bounded = [&](std::chrono::milliseconds d) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(options.deadline -
                                                                      SteadyClock::now());
    d = std::min(d, left);
    if (d.count() > 0) {
      // A cancellable watch waits on its fd instead (Stop() must not wait out a backoff).
      if (options.cancel_fd >= 0) {
        (void)cancelled(static_cast<int>(std::min<int64_t>(d.count(), INT32_MAX)));
      } else {
        Sleep(d);
      }
    }
  };

  for (;;) {
    if (cancelled(0)) return cancel_error();
    if (SteadyClock::now() >= options.deadline) return timeout_error();
    if (need_list) {
      auto list = List(type, ns, {options.label_selector, options.field_selector, "", 0});
      if (!list) {
        auto code = list.error().code;
        if (code == ErrorCode::kUnavailable || code == ErrorCode::kTimeout ||
            code == ErrorCode::kInternal || code == ErrorCode::kResourceExhausted) {
          ++stats.reconnects;
          sleep_bounded(Backoff(failures++));
          continue;
        }
        return tl::unexpected(list.error());
      }
      ++stats.relists;
      need_list = false;
      rv = list->resource_version;
      stats.resource_version = rv;
      std::map<std::string, json::object> now_known;
      for (auto& item : list->items) {
        std::string name = ObjectName(item);
        auto it = known.find(name);
        bool changed = it == known.end() || ObjectVersion(it->second) != ObjectVersion(item);
        WatchEvent ev{it == known.end() ? WatchEventType::kAdded : WatchEventType::kModified, item,
                      true};
        now_known.emplace(name, std::move(item));
        if (changed && !on_event(ev)) return stats;
      }
      for (auto& [name, obj] : known) {
        if (!now_known.contains(name)) {
          if (!on_event(WatchEvent{WatchEventType::kDeleted, obj, true})) return stats;
        }
      }
      known = std::move(now_known);
    }

    auto remaining =
        std::chrono::duration_cast<std::chrono::seconds>(options.deadline - SteadyClock::now());
    int64_t timeout_s = options_.watch_timeout.count();
    if (options.deadline != SteadyClock::time_point::max()) {
      timeout_s = std::clamp<int64_t>(remaining.count() + 1, 1, timeout_s);
    }
    std::vector<std::pair<std::string, std::string>> q{{"watch", "1"}};
    if (options.allow_bookmarks) q.emplace_back("allowWatchBookmarks", "true");
    if (!rv.empty()) q.emplace_back("resourceVersion", rv);
    q.emplace_back("timeoutSeconds", std::to_string(timeout_s));
    if (!options.label_selector.empty()) q.emplace_back("labelSelector", options.label_selector);
    if (!options.field_selector.empty()) q.emplace_back("fieldSelector", options.field_selector);
    std::string target = path + "?" + net::BuildQuery(q);

    Throttle();
    auto transport = CurrentTransport();
    if (!transport) return tl::unexpected(transport.error());
    net::ClientRequest req;
    req.method = "GET";
    req.target = target;
    req.cancel_fd = options.cancel_fd;
    if (options.deadline == SteadyClock::time_point::max()) {
      req.timeout = std::chrono::seconds(timeout_s + 30);
    } else {
      req.timeout = std::max<std::chrono::milliseconds>(
          std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(
                                            options.deadline - SteadyClock::now()));
    }
    if (auto s = PrepareHeaders(req.headers); !s) return tl::unexpected(s.error());
    {
      std::lock_guard lock(mu_);
      ++metrics_.requests;
    }
    ++stats.watch_requests;

    int status = 0;
    std::string error_body;
    std::string buffer;
    bool stopped_by_caller = false;
    bool gone = false;
    std::optional<Error> fatal;
    bool got_event = false;

    auto handle_line = [&](std::string_view line) -> bool {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
      if (line.empty()) return true;
      auto doc = ParseJsonObject(line);
      if (!doc) {
        fatal = Error(ErrorCode::kInternal, fmt::format("kubernetes API watch {}: bad event: {}",
                                                        path, doc.error().message));
        return false;
      }
      std::string type_name = FindString(*doc, {"type"});
      const json::value* obj = Find(*doc, {"object"});
      if (obj == nullptr || !obj->is_object()) {
        fatal = Error(ErrorCode::kInternal,
                      fmt::format("kubernetes API watch {}: event without an object", path));
        return false;
      }
      const json::object& o = obj->get_object();
      if (type_name == "ERROR") {
        ApiStatus st = ParseApiStatus(500, ToJson(o));
        if (st.code == 410) {
          gone = true;  // too old resource version: re-list, then resume
          return false;
        }
        fatal = ApiStatusError(st, "watch " + path);
        return false;
      }
      std::string v = ObjectVersion(o);
      if (!v.empty()) {
        rv = v;
        stats.resource_version = v;
      }
      got_event = true;
      if (type_name == "BOOKMARK") {
        ++stats.bookmarks;
        if (!on_event(WatchEvent{WatchEventType::kBookmark, o, false})) {
          stopped_by_caller = true;
          return false;
        }
        return true;
      }
      WatchEventType t;
      if (type_name == "ADDED") {
        t = WatchEventType::kAdded;
      } else if (type_name == "MODIFIED") {
        t = WatchEventType::kModified;
      } else if (type_name == "DELETED") {
        t = WatchEventType::kDeleted;
      } else {
        fatal =
            Error(ErrorCode::kInternal,
                  fmt::format("kubernetes API watch {}: unknown event type '{}'", path, type_name));
        return false;
      }
      std::string name = ObjectName(o);
      if (t == WatchEventType::kDeleted) {
        known.erase(name);
      } else {
        known[name] = o;
      }
      if (!on_event(WatchEvent{t, o, false})) {
        stopped_by_caller = true;
        return false;
      }
      return true;
    };

    auto r =
        (*transport)
            ->http->SendStreaming(
                req,
                [&](const net::Response& head) {
                  status = head.status;
                  return true;
                },
                [&](std::string_view data) {
                  if (status != 200) {
                    if (error_body.size() < kMaxErrorBody) error_body.append(data);
                    return true;
                  }
                  buffer.append(data);
                  size_t start = 0;
                  for (;;) {
                    auto nl = buffer.find('\n', start);
                    if (nl == std::string::npos) break;
                    if (!handle_line(std::string_view(buffer).substr(start, nl - start)))
                      return false;
                    start = nl + 1;
                  }
                  buffer.erase(0, start);
                  if (buffer.size() > kMaxWatchLine) {
                    fatal = Error(ErrorCode::kResourceExhausted,
                                  fmt::format("kubernetes API watch {}: event larger than {} bytes",
                                              path, kMaxWatchLine));
                    return false;
                  }
                  return true;
                });

    if (stopped_by_caller) return stats;
    if (fatal) return tl::unexpected(*fatal);
    if (gone) {
      need_list = true;
      continue;
    }
    if (!r) {
      if (cancelled(0)) return cancel_error();
      if (SteadyClock::now() >= options.deadline) return timeout_error();
      // Dropped or refused connection: re-watch from the last version.
      ++stats.reconnects;
      sleep_bounded(got_event ? std::chrono::milliseconds(0) : Backoff(failures++));
      if (got_event) failures = 0;
      continue;
    }
    if (status == 200) {
      // The server ended the stream (timeoutSeconds): resume where we were.
      if (!buffer.empty()) handle_line(buffer);
      if (stopped_by_caller) return stats;
      if (fatal) return tl::unexpected(*fatal);
      if (gone) {
        need_list = true;
        continue;
      }
      ++stats.reconnects;
      failures = 0;
      continue;
    }
    ApiStatus st = ParseApiStatus(status, error_body);
    if (status == 410 || st.code == 410) {
      need_list = true;
      continue;
    }
    if (status == 401 && (config_.exec || !config_.token_file.empty()) && failures == 0) {
      credentials_.Invalidate();
      ++failures;
      continue;
    }
    if (Retryable(status) && failures < options_.max_retries + 5) {
      ++stats.reconnects;
      sleep_bounded(Backoff(failures++));
      continue;
    }
    return tl::unexpected(ApiStatusError(st, "watch " + path));
  }
}

// ------------------------------------------------------------------ SandboxApi

Result<std::string> SandboxApi::Version(std::string_view group) {
  {
    std::lock_guard lock(mu_);
    if (auto it = versions_.find(group); it != versions_.end()) return it->second;
  }
  auto served = client_.ServedVersions(group);
  std::string chosen;
  if (!served) {
    if (served.error().code == ErrorCode::kNotFound) {
      return MakeError(
          ErrorCode::kNotFound,
          fmt::format("{} (is the agent-sandbox controller installed{}?)", served.error().message,
                      group == kExtensionsGroup ? " with its extensions" : ""));
    }
    // Discovery is not readable (e.g. RBAC): assume the storage version; a
    // 404 on create falls back later.
    chosen = "v1beta1";
  } else if (std::find(served->begin(), served->end(), "v1beta1") != served->end()) {
    chosen = "v1beta1";
  } else if (std::find(served->begin(), served->end(), "v1alpha1") != served->end()) {
    chosen = "v1alpha1";
  } else {
    return MakeError(ErrorCode::kUnimplemented,
                     fmt::format("{} is served at versions [{}], but deepbox speaks v1beta1 and "
                                 "v1alpha1",
                                 group, fmt::join(*served, ", ")));
  }
  std::lock_guard lock(mu_);
  versions_[std::string(group)] = chosen;
  return chosen;
}

void SandboxApi::FallBackToV1alpha1() {
  std::lock_guard lock(mu_);
  versions_[std::string(kExtensionsGroup)] = "v1alpha1";
}

std::optional<ResourceType> SandboxApi::KnownClaimType() {
  std::lock_guard lock(mu_);
  auto it = versions_.find(kExtensionsGroup);
  if (it == versions_.end()) return std::nullopt;
  return ResourceType{std::string(kExtensionsGroup), it->second, "sandboxclaims", "SandboxClaim"};
}

void SandboxApi::RememberClaimVersion(const std::string& version) {
  std::lock_guard lock(mu_);
  versions_.try_emplace(std::string(kExtensionsGroup), version);
}

Result<ResourceType> SandboxApi::ClaimType() {
  auto v = Version(kExtensionsGroup);
  if (!v) return tl::unexpected(v.error());
  return ResourceType{std::string(kExtensionsGroup), *v, "sandboxclaims", "SandboxClaim"};
}

Result<ResourceType> SandboxApi::WarmPoolType() {
  auto v = Version(kExtensionsGroup);
  if (!v) return tl::unexpected(v.error());
  return ResourceType{std::string(kExtensionsGroup), *v, "sandboxwarmpools", "SandboxWarmPool"};
}

Result<ResourceType> SandboxApi::SandboxType() {
  auto v = Version(kSandboxGroup);
  if (!v) return tl::unexpected(v.error());
  return ResourceType{std::string(kSandboxGroup), *v, "sandboxes", "Sandbox"};
}

Result<json::object> SandboxApi::CreateClaim(std::string_view ns, const json::object& claim) {
  auto t = ClaimType();
  if (!t) return tl::unexpected(t.error());
  return client_.Create(*t, ns, claim);
}

Result<json::object> SandboxApi::CreateClaim(const ResourceType& type, std::string_view ns,
                                             const json::object& claim) {
  return client_.Create(type, ns, claim);
}

Result<json::object> SandboxApi::GetClaim(std::string_view ns, std::string_view name) {
  auto t = ClaimType();
  if (!t) return tl::unexpected(t.error());
  return client_.Get(*t, ns, name);
}

Result<ObjectList> SandboxApi::ListClaims(std::string_view ns, const ListOptions& options) {
  auto t = ClaimType();
  if (!t) return tl::unexpected(t.error());
  return client_.List(*t, ns, options);
}

Status SandboxApi::DeleteClaim(std::string_view ns, std::string_view name) {
  auto t = ClaimType();
  if (!t) return tl::unexpected(t.error());
  return client_.Delete(*t, ns, name);
}

Result<WatchStats> SandboxApi::WatchClaims(std::string_view ns, const WatchOptions& options,
                                           const std::function<bool(const WatchEvent&)>& fn) {
  auto t = ClaimType();
  if (!t) return tl::unexpected(t.error());
  return client_.Watch(*t, ns, options, fn);
}

Result<json::object> SandboxApi::GetSandbox(std::string_view ns, std::string_view name) {
  auto t = SandboxType();
  if (!t) return tl::unexpected(t.error());
  return client_.Get(*t, ns, name);
}

Result<json::object> SandboxApi::PatchSandbox(std::string_view ns, std::string_view name,
                                              const json::object& patch) {
  auto t = SandboxType();
  if (!t) return tl::unexpected(t.error());
  return client_.Patch(*t, ns, name, patch);
}

Result<WatchStats> SandboxApi::WatchSandboxes(std::string_view ns, const WatchOptions& options,
                                              const std::function<bool(const WatchEvent&)>& fn) {
  auto t = SandboxType();
  if (!t) return tl::unexpected(t.error());
  return client_.Watch(*t, ns, options, fn);
}

Result<json::object> SandboxApi::GetWarmPool(std::string_view ns, std::string_view name) {
  auto t = WarmPoolType();
  if (!t) return tl::unexpected(t.error());
  return client_.Get(*t, ns, name);
}

}  // namespace deepbox::k8s
