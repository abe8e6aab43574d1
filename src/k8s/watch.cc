#include "k8s/watch.h"

#include <fmt/format.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <map>
#include <optional>

#include "net/url.h"

namespace deepbox::k8s {

namespace {

constexpr size_t kMaxWatchLine = 64u << 20;
constexpr size_t kMaxErrorBody = 64u << 10;

std::string ObjectName(const json::object& obj) { return FindString(obj, {"metadata", "name"}); }
std::string ObjectVersion(const json::object& obj) {
  return FindString(obj, {"metadata", "resourceVersion"});
}

}  // namespace

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

Result<WatchStats> WatchObjects(KubeClient& client, const ResourceType& type, std::string_view ns,
                                const WatchOptions& options,
                                const std::function<bool(const WatchEvent&)>& on_event) {
  using SteadyClock = std::chrono::steady_clock;
  WatchStats stats;
  std::string rv = options.resource_version;
  bool need_list = rv.empty();
  std::map<std::string, json::object> known;  // by name: for DELETED after a re-list
  for (const auto& o : options.known_objects) known[ObjectName(o)] = o;
  int failures = 0;
  const ClientOptions& client_options = client.options();
  auto backoff = [&](int attempt) {
    return BackoffDelay(client_options.initial_backoff, client_options.max_backoff, attempt);
  };
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
        client.Sleep(d);
      }
    }
  };

  for (;;) {
    if (cancelled(0)) return cancel_error();
    if (SteadyClock::now() >= options.deadline) return timeout_error();
    if (need_list) {
      auto list = client.List(type, ns, {options.label_selector, options.field_selector, "", 0});
      if (!list) {
        auto code = list.error().code;
        if (code == ErrorCode::kUnavailable || code == ErrorCode::kTimeout ||
            code == ErrorCode::kInternal || code == ErrorCode::kResourceExhausted) {
          ++stats.reconnects;
          sleep_bounded(backoff(failures++));
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
    int64_t timeout_s = client_options.watch_timeout.count();
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

    auto sent = client.SendStreamingOnce(
        target, options.deadline, std::chrono::seconds(timeout_s + 30), options.cancel_fd,
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
            if (!handle_line(std::string_view(buffer).substr(start, nl - start))) return false;
            start = nl + 1;
          }
          buffer.erase(0, start);
          if (buffer.size() > kMaxWatchLine) {
            fatal = Error(ErrorCode::kResourceExhausted,
                          fmt::format("kubernetes API watch {}: event larger than {} bytes", path,
                                      kMaxWatchLine));
            return false;
          }
          return true;
        });

    if (!sent) return tl::unexpected(sent.error());
    const Result<net::Response>& r = *sent;
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
      sleep_bounded(got_event ? std::chrono::milliseconds(0) : backoff(failures++));
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
    if (status == 401 && client.CanRefreshCredentials() && failures == 0) {
      client.InvalidateCredentials();
      ++failures;
      continue;
    }
    if (IsRetryableStatus(status) && failures < client_options.max_retries + 5) {
      ++stats.reconnects;
      sleep_bounded(backoff(failures++));
      continue;
    }
    return tl::unexpected(ApiStatusError(st, "watch " + path));
  }
}

}  // namespace deepbox::k8s
