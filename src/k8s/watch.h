// Kubernetes watches over KubeClient: newline-delimited JSON events read as
// they arrive, bookmarks, 410 Gone -> re-list and resume (reporting what the
// re-list no longer shows as DELETED), dropped connections and server
// timeouts -> re-watch from the last resourceVersion.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "k8s/rest_client.h"

namespace deepbox::k8s {

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

// Watches objects of `type` in `ns` ("" = all namespaces). Calls on_event for
// every event until it returns false (then OK), the deadline passes (TIMEOUT),
// the cancel_fd is readable (CANCELLED) or a non-retryable error happens.
Result<WatchStats> WatchObjects(KubeClient& client, const ResourceType& type, std::string_view ns,
                                const WatchOptions& options,
                                const std::function<bool(const WatchEvent&)>& on_event);

}  // namespace deepbox::k8s
